"""tf-keras under MultiWorkerMirroredStrategy (2 worker processes) gives the masks of one process on the whole
batch, for Wanda (issue 35 (a)).

Each worker reads its own half of every global batch of 16 rows (``distribute_datasets_from_function``, worker
1's half scaled by 5); Keras scales each replica's loss by the global batch size and the replicas' gradients are
summed, so one process fitting the concatenated batches (``batch_size=16``) with the same init trains the same
weights. The callback's input statistics (sums of squares, aggregation SUM) are summed over the workers before
the scores are formed: the masks after every batch equal the single-process run's exactly, local and global
scope. Averaging each worker's *scores* instead would give other masks at the first update (computed here with
the core and asserted, so the comparison decides something).

Not covered: ``snip`` (the tf-keras callback refuses criteria scored from every step's gradients: "criterion
'snip' is scored from the gradients of every step, which the tf-keras (Keras 2) callback does not do"), and
Keras 3, which does not train under MultiWorkerMirroredStrategy (keras-team/keras#20585; see
``test_multi_worker.py``).
"""
import os
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from sparsify import PruningEngine  # noqa: E402
from tf_workers import WANDA_HALVES, run_workers  # noqa: E402

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

# shared by the worker script and the single-process reference (run here)
COMMON = textwrap.dedent("""
    import numpy as np, tensorflow as tf
    import tf_keras as K
    from sparsify_tf.keras import PruningCallback

""") + WANDA_HALVES + textwrap.dedent("""

    def build():
        K.utils.set_random_seed(0)
        m = K.Sequential([K.layers.InputLayer((16,)), K.layers.Dense(32, activation="relu", use_bias=False, name="fc1"),
                          K.layers.Dense(8, use_bias=False, name="fc2")])
        m.set_weights(init())
        m.compile(K.optimizers.SGD(0.05, momentum=0.9), K.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m


    def fit(cfg, model, data, update_in_graph=None, **kw):
        cb = PruningCallback(cfg, update_in_graph=update_in_graph)
        out = {"masks": [], "last": [], "weights_at_begin": []}

        class Before(K.callbacks.Callback):              # runs before the pruning callback's batch start
            def on_train_batch_begin(self, batch, logs=None):
                out["weights_at_begin"].append([w.tolist() for w in model.get_weights()])

        class After(K.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                out["masks"].append({p: m.astype(int).tolist() for p, m in cb.masks.items()})
                out["last"].append(cb.last_update_step)

        model.fit(data, epochs=1, verbose=0, callbacks=[Before(), cb, After()], **kw)
        out["final"] = [w.tolist() for w in model.get_weights()]
        return out
""")

SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
""") + COMMON + textwrap.dedent("""
    worker = strategy.cluster_resolver.task_id
    batches = global_batches()

    def dataset_fn(ctx):
        assert ctx.get_per_replica_batch_size(GLOBAL) == HALF
        rows = slice(ctx.input_pipeline_id * HALF, (ctx.input_pipeline_id + 1) * HALF)
        x = np.concatenate([b[0][rows] for b in batches])
        y = np.concatenate([b[1][rows] for b in batches])
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(HALF)

    out = {"worker": worker, "replicas": strategy.num_replicas_in_sync}
    for scope, cfg in CONFIGS.items():
        with strategy.scope():
            model = build()
        data = strategy.distribute_datasets_from_function(dataset_fn)
        out[scope] = fit(cfg, model, data, steps_per_epoch=STEPS)
    json.dump(out, open(sys.argv[1], "w"))
