"""tfmot compatibility check: ``sparsify_tf.compat.tfmot`` against tfmot itself, kernels bit for bit.

For each model (an MLP and a small CNN on scikit-learn's digits), schedule
and seed, the same tf-keras model with the same initial weights is trained
twice with the same data order, once with tfmot and once with
``import sparsify_tf.compat.tfmot as tfmot`` (the only change), then
stripped. The table reports whether every final kernel (and every mask) is
bit-identical, the final sparsity and the wall time of each ``fit``.

tfmot is NOT a project dependency: it is installed with ``pip install
--target`` into a temporary folder (``--no-deps``, plus ``dm-tree``), or
taken from ``TFMOT_PATH`` when that folder exists.

Usage::

    python -m bench.bench_tfmot_compat [--seeds 3] [--no-write]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402

from bench.bench_keras import ensure_tfmot  # noqa: E402  (one installer for every tfmot benchmark)

EPOCHS, BATCH = 3, 64


def data():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype("float32"), d.target.astype("int32")


def build(arch: str, seed: int):
    import tf_keras as K

    K.utils.set_random_seed(seed)
    if arch == "mlp":
        layers = [K.layers.Dense(48, activation="relu", name="fc1", input_shape=(64,)),
                  K.layers.Dense(10, name="out")]
    else:
        layers = [K.layers.Reshape((8, 8, 1), input_shape=(64,)),
                  K.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv"),
                  K.layers.MaxPooling2D(2), K.layers.Flatten(),
                  K.layers.Dense(24, activation="relu", name="fc1"), K.layers.Dense(10, name="out")]
    return K.Sequential(layers)


def cases(api):
    """``{name: prune_low_magnitude keyword arguments}`` built with ``api`` (tfmot's or ours)."""
    steps = EPOCHS * -(-1797 // BATCH)
    poly = api.PolynomialDecay
    return {
        "PolynomialDecay 0->0.8, every step": {"pruning_schedule": poly(0.0, 0.8, 0, steps // 2, frequency=1)},
        "PolynomialDecay 0.5->0.9, freq 10": {"pruning_schedule": poly(0.5, 0.9, 3, steps - 20, frequency=10)},
        "ConstantSparsity 0.6, begin 5, freq 7": {"pruning_schedule": api.ConstantSparsity(0.6, 5, frequency=7)},
        "block (2, 2) AVG, Poly 0.3->0.75": {"pruning_schedule": poly(0.3, 0.75, 0, steps // 2, frequency=5),
                                             "block_size": (2, 2)},
        "block (1, 4) MAX, Constant 0.5": {"pruning_schedule": api.ConstantSparsity(0.5, 0, frequency=4),
                                           "block_size": (1, 4), "block_pooling_type": "MAX"},
        "sparsity_m_by_n (2, 4)": {"pruning_schedule": api.ConstantSparsity(0.5, 0, frequency=10),
                                   "sparsity_m_by_n": (2, 4)},
    }


def run(api, arch: str, seed: int, case: str, init, X, y):
    """Train one pruned model with ``api``; (kernels, masks, fit seconds)."""
    import tf_keras as K

    model = build(arch, seed)
    model.set_weights(init)
    params = cases(api)[case]
    if "block_size" in params and arch == "cnn":
        pruned = K.models.clone_model(model, clone_function=lambda layer: api.prune_low_magnitude(layer, **params)
                                      if isinstance(layer, K.layers.Dense) else layer)
    else:
        pruned = api.prune_low_magnitude(model, **params)
    pruned.compile(K.optimizers.Adam(3e-3), K.losses.SparseCategoricalCrossentropy(from_logits=True))
    t0 = time.perf_counter()
    pruned.fit(X, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[api.UpdatePruningStep()])
    seconds = time.perf_counter() - t0
    masks = {}
    for layer in pruned.layers:
        for i, (_, mask, _) in enumerate(getattr(layer, "pruning_vars", [])):
            masks[f"{layer.name}/{i}"] = mask.numpy()
    stripped = api.strip_pruning(pruned)
    kernels = {layer.name: layer.kernel.numpy() for layer in stripped.layers if hasattr(layer, "kernel")}
    return kernels, masks, seconds


def same_bits(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
                                        and a[k].tobytes() == b[k].tobytes() for k in a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds per model and schedule")
    ap.add_argument("--no-write", action="store_true", help="print only, do not update bench/RESULTS.md")
    args = ap.parse_args()
    why = ensure_tfmot()
    if why:
        print(why)
        sys.exit(1)
    import tensorflow as tf
    import tensorflow_model_optimization as real
    import tf_keras as K

    import sparsify_tf.compat.tfmot as ours

    tf.config.experimental.enable_op_determinism()
    X, y = data()
    rows = ["| model | schedule | seeds | kernels identical | masks identical | final sparsity | fit s tfmot "
            "| fit s ours |",
            "|---|---|---|---|---|---|---|---|"]
    mismatches = 0
    for arch in ("mlp", "cnn"):
        for case in cases(ours.sparsity.keras):
            same_k = same_m = 0
            sparsity, t_real, t_ours = [], [], []
            for seed in range(args.seeds):
                init = build(arch, seed).get_weights()
                k_real, m_real, s_real = run(real.sparsity.keras, arch, seed, case, init, X, y)
                k_ours, m_ours, s_ours = run(ours.sparsity.keras, arch, seed, case, init, X, y)
                same_k += same_bits(k_real, k_ours)
                same_m += same_bits(m_real, m_ours)
                zeros = sum(int((m == 0).sum()) for m in m_ours.values())
                sparsity.append(zeros / max(1, sum(m.size for m in m_ours.values())))
                t_real.append(s_real)
                t_ours.append(s_ours)
                K.backend.clear_session()
            mismatches += (args.seeds - same_k) + (args.seeds - same_m)
            rows.append(f"| {arch} | {case} | {args.seeds} | {same_k}/{args.seeds} | {same_m}/{args.seeds} | "
                        f"{np.mean(sparsity):.4f} | {np.median(t_real):.2f} | {np.median(t_ours):.2f} |")
            print(rows[-1], flush=True)
    body = "\n".join([
        f"tf-keras {K.__version__}, TF {tf.__version__}, tfmot {real.__version__}; digits (1797 x 64), "
        f"Adam(3e-3), batch {BATCH}, {EPOCHS} epochs, no shuffling, op determinism on. Same initial weights "
        "for both runs; 'identical' compares the bytes of every stripped kernel / mask.",
        "", *rows, "", f"Mismatching runs: {mismatches}.",
        "", "Command: `python -m bench.bench_tfmot_compat --seeds %d`" % args.seeds])
    from bench._results import publish

    publish("bench_tfmot_compat", body, write=not args.no_write)
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
