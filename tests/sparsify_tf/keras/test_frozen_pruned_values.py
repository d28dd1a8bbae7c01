"""Keras on TensorFlow (tf-keras and Keras 3): pruned values are frozen under weight decay (issue 35 (b)).

With ``pruned_gradient="none"`` the kernel holds 0 where pruned and the callback's state keeps the pruned
entries' values (``stored``, zeros where kept; the dense weight the core ranks is ``kernel + stored``).
``model.fit`` with ``PruningCallback`` and an optimizer with weight decay (AdamW; SGD with momentum and
``weight_decay``), updates at steps 0 (25%) and 3 (50%), 8 steps: after every batch the stored values of the
pruned entries are bit for bit those they had when pruned (the entries pruned at step 0: the initial kernel),
the kernel is exactly 0 there and so is every optimizer slot entry, while the kept weights train.
tf-keras runs both update paths (in the train step, and on the host); Keras 3 updates on the host only
(the ``in_graph`` case is deselected for it by ``conftest.py``).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from sparsify_tf.keras import PruningCallback, find_prunable_weights  # noqa: E402
from sparsify_keras.compat import optimizer_slots  # noqa: E402

from _keras_helpers import first  # noqa: E402

CFG = {"init_sparsity": 0.25, "target_sparsity": 0.5, "start_step": 0, "end_step": 3, "pruning_frequency": 3}

OPTIMIZERS = {
    "adamw": (lambda K: K.optimizers.AdamW(0.01, weight_decay=0.05), 2),              # (optimizer, slots per weight)
    "sgd_momentum_wd": (lambda K: K.optimizers.SGD(0.05, momentum=0.9, weight_decay=0.05), 1),
}


def _bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _np(v):
    return np.array(v.numpy())


@pytest.mark.parametrize("in_graph", [True, False], ids=["in_graph", "host"])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_stored_pruned_values_do_not_move_with_weight_decay(K, digits, opt, in_graph):
    X, y = digits
    X, y = X[:256], y[:256]
    K.utils.set_random_seed(0)
    model = K.Sequential([first(K, (64,)), K.layers.Dense(16, activation="relu", name="fc"),
                          K.layers.Dense(10, name="out")])
    make, n_slots = OPTIMIZERS[opt]
    model.compile(make(K), K.losses.SparseCategoricalCrossentropy(from_logits=True))
    initial = {pw.path: _np(pw.variable) for pw in find_prunable_weights(model)}
    assert set(initial) == {"fc/kernel", "out/kernel"}
    cb = PruningCallback(CFG, update_in_graph=in_graph)
    records = []

    def record(batch, logs=None):
        st = cb._state
        records.append({
            "step": int(model.optimizer.iterations.numpy()), "last": cb.last_update_step,
            "keep": {pw.path: _np(m) != 0 for pw, m in zip(st.pweights, st.masks)},
            "stored": {pw.path: _np(s) for pw, s in zip(st.pweights, st.stored)},
            "kernel": {pw.path: _np(pw.variable) for pw in st.pweights},
            "slots": {pw.path: [_np(s) for s in optimizer_slots(model.optimizer, pw.variable)] for pw in st.pweights},
        })

    model.fit(X, y, batch_size=32, epochs=1, verbose=0, shuffle=False,
              callbacks=[cb, K.callbacks.LambdaCallback(on_train_batch_end=record)])
    if K.__name__ == "tf_keras":
        assert cb._in_graph is in_graph
    assert [r["step"] for r in records] == list(range(1, 9))
    # the update due at step 3 runs at the end of the train step reaching it (in the train step) or at the start
    # of the next batch (host): either way before the step-3 batch trains
    in_train_step = K.__name__ == "tf_keras" and in_graph
    assert [r["last"] for r in records] == ([0, 0, 3, 3, 3, 3, 3, 3] if in_train_step else [0, 0, 0, 3, 3, 3, 3, 3])
    third = 2 if in_train_step else 3                                          # first record after that update
    assert [{p: int((~k).sum()) for p, k in r["keep"].items()} for r in (records[0], records[-1])] == \
        [{"fc/kernel": 256, "out/kernel": 40}, {"fc/kernel": 512, "out/kernel": 80}]
    first_pruned = {p: ~k for p, k in records[0]["keep"].items()}
    at_three = records[third]
    for i, r in enumerate(records):
        for p, keep in r["keep"].items():
            where = f"{opt} after step {r['step']} {p}"
            pruned = ~keep
            assert not np.any(r["kernel"][p][pruned]), where                   # the kernel holds 0 there
            assert not np.any(r["stored"][p][keep]), where                     # stored: 0 where kept
            assert len(r["slots"][p]) == n_slots, where
            for s in r["slots"][p]:
                assert not np.any(s[pruned]), where                            # slots exactly 0 there
            # pruned at step 0: the initial values, bit for bit, whatever the decay did to the kept weights
            np.testing.assert_array_equal(_bits(r["stored"][p][first_pruned[p]]),
                                          _bits(initial[p][first_pruned[p]]), err_msg=where)
            if i >= third:                                                    # after the last update
                np.testing.assert_array_equal(_bits(r["stored"][p][pruned]),
                                              _bits(at_three["stored"][p][pruned]), err_msg=where)
                assert np.array_equal(keep, at_three["keep"][p]), where
    for p in initial:
        new = first_pruned[p] ^ ~at_three["keep"][p]                           # pruned at step 3
        assert int(new.sum()) == {"fc/kernel": 256, "out/kernel": 40}[p]
        assert np.all(at_three["stored"][p][new] != 0)                         # they were trained values
        assert np.all(at_three["stored"][p][new] != initial[p][new])
        kept = records[-1]["keep"][p]
        assert np.all(records[-1]["kernel"][p][kept] != initial[p][kept])     # the kept weights trained