""")


def _reference():
    import tensorflow as tf

    ns = {}
    exec(COMMON, ns)
    batches = ns["global_batches"]()
    x, y = np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])
    out = {}
    for scope, cfg in ns["CONFIGS"].items():
        for in_graph in (False, True):
            data = tf.data.Dataset.from_tensor_slices((x, y)).batch(ns["GLOBAL"])
            out[scope, in_graph] = ns["fit"](cfg, ns["build"](), data, update_in_graph=in_graph)
    return ns, out


def _sum_of_squares(a):
    return (a.astype(np.float64) ** 2).sum(axis=0)


def _first_update_alternatives(ns, cfg, dense_tf_layout):
    """The first update's masks (canonical layout) from summed statistics, and those of other rules (the
    workers' scores averaged, each worker's statistics alone). The statistics are the first batch's (its forward
    pass read the initial weights, masks all ones), the weights ranked those after it (from the reference)."""
    x = ns["global_batches"]()[0][0]
    w1 = ns["init"]()[0]
    halves = [x[:ns["HALF"]], x[ns["HALF"]:]]
    stats = [{"fc1/kernel": _sum_of_squares(h), "fc2/kernel": _sum_of_squares(np.maximum(h @ w1, 0))}
             for h in halves]
    weights = {n: np.asarray(w, np.float32).T for n, w in zip(ns["NAMES"], dense_tf_layout)}
    engine = PruningEngine(cfg)
    summed = {n: np.abs(w) * np.sqrt(stats[0][n] + stats[1][n])[None, :] for n, w in weights.items()}
    averaged = {n: sum(np.abs(w) * np.sqrt(s[n])[None, :] for s in stats) / 2 for n, w in weights.items()}
    alternatives = {"averaged": averaged}
    for r in (0, 1):                                 # each worker's statistics alone (nothing reduced)
        alternatives[f"worker {r} alone"] = {n: np.abs(w) * np.sqrt(stats[r][n])[None, :] for n, w in weights.items()}
    return (engine.compute_masks(weights, step=0, scores=summed),
            {k: engine.compute_masks(weights, step=0, scores=v) for k, v in alternatives.items()})


def test_two_workers_wanda_masks_equal_one_process_on_the_concatenated_batch(tmp_path):
    workers = run_workers(SCRIPT, tmp_path, n=2)
    ns, ref = _reference()
    assert sorted(w["worker"] for w in workers) == [0, 1]
    for scope, cfg in ns["CONFIGS"].items():
        # the host path, as under a strategy: Wanda's step-0 update waits for the first batch and is applied at
        # the start of batch 1 (recorded as step 1)
        r = ref[scope, False]
        assert r["last"] == [-1, 1, 2, 2, 4], scope
        # the update in the train step (the default without a strategy) applies each update at the end of the
        # batch before: the same masks, one batch earlier
        g = ref[scope, True]
        assert g["last"] == [1, 2, 2, 4, 4] and g["masks"][:4] == r["masks"][1:], scope
        want, others = _first_update_alternatives(ns, cfg, r["weights_at_begin"][1])
        first = {n: np.asarray(m, bool).T for n, m in r["masks"][1].items()}
        for n in ns["NAMES"]:
            np.testing.assert_array_equal(first[n], want[n], err_msg=f"{scope} {n}: reference vs summed statistics")
        for name, other in others.items():
            assert sum(int((other[n] != want[n]).sum()) for n in want) > 0, (scope, name)       # the rule matters here
        pruned = [sum(int((1 - np.asarray(m[n])).sum()) for n in ns["NAMES"]) for m in r["masks"]]
        assert pruned == [0, 192, 360, 360, 384], scope
        for w in workers:
            assert w["replicas"] == 2
            got = w[scope]
            assert got["last"] == r["last"]
            for step, (a, b) in enumerate(zip(got["masks"], r["masks"])):
                for n in ns["NAMES"]:
                    np.testing.assert_array_equal(np.asarray(a[n]), np.asarray(b[n]),
                                                  err_msg=f"worker {w['worker']} {scope} batch {step} {n}")
            # the same training: weights equal up to float32 rounding (the all-reduce sums two halves)
            for u, v in zip(got["final"], r["final"]):
                np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)
    assert workers[0]["local"]["masks"] == workers[1]["local"]["masks"]
    assert workers[0]["global"]["masks"] == workers[1]["global"]["masks"]
