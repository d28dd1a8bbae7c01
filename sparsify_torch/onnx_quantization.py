"""Int8 ONNX of a pruned model (onnxruntime's quantizer) that keeps every pruned zero, checked from the file.

:func:`quantize_onnx_int8` takes the ONNX file :func:`sparsify_torch.onnx_export.export_onnx` writes (its
``SparseTensorProto`` initializers are made dense first; a plain dense ONNX model works too) and quantizes it
with ``onnxruntime.quantization``:

* ``mode="dynamic"``: ``quantize_dynamic``: int8 weights, activations quantized per batch at run time
  (``MatMulInteger`` / ``ConvInteger``); no calibration;
* ``mode="qdq"``: ``quantize_static`` in the QDQ format: int8 weights and activations, activation ranges
  calibrated on ``calibration`` (``QuantizeLinear`` / ``DequantizeLinear`` around the float ops, which
  runtimes fuse into integer kernels).

Weights are int8 and symmetric (zero point 0), per output channel (per tensor for the dynamic
``ConvInteger``, which takes one scale), so a pruned 0 stays 0. The quantized
initializers are then read back from the quantized model (``<weight>_quantized``, ``_scale``,
``_zero_point``; ``<weight>_Transposed_quantized`` where the quantizer transposed a ``Gemm`` weight for
``MatMulInteger``) and compared with the float weights by :func:`sparsify.quantization.zeros_check`: a zero
turned non-zero raises ``ValueError`` and nothing is written.

``compress=True`` stores each pruned int8 weight as bitmask + non-zero int8 values
(:mod:`sparsify_torch.onnx_int8_bitmask`): rebuilt by standard ops that onnxruntime folds when it loads
the model, so the session computes exactly as with the dense int8 file, from a file a fraction of its size.

Needs ``onnx`` and ``onnxruntime``: ``pip install "sparsify-train[deploy]"``.

Example:
    >>> import torch, tempfile, os
    >>> m = torch.nn.Linear(64, 64)
    >>> with torch.no_grad():
    ...     _ = m.weight.mul_((torch.rand(64, 64) > 0.9).float())
    >>> d = tempfile.mkdtemp()
    >>> _ = export_onnx(m, torch.randn(2, 64), os.path.join(d, "m.onnx"))
    >>> res = quantize_onnx_int8(os.path.join(d, "m.onnx"), os.path.join(d, "m.int8.onnx"))
    >>> res.report["weight"].lost_zeros, res.weights["weight"][0].dtype.name
    (0, 'int8')
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from sparsify.extras import install_command
from sparsify.quantization import LayerZeros, require_zeros_kept, zeros_check

from .onnx_export import export_onnx  # noqa: F401 - named in the module example
from .onnx_int8_bitmask import bitmask_int8_initializers, bitmask_int8_names, expand_bitmask_int8

__all__ = ["MODES", "OnnxInt8", "dense_initializers", "quantized_weights", "quantize_onnx_int8"]

#: How :func:`quantize_onnx_int8` quantizes.
MODES = ("dynamic", "qdq")


@dataclasses.dataclass
class OnnxInt8:
    """The result of :func:`quantize_onnx_int8`.

    ``content``: the int8 ONNX model (serialized); ``weights``: per float weight quantized, ``(q, scales,
    axis)`` in the float weight's layout; ``report``: the zeros check per weight; ``float_weights``: weights
    of two or more axes the quantizer left in float; ``max_abs_diff``: the largest difference of
    onnxruntime's outputs, int8 against float, on ``check_inputs`` (``None`` when not checked);
    ``dense_int8_bytes``: the size of the int8 model with dense int8 weights; ``compressed``: the int8
    initializers stored as bitmask + values (``compress=True``; then ``content`` is that smaller model).
    """

    content: bytes
    float_bytes: int
    weights: dict[str, tuple[np.ndarray, np.ndarray, int]]
    report: dict[str, LayerZeros]
    float_weights: list[str]
    max_abs_diff: float | None
    dense_int8_bytes: int = 0
    compressed: list[str] = dataclasses.field(default_factory=list)


def _libs() -> tuple[Any, Any]:
    try:
        import onnx
        import onnxruntime.quantization as ortq
    except ImportError as e:   # pragma: no cover - the deploy extra installs both
        raise ImportError(f"ONNX int8 needs onnx and onnxruntime: {install_command('deploy')}") from e
    return onnx, ortq


def dense_initializers(model: Any) -> Any:
    """A copy of ONNX ``model`` whose ``sparse_initializer`` entries are dense initializers again.

    Example:
        >>> import onnx
        >>> v = onnx.numpy_helper.from_array(np.array([2.0], np.float32), "w")
        >>> i = onnx.numpy_helper.from_array(np.array([3], np.int64), "w.indices")
        >>> g = onnx.helper.make_graph([], "g", [], [], sparse_initializer=[onnx.helper.make_sparse_tensor(v, i, [2, 2])])
        >>> onnx.numpy_helper.to_array(dense_initializers(onnx.helper.make_model(g)).graph.initializer[0]).tolist()
        [[0.0, 0.0], [0.0, 2.0]]
    """
    onnx, _ = _libs()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for s in out.graph.sparse_initializer:
        values = onnx.numpy_helper.to_array(s.values)
        positions = onnx.numpy_helper.to_array(s.indices)
        dense = np.zeros(int(np.prod(s.dims)), values.dtype)
        if positions.ndim == 2:                          # (nnz, rank) coordinates
            positions = np.ravel_multi_index(tuple(positions.T), tuple(s.dims))
        dense[positions.reshape(-1)] = values
        out.graph.initializer.append(onnx.numpy_helper.from_array(dense.reshape(list(s.dims)), s.values.name))
    del out.graph.sparse_initializer[:]
    return out


def quantized_weights(model: Any, names: Iterable[str]) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """The int8 values of the float weights ``names`` in a quantized ONNX ``model``, in the float layout.

    Returns ``{name: (q - zero_point as int8, scales, axis)}`` for each weight the quantizer stored as
    ``<name>_quantized`` (or ``<name>_Transposed_quantized``, transposed back, the axis moved with it);
    weights stored as bitmask + values (``compress=True``) are read decoded.

    Raises:
        ValueError: a weight is quantized to a type other than int8, or with a non-zero zero point.
    """
    onnx, _ = _libs()
    if bitmask_int8_names(model):
        model = expand_bitmask_int8(model)
    inits = {i.name: i for i in model.graph.initializer}
    out = {}
    for name in names:
        for stem, transposed in ((name, False), (f"{name}_Transposed", True)):
            if f"{stem}_quantized" not in inits:
                continue
            q = onnx.numpy_helper.to_array(inits[f"{stem}_quantized"])
            if q.dtype != np.int8:
                raise ValueError(f"weight {name!r} is quantized to {q.dtype}, not int8 (weight_type must be QInt8)")
            scales = onnx.numpy_helper.to_array(inits[f"{stem}_scale"]).astype(np.float32).reshape(-1)
            zp = onnx.numpy_helper.to_array(inits[f"{stem}_zero_point"]).reshape(-1)
            if np.any(zp != 0):
                raise ValueError(f"weight {name!r} has non-zero zero points {zp[zp != 0][:4].tolist()}; "
                                 "the int8 weights must be symmetric")
            axis = _quant_axis(model, f"{stem}_quantized", q, scales)
            if transposed:
                q, axis = q.T, (q.ndim - 1 - axis)
            out[name] = (np.ascontiguousarray(q), scales, axis)
            break
    return out


def _quant_axis(model: Any, qname: str, q: np.ndarray, scales: np.ndarray) -> int:
    for node in model.graph.node:                        # QDQ: DequantizeLinear names its axis
        if node.op_type == "DequantizeLinear" and node.input and node.input[0] == qname:
            for a in node.attribute:
                if a.name == "axis":
                    return int(a.i) % q.ndim
            return 1 % q.ndim if scales.size > 1 else 0
    if scales.size == 1:
        return 0
    axes = [i for i in range(q.ndim) if q.shape[i] == scales.size]
    # dynamic MatMulInteger: the channels of a (in, out) weight are its last axis; ConvInteger: axis 0
    return axes[-1] if q.ndim == 2 else axes[0]


def _feeds(data: Any, input_names: Sequence[str], what: str) -> list[dict[str, np.ndarray]]:
    if isinstance(data, (str, bytes, Mapping)) or not hasattr(data, "__len__") or len(data) == 0:
        raise ValueError(f"{what} must be a non-empty sequence of batches (an array for a one-input model, or a "
                         f"dict of input name -> array), got {data!r:.80}")
    out = []
    for b in data:
        if isinstance(b, Mapping):
            if sorted(b) != sorted(input_names):
                raise ValueError(f"{what}: a batch names inputs {sorted(b)}; the model takes {sorted(input_names)}")
            out.append({k: np.asarray(v) for k, v in b.items()})
        elif len(input_names) == 1:
            out.append({input_names[0]: np.asarray(b.detach().cpu().numpy() if hasattr(b, "detach") else b)})
        else:
            raise ValueError(f"{what}: the model takes {len(input_names)} inputs {list(input_names)}; give each "
                             "batch as a dict of input name -> array")
    return out


@contextlib.contextmanager
def _quiet_root() -> Any:
    """onnxruntime's quantizer logs a pre-processing hint on the root logger for every call."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_onnx_int8(model: Any, path: str | os.PathLike | None = None, *, mode: str = "dynamic",
                       calibration: Any = None, check_inputs: Any = None, compress: bool = False) -> OnnxInt8:
    """Quantize a pruned ONNX model to int8 with onnxruntime, check every pruned zero, write it to ``path``.

    Args:
        model: an ``.onnx`` path (what ``export_onnx`` writes) or an ``onnx.ModelProto``.
        path: where to write the int8 model (``None``: not written; the bytes are in the result).
        mode: ``"dynamic"`` or ``"qdq"`` (static, activations calibrated on ``calibration``); see the module doc.
        calibration: ``mode="qdq"`` only: a non-empty sequence of input batches (arrays for a one-input model,
            or dicts of input name -> array).
        check_inputs: batches as ``calibration``: run the float and the int8 model on them in onnxruntime
            and report the largest output difference (of the file written: compressed or not).
        compress: store the pruned int8 weights as bitmask + int8 values (see the module doc); the file
            decodes to exactly the dense int8 weights (checked before anything is written).

    Raises:
        TypeError / ValueError: a bad ``model``, ``mode``, ``calibration`` or ``check_inputs``; an int8
            weight with a zero point or a zero turned non-zero (nothing is written).
    """
    onnx, ortq = _libs()
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if isinstance(model, (str, os.PathLike)):
        if not os.path.isfile(model):
            raise ValueError(f"model {os.fspath(model)!r} is not a file")
        model = onnx.load(os.fspath(model))
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"model must be an .onnx path or an onnx.ModelProto, got {type(model).__name__}")
    if not isinstance(compress, bool):
        raise TypeError(f"compress must be True or False, got {compress!r}")
    if mode == "dynamic" and calibration is not None:
        raise ValueError("calibration is for mode='qdq' only; mode='dynamic' quantizes activations per batch")
    dense = dense_initializers(model)
    inits = {i.name for i in dense.graph.initializer}
    inputs = [i.name for i in dense.graph.input if i.name not in inits]
    feeds = _feeds(calibration, inputs, "calibration") if mode == "qdq" else None
    checks = _feeds(check_inputs, inputs, "check_inputs") if check_inputs is not None else None
    floats = {i.name: onnx.numpy_helper.to_array(i) for i in dense.graph.initializer}
    floats = {n: a for n, a in floats.items() if a.dtype.kind == "f" and a.ndim >= 2}
    options = {"WeightSymmetric": True}
    dense_content = dense.SerializeToString()
    with _quiet_root(), tempfile.TemporaryDirectory() as tmp:     # the quantizer reads and writes files
        src, out = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "int8.onnx")
        with open(src, "wb") as f:
            f.write(dense_content)
        if mode == "dynamic":
            ortq.quantize_dynamic(src, out, weight_type=ortq.QuantType.QInt8, per_channel=True,
                                  extra_options=options)
        else:
            ortq.quantize_static(src, out, _Reader(feeds), quant_format=ortq.QuantFormat.QDQ,
                                 weight_type=ortq.QuantType.QInt8, activation_type=ortq.QuantType.QInt8,
                                 per_channel=True, extra_options=options)
        q_model = onnx.load(out)
    weights = quantized_weights(q_model, floats)
    report = zeros_check({n: floats[n] for n in weights}, {n: w[0] for n, w in weights.items()})
    require_zeros_kept(report)
    content = dense_int8 = q_model.SerializeToString()
    compressed: list[str] = []
    if compress:
        small, compressed = bitmask_int8_initializers(q_model)
        again = quantized_weights(small, floats)
        if sorted(again) != sorted(weights) or not all(np.array_equal(again[n][0], weights[n][0]) for n in weights):
            raise ValueError("the bitmask int8 weights do not decode to the int8 weights")    # never expected
        content = small.SerializeToString()
    diff = _compare(dense_content, content, checks) if checks is not None else None
    if path is not None:
        with open(os.fspath(path), "wb") as f:
            f.write(content)
    return OnnxInt8(content=content, float_bytes=len(model.SerializeToString()), weights=weights, report=report,
                    float_weights=[n for n in floats if n not in weights], max_abs_diff=diff,
                    dense_int8_bytes=len(dense_int8), compressed=compressed)


class _Reader:
    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._it = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:                     # pragma: no cover - called by some calibrators
        pass


def _compare(float_content: bytes, int8_content: bytes, feeds: list[dict[str, np.ndarray]]) -> float:
    import onnxruntime as ort

    a = ort.InferenceSession(float_content, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(int8_content, providers=["CPUExecutionProvider"])
    diff = 0.0
    for feed in feeds:
        for x, y in zip(a.run(None, feed), b.run(None, feed)):
            diff = max(diff, float(np.max(np.abs(np.asarray(x, np.float64) - y))) if np.size(x) else 0.0)
    return diff
