"""TFLite for XNNPACK's sparse inference: what a Keras model must look like, and the export that emits it
(``sparsify_tf.xnnpack_report``, ``sparsify_tf.export_tflite_xnnpack``).

XNNPACK (TFLite's CPU delegate) runs a convolutional model sparse (Fast
Sparse ConvNets) only when, per its documentation and source:

* the weights are stored sparse in the flatbuffer (``DENSIFY`` ops): the
  converter's ``tf.lite.Optimize.EXPERIMENTAL_SPARSITY`` does that;
* the sparse subgraph starts with a 3x3 stride-2 ``CONV_2D`` on 3 input
  channels with padding 1 on each side (Keras: ``padding="same"`` on an odd
  input size), holds only 1x1 ``CONV_2D`` (no padding), 3x3/5x5 depthwise
  convolutions, element-wise ops, and ends with a spatial ``MEAN``
  (``GlobalAveragePooling2D``);
* at least 2/3 of the 1x1 convolutions' weights are zero. Non-zeros in
  blocks of 4 output channels (pattern ``"4x1"``, the ``"xnnpack"`` preset of
  :mod:`sparsify.runtime_presets`) let it use its 4-channel kernel;
* the processor is ARM (or x86 without AVX): on x86 with AVX, XNNPACK turns
  sparse inference off ("dense inference is expected to be faster"), so there
  the sparse file is smaller but not faster (:func:`xnnpack_sparse_on_this_cpu`).

:func:`xnnpack_report` checks a Keras model against these rules;
:func:`export_tflite_xnnpack` converts it with the sparsity optimisation,
checks the flatbuffer's outputs against the model's and writes it.

Example:
    >>> xnnpack_sparse_on_this_cpu("/nonexistent")[0] in (True, False)
    True
"""
from __future__ import annotations

import os
import platform
import tempfile
from typing import Any

import numpy as np

import tensorflow as tf

from .tflite import convert, run_tflite

__all__ = ["XNNPACK_MIN_ZEROS", "xnnpack_sparse_on_this_cpu", "xnnpack_report", "export_tflite_xnnpack"]

#: Fraction of the 1x1 convolutions' weights that must be zero for XNNPACK to run them sparse.
XNNPACK_MIN_ZEROS = 2 / 3


