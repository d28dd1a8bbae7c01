"""Where the time of a Keras 3 mask update goes, per backend, on bench_keras's CNN.

``bench_keras`` measures the end-to-end cost of pruning against dense training; this benchmark splits
the cost of one mask update, so the ``<= 1.05x at pruning_frequency >= 10`` target can be read
against what each part costs. Per backend (one process each, ``KERAS_BACKEND`` set before Keras is
imported): the CNN of ``bench_keras`` (digits, batch 32) trained densely and with
``sparsify_keras.PruningCallback`` (gradual to 90% over 10,000 steps, an update every 10 steps, so
every timed epoch updates), the two advanced one epoch at a time. Timed, per update:

* ``read``: the weights' read (kernel + stored values, to the host, canonical layout);
* ``select``: ``PruningProtocol.advance`` less its read: the core's exact selection;
* ``write``: the update's write (kernels, stored values, masks, optimizer slots);

the three as the callback times them (``PruningCallback.update_timings``);
* ``batch start``: the callback's whole ``on_train_batch_begin`` at an update; beyond the three parts
  it syncs the trainer's state and reads the step. On JAX that includes waiting for the steps
  dispatched ahead, compute dense training needs as well, so it is reported, not counted as cost;
* ``floor``: the least any host-side update of these kernels costs, timed after training on the dense
  model's kernels (warm caches, so it is optimistic): each kernel read to NumPy, its half with the
  smallest magnitudes found by ``np.argpartition`` (no tie order, no canonical layout, no checks) and a
  kernel's worth of values assigned back (the values read, so the kernels do not change). Where the
  floor alone is near or over the budget, no exact host-side selection can meet it on this model and
  machine.

``budget`` is 5% of 10 dense steps (the target at frequency 10); ``f for 5%`` is the smallest
frequency at which read + select + write is within 5% of the dense steps in between (the update's
own cost only: the per-step overhead and, on JAX, restarting the dispatch pipeline come on top).

Usage:
    python -m bench.keras_update_cost [--epochs 6] [--backends jax,torch,tensorflow] [--no-write]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

BACKENDS = ("jax", "torch", "tensorflow")
FREQUENCY = 10


def worker(epochs: int) -> dict:
    """Runs under one backend: the parts' medians (ms) over the updates of the timed epochs, and the dense step."""
    import keras

    from bench.bench_keras import build, compile_, data
    from sparsify_keras import PruningCallback

    class BatchStartTimer(PruningCallback):
        """The callback, also timing each whole batch start that made an update."""

        def __init__(self, config: dict) -> None:
            super().__init__(config)
            self.update_starts: list[float] = []

        def on_train_batch_begin(self, batch_index, logs=None):
            updates, t = len(self.update_timings), time.perf_counter()
            super().on_train_batch_begin(batch_index, logs)
            if len(self.update_timings) != updates:
                self.update_starts.append(time.perf_counter() - t)

    (X, y), _ = data()
    batch, steps = 32, len(X) // 32
    dense = compile_(build("cnn", keras, 0), keras)
    pruned = compile_(build("cnn", keras, 0), keras)
    callback = BatchStartTimer({"target_sparsity": 0.9, "start_step": 0, "end_step": 10_000,
                                "pruning_frequency": FREQUENCY, "sparsity_decay_type": "gradual", "exponent": 3.0})
    dense_steps: list[float] = []
    first_timed = (0, 0)          # the updates and batch starts of the warm-up epoch
    for epoch in range(epochs):
        perm = np.random.RandomState(epoch).permutation(len(X))
        for model, callbacks in ((dense, []), (pruned, [callback])):
            if epoch == 1 and callbacks:
                first_timed = (len(callback.update_timings), len(callback.update_starts))
            t = time.perf_counter()
            model.fit(X[perm], y[perm], batch_size=batch, epochs=epoch + 1, initial_epoch=epoch, verbose=0,
                      shuffle=False, callbacks=callbacks)
            if not callbacks and epoch >= 1:
                dense_steps.append((time.perf_counter() - t) / steps * 1e3)

    timings = callback.update_timings[first_timed[0]:]
    n = len(timings)
    parts = {name: np.asarray([u[name] for u in timings], float) * 1e3 for name in ("read", "select", "write")}
    batch_start = np.asarray(callback.update_starts[first_timed[1]:], float) * 1e3
    return {"backend": keras.backend.backend(), "updates": int(n), "dense_step_ms": float(np.median(dense_steps)),
            **{k: float(np.median(v)) for k, v in parts.items()},
            "host_ms": float(np.median(sum(parts.values()))), "batch_start_ms": float(np.median(batch_start)),
            "floor_ms": floor_ms(dense, keras)}


