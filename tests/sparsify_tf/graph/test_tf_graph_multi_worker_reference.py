"""prune_graph under MultiWorkerMirroredStrategy (2 worker processes) gives the masks of one process on the whole
batch, for Wanda (issue 35 (a)).

Each worker trains on its half of every global batch of 16 rows (worker 1's half scaled by 5), the loss of each
replica is its summed loss over the global batch size (the tf.compat.v1 optimizers sum the replicas' gradients),
so one process training on the concatenated batch with the same init computes the same gradients. The input
statistics (sums of squares per input channel) are summed over the workers before the scores are formed:
the masks after every update (local and global scope) equal the single-process run's exactly.

The scale difference between the halves makes the rule matter: averaging each worker's *scores*
(``|w| * ||x_r||`` per worker, then the mean) instead of summing statistics gives other masks at the first
update, which the test computes here with the core (``PruningEngine.compute_masks``) and asserts, so the
comparison decides something. Graph mode refuses ``snip`` (``criterion 'snip' needs ['grad'], which graph-mode
pruning does not collect``), so Wanda is the statistic tested.
"""
import os
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from sparsify import PruningEngine  # noqa: E402
from tf_workers import WANDA_HALVES, run_workers  # noqa: E402

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

# shared by the worker script and the single-process reference (run here, in a tf.Graph)
COMMON = textwrap.dedent("""
    import contextlib
    import numpy as np, tensorflow as tf
    from sparsify_tf import prune_graph
    tf1 = tf.compat.v1

""") + WANDA_HALVES + textwrap.dedent("""

    def build(cfg, strategy=None):
        g = tf.Graph()
        with g.as_default(), (strategy.scope() if strategy else contextlib.nullcontext()):
            gs = tf1.train.get_or_create_global_step()
            ws = [tf1.get_variable(n, initializer=w) for n, w in zip(NAMES, init())]
            opt = tf1.train.MomentumOptimizer(0.05, 0.9)
            x, y = tf1.placeholder(tf.float32, [None, 16]), tf1.placeholder(tf.int32, [None])
            held = {}

            def step_fn(x, y):
                logits = tf.matmul(tf.nn.relu(tf.matmul(x, ws[0])), ws[1])
                held["pruning"] = prune_graph(cfg, global_step=gs)      # after the model, before the optimizer
                ce = tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
                return opt.minimize(tf.reduce_sum(ce) / GLOBAL, global_step=gs)

            train = strategy.group(strategy.run(step_fn, args=(x, y))) if strategy else step_fn(x, y)
            pruning = held["pruning"]
            update = pruning.build_update_op()
            init_op = tf1.global_variables_initializer()
        return dict(g=g, x=x, y=y, train=train, update=update, pruning=pruning, w=ws, init=init_op, gs=gs)


    def train(cfg, rows, strategy=None, target=""):
        m = build(cfg, strategy)
        out = {"masks": [], "dense": [], "before_first_update": None}
        with tf1.Session(target, graph=m["g"], config=CONFIG) as sess:
            sess.run(m["init"])
            sess.run(m["update"])                      # Wanda's step-0 update waits for the first training step
            for step, (xb, yb) in enumerate(global_batches(), start=1):
                sess.run(m["train"], {m["x"]: xb[rows], m["y"]: yb[rows]})
                w = sess.run(m["w"])
                if step == 1:
                    out["before_first_update"] = [a.tolist() for a in w]
                sess.run(m["update"])
                masks = m["pruning"].get_masks(sess)
                stored = sess.run([m["pruning"].stored[n] for n in NAMES])
                out["masks"].append({n: masks[n].astype(int).tolist() for n in NAMES})
                out["dense"].append([(a + s).tolist() for a, s in zip(sess.run(m["w"]), stored)])
            out["step"] = int(sess.run(m["gs"]))
            out["last_update"] = int(sess.run(m["pruning"].last_update_step))
        return out
""")

SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    strategy = tf1.distribute.experimental.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    CONFIG = strategy.update_config_proto(tf1.ConfigProto())
    server = tf.distribute.Server(resolver.cluster_spec(), job_name="worker", task_index=resolver.task_id,
                                  config=CONFIG, start=True)
""") + COMMON + textwrap.dedent("""
    worker = resolver.task_id
    rows = slice(worker * HALF, (worker + 1) * HALF)
    out = {"worker": worker, "replicas": strategy.num_replicas_in_sync}
    for scope, cfg in CONFIGS.items():
        out[scope] = train(cfg, rows, strategy, server.target)
    json.dump(out, open(sys.argv[1], "w"))
""")


def _reference() -> dict:
    import tensorflow as tf

    ns = {"CONFIG": tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)}
    exec(COMMON, ns)
    return ns, {scope: ns["train"](cfg, slice(None)) for scope, cfg in ns["CONFIGS"].items()}


def _sum_of_squares(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) ** 2).sum(axis=0)


def _first_update_alternatives(ns: dict, cfg: dict, dense_tf_layout: list) -> tuple[dict, dict]:
    """The first update's masks (canonical layout) from summed statistics, and those of other rules (the
    workers' scores averaged, each worker's statistics alone).

    The statistics of the first update are those of step 1, whose forward pass read the initial weights (masks
    all ones until then); the weights ranked are those after step 1 (``dense_tf_layout``, from the reference)."""
    x = ns["global_batches"]()[0][0]
    w1 = ns["init"]()[0]
    halves = [x[:ns["HALF"]], x[ns["HALF"]:]]
    stats = [{"fc1/kernel": _sum_of_squares(h), "fc2/kernel": _sum_of_squares(np.maximum(h @ w1, 0))}
             for h in halves]
    weights = {n: np.asarray(w, np.float32).T for n, w in zip(ns["NAMES"], dense_tf_layout)}   # canonical (out, in)
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
        r = ref[scope]
        assert r["step"] == 5 and r["last_update"] == 4
        # decisive: averaging the workers' scores would prune other weights at the first update
        want, others = _first_update_alternatives(ns, cfg, r["before_first_update"])
        first = {n: np.asarray(m, bool).T for n, m in r["masks"][0].items()}           # canonical layout
        for n in ns["NAMES"]:
            np.testing.assert_array_equal(first[n], want[n], err_msg=f"{scope} {n}: reference vs summed statistics")
        for name, other in others.items():
            assert sum(int((other[n] != want[n]).sum()) for n in want) > 0, (scope, name)
        pruned = [sum(int((1 - np.asarray(m[n])).sum()) for n in ns["NAMES"]) for m in r["masks"]]
        assert pruned == [192, 360, 360, 384, 384], scope              # 25% at step 0 (after step 1), 47%, 50%
        changed = [r["masks"][i] != r["masks"][i - 1] for i in range(1, 5)]          # step i + 1 against step i
        assert changed == [True, False, True, False], scope                              # updates at 2 and 4 act
        for w in workers:
            assert w["replicas"] == 2
            got = w[scope]
            assert got["step"] == 5 and got["last_update"] == 4
            for step, (a, b) in enumerate(zip(got["masks"], r["masks"]), start=1):
                for n in ns["NAMES"]:
                    np.testing.assert_array_equal(np.asarray(a[n]), np.asarray(b[n]),
                                                  err_msg=f"worker {w['worker']} {scope} step {step} {n}")
            # the same training: weights equal up to float32 rounding (summation order of the all-reduce)
            for a, b in zip(got["dense"], r["dense"]):
                for u, v in zip(a, b):
                    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)
    assert workers[0]["local"]["masks"] == workers[1]["local"]["masks"]
    assert workers[0]["global"]["masks"] == workers[1]["global"]["masks"]