def xnnpack_sparse_on_this_cpu(cpuinfo: str = "/proc/cpuinfo") -> tuple[bool, str]:
    """Whether XNNPACK runs sparse kernels on this processor, and why (x86 with AVX: it does not)."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return True, f"{machine}: XNNPACK's sparse kernels run here"
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    if "avx" in flags:
        return False, ("x86 with AVX: XNNPACK turns sparse inference off here (its sparse kernels target SSE; "
                       "dense AVX is expected to be faster); the file still shrinks")
    return True, "x86 without AVX: XNNPACK's SSE sparse kernels run here"


def _write_whole(path: str, data: bytes) -> None:
    """``data`` into ``path`` through a temporary file beside it, renamed into place: never half a file."""
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _cls(layer: Any) -> str:
    return type(layer).__name__


def _kernel(layer: Any) -> np.ndarray:
    return np.asarray(layer.kernel.numpy() if hasattr(layer.kernel, "numpy") else layer.kernel)


def _is_pointwise(layer: Any) -> bool:
    return (_cls(layer) == "Conv2D" and tuple(layer.kernel_size) == (1, 1) and tuple(layer.strides) == (1, 1)
            and getattr(layer, "groups", 1) == 1)


def _stem_problem(layer: Any) -> str | None:
    if _cls(layer) != "Conv2D" or tuple(layer.kernel_size) != (3, 3) or tuple(layer.strides) != (2, 2):
        return f"the first layer {layer.name!r} is not a 3x3 stride-2 Conv2D"
    shape = tuple(layer.input.shape) if hasattr(layer, "input") else ()
    if len(shape) != 4 or shape[-1] != 3:
        return f"the first layer {layer.name!r} does not take 3 input channels (input shape {shape})"
    if layer.padding == "same" and any(d is None or d % 2 == 0 for d in shape[1:3]):
        return (f"the first layer {layer.name!r} pads 'same' on an even or unknown input size {shape[1:3]}: "
                "TensorFlow then pads 0 before and 1 after; XNNPACK needs 1 on each side (use an odd size)")
    return None


def xnnpack_report(model: Any) -> dict[str, Any]:
    """How a built Keras model (Keras 3 or tf-keras) meets XNNPACK's sparse-inference rules.

    Returns:
        ``{"ready": bool, "problems": [str], "pointwise_layers": int, "pointwise_zeros": float,
        "block4_fraction": float, "cpu": (bool, str)}``: ``block4_fraction`` is the fraction of the
        non-zeros that lie in complete blocks of 4 output channels (1.0 after pattern ``"4x1"``).
    """
    if not hasattr(model, "layers"):
        raise TypeError(f"model must be a Keras model, got {type(model).__name__}")
    layers = [lyr for lyr in model.layers if _cls(lyr) != "InputLayer"]
    problems = []
    weighted = [lyr for lyr in layers if getattr(lyr, "kernel", None) is not None or _cls(lyr) == "DepthwiseConv2D"]
    if weighted and (why := _stem_problem(weighted[0])):
        problems.append(why)
    if not any(_cls(lyr) == "GlobalAveragePooling2D" for lyr in layers):
        problems.append("no GlobalAveragePooling2D: XNNPACK's sparse subgraph must end with a spatial MEAN")
    pointwise = [lyr for lyr in layers if _is_pointwise(lyr)]
    for lyr in weighted[1:]:
        if _cls(lyr) == "Conv2D" and not _is_pointwise(lyr):
            problems.append(f"{lyr.name!r}: a {tuple(lyr.kernel_size)} stride {tuple(lyr.strides)} Conv2D inside "
                            "the network; the sparse subgraph takes 1x1 stride-1 ones only")
    zeros = nnz = block4 = total = 0
    for lyr in pointwise:
        k = _kernel(lyr).reshape(-1, _kernel(lyr).shape[-1])          # (in, out)
        total += k.size
        nz = k != 0
        nnz += int(nz.sum())
        out4 = (k.shape[1] // 4) * 4
        if out4:
            blocks = nz[:, :out4].reshape(k.shape[0], -1, 4)
            block4 += int(blocks.all(-1).sum()) * 4
    zeros = 1 - nnz / total if total else 0.0
    if not pointwise:
        problems.append("no 1x1 Conv2D layer: XNNPACK's sparse path is for 1x1 convolutions")
    elif zeros < XNNPACK_MIN_ZEROS:
        problems.append(f"{zeros:.1%} of the 1x1 convolutions' weights are zero; XNNPACK needs at least "
                        f"{XNNPACK_MIN_ZEROS:.1%} (prune them to 70% or more: runtime_config('xnnpack', ...))")
    return {"ready": not problems, "problems": problems, "pointwise_layers": len(pointwise),
            "pointwise_zeros": float(zeros), "block4_fraction": float(block4 / nnz) if nnz else 0.0,
            "cpu": xnnpack_sparse_on_this_cpu()}


def export_tflite_xnnpack(model: Any, path: str | os.PathLike, *, strict: bool = True, samples: int = 2,
                          overwrite: bool = False) -> dict[str, Any]:
    """Convert a pruned Keras model to a sparse TFLite flatbuffer for XNNPACK, check it, write it.

    Args:
        model: a built Keras model (Keras 3 on the TensorFlow backend, or tf-keras), pruned.
        path: the ``.tflite`` file to write.
        strict: refuse (``ValueError``) a model :func:`xnnpack_report` finds problems in; False writes it anyway
            (smaller, not faster).
        samples: random inputs the flatbuffer's outputs are compared on.
        overwrite: replace an existing file.

    Returns:
        ``{"path", "bytes", "dense_bytes", "max_abs_diff", "report"}``.
    """
    report = xnnpack_report(model)
    if strict and report["problems"]:
        raise ValueError("the model cannot take XNNPACK's sparse inference: " + "; ".join(report["problems"])
                         + " (strict=False writes it anyway)")
    if os.path.exists(path) and not overwrite:
        raise ValueError(f"path {os.fspath(path)!r} already exists; pass overwrite=True to replace it")

    def make() -> Any:
        return tf.lite.TFLiteConverter.from_keras_model(model)

    dense, sparse = convert(make, sparse=False), convert(make, sparse=True)
    shape = [samples if i == 0 else int(d) for i, d in enumerate(model.inputs[0].shape)]
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    got = run_tflite(sparse, [x])[0]
    want = np.asarray(model(x, training=False))
    diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
    if not diff <= 1e-4 * max(1.0, float(np.max(np.abs(want)))):
        raise ValueError(f"the sparse TFLite model's outputs differ from the model's by {diff:.3g}; not written")
    _write_whole(os.fspath(path), sparse)
    return {"path": os.fspath(path), "bytes": len(sparse), "dense_bytes": len(dense), "max_abs_diff": diff,
            "report": report}