def floor_ms(model, keras, calls: int = 200) -> float:
    """Median ms of the least host-side update of ``model``'s kernels: read, ``argpartition`` of half, assign.

    Example:
        >>> import keras
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        >>> floor_ms(model, keras, calls=3) > 0
        True
    """
    kernels = [layer.kernel for layer in model.layers if getattr(layer, "kernel", None) is not None]
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        for kernel in kernels:
            values = keras.ops.convert_to_numpy(kernel.value)
            flat = np.abs(values).ravel()
            keep = np.ones(flat.size, bool)         # the mask a selection makes (not written: see below)
            keep[np.argpartition(flat, flat.size // 2)[:flat.size // 2]] = False
            kernel.assign(values)       # the values read, so every call selects among the same (untied) values
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def table(rows: list[dict]) -> str:
    """The Markdown table of the workers' results."""
    lines = ["| backend | dense step (ms) | read | select | write | read + select + write | batch start at an update "
             "| budget at f=10 | within it | f for 5% | floor | floor / budget | updates timed |",
             "|---|" + "---|" * 12]
    for r in rows:
        budget = 0.05 * FREQUENCY * r["dense_step_ms"]
        needed = math.ceil(r["host_ms"] / (0.05 * r["dense_step_ms"]))
        lines.append(f"| Keras 3 ({r['backend']}) | {r['dense_step_ms']:.3f} | {r['read']:.3f} | {r['select']:.3f} | "
                     f"{r['write']:.3f} | {r['host_ms']:.3f} | {r['batch_start_ms']:.3f} | {budget:.3f} | "
                     f"{'yes' if r['host_ms'] <= budget else 'no'} | {needed} | {r['floor_ms']:.3f} | "
                     f"{r['floor_ms'] / budget:.2f} | {r['updates']} |")
    return "\n".join(lines)


def run_backend(backend: str, epochs: int) -> dict:
    """One worker process under ``backend``; its result."""
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-m", "bench.keras_update_cost", "--worker", "--epochs", str(epochs)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"backend {backend}: the worker failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=6, help="epochs per case (the first is warm-up), >= 2")
    ap.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated subset of {','.join(BACKENDS)}")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.epochs < 2:
        ap.error(f"--epochs: at least 2 (one warm-up, one timed), got {args.epochs}")
    if args.worker:
        print(json.dumps(worker(args.epochs)))
        return ""
    backends = [b for b in args.backends.split(",") if b]
    bad = [b for b in backends if b not in BACKENDS]
    if bad or not backends:
        ap.error(f"--backends: a comma-separated subset of {','.join(BACKENDS)}, got {args.backends!r}")
    started = time.perf_counter()
    rows = [run_backend(b, args.epochs) for b in backends]
    import keras

    body = (table(rows) + "\n\n"
            f"Milliseconds, medians over the updates of the timed epochs ({args.epochs - 1} timed epochs of 44 "
            f"steps, an update every {FREQUENCY} steps; gradual to 90% over steps 0..10000). One process per "
            "backend; dense step: median over the timed epochs of dense training in the same process. Floor: "
            "the least host-side update of the same kernels (each read to NumPy, its smaller half found by "
            "`np.argpartition`, a kernel assigned back; no tie order, layout or checks), median of 200 calls "
            "after training, so with warm caches: an optimistic lower bound. "
            f"Keras {keras.__version__}; 2 cores, load average {os.getloadavg()[0]:.1f}; run took "
            f"{(time.perf_counter() - started) / 60:.1f} min. Command: `python -m bench.keras_update_cost "
            f"--epochs {args.epochs} --backends {','.join(backends)}`.")
    from bench._results import publish

    publish("keras_update_cost", body, write=not args.no_write)
    return body


if __name__ == "__main__":
    main()
