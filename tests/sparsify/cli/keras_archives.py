"""A helper of the CLI tests: a ``.keras`` archive written the way Keras 3 writes one, without Keras.

``config.json`` names the layers; ``model.weights.h5`` keys their weights by class (``layers/dense/vars/0``)
and holds the optimizer's variables (``optimizer/vars/N``), as ``model.save`` of a compiled, trained model does.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import h5py
import numpy as np

#: The demo's MLP: (name, units in, units out).
MLP = (("fc1", 64, 128), ("fc2", 128, 64), ("out", 64, 10))


def mlp_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """``{"fc1/kernel": (64, 128), "fc1/bias": (128,), ...}``, kernels 90% zeros."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, n_in, n_out in MLP:
        k = rng.normal(size=(n_in, n_out)).astype(np.float32)
        out[f"{name}/kernel"] = np.where(rng.random(k.shape) < 0.9, 0.0, k).astype(np.float32)
        out[f"{name}/bias"] = rng.normal(size=n_out).astype(np.float32)
    return out


def write_keras_archive(path: Path, weights: dict[str, np.ndarray], optimizer: bool = True) -> Path:
    """A Sequential ``.keras`` of Dense layers named as in ``weights``; with Adam's 2 counters + 2 moments a weight."""
    names = list(dict.fromkeys(k.split("/")[0] for k in weights))
    layers = [{"module": "keras.layers", "class_name": "InputLayer", "config": {"name": "input_layer"}}]
    layers += [{"module": "keras.layers", "class_name": "Dense",
                "config": {"name": n, "units": int(weights[f"{n}/bias"].shape[0]), "use_bias": True}} for n in names]
    config = {"module": "keras", "class_name": "Sequential", "config": {"name": "digits_mlp", "layers": layers}}
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        for i, n in enumerate(names):
            group = f.create_group(f"layers/dense{'_' + str(i) if i else ''}/vars")
            group["0"], group["1"] = weights[f"{n}/kernel"], weights[f"{n}/bias"]
        f.create_group("vars")
        if optimizer:
            opt = f.create_group("optimizer/vars")
            opt["0"], opt["1"] = np.int64(30), np.float32(0.01)          # iterations, learning rate
            for j, w in enumerate(weights.values()):
                opt[str(2 + 2 * j)], opt[str(3 + 2 * j)] = np.full_like(w, 0.5), np.full_like(w, 0.25)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        zf.writestr("config.json", json.dumps(config))
        zf.writestr("model.weights.h5", buf.getvalue())
    return path
