"""What a Keras 3 mask update pays to read the weights: the canonical layout made on the device or on the host.

Run: ``.venv/bin/python -m bench.keras_read [--layers 4] [--width 4096] [--rounds 8]`` (writes the
``bench_keras_read`` section of bench/RESULTS.md). Each backend (JAX, TensorFlow, PyTorch; CPU) runs in its own
process: a model of ``--layers`` Dense layers of ``width x width`` float32, its pruning state, and
:class:`sparsify_keras.adapter.Keras3StateIO`'s two reads, alternating, ``--rounds`` times each (median):

- *host*: ``read_dense()`` (kernel + stored values, one compiled call), then each kernel converted to the
  canonical layout with NumPy (``(in, out)`` -> ``(out, in)``: a blocked transpose, a copy);
- *device*: ``read_canonical()`` (the sum, the transpose and the reshape in the same compiled call), handed
  to the core without a copy where the backend allows (:func:`sparsify_keras.backend.host_view`).

Both give the same arrays, bit for bit (checked before timing). What :class:`sparsify_keras.adapter.KerasAdapter`
uses is *device*.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

BACKENDS = ("jax", "tensorflow", "torch")


def run_backend(layers: int, width: int, rounds: int) -> dict:
    """Both reads timed in this process (its Keras backend): medians in seconds, and the weights read."""
    import keras

    from sparsify_keras.adapter import Keras3StateIO
    from sparsify_keras.layers import find_prunable_weights
    from sparsify_keras.state import PruningState

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width, name=f"fc{i}")
                                                         for i in range(layers)])
    model.compile(optimizer="sgd", loss="mse")
    state = PruningState(find_prunable_weights(model), np.zeros(3, np.int64))
    io = Keras3StateIO(model, state)

    def host() -> list[np.ndarray]:
        return [pw.to_canonical(d) for pw, d in zip(state.pweights, io.read_dense())]

    reads = {"host": host, "device": io.read_canonical}
    first = {name: fn() for name, fn in reads.items()}             # compiled once, and the same arrays
    if not all(np.array_equal(a, b) for a, b in zip(first["host"], first["device"])):
        raise AssertionError("the device read differs from the host read")
    del first
    times: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(rounds):
        for name, fn in reads.items():                                # alternating: drift falls on both
            t0 = time.perf_counter()
            out = fn()
            times[name].append(time.perf_counter() - t0)
            del out
    return {"backend": keras.backend.backend(), "weights": layers * width * width,
            "seconds": {name: float(np.median(v)) for name, v in times.items()}}


def report(results: list[dict], layers: int, width: int, rounds: int) -> str:
    """The section's table and its method line."""
    rows = ["| backend | host layout: ms (ns/weight) | device layout: ms (ns/weight) | speed-up |",
            "|---|---:|---:|---:|"]
    for r in results:
        h, d = r["seconds"]["host"], r["seconds"]["device"]
        ns = lambda s: s / r["weights"] * 1e9          # noqa: E731
        rows.append(f"| {r['backend']} | {h * 1e3:.0f} ({ns(h):.2f}) | {d * 1e3:.0f} ({ns(d):.2f}) | {h / d:.2f}x |")
    return "\n".join(rows) + (
        f"\n\nOne read of the weights a mask update ranks: {layers} Dense layers of {width}x{width} float32 "
        f"({layers * width * width / 1e6:.0f}M weights), CPU, median of {rounds} reads each, the two alternating, "
        "each backend in a fresh process. *Host*: kernel + stored values in one compiled call, then the "
        "canonical layout by NumPy; *device*: the layout in the same compiled call, the result handed over "
        "without a copy where the backend allows (what the adapter uses). Load average at the end: "
        f"{os.getloadavg()[0]:.1f}. Command: `.venv/bin/python -m bench.keras_read --layers {layers} "
        f"--width {width} --rounds {rounds}`.")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--no-write", action="store_true", help="print only, do not update RESULTS.md")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)   # internal: this process's backend
    args = ap.parse_args(argv)
    for name in ("layers", "width", "rounds"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.one:
        print(json.dumps(run_backend(args.layers, args.width, args.rounds)))
        return
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in backends if b not in BACKENDS]
    if bad:
        raise SystemExit(f"--backends: unknown {bad}; choose among {', '.join(BACKENDS)}")
    results = []
    for backend in backends:
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
        proc = subprocess.run([sys.executable, "-m", "bench.keras_read", "--one", "--layers", str(args.layers),
                               "--width", str(args.width), "--rounds", str(args.rounds)],
                              capture_output=True, text=True, check=True, env=env)
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(backend, results[-1]["seconds"], flush=True)
    from bench._results import publish

    publish("bench_keras_read", report(results, args.layers, args.width, args.rounds), write=not args.no_write)


if __name__ == "__main__":
    main()
