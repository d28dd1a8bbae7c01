"""TFLite export of a pruned Keras model or SavedModel, with TensorFlow's sparsity optimisation.

Two conversions of the same model: without optimisations (the dense
baseline) and with ``tf.lite.Optimize.EXPERIMENTAL_SPARSITY``, which stores
sparse constant tensors in TFLite's sparse format. The sparse flatbuffer is
then run on random inputs and its outputs compared with the pruned model's
(Keras ``model(x)``, or the SavedModel's ``serving_default`` signature).

Keras files are loaded with ``safe_mode=True`` (no code from the file runs).
The conversion and the interpreter are the library's (:mod:`sparsify_tf.tflite`),
imported once TensorFlow is.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import interrupts
from ..atomic import write_bytes
from ..frameworks import import_tensorflow
from ..report.readers import check_regular, format_bytes
from .result import ExportResult, gzip_size

__all__ = ["export_tflite", "CHECK_SAMPLES"]

#: Random inputs the outputs are compared on.
CHECK_SAMPLES = 8


def _load_keras(path: str) -> Any:
    """A Keras model from a ``.keras`` archive, Keras 3 first, then tf-keras; never runs code from the file."""
    from sparsify_tf.tflite import quiet

    errors = []
    for name in ("keras", "tf_keras"):
        try:
            mod = __import__(name)
        except ImportError:
            continue
        try:
            with quiet():
                return mod.saving.load_model(path, compile=False, safe_mode=True)
        except Exception as e:  # noqa: BLE001 - each Keras raises its own types
            errors.append(f"{name}: {' '.join(str(e).split())[:200]}")
    raise ValueError(f"{path!r} cannot be loaded as a Keras model (safe_mode=True): {'; '.join(errors) or 'no Keras'}")


def export_tflite(src: str, fmt: str, out: str, max_bytes: int | None = None):
    """Convert ``src`` (``"keras"`` or ``"savedmodel"``) twice, check the sparse one, write it to ``out``."""
    tf = import_tensorflow()
    from sparsify_tf.tflite import convert, load_interpreter, quiet, random_inputs, run_tflite

    check_regular(src)
    if max_bytes is not None:
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(src) for f in fs) \
            if os.path.isdir(src) else os.path.getsize(src)
        if size > max_bytes:
            raise ValueError(f"{src!r} is {format_bytes(size)}, more than the cap of {format_bytes(max_bytes)}; "
                             f"pass --max-bytes {size} to export it anyway")
    if fmt == "keras":
        model = _load_keras(src)

        def make() -> Any:
            return tf.lite.TFLiteConverter.from_keras_model(model)

        def reference(xs: list[np.ndarray]) -> list[np.ndarray]:
            y = model(xs[0] if len(xs) == 1 else xs, training=False)
            return [np.asarray(t) for t in (y if isinstance(y, (list, tuple)) else [y])]
    else:
        try:
            with quiet():
                loaded = tf.saved_model.load(src)
        except Exception as e:  # noqa: BLE001 - tf.errors.* for a broken SavedModel
            raise ValueError(f"{src!r} cannot be loaded as a SavedModel: {' '.join(str(e).split())[:300]}") from None
        if "serving_default" not in loaded.signatures:
            raise ValueError(f"{src!r} has no 'serving_default' signature to convert "
                             f"(it has {sorted(loaded.signatures) or 'none'})")
        fn = loaded.signatures["serving_default"]

        def make() -> Any:
            return tf.lite.TFLiteConverter.from_saved_model(src, signature_keys=["serving_default"])

        def reference(xs: list[np.ndarray]) -> list[np.ndarray]:
            names = sorted(fn.structured_input_signature[1])
            res = fn(**{n: tf.constant(x) for n, x in zip(names, xs)})
            return [np.asarray(res[k]) for k in sorted(res)]
    try:                                # Ctrl-C is looked at between the steps, never inside the converter
        interrupts.check()
        dense = convert(make, sparse=False)
        interrupts.check()
        sparse = convert(make, sparse=True)
        interrupts.check()
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - converter errors (ConverterError and friends)
        raise ValueError(f"{src!r} cannot be converted to TFLite: {' '.join(str(e).split())[:300]}") from None
    it = load_interpreter(sparse)
    details = it.get_input_details()
    if fmt == "savedmodel":             # the interpreter orders inputs by its own names; follow the signature's
        order = sorted(range(len(details)), key=lambda i: details[i]["name"])
        details = [details[i] for i in order]
    xs = random_inputs(details, CHECK_SAMPLES)
    got = run_tflite(sparse, [xs[[d["index"] for d in details].index(d["index"])] for d in it.get_input_details()])
    want = reference(xs)
    if fmt == "savedmodel":
        got = [got[i] for i in sorted(range(len(got)), key=lambda i: it.get_output_details()[i]["name"])]
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        raise ValueError(f"{src!r}: the TFLite model's outputs {[g.shape for g in got]} do not match the model's "
                         f"{[w.shape for w in want]}")
    err = max(float(np.max(np.abs(g.astype(np.float64) - w))) if g.size else 0.0 for g, w in zip(got, want))
    scale = max(1.0, max(float(np.max(np.abs(w))) if w.size else 0.0 for w in want))
    if not err <= 1e-4 * scale:
        raise ValueError(f"{src!r}: the sparse TFLite model's outputs differ from the pruned model's by {err:.3g} "
                         f"(allowed {1e-4 * scale:.3g}); not written")
    interrupts.check()
    write_bytes(out, sparse)
    return ExportResult(src, fmt, out, "tflite", len(dense), gzip_size(dense), len(sparse), gzip_size(sparse),
                        f"outputs match the pruned model on {CHECK_SAMPLES} random inputs "
                        f"(max |difference| {err:.2g})")
