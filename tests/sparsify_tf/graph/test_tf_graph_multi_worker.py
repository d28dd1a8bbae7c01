"""prune_graph under MultiWorkerMirroredStrategy: 2 worker processes (TF_CONFIG), tf.compat.v1 graphs.

Each worker builds its graph in the strategy's scope (``strategy.run`` of the training
step), calls ``prune_graph`` inside the step before the optimizer, and runs sessions on
its ``tf.distribute.Server``. Gradients are all-reduced, so the weights and the masks the
core computes from them are identical on every worker; pruned weights and Momentum slots
stay exactly zero; a new graph restored from the chief's ``tf.train.Saver`` checkpoint
ends exactly like the uninterrupted run.
"""
import json
import textwrap

import pytest

from sparsify import exact_prune_count
from tf_workers import run_workers

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

SCRIPT = textwrap.dedent("""
    import hashlib, json, os, sys
    import numpy as np, tensorflow as tf
    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    strategy = tf1.distribute.experimental.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    config = strategy.update_config_proto(tf1.ConfigProto())
    server = tf.distribute.Server(resolver.cluster_spec(), job_name="worker", task_index=resolver.task_id,
                                  config=config, start=True)
    from sparsify_tf import prune_graph

    CFG = {"target_sparsity": 0.75, "pattern": "4x1", "pruning_scope": "global", "start_step": 0, "end_step": 6,
           "pruning_frequency": 2, **json.loads(sys.argv[2])}
    worker = resolver.task_id
    rng = np.random.default_rng(worker)                  # each worker trains on its own data
    data = [(rng.standard_normal((8, 16)).astype("float32"), rng.integers(0, 4, 8).astype("int32"))
            for _ in range(9)]
    ckpt = os.path.join(os.path.dirname(sys.argv[1]), "ckpt", "model")

    def build():
        g = tf.Graph()
        with g.as_default(), strategy.scope():
            gs = tf1.train.get_or_create_global_step()
            w1 = tf1.get_variable("fc1/kernel", [16, 32], initializer=tf1.glorot_uniform_initializer(seed=1))
            w2 = tf1.get_variable("fc2/kernel", [32, 8], initializer=tf1.glorot_uniform_initializer(seed=2))
            opt = tf1.train.MomentumOptimizer(0.1, 0.9)
            x, y = tf1.placeholder(tf.float32, [None, 16]), tf1.placeholder(tf.int32, [None])
            held = {}

            def step_fn(x, y):
                logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
                held["pruning"] = prune_graph(CFG, global_step=gs)       # after the model, before the optimizer
                loss = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y % 8, logits=logits))
                return opt.minimize(loss, global_step=gs)

            train_op = strategy.group(strategy.run(step_fn, args=(x, y)))
            pruning = held["pruning"]
            update = pruning.build_update_op()
            slots = [opt.get_slot(w, "momentum") for w in (w1, w2)]
            saver = tf1.train.Saver()
            init = tf1.global_variables_initializer()
        return dict(g=g, x=x, y=y, train=train_op, update=update, pruning=pruning, w=[w1, w2], slots=slots,
                    saver=saver, init=init, gs=gs)

    def digest(a):
        return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()

    def train(m, sess, steps, save_at=None):
        zeros = []
        for step in steps:
            xb, yb = data[step]
            sess.run(m["train"], {m["x"]: xb, m["y"]: yb})
            sess.run(m["update"])
            masks = m["pruning"].get_masks(sess)
            ws, ss = sess.run(m["w"]), sess.run(m["slots"])
            zeros.append(all(not np.any(a[~masks[n]]) for n, w, s in zip(["fc1/kernel", "fc2/kernel"], ws, ss)
                             for a in (w, s)))
            if save_at == step and worker == 0:
                m["saver"].save(sess, ckpt)
        masks = m["pruning"].get_masks(sess)
        return {"masks": {n: digest(v) for n, v in masks.items()},
                "pruned": {n: int((~v).sum()) for n, v in masks.items()},
                "weights": [digest(w) for w in sess.run(m["w"])], "step": int(sess.run(m["gs"])), "zeros": zeros,
                "statistics": [digest(v) for v in sess.run(m["pruning"].collectors.variables())]}

    out = {"worker": worker, "replicas": strategy.num_replicas_in_sync}
    a = build()
    with tf1.Session(server.target, graph=a["g"], config=config) as sess:
        sess.run(a["init"])
        sess.run(a["update"])
        out["reference"] = train(a, sess, range(1, 9), save_at=4)
    b = build()                                          # a new graph restored from the chief's checkpoint
    with tf1.Session(server.target, graph=b["g"], config=config) as sess:
        sess.run(b["init"])
        b["saver"].restore(sess, ckpt)
        out["restored_step"] = int(sess.run(b["gs"]))
        out["resumed"] = train(b, sess, range(5, 9))
    json.dump(out, open(sys.argv[1], "w"))
""")


@pytest.mark.parametrize("extra", [{}, {"criterion": "wanda", "regrowth": "rigl", "pattern": "1x1"}])
def test_prune_graph_multi_worker_identical_masks_and_exact_resume_from_chief(tmp_path, extra):
    """With Wanda and RigL the input statistics and dense gradients are summed over the workers."""
    w0, w1 = run_workers(SCRIPT, tmp_path, n=2, args=(json.dumps(extra),))
    for w in (w0, w1):
        assert w["replicas"] == 2
        ref = w["reference"]
        assert ref["step"] == 8 and all(ref["zeros"]) and len(ref["zeros"]) == 8
        unit = 1 if extra else 4                                           # 4x1 blocks, or single weights
        assert sum(ref["pruned"].values()) == exact_prune_count(0.75, (16 * 32 + 32 * 8) // unit) * unit
        assert w["restored_step"] == 4
        res = w["resumed"]
        assert all(res["zeros"])
        assert {k: res[k] for k in ("masks", "pruned", "weights", "step", "statistics")} == \
               {k: ref[k] for k in ("masks", "pruned", "weights", "step", "statistics")}
        assert len(ref["statistics"]) == (2 * 2 + 2 + 1 if extra else 0)     # sums, counts, op gradients, seen
    assert w0["reference"]["masks"] == w1["reference"]["masks"]          # the same masks on every worker
    assert w0["reference"]["weights"] == w1["reference"]["weights"]
    assert w0["reference"]["statistics"] == w1["reference"]["statistics"]
