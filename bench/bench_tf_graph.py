"""Training-step time of a tf.compat.v1 graph with pruning (update every 100 steps) vs dense.

Two models: a memory-bound MLP 784-512-512-10 (each elementwise pass over its
670k weights is a visible share of a ~4 ms step) and a small CNN on 28x28
images where convolutions dominate.

Pruned variants, each in the two ways of running the update:

* ``masking="weights"`` (the ``prune_graph`` default): the ops read the
  weights; each mask update writes the zeros into the weights and optimizer
  slots, and the gradients through the pruned ops are masked (one pass per step);
* ``masking="inputs"`` (the seed design): the ops read ``mask * weight``
  (the product forward and its gradient: two passes per step);
* ``wrap_train_op`` (update fused into the train op, one ``sess.run``) and
  ``PruningHook`` in a ``MonitoredSession`` (the dense MonitoredSession is its
  baseline).

Same architecture, data and initial weights. In every round each variant of a
model runs 100 steps (from one update point to the next, so each holds exactly
one mask update), the variants alternating every 10 steps in a rotating order,
so machine load hits all variants alike. Per
round the ratio pruned / dense is taken on wall time and on process CPU time;
reported are the medians over rounds and the spread (min-max) of the wall
ratios, with the load average. Use the CPU ratio to compare designs on a busy
machine; wall time is what the targets speak of.

Usage: ``python -m bench.bench_tf_graph [--rounds 8] [--cnn-rounds 4] [--no-write]``
(about 3 minutes on an idle 2-core machine).
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sparsify  # noqa: E402
import sparsify_tf  # noqa: E402

tf1 = tf.compat.v1
IN, HID, OUT, BATCH = 784, 512, 10, 128
BLOCK = 100          # steps per round and variant = pruning_frequency: one mask update each
CHUNK = 10           # variants alternate every CHUNK steps within a round
THREADS = 2


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
MODES = {"wrap": "Session + `wrap_train_op`", "hook": "MonitoredSession + `PruningHook`"}


def build(masking: str | None, mode: str, arch: str = "mlp"):
    """(session, train op, x, y, pruning) of one variant; ``masking`` None: dense."""
    g = tf.Graph()
    with g.as_default():
        rng = np.random.default_rng(0)
        x = tf1.placeholder(tf.float32, [None, IN])
        y = tf1.placeholder(tf.int64, [None])
        logits = ARCHS[arch][1](x, rng)
        loss = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        gs = tf1.train.get_or_create_global_step()
        pruning = None
        if masking is not None:
            pruning = sparsify_tf.prune_graph(sparsify.PruningConfig(
                target_sparsity=0.9, start_step=0, end_step=100_000, pruning_frequency=BLOCK), global_step=gs,
                masking=masking)
        train = tf1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=gs)
        if pruning is not None and mode == "wrap":
            train = pruning.wrap_train_op(train)
        cfg = tf1.ConfigProto(intra_op_parallelism_threads=THREADS, inter_op_parallelism_threads=1)
        if mode == "hook":
            hooks = [pruning.hook()] if pruning is not None else []
            sess = tf1.train.MonitoredSession(tf1.train.ChiefSessionCreator(config=cfg), hooks=hooks)
        else:
            sess = tf1.Session(graph=g, config=cfg)
            sess.run(tf1.global_variables_initializer())
            if pruning is not None:
                sess.run(pruning.update_op)
    return sess, train, x, y, pruning


def time_block(variant, data, steps, start):
    """(wall s, process CPU s) of ``steps`` training steps."""
    sess, train, x, y, _ = variant
    xs, ys = data
    t, c = time.perf_counter(), time.process_time()
    for i in range(start, start + steps):
        j = (i * BATCH) % (len(xs) - BATCH)
        sess.run(train, {x: xs[j:j + BATCH], y: ys[j:j + BATCH]})
    return time.perf_counter() - t, time.process_time() - c


def check_zeros(variant) -> bool:
    """Some weights of every layer pruned, and exactly zero, after the timed steps (the variants are real)."""
    sess, _, _, _, pruning = variant
    raw = sess._tf_sess() if hasattr(sess, "_tf_sess") else sess   # noqa: SLF001 - read without running hooks
    masks, weights = raw.run([pruning.masks, pruning.weights])
    return all(np.all(weights[n][masks[n] == 0] == 0.0) and np.any(masks[n] == 0) for n in masks)


def run_model(arch: str, mode: str, rounds: int, data) -> dict:
    variants = {"dense": build(None, mode, arch), "weights": build("weights", mode, arch),
                "inputs": build("inputs", mode, arch)}
    names = list(variants)
    for v in variants.values():
        time_block(v, data, 20, 0)                       # warm-up (pruned: first update at step 0 done)
    steps = {k: 20 for k in names}
    wall = {k: [] for k in names}
    cpu = {k: [] for k in names}
    loads = []
    for r in range(rounds):
        for k in names:               # each round: from one update point (exclusive) to the next (inclusive)
            pad = (-steps[k]) % BLOCK
            if pad:
                time_block(variants[k], data, pad, steps[k])
                steps[k] += pad
        acc = {k: [0.0, 0.0] for k in names}
        for c in range(BLOCK // CHUNK):        # variants alternate every CHUNK steps: load hits them alike
            order = names[(r + c) % len(names):] + names[:(r + c) % len(names)]
            for k in order:
                w, cp = time_block(variants[k], data, CHUNK, steps[k])
                steps[k] += CHUNK
                acc[k][0] += w
                acc[k][1] += cp
        for k in names:
            wall[k].append(acc[k][0] / BLOCK)
            cpu[k].append(acc[k][1] / BLOCK)
        loads.append(os.getloadavg()[0])
    out = {"arch": arch, "mode": mode, "load": float(np.median(loads)), "rounds": rounds}
    for k in ("weights", "inputs"):
        rw = np.array(wall[k]) / np.array(wall["dense"])
        rc = np.array(cpu[k]) / np.array(cpu["dense"])
        out[k] = {"ms": 1e3 * float(np.median(wall[k])), "ratio": float(np.median(rw)), "lo": float(rw.min()),
                  "hi": float(rw.max()), "cpu_ratio": float(np.median(rc)), "zeros": check_zeros(variants[k])}
    out["dense_ms"] = 1e3 * float(np.median(wall["dense"]))
    for v in variants.values():
        v[0].close()
    return out


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8, help="rounds (one 100-step block per variant) for the MLP")
    ap.add_argument("--cnn-rounds", type=int, default=4, help="rounds for the CNN (its steps are ~10x longer)")
    ap.add_argument("--models", default="mlp,cnn", help="comma-separated subset of mlp,cnn")
    ap.add_argument("--no-write", action="store_true", help="print only, do not update bench/RESULTS.md")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    data = (rng.normal(size=(4096, IN)).astype(np.float32), rng.integers(0, OUT, 4096).astype(np.int64))
    rows = []
    for arch in args.models.split(","):
        for mode in MODES:
            r = run_model(arch, mode, args.rounds if arch == "mlp" else args.cnn_rounds, data)
            rows.append(r)
            print(f"{arch} {mode}: dense {r['dense_ms']:.3f} ms, weights {r['weights']['ratio']:.3f}x "
                  f"(cpu {r['weights']['cpu_ratio']:.3f}x), inputs {r['inputs']['ratio']:.3f}x "
                  f"(cpu {r['inputs']['cpu_ratio']:.3f}x), load {r['load']:.1f}", flush=True)
    lines = [f"Batch {BATCH}, Momentum 0.9, 90% target, pruning_frequency={BLOCK}, {THREADS} intra-op threads. "
             f"Per round, each variant runs {BLOCK} steps (one mask update each), the variants alternating every "
             f"{CHUNK} steps in rotating order; "
             "ratios are per round against the dense block of the same round, median over rounds "
             "(spread: min-max of the wall ratios). CPU = process CPU time. Pruned weights were exactly zero "
             "after the timed steps in every pruned variant: "
             f"{all(r[k]['zeros'] for r in rows for k in ('weights', 'inputs'))}.", "",
             "| model | variant | dense ms/step | `masking=\"weights\"` (default) ms/step | ratio (spread) | CPU ratio "
             "| `masking=\"inputs\"` ms/step | ratio (spread) | CPU ratio | rounds | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        wv, iv = r["weights"], r["inputs"]
        lines.append(f"| {ARCHS[r['arch']][0]} | {MODES[r['mode']]} | {r['dense_ms']:.3f} | {wv['ms']:.3f} | "
                     f"{wv['ratio']:.3f}x ({wv['lo']:.2f}-{wv['hi']:.2f}) | {wv['cpu_ratio']:.3f}x | {iv['ms']:.3f} | "
                     f"{iv['ratio']:.3f}x ({iv['lo']:.2f}-{iv['hi']:.2f}) | {iv['cpu_ratio']:.3f}x | {r['rounds']} | "
                     f"{r['load']:.1f} |")
    lines += ["", "Target <= 1.05x dense (wall, median): " + "; ".join(
        f"{r['arch'].upper()} {r['mode']} weights {r['weights']['ratio']:.3f}x "
        f"({'met' if r['weights']['ratio'] <= 1.05 else 'not met'})" for r in rows) + "."]
    lines += ["", f"Machine: {os.cpu_count()} cores, TF {tf.__version__}. Command: `python -m bench.bench_tf_graph "
              f"--rounds {args.rounds} --cnn-rounds {args.cnn_rounds}`"]
    text = "\n".join(lines)
    from bench._results import publish

    publish("bench_tf_graph", text, write=not args.no_write)
    return text


if __name__ == "__main__":
    main()
