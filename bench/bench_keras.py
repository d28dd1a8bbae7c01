"""Keras pruning benchmark: step time and accuracy, dense vs sparsify vs tfmot, with a frequency sweep.

Two models on scikit-learn digits (1408 train / 389 test images, 8x8):

* ``dense``: Sequential Dense 64-128-10 (relu), batch 64, Adam 1e-3,
  0 -> 80% over steps 0..200;
* ``cnn``: conv(32)-conv(64)-pool-fc(128)-fc(10), batch 32, Adam 1e-3,
  0 -> 90% over steps 0..200.

Cubic (gradual) schedule, every prunable kernel pruned, ``pruning_frequency``
1, 10 and 100. Cases: dense training, ``sparsify_tf.keras.PruningCallback``
under tf-keras, ``sparsify_keras.PruningCallback`` under Keras 3 on each
backend (TensorFlow in this process; JAX and PyTorch in one process each,
``--backends``, from the same initial weights and batches; also counted:
how often the train step runs as Python, i.e. JAX compilations and TF traces
per run), and TF Model Optimization's
``prune_low_magnitude`` under tf-keras, with ``begin_step = start_step + 1``
and ``end_step = end_step + 1`` (tfmot adds one to its step before it
updates). With that alignment, the same initial weights and the same data
order, sparsify and tfmot give bit-identical kernels: the benchmark checks
it for every seed and frequency and reports the result.

tfmot is NOT a project dependency: the benchmark installs it with
``pip install --target`` into a temporary folder (``--no-deps``, with
``dm-tree``), or uses ``$TFMOT_PATH`` when that folder holds it.

Per seed, all cases start from the same initial weights and see the same
batches (per-epoch permutations of the training set, ``shuffle=False``). One
warm-up epoch, then 4 timed epochs, advanced one epoch at a time across all
cases in a rotating order so machine load hits them alike; then every case
trains on until the schedule has ended (untimed) and is evaluated.
Step time = epoch wall time / steps; per seed, a case's figure is the median
of its timed epochs and its ratio is taken against dense training in the same
Keras; reported: median over seeds and the spread (min-max) of the ratios,
plus the same ratio on process CPU time, and test accuracy as mean +- std
over the seeds (a different seed, i.e. initial weights and batch order, per
repeat).

Usage:
    python -m bench.bench_keras [--seeds 5] [--models dense,cnn] [--backends jax,torch] [--no-write]
"""
from __future__ import annotations

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from bench.keras_report import FREQS, MODELS, table  # noqa: E402  (the report owns what its tables show)

START, END = 0, 200
WARMUP, TIMED = 1, 4


def data():
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.data / 16.0).astype("float32").reshape(-1, 8, 8, 1)
    y = d.target.astype("int32")
    idx = np.random.RandomState(0).permutation(len(X))
    X, y = X[idx], y[idx]
    return (X[:1408], y[:1408]), (X[1408:], y[1408:])


def build(arch: str, K, seed: int):
    K.utils.set_random_seed(seed)
    shape = (64,) if arch == "dense" else (8, 8, 1)
    first = K.layers.InputLayer(shape) if K.__name__ == "tf_keras" else K.Input(shape)
    if arch == "dense":
        layers = [K.layers.Dense(128, activation="relu", name="fc1"), K.layers.Dense(10, name="out")]
    else:
        layers = [K.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv1"),
                  K.layers.Conv2D(64, 3, padding="same", activation="relu", name="conv2"),
                  K.layers.MaxPooling2D(2), K.layers.Flatten(),
                  K.layers.Dense(128, activation="relu", name="fc"), K.layers.Dense(10, name="out")]
    return K.Sequential([first, *layers])


def kernel_names(arch: str) -> tuple[str, ...]:
    return ("fc1", "out") if arch == "dense" else ("conv1", "conv2", "fc", "out")


