"""Keras 3 on JAX, PyTorch and TensorFlow: training-step overhead of pruning and compilations per run.

``bench/bench_keras.py``'s CNN (conv(32)-conv(64)-pool-fc(128)-fc(10), batch 32, Adam 1e-3, digits),
0 -> 90% cubic over steps 0..200 with ``pruning_frequency`` 1, 10 and 100, against dense training in
the same backend. One process per backend (a Keras backend is fixed at import); in it, per seed, the
cases start from the same initial weights and see the same batches; one warm-up epoch, then
``--epochs`` timed epochs advanced one epoch at a time across the cases in a rotating order, so machine
load hits them alike. Step time = epoch wall time / steps; per seed the median over timed epochs; the
ratio to dense per seed; reported: the median ratio over seeds and its min-max. Also counted over a
whole run: how often the train step was traced (JAX: compilations of the step; TF: retraces; torch
runs it eagerly, once per batch). torch's ``set_flush_denormal`` is not used.

Usage:
    python bench/bench_keras_backends.py [--backends jax,torch,tensorflow] [--seeds 3] [--no-write]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FREQS = (1, 10, 100)
CASES = ("dense", *(f"freq{f}" for f in FREQS))


def _worker(seeds: int, epochs: int, out: str) -> None:
    """Runs inside one backend's process."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, ROOT)
    import keras
    import numpy as np

    from bench.bench_keras import build, compile_, data
    from sparsify_keras import PruningCallback

    (X, y), _ = data()
    steps = len(X) // 32
    ratios: dict[str, list[float]] = {c: [] for c in CASES[1:]}
    traces: dict[str, int] = {}
    for seed in range(seeds):
        init = build("cnn", keras, seed).get_weights()
        runs = {}
        for case in CASES:
            model = compile_(build("cnn", keras, seed), keras)
            model.set_weights(init)
            cbs = []
            if case != "dense":
                cb = PruningCallback({"target_sparsity": 0.9, "start_step": 0, "end_step": 200,
                                      "pruning_frequency": int(case[4:])})
                cb.attach(model)
                cbs.append(cb)
            wrapped = model.__dict__.get("train_step") or model.train_step
            count = {"n": 0}

            def counting(*args, _w=wrapped, _c=count):
                _c["n"] += 1
                return _w(*args)

            object.__setattr__(model, "train_step", counting)
            model.train_function = None
            runs[case] = (model, cbs, count, [])
        order = list(CASES)
        for epoch in range(1 + epochs):
            order = order[1:] + order[:1]
            for case in order:
                model, cbs, count, times = runs[case]
                rng = np.random.RandomState(1000 * seed + epoch)
                idx = rng.permutation(len(X))
                t0 = time.perf_counter()
                model.fit(X[idx], y[idx], batch_size=32, epochs=epoch + 1, initial_epoch=epoch, shuffle=False,
                          verbose=0, callbacks=cbs)
                if epoch >= 1:
                    times.append((time.perf_counter() - t0) / steps)
        dense = float(np.median(runs["dense"][3]))
        for case in CASES[1:]:
            ratios[case].append(float(np.median(runs[case][3])) / dense)
        for case in CASES:
            traces[case] = runs[case][2]["n"]
    with open(out, "w") as f:
        json.dump({"backend": keras.backend.backend(), "ratios": ratios, "traces": traces,
                   "steps_per_run": (1 + epochs) * steps, "updates": {c: 200 // int(c[4:]) + 1 for c in CASES[1:]}},
                  f)


def run_backend(backend: str, seeds: int, epochs: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
        subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", out, "--seeds", str(seeds),
                        "--epochs", str(epochs)], env=env, check=True)
        with open(out) as f:
            return json.load(f)


def table(results: list[dict]) -> str:
    import numpy as np

    lines = ["| backend | freq 1 | freq 10 | freq 100 | step traces (dense / pruned, per run) |",
             "|---|---|---|---|---|"]
    for r in results:
        cells = []
        for case in CASES[1:]:
            v = np.asarray(r["ratios"][case])
            cells.append(f"{np.median(v):.3f}x ({v.min():.3f}-{v.max():.3f})")
        tr = r["traces"]
        lines.append(f"| {r['backend']} | {' | '.join(cells)} | {tr['dense']} / "
                     f"{', '.join(str(tr[c]) for c in CASES[1:])} ({r['steps_per_run']} steps) |")
    return "\n".join(lines)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="jax,torch,tensorflow")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs per seed (after one warm-up epoch)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.seeds, args.epochs, args.worker)
        return ""
    results = [run_backend(b, args.seeds, args.epochs) for b in args.backends.split(",")]
    text = (f"Step-time ratio pruned / dense, same backend, median over {args.seeds} seeds (min-max), "
            f"{args.epochs} timed epochs each:\n\n" + table(results))
    sys.path.insert(0, ROOT)
    from bench._results import publish

    publish("bench_keras_backends", text, write=not args.no_write)
    return text


if __name__ == "__main__":
    main()
