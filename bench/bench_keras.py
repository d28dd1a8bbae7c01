"""Keras pruning benchmark: step time and accuracy, dense vs sparsify vs tfmot.

One run, one CNN, one data set (scikit-learn digits, 8x8x1), same schedule
(gradual, cubic, 0 -> 90% over the first 60% of the steps, an update every
10 steps):

* dense training (no pruning),
* ``sparsify_tf.keras.PruningCallback``, under tf-keras and Keras 3,
* TF Model Optimization's ``prune_low_magnitude`` (tf-keras only).

tfmot is NOT a project dependency. Install it for the benchmark only::

    pip install --target /tmp/tfmot --no-deps tensorflow-model-optimization dm-tree

The script puts ``/tmp/tfmot`` (or ``$TFMOT_PATH``) on ``sys.path`` when it
exists and reports clearly when tfmot cannot run.

Step time = epoch wall time / steps (epochs 2..N); all cases advance one epoch
at a time in turn so machine load hits them alike. Reported: the best epoch
(least disturbed) and the mean epoch (includes the mask updates). Writes the table to
bench/RESULTS.md (section ``bench_keras``).

Usage:
    python bench/bench_keras.py [--epochs 12] [--repeats 3] [--no-write]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

BATCH = 32
TARGET = 0.9
FREQ = 10


def data():
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.data / 16.0).astype("float32").reshape(-1, 8, 8, 1)
    y = d.target.astype("int32")
    rng = np.random.RandomState(0)
    idx = rng.permutation(len(X))
    X, y = X[idx], y[idx]
    return (X[:1408], y[:1408]), (X[1408:], y[1408:])


def build_cnn(K, seed=0):
    K.utils.set_random_seed(seed)
    first = K.layers.InputLayer((8, 8, 1)) if K.__name__ == "tf_keras" else K.Input((8, 8, 1))
    return K.Sequential([
        first,
        K.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv1"),
        K.layers.Conv2D(64, 3, padding="same", activation="relu", name="conv2"),
        K.layers.MaxPooling2D(2),
        K.layers.Flatten(),
        K.layers.Dense(128, activation="relu", name="fc"),
        K.layers.Dense(10, name="out"),
    ])


def compile_(model, K):
    model.compile(K.optimizers.Adam(1e-3), K.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


class EpochTimer:
    """Factory for a flavour-specific callback recording epoch wall times."""

    @staticmethod
    def make(K, times):
        def begin(epoch, logs=None):
            times.append([time.perf_counter(), None])

        def end(epoch, logs=None):
            times[-1][1] = time.perf_counter()

        return K.callbacks.LambdaCallback(on_epoch_begin=begin, on_epoch_end=end)


def sparsity_of(model, names=("conv1", "conv2", "fc", "out")):
    ks = [model.get_layer(n).get_weights()[0] for n in names]
    return float(sum((k == 0).sum() for k in ks) / sum(k.size for k in ks))


def setup(kind, K, end_step):
    """A compiled model and its callbacks for one case."""
    model = build_cnn(K)
    callbacks = []
    if kind == "ours":
        from sparsify_tf.keras import PruningCallback

        callbacks.append(PruningCallback({"target_sparsity": TARGET, "start_step": 0, "end_step": end_step,
                                          "pruning_frequency": FREQ, "sparsity_decay_type": "gradual",
                                          "exponent": 3.0}))
    elif kind == "tfmot":
        import tensorflow_model_optimization as tfmot

        sched = tfmot.sparsity.keras.PolynomialDecay(0.0, TARGET, begin_step=0, end_step=end_step,
                                                     power=3, frequency=FREQ)
        model = tfmot.sparsity.keras.prune_low_magnitude(model, pruning_schedule=sched)
        callbacks.append(tfmot.sparsity.keras.UpdatePruningStep())
    compile_(model, K)
    times: list = []
    callbacks.append(EpochTimer.make(K, times))
    return model, callbacks, times


def finish(kind, K, model, test):
    """Strip, evaluate; (test accuracy, sparsity of the four kernels)."""
    Xt, yt = test
    if kind == "ours":
        from sparsify_tf.keras import strip_pruning

        strip_pruning(model)
    elif kind == "tfmot":
        import tensorflow_model_optimization as tfmot

        model = tfmot.sparsity.keras.strip_pruning(model)
        compile_(model, K)
    _, acc = model.evaluate(Xt, yt, verbose=0)
    return float(acc), (sparsity_of(model) if kind != "dense" else 0.0)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)

    tfmot_path = os.environ.get("TFMOT_PATH", "/tmp/tfmot")
    if os.path.isdir(tfmot_path) and tfmot_path not in sys.path:
        sys.path.append(tfmot_path)
    import tensorflow as tf
    import keras
    import tf_keras

    tfmot_note = ""
    try:
        import tensorflow_model_optimization  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the environment
        tfmot_note = f"tfmot not available: {type(e).__name__}: {e}"

    train, test = data()
    steps = int(np.ceil(len(train[0]) / BATCH))
    end_step = int(0.6 * steps * args.epochs)
    cases = [("dense", "tf-keras", tf_keras), ("ours", "tf-keras", tf_keras), ("tfmot", "tf-keras", tf_keras),
             ("dense", "Keras 3", keras), ("ours", "Keras 3", keras)]
    results: dict = {}
    for rep in range(args.repeats):
        # all cases advance one epoch at a time, interleaved, so machine load hits them alike
        live = {}
        for kind, label, K in cases:
            if kind == "tfmot" and tfmot_note:
                continue
            try:
                live[(kind, label)] = (K, *setup(kind, K, end_step))
            except Exception as e:  # pragma: no cover - report, don't crash the table
                if kind != "tfmot":
                    raise
                tfmot_note = f"tfmot failed on TF {tf.__version__}: {type(e).__name__}: {e}"
                traceback.print_exc()
        for epoch in range(args.epochs):
            for key, (K, model, callbacks, times) in list(live.items()):
                model.fit(*train, batch_size=BATCH, epochs=epoch + 1, initial_epoch=epoch, verbose=0,
                          shuffle=True, callbacks=callbacks)
        for (kind, label), (K, model, callbacks, times) in live.items():
            ep = [(b - a) / steps for a, b in times[1:]]
            acc, sp = finish(kind, K, model, test)
            r = (float(np.min(ep)), float(np.mean(ep)), acc, sp)
            results.setdefault((kind, label), []).append(r)
            print(f"rep {rep} {kind:5s} {label:8s} step min {r[0] * 1e3:7.3f} ms mean {r[1] * 1e3:7.3f} ms  "
                  f"acc {r[2]:.4f}  sparsity {r[3]:.4f}", flush=True)

    rows = ["| framework | method | step time, best epoch (ms) | vs dense | step time, mean (ms) | vs dense "
            "| test accuracy | final sparsity |", "|---|---|---|---|---|---|---|---|"]
    for kind, label, _ in cases:
        rs = results.get((kind, label))
        if not rs:
            rows.append(f"| {label} | {kind} | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        best = min(r[0] for r in rs)
        mean = float(np.median([r[1] for r in rs]))
        dbest = min(r[0] for r in results[("dense", label)])
        dmean = float(np.median([r[1] for r in results[("dense", label)]]))
        acc = float(np.mean([r[2] for r in rs]))
        sp = float(np.mean([r[3] for r in rs]))
        name = {"dense": "dense", "ours": "sparsify PruningCallback", "tfmot": "tfmot prune_low_magnitude"}[kind]
        rows.append(f"| {label} | {name} | {best * 1e3:.3f} | {best / dbest:.3f}x | {mean * 1e3:.3f} | "
                    f"{mean / dmean:.3f}x | {acc:.4f} | {sp:.4f} |")
    body = "\n".join(rows)
    body += (f"\n\nCNN conv(32)-conv(64)-pool-fc(128)-fc(10) on sklearn digits (1408 train / 389 test, 8x8x1), "
             f"Adam 1e-3, batch {BATCH}, {args.epochs} epochs ({steps} steps/epoch); schedule 0 -> {TARGET:.0%} "
             f"cubic over steps 0..{end_step}, update every {FREQ} steps, all four kernels pruned. Step time: "
             f"epoch wall time / steps over epochs 2..{args.epochs} (best epoch = least disturbed, includes no "
             f"mask update once pruning has ended; mean = over all those epochs, includes the mask updates), "
             f"cases advanced one epoch at a time in turn, {args.repeats} repeats (best / median); "
             f"shared 2-core CPU, so expect noise of several %. Accuracy and sparsity: mean over repeats. TF {tf.__version__}, "
             f"tf-keras {tf_keras.__version__}, Keras {keras.__version__}.")
    if tfmot_note:
        body += f"\n\n{tfmot_note}"
    from bench._results import publish

    publish("bench_keras", body, write=not args.no_write)
    return body


if __name__ == "__main__":
    main()
