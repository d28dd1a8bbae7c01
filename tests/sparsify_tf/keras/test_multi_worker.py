"""MultiWorkerMirroredStrategy, 2 worker processes on localhost (TF_CONFIG), tf-keras.

Every worker runs the callback and gets the same masks; pruned weights and optimizer
slots are exactly zero after every batch; a run resumed from the chief's checkpoint
(new model, new callback, ``load_weights``) ends exactly like the uninterrupted run.
Keras 3 itself does not train under MultiWorkerMirroredStrategy (keras-team/keras#20585),
so the multi-worker path is tf-keras (``TF_USE_LEGACY_KERAS=1``), as in TensorFlow's
multi-worker tutorial.
"""
import textwrap

import numpy as np
import pytest

from sparsify import exact_prune_count
from tf_workers import run_workers

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

SCRIPT = textwrap.dedent("""
    import hashlib, json, os, sys
    import numpy as np, tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import tf_keras as K
    from sklearn.datasets import load_digits
    from sparsify_tf.keras import PruningCallback
    from sparsify_keras.compat import optimizer_slots
    from sparsify_tf.keras.compat import tf_variable

    CFG = {"target_sparsity": 0.8, "start_step": 0, "end_step": 24, "pruning_frequency": 5}
    d = load_digits()
    X, y = (d.data[:256] / 16.0).astype("float32"), d.target[:256].astype("int32")
    worker = strategy.cluster_resolver.task_id
    ckpt = os.path.join(os.path.dirname(sys.argv[1]), "ckpt", "epoch{epoch}")

    def build(seed):
        with strategy.scope():
            K.utils.set_random_seed(seed)
            m = K.Sequential([K.layers.InputLayer((64,)), K.layers.Dense(32, activation="relu", name="fc1"),
                              K.layers.Dense(16, activation="relu", name="fc2"), K.layers.Dense(10, name="out")])
            m.compile(K.optimizers.SGD(0.05, momentum=0.9), K.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m

    def zero_check(model, cb, seen):
        def check(batch, logs=None):
            ok = True
            for pw, mv in zip(cb._state.pweights, cb._state.masks):
                keep = tf_variable(mv).numpy() != 0
                arrays = [tf_variable(pw.variable).numpy()] + [tf_variable(s).numpy()
                                                               for s in optimizer_slots(model.optimizer, pw.variable)]
                ok &= all(not np.any(a[~keep]) for a in arrays) and len(arrays) == 2
            seen.append(bool(ok))
        return K.callbacks.LambdaCallback(on_train_batch_end=check)

    def digest(a):
        return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()

    def summary(model, cb):
        return {"masks": {p: digest(m) for p, m in cb.masks.items()},
                "weights": [digest(w) for w in model.get_weights()],
                "pruned": {p: int((~m).sum()) for p, m in cb.masks.items()},
                "size": {p: int(m.size) for p, m in cb.masks.items()},
                "last_update": cb.last_update_step, "step": int(model.optimizer.iterations.numpy())}

    # the uninterrupted run: 4 epochs of 8 global batches; ModelCheckpoint saves every epoch (the chief's copy
    # goes to ckpt, the other worker's to a temporary directory)
    ref, ref_cb, seen = build(0), PruningCallback(CFG), []
    ref.fit(X, y, batch_size=32, epochs=4, verbose=0, shuffle=False,
            callbacks=[ref_cb, zero_check(ref, ref_cb, seen), K.callbacks.ModelCheckpoint(ckpt, save_weights_only=True)])
    out = {"worker": worker, "replicas": strategy.num_replicas_in_sync, "zero_every_batch": all(seen),
           "n_checks": len(seen), "reference": summary(ref, ref_cb)}

    # resume from the chief's epoch-2 checkpoint in a new model (another init) with a new callback
    resumed, cb = build(5), PruningCallback(CFG)
    cb.attach(resumed)
    resumed.load_weights(ckpt.format(epoch=2))
    out["restored_last_update"] = cb.last_update_step
    seen2 = []
    resumed.fit(X, y, batch_size=32, epochs=4, initial_epoch=2, verbose=0, shuffle=False,
                callbacks=[cb, zero_check(resumed, cb, seen2)])
    out["resumed"] = summary(resumed, cb)
    out["resumed_zero_every_batch"] = all(seen2)
    json.dump(out, open(sys.argv[1], "w"))
""")


def test_multi_worker_two_processes_identical_masks_and_exact_resume_from_chief(tmp_path):
    w0, w1 = run_workers(SCRIPT, tmp_path, n=2)
    assert {w0["worker"], w1["worker"]} == {0, 1}
    for w in (w0, w1):
        assert w["replicas"] == 2
        assert w["zero_every_batch"] and w["n_checks"] == 32
        ref = w["reference"]
        assert ref["last_update"] == 24 and ref["step"] == 32
        for path, pruned in ref["pruned"].items():
            assert pruned == exact_prune_count(0.8, ref["size"][path]), path
        assert w["restored_last_update"] == 15                 # mask state came back from the checkpoint
        assert w["resumed"] == ref, "the resumed run must end exactly like the uninterrupted one"
        assert w["resumed_zero_every_batch"]
    # every worker holds the same masks and weights
    assert w0["reference"] == w1["reference"]
    assert np.array_equal(sorted(w0["reference"]["masks"]), ["fc1/kernel", "fc2/kernel", "out/kernel"])