def compile_(model, K):
    model.compile(K.optimizers.Adam(1e-3), K.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def ensure_tfmot() -> str:
    """Make tfmot importable (installed with ``pip install --target`` into a temporary folder); '' or why not."""
    path = os.environ.get("TFMOT_PATH")
    if path and os.path.isdir(path):
        sys.path.append(path)
    try:
        import tensorflow_model_optimization  # noqa: F401
        return ""
    except ImportError:
        pass
    target = tempfile.mkdtemp(prefix="sparsify-bench-tfmot-")
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--target", target, "tensorflow-model-optimization", "dm-tree"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return f"tfmot could not be installed ({' '.join(cmd)}): {done.stderr.strip()[-300:]}"
    sys.path.append(target)
    try:
        import tensorflow_model_optimization  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the environment
        return f"tfmot not importable after install: {type(e).__name__}: {e}"
    return ""


class Timer:
    """A flavour-specific callback recording (wall, process CPU) of every epoch."""

    @staticmethod
    def make(K, times):
        def begin(epoch, logs=None):
            times.append([time.perf_counter(), time.process_time(), None, None])

        def end(epoch, logs=None):
            times[-1][2:] = [time.perf_counter(), time.process_time()]

        return K.callbacks.LambdaCallback(on_epoch_begin=begin, on_epoch_end=end)


def make_case(kind: str, freq: int | None, K, arch: str, weights, target: float):
    """(model, callbacks, times) of one case; the model starts from ``weights``."""
    model = build(arch, K, 0)
    model.set_weights(weights)
    callbacks = []
    if kind == "ours":
        if K.__name__ == "tf_keras":
            from sparsify_tf.keras import PruningCallback
        else:
            from sparsify_keras import PruningCallback

        callbacks.append(PruningCallback({"target_sparsity": target, "start_step": START, "end_step": END,
                                          "pruning_frequency": freq, "sparsity_decay_type": "gradual",
                                          "exponent": 3.0}))
    elif kind == "tfmot":
        import tensorflow_model_optimization as tfmot

        # tfmot increments its step before it updates: begin/end one later give the same update steps
        sched = tfmot.sparsity.keras.PolynomialDecay(0.0, target, begin_step=START + 1, end_step=END + 1,
                                                     power=3, frequency=freq)
        model = tfmot.sparsity.keras.prune_low_magnitude(model, pruning_schedule=sched)
        callbacks.append(tfmot.sparsity.keras.UpdatePruningStep())
    compile_(model, K)
    if K.__name__ != "tf_keras":
        count_traces(model)
    times: list = []
    callbacks.append(Timer.make(K, times))
    return model, callbacks, times


def count_traces(model) -> None:
    """Count how often Keras 3 runs ``model.train_step`` as Python (``model.trace_count``): the compilations of
    the step on JAX, its traces on TensorFlow, every step on PyTorch (eager)."""
    inner = model.__dict__.get("train_step") or model.train_step
    model.trace_count = 0

    def counting(*args):
        model.trace_count += 1
        return inner(*args)

    object.__setattr__(model, "train_step", counting)
    model.train_function = None


def finish(kind: str, K, model, arch: str, test):
    """Strip, evaluate; (test accuracy, sparsity of the kernels, kernels)."""
    traces = getattr(model, "trace_count", None)
    if kind == "ours":
        if K.__name__ == "tf_keras":
            from sparsify_tf.keras import strip_pruning
        else:
            from sparsify_keras import strip_pruning

        strip_pruning(model)
    elif kind == "tfmot":
        import tensorflow_model_optimization as tfmot

        model = tfmot.sparsity.keras.strip_pruning(model)
        compile_(model, K)
    Xt, yt = test
    _, acc = model.evaluate(Xt.reshape(len(Xt), -1) if arch == "dense" else Xt, yt, verbose=0)
    ks = [np.array(model.get_layer(n).get_weights()[0]) for n in kernel_names(arch)]
    sp = float(sum((k == 0).sum() for k in ks) / sum(k.size for k in ks))
    return float(acc), sp, ks, traces


def count_differences(arch: str, freq: int, target: float) -> list[str]:
    """Update steps where tfmot's pruned count differs from the exact rule (``sparsify.exact_prune_count``).

    tfmot's sparsity comes from its own ``PolynomialDecay`` (float32) and its kept count is
    ``max(round(n * (1 - sparsity)), 1)`` in float32 (``pruning_impl._update_mask``); ours is
    ``min(ceil(s * n - 0.5), n - 1)`` with the core's float64 schedule value.
    """
    import tensorflow_model_optimization as tfmot
    import tf_keras

    import sparsify

    sched = tfmot.sparsity.keras.PolynomialDecay(0.0, target, begin_step=START + 1, end_step=END + 1, power=3,
                                                 frequency=freq)
    ours = sparsify.GradualSchedule(0.0, target, START, END, freq)
    sizes = {n: int(np.prod(w.shape)) for n, w in
             ((layer.name, layer.kernel) for layer in build(arch, tf_keras, 0).layers if hasattr(layer, "kernel"))}
    out = []
    for step in range(START, END + 1):
        due, s32 = sched(np.int64(step + 1))
        if not bool(due):
            continue
        for name, n in sizes.items():
            theirs = n - max(int(np.round(np.float32(n) * (np.float32(1) - np.float32(s32)))), 1)
            exact = sparsify.exact_prune_count(ours.sparsity(step), n)
            if theirs != exact:
                out.append(f"step {step}, {name}: tfmot prunes {theirs}, the exact rule {exact} of {n}")
    return out


def init_weights(arch: str, seed: int) -> list:
    """The initial weights of a seed, the same in every Keras and backend (NumPy arrays drawn by tf-keras when it
    is there; Keras 3 on another backend reads them from the file the parent process wrote)."""
    path = os.environ.get("SPARSIFY_BENCH_INIT")
    if path:
        with np.load(os.path.join(path, f"{arch}-{seed}.npz")) as z:
            return [z[f"w{i}"] for i in range(len(z.files))]
    import tf_keras

    return build(arch, tf_keras, seed).get_weights()


def run_seed(arch: str, seed: int, cases, train, test, tfmot_note: str):
    spec = MODELS[arch]
    X, y = train
    if arch == "dense":
        X = X.reshape(len(X), -1)
    batch, epochs = spec["batch"], spec["epochs"]
    steps = len(X) // batch
    perms = [np.random.RandomState(1000 * seed + e).permutation(len(X)) for e in range(epochs)]
    init = init_weights(arch, seed)     # the same initial weights for every case
    live = {}
    for key in cases:
        kind, freq, label, K = key
        if kind == "tfmot" and tfmot_note:
            continue
        live[key] = make_case(kind, freq, K, arch, init, spec["target"])
    keys = list(live)
    for epoch in range(WARMUP + TIMED):
        r = epoch % len(keys)
        for key in keys[r:] + keys[:r]:
            model, callbacks, _ = live[key]
            p = perms[epoch]
            model.fit(X[p], y[p], batch_size=batch, epochs=epoch + 1, initial_epoch=epoch, verbose=0,
                      shuffle=False, callbacks=callbacks)
    rest = np.concatenate(perms[WARMUP + TIMED:])        # the remaining epochs, same order for every case
    out = {}
    for key in keys:
        model, callbacks, times = live[key]
        model.fit(X[rest], y[rest], batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=callbacks[:-1])
        wall = float(np.median([(t[2] - t[0]) / steps for t in times[WARMUP:]]))
        cpu = float(np.median([(t[3] - t[1]) / steps for t in times[WARMUP:]]))
        acc, sp, ks, traces = finish(key[0], key[3], model, arch, test)
        out[key] = {"wall": wall, "cpu": cpu, "acc": acc, "sparsity": sp, "kernels": ks, "traces": traces,
                    "steps": WARMUP * steps + TIMED * steps + len(rest) // batch}
    return out


def backend_worker(backend: str, seeds: int, models: list[str], out: str) -> None:
    """Runs in a process started with ``KERAS_BACKEND=backend``: dense and sparsify on Keras 3, results to ``out``."""
    import json

    import keras

    label = f"Keras 3 ({keras.backend.backend()})"
    cases = [("dense", None, label, keras)] + [("ours", f, label, keras) for f in FREQS]
    train, test = data()
    dump: dict = {}
    for arch in models:
        for seed in range(seeds):
            res = run_seed(arch, seed, cases, train, test, "")
            for (kind, freq, _, _), r in res.items():
                r = {k: v for k, v in r.items() if k != "kernels"}
                dump.setdefault(arch, {}).setdefault(f"{kind}|{freq}", []).append(r)
            print(f"{backend} {arch} seed {seed}: " + ", ".join(
                f"{k[0]}/{k[1]} {1e3 * r['wall']:.2f}ms traces {r['traces']}" for k, r in res.items()), flush=True)
    with open(out, "w") as f:
        json.dump({"label": label, "results": dump}, f)


def run_backends(backends: list[str], seeds: int, models: list[str]) -> dict:
    """``{arch: {(kind, freq, label, None): [result per seed]}}`` of Keras 3 on other backends, each in its own
    process, from the initial weights this process draws."""
    import json

    out: dict = {}
    with tempfile.TemporaryDirectory() as d:
        for arch in models:
            for seed in range(seeds):
                np.savez(os.path.join(d, f"{arch}-{seed}.npz"),
                         **{f"w{i}": w for i, w in enumerate(init_weights(arch, seed))})
        for backend in backends:
            path = os.path.join(d, f"{backend}.json")
            env = {**os.environ, "KERAS_BACKEND": backend, "SPARSIFY_BENCH_INIT": d, "TF_CPP_MIN_LOG_LEVEL": "2"}
            subprocess.run([sys.executable, "-m", "bench.bench_keras", "--backend-worker", backend, "--out", path,
                            "--seeds", str(seeds), "--models", ",".join(models)], env=env, cwd=ROOT, check=True)
            with open(path) as f:
                got = json.load(f)
            for arch, cases in got["results"].items():
                for key, rs in cases.items():
                    kind, freq = key.split("|")
                    out.setdefault(arch, {})[(kind, None if freq == "None" else int(freq), got["label"], None)] = rs
    return out


def method_note(args, models: list[str], backends: list[str], loads: list[float], elapsed: float) -> str:
    """How the figures were measured (appended under the tables)."""
    import keras
    import tensorflow as tf
    import tf_keras

    return (f"Schedule: cubic (gradual) from 0 at step {START} to the target at step {END}, every "
             f"prunable kernel; tfmot `PolynomialDecay(0, target, begin_step={START + 1}, end_step={END + 1}, "
             "power=3, frequency=f)` (tfmot adds one to its step before it updates). Per seed: the same initial "
             f"weights and batch order for every case; {WARMUP} warm-up epoch, {TIMED} timed epochs advanced one "
             "epoch at a time across all cases in rotating order, then training on until the schedule has "
             "ended (dense model 12 epochs, CNN 7 in all). Keras 3 on JAX and PyTorch runs in one process per backend "
             "(a backend is fixed at import), from the same initial weights and batches, its cases rotated the same "
             "way; machine load may differ between those processes, so compare ratios within a backend. "
             "Step time: median over the timed epochs of epoch "
             "wall time / steps; ratio per seed against dense training in the same Keras, median over seeds "
             "(spread: min-max); CPU ratio likewise on process CPU time. Accuracy: test accuracy after "
             f"stripping, mean +- std over {args.seeds} seeds. TF {tf.__version__}, tf-keras {tf_keras.__version__}, "
             f"Keras {keras.__version__}; {os.cpu_count()} cores, load average during the run "
             f"{min(loads):.1f}-{max(loads):.1f}; run took {elapsed / 60:.1f} min. "
             f"Command: `python -m bench.bench_keras --seeds {args.seeds} --models {','.join(models)} "
             f"--backends {','.join(backends)}` (torch's `set_flush_denormal` not used).")


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="repeats, one seed each (>= 5 for the accuracy figures)")
    ap.add_argument("--models", default="dense,cnn", help="comma-separated subset of dense,cnn")
    ap.add_argument("--backends", default="jax,torch",
                    help="Keras 3 backends besides tensorflow, each run in its own process ('' for none)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--backend-worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            raise SystemExit(f"--models: unknown model {m!r}; choose from {sorted(MODELS)}")
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in ("jax", "torch"):
            raise SystemExit(f"--backends: unknown backend {b!r}; choose from jax, torch (tensorflow always runs)")
    if args.backend_worker:
        backend_worker(args.backend_worker, args.seeds, models, args.out)
        return ""

    tfmot_note = ensure_tfmot()
    import keras
    import tensorflow as tf
    import tf_keras

    k3 = "Keras 3 (tensorflow)"
    cases = [("dense", None, "tf-keras", tf_keras)]
    cases += [("ours", f, "tf-keras", tf_keras) for f in FREQS]
    cases += [("tfmot", f, "tf-keras", tf_keras) for f in FREQS]
    cases += [("dense", None, k3, keras)] + [("ours", f, k3, keras) for f in FREQS]
    train, test = data()
    sections, loads, t0 = [], [], time.perf_counter()
    others = run_backends(backends, args.seeds, models) if backends else {}
    for arch in models:
        results: dict = dict(others.get(arch, {}))
        for seed in range(args.seeds):
            try:
                res = run_seed(arch, seed, cases, train, test, tfmot_note)
            except Exception as e:  # pragma: no cover - report tfmot trouble, do not hide our own
                if tfmot_note or "tensorflow_model_optimization" not in traceback.format_exc():
                    raise
                tfmot_note = f"tfmot failed on TF {tf.__version__}: {type(e).__name__}: {e}"
                res = run_seed(arch, seed, cases, train, test, tfmot_note)
            loads.append(os.getloadavg()[0])
            for key, r in res.items():
                results.setdefault(key, []).append(r)
            for f in FREQS:
                a, b = res.get(("ours", f, "tf-keras", tf_keras)), res.get(("tfmot", f, "tf-keras", tf_keras))
                if a and b:
                    a["same_as_tfmot"] = all(np.array_equal(x, z) for x, z in zip(a["kernels"], b["kernels"]))
            print(f"{arch} seed {seed}: " + ", ".join(
                f"{k[0]}/{k[1]}/{k[2]} {1e3 * r['wall']:.2f}ms acc {r['acc']:.3f}" for k, r in res.items()),
                flush=True)
        all_cases = cases + sorted({k for k in results if k[3] is None}, key=lambda k: (k[2], k[0] != "dense",
                                                                                         k[1] or 0))
        sections.append(table(arch, results, all_cases, args.seeds))
        if not tfmot_note:
            for f in FREQS:
                diffs = count_differences(arch, f, MODELS[arch]["target"])
                same = [r.get("same_as_tfmot") for r in results.get(("ours", f, "tf-keras", tf_keras), [])]
                if diffs or not all(same):
                    sections[-1] += (f"\n\npruning_frequency {f}: kernels identical to tfmot's on {sum(same)} of "
                                     f"{len(same)} seeds. Update steps where tfmot's pruned count (float32 schedule "
                                     f"and rounding) differs from the exact count: {'; '.join(diffs) or 'none'}.")
    elapsed = time.perf_counter() - t0
    body = "\n\n".join(sections)
    body += "\n\n" + method_note(args, models, backends, loads, elapsed)
    if tfmot_note:
        body += f"\n\n{tfmot_note}"
    from bench._results import publish

    publish("bench_keras", body, write=not args.no_write)
    return body


if __name__ == "__main__":
    main()
