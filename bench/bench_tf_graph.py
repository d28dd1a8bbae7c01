"""Training-step time of a tf.compat.v1 graph with pruning (update every 100 steps) vs dense.

Two models: a memory-bound MLP 784-512-512-10 (the per-step cost of the
masked inputs, ``mask * weight`` forward and its gradient, is a visible share
of a 5 ms step) and a small CNN on 28x28 images where convolutions dominate.

Same architecture, same data, same process; dense and pruned steps are timed
in interleaved blocks so machine noise hits both alike. Pruned variants:
``wrap_train_op`` (update fused into the train op, one ``sess.run``) and
``PruningHook`` in a ``MonitoredSession`` (one extra ``sess.run`` per step; the
dense MonitoredSession is its baseline).

Usage: ``python bench/bench_tf_graph.py [--steps 600] [--no-write]``
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sparsify  # noqa: E402
import sparsify_tf  # noqa: E402

tf1 = tf.compat.v1
IN, HID, OUT, BATCH = 784, 512, 10, 128


def _var(rng, name, shape):
    return tf1.get_variable(name, initializer=rng.normal(0, 0.05, shape).astype(np.float32))


def mlp_logits(x, rng):
    w1, w2, w3 = _var(rng, "fc1/kernel", (IN, HID)), _var(rng, "fc2/kernel", (HID, HID)), _var(rng, "fc3/kernel", (HID, OUT))
    return tf.matmul(tf.nn.relu(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)), w3)


def cnn_logits(x, rng):
    h = tf.reshape(x, [-1, 28, 28, 1])
    h = tf.nn.relu(tf.nn.conv2d(h, _var(rng, "conv1/kernel", (3, 3, 1, 32)), 1, "SAME"))
    h = tf.nn.relu(tf.nn.conv2d(h, _var(rng, "conv2/kernel", (3, 3, 32, 64)), 2, "SAME"))
    h = tf.nn.relu(tf.nn.conv2d(h, _var(rng, "conv3/kernel", (3, 3, 64, 64)), 2, "SAME"))
    h = tf.reshape(h, [-1, 7 * 7 * 64])
    return tf.matmul(h, _var(rng, "fc/kernel", (7 * 7 * 64, OUT)))


ARCHS = {"mlp": ("MLP 784-512-512-10", mlp_logits), "cnn": ("CNN conv32-conv64/2-conv64/2-fc on 28x28", cnn_logits)}


def build(prune: bool, mode: str, arch: str = "mlp"):
    g = tf.Graph()
    with g.as_default():
        rng = np.random.default_rng(0)
        x = tf1.placeholder(tf.float32, [None, IN])
        y = tf1.placeholder(tf.int64, [None])
        logits = ARCHS[arch][1](x, rng)
        loss = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        gs = tf1.train.get_or_create_global_step()
        pruning = None
        if prune:
            pruning = sparsify_tf.prune_graph(sparsify.PruningConfig(
                target_sparsity=0.9, start_step=0, end_step=100_000, pruning_frequency=100), global_step=gs)
        train = tf1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=gs)
        if prune and mode == "wrap":
            train = pruning.wrap_train_op(train)
        cfg = tf1.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=1)
        if mode == "hook":
            hooks = [pruning.hook()] if prune else []
            sess = tf1.train.MonitoredSession(tf1.train.ChiefSessionCreator(config=cfg), hooks=hooks)
        else:
            sess = tf1.Session(graph=g, config=cfg)
            sess.run(tf1.global_variables_initializer())
            if prune:
                sess.run(pruning.update_op)
    return sess, train, x, y


def time_block(sess, train, x, y, data, steps):
    xs, ys = data
    t = time.perf_counter()
    for i in range(steps):
        j = (i * BATCH) % (len(xs) - BATCH)
        sess.run(train, {x: xs[j:j + BATCH], y: ys[j:j + BATCH]})
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600, help="measured steps per variant (multiple of 100)")
    ap.add_argument("--no-write", action="store_true", help="print only, do not update bench/RESULTS.md")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    data = (rng.normal(size=(4096, IN)).astype(np.float32), rng.integers(0, OUT, 4096).astype(np.int64))
    rows = []
    for arch, mode in (("mlp", "wrap"), ("mlp", "hook"), ("cnn", "wrap"), ("cnn", "hook")):
        dense, pruned = build(False, mode, arch), build(True, mode, arch)
        for v in (dense, pruned):
            time_block(*v, data, 50)                       # warm-up
        td = tp = 0.0
        block = 100                                       # each block holds exactly one pruning update
        for _ in range(args.steps // block):
            td += time_block(*dense, data, block)
            tp += time_block(*pruned, data, block)
        n = (args.steps // block) * block
        rows.append((arch, mode, 1e3 * td / n, 1e3 * tp / n, tp / td))
        for v in (dense, pruned):
            v[0].close()
    lines = [f"Batch {BATCH}, Momentum, 90% target, pruning_frequency=100, {args.steps} steps per variant, "
             "interleaved blocks of 100 steps (each with one mask update), 2 intra-op threads.", "",
             "| model | variant | dense ms/step | pruned ms/step | ratio |", "|---|---|---|---|---|"]
    names = {"wrap": "Session + `wrap_train_op`", "hook": "MonitoredSession + `PruningHook`"}
    for arch, mode, d, p, r in rows:
        lines.append(f"| {ARCHS[arch][0]} | {names[mode]} | {d:.3f} | {p:.3f} | {r:.3f}x |")
    lines += ["", "Command: `python bench/bench_tf_graph.py --steps " + str(args.steps) + "`"]
    text = "\n".join(lines)
    from bench._results import publish

    publish("bench_tf_graph", text, write=not args.no_write)


if __name__ == "__main__":
    main()
