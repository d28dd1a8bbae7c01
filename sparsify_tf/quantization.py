"""Full-integer int8 TFLite of a pruned model that keeps every pruned zero, checked from the flatbuffer.

:func:`quantize_tflite_int8` converts a pruned tf-keras model (after
``strip_pruning``; a Keras 3 model on the TensorFlow backend too), a
SavedModel directory (``sparsify_tf.export_saved_model``) or a frozen
``GraphDef`` file (``sparsify_tf.export_frozen_graph``) twice with TensorFlow's
converter:

* float32, no optimisation: the reference weights;
* full-integer int8: ``optimizations = [tf.lite.Optimize.DEFAULT,
  tf.lite.Optimize.EXPERIMENTAL_SPARSITY]``, activations calibrated on a
  representative dataset, every op in ``TFLITE_BUILTINS_INT8`` (int8 inputs
  and outputs unless ``integer_io=False``). TFLite quantizes weights
  symmetrically per output channel (zero point 0), so a pruned 0 stays 0, and
  ``EXPERIMENTAL_SPARSITY`` stores sparse enough int8 weights in TFLite's
  sparse format (``DENSIFY`` ops).

Both flatbuffers are then read back with the TFLite interpreter: the weight of
every ``FULLY_CONNECTED``, ``CONV_2D``, ``DEPTHWISE_CONV_2D``, ``CONV_3D`` and
``TRANSPOSE_CONV`` op (through its ``DENSIFY``, whose sparse tensor is decoded
from the tensor details' ``sparsity_parameters``), paired op by op, goes
through :func:`sparsify.quantization.zeros_check`; a zero turned non-zero
raises ``ValueError`` and nothing is returned.

Example:
    >>> decode_sparse_tensor(np.array([5, 7], np.int8), (2, 3), {"traversal_order": [0, 1], "block_map": [],
    ...     "dim_metadata": [{"format": 0, "dense_size": 2},
    ...                      {"format": 1, "array_segments": [0, 1, 2], "array_indices": [2, 0]}]}).tolist()
    [[0, 0, 5], [7, 0, 0]]
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import warnings
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from sparsify.quantization import LayerZeros, require_zeros_kept, zeros_check

__all__ = ["WEIGHT_OPS", "TFLiteInt8", "quantize_tflite_int8", "tflite_weights", "decode_sparse_tensor",
           "run_tflite_int8"]

#: TFLite ops whose weight (input 1) is checked, with the axis of its output channels.
WEIGHT_OPS = {"FULLY_CONNECTED": 0, "CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "CONV_3D": 4, "TRANSPOSE_CONV": 0}


@dataclasses.dataclass
class TFLiteInt8:
    """The result of :func:`quantize_tflite_int8`.

    ``content`` is the int8 flatbuffer (write it to a ``.tflite`` file);
    ``float_bytes`` the size of the float32 conversion; ``weights`` maps each
    checked weight (named after its tensor in the float32 flatbuffer, in op order) to ``(q, scales, axis)``,
    the dense int8 values read back from the flatbuffer in TFLite's layout;
    ``sparse`` names the weights stored in TFLite's sparse format;
    ``report`` is the zeros check per weight (float32 flatbuffer -> int8).
    """

    content: bytes
    float_bytes: int
    weights: dict[str, tuple[np.ndarray, np.ndarray, int]]
    sparse: list[str]
    report: dict[str, LayerZeros]

    def save(self, path: str | os.PathLike) -> int:
        """Write the int8 flatbuffer to ``path``; its size in bytes."""
        with open(os.fspath(path), "wb") as f:
            f.write(self.content)
        return len(self.content)


@contextlib.contextmanager
def _quiet() -> Any:
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _interpreter(content: bytes) -> Any:
    import tensorflow as tf

    with _quiet():
        it = tf.lite.Interpreter(
            model_content=content,
            experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        it.allocate_tensors()
    return it


def decode_sparse_tensor(values: np.ndarray, shape: Sequence[int], sparsity: Mapping[str, Any]) -> np.ndarray:
    """The dense array of a TFLite sparse tensor: its stored ``values`` and ``sparsity_parameters``.

    Follows TFLite's format (``traversal_order`` over the dimensions and the
    block dimensions of ``block_map``; each level ``DENSE`` (``format`` 0,
    ``dense_size``) or ``SPARSE_CSR`` (1, ``array_segments`` / ``array_indices``)).

    Raises:
        ValueError: the metadata does not describe ``shape`` or ``values``.
    """
    shape = tuple(int(s) for s in shape)
    order = [int(i) for i in sparsity["traversal_order"]]
    block_map = [int(i) for i in sparsity.get("block_map", [])]
    meta = list(sparsity["dim_metadata"])
    ndim = len(shape)
    if len(order) != ndim + len(block_map) or len(meta) != len(order) or sorted(order) != list(range(len(order))):
        raise ValueError(f"sparsity_parameters do not describe a {ndim}-D tensor with {len(block_map)} block "
                         f"dimension(s): traversal_order {order}, {len(meta)} dim_metadata")
    values = np.asarray(values).reshape(-1)
    block_sizes = {}
    for k, d in enumerate(block_map):
        level = order.index(ndim + k)
        block_sizes[d] = int(meta[level]["dense_size"])
    pos = np.zeros(1, np.int64)                      # the position of each element reached so far
    idx = np.zeros((1, len(order)), np.int64)         # its index along every (expanded) dimension
    for level, m in enumerate(meta):
        if int(m["format"]) == 0:
            size = int(m["dense_size"])
            pos = (pos[:, None] * size + np.arange(size)).reshape(-1)
            idx = np.repeat(idx, size, axis=0)
            idx[:, order[level]] = np.tile(np.arange(size), len(idx) // size if size else 0)
        else:
            seg, ind = np.asarray(m["array_segments"], np.int64), np.asarray(m["array_indices"], np.int64)
            if pos.size and (pos.max() + 1 >= seg.size or seg[-1] > ind.size):
                raise ValueError("sparsity_parameters: array_segments do not match the dimensions before them")
            starts, counts = seg[pos], seg[pos + 1] - seg[pos]
            k = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(starts, counts)
            idx = np.repeat(idx, counts, axis=0)
            idx[:, order[level]] = ind[k]
            pos = k
    if pos.size and pos.max() >= values.size:
        raise ValueError(f"sparsity_parameters point past the {values.size} stored values")
    full = idx[:, :ndim].copy()
    for k, d in enumerate(block_map):
        full[:, d] = full[:, d] * block_sizes[d] + idx[:, ndim + k]
    out = np.zeros(shape, values.dtype)
    out[tuple(full.T)] = values[pos]
    return out


def _details(it: Any) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    return {d["index"]: d for d in it.get_tensor_details()}, it._get_ops_details()


def tflite_weights(content: bytes) -> list[tuple[str, str, np.ndarray, dict[str, Any], bool]]:
    """The weights of a flatbuffer's :data:`WEIGHT_OPS`, in op order.

    Each item is ``(name, op, dense value, quantization_parameters, stored sparse)``;
    a ``DENSIFY`` (or ``DEQUANTIZE``) in front of the op is followed to its constant.

    Raises:
        ValueError: an op's weight is not a constant of the flatbuffer.
    """
    it = _interpreter(content)
    tensors, ops = _details(it)
    producer = {int(o): op for op in ops for o in op["outputs"]}
    out = []
    for op in ops:
        kind = op["op_name"]
        if kind not in WEIGHT_OPS:
            continue
        index = int(op["inputs"][1])
        via = producer.get(index)
        while via is not None and via["op_name"] in ("DENSIFY", "DEQUANTIZE"):
            index = int(via["inputs"][0])
            via = producer.get(index)
        if via is not None:
            raise ValueError(f"the weight of {kind} op {op['index']} is computed by a {via['op_name']} op, "
                             "not stored as a constant; cannot check it")
        d = tensors[index]
        shape = tuple(int(s) for s in tensors[int(op["inputs"][1])]["shape"])
        stored = np.array(it.get_tensor(index))
        sp = d.get("sparsity_parameters") or {}
        is_sparse = bool(sp) and len(sp.get("dim_metadata", [])) > 0
        dense = decode_sparse_tensor(stored, shape, sp) if is_sparse else stored.reshape(shape)
        name = d["name"].split(";")[0]
        seen = sum(1 for o in out if o[0] == name or o[0].startswith(name + "#"))
        out.append((f"{name}#{seen}" if seen else name, kind, dense, d["quantization_parameters"], is_sparse))
    return out


def _make_converter(tf: Any, source: Any, input_arrays: Sequence[str] | None, output_arrays: Sequence[str] | None,
                    input_shapes: Mapping[str, Sequence[int]] | None) -> Callable[[], Any]:
    if hasattr(source, "layers") and hasattr(source, "inputs"):
        return lambda: tf.lite.TFLiteConverter.from_keras_model(source)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a Keras model, a SavedModel directory or a frozen GraphDef file, "
                        f"got {type(source).__name__}")
    path = os.fspath(source)
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "saved_model.pb")):
            raise ValueError(f"source {path!r} is a directory without saved_model.pb; pass a SavedModel directory")
        return lambda: tf.lite.TFLiteConverter.from_saved_model(path, signature_keys=["serving_default"])
    if not os.path.isfile(path):
        raise ValueError(f"source {path!r} does not exist")
    if not input_arrays or not output_arrays:
        raise ValueError(f"source {path!r} is a frozen GraphDef: pass input_arrays and output_arrays (op names), "
                         f"got {input_arrays!r} and {output_arrays!r}")
    shapes = {k: list(v) for k, v in (input_shapes or {}).items()}
    return lambda: tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(path, list(input_arrays),
                                                                       list(output_arrays), shapes or None)


def _representative(data: Any) -> Callable[[], Iterable[list[np.ndarray]]]:
    if callable(data):
        return data
    if isinstance(data, (str, bytes)) or not hasattr(data, "__len__") or len(data) == 0:
        raise ValueError("representative_dataset must be a non-empty sequence of input batches (an array, or a "
                         f"list of arrays per batch for several inputs) or a generator function, got {data!r:.80}")
    batches = [[np.asarray(b, np.float32)] if not isinstance(b, (list, tuple)) else [np.asarray(a, np.float32)
                                                                                     for a in b] for b in data]

    def gen() -> Iterable[list[np.ndarray]]:
        yield from batches
    return gen


def quantize_tflite_int8(source: Any, representative_dataset: Any, *, integer_io: bool = True,
                         input_arrays: Sequence[str] | None = None, output_arrays: Sequence[str] | None = None,
                         input_shapes: Mapping[str, Sequence[int]] | None = None) -> TFLiteInt8:
    """Full-integer int8 TFLite of a pruned model, sparse weights stored sparse, every pruned zero checked.

    Args:
        source: a pruned Keras model (tf-keras after ``strip_pruning``, or Keras 3 on TensorFlow), a SavedModel
            directory (signature ``serving_default``) or a frozen ``GraphDef`` file.
        representative_dataset: the calibration inputs: a sequence of batches (each an array, or a list of
            arrays in input order; a leading batch axis of 1 for a model with a fixed batch of 1), or a
            generator function as TensorFlow takes it.
        integer_io: int8 model inputs and outputs (full integer, for integer-only accelerators); ``False``
            keeps float32 inputs and outputs around the int8 ops.
        input_arrays, output_arrays, input_shapes: for a frozen ``GraphDef`` only: the input and output op names
            and the input shapes.

    Returns:
        :class:`TFLiteInt8`.

    Raises:
        TypeError / ValueError: a bad ``source``, ``representative_dataset`` or ``integer_io``; a model the
            converter cannot make full-integer; a zero of the float32 weights that is not a zero in int8.
    """
    if not isinstance(integer_io, bool):
        raise TypeError(f"integer_io must be True or False, got {integer_io!r}")
    import tensorflow as tf

    make = _make_converter(tf, source, input_arrays, output_arrays, input_shapes)
    gen = _representative(representative_dataset)
    try:
        with _quiet():
            float_content = bytes(make().convert())
            conv = make()
            conv.optimizations = [tf.lite.Optimize.DEFAULT, tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
            conv.representative_dataset = gen
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            if integer_io:
                conv.inference_input_type = tf.int8
                conv.inference_output_type = tf.int8
            content = bytes(conv.convert())
    except (TypeError, ValueError):
        raise
    except Exception as e:  # noqa: BLE001 - ConverterError and friends
        raise ValueError(f"the model cannot be converted to full-integer int8 TFLite: "
                         f"{' '.join(str(e).split())[:400]}") from None
    before = tflite_weights(float_content)
    after = tflite_weights(content)
    if [(b[1], b[2].shape) for b in before] != [(a[1], a[2].shape) for a in after]:
        raise ValueError("the float32 and int8 flatbuffers hold different weight ops: "
                         f"{[(b[1], b[2].shape) for b in before]} and {[(a[1], a[2].shape) for a in after]}")
    weights, sparse, floats, ints = {}, [], {}, {}
    for (name, _, w, _, _), (_, kind, q, qp, is_sparse) in zip(before, after):
        if q.dtype != np.int8:
            raise ValueError(f"{name}: the int8 flatbuffer stores this weight as {q.dtype}, not int8")
        axis = int(qp.get("quantized_dimension", WEIGHT_OPS[kind]))
        zp = np.asarray(qp["zero_points"]).reshape(-1)
        if np.any(zp != 0):
            raise ValueError(f"{name}: int8 weights with non-zero zero points {zp[zp != 0][:4].tolist()}; "
                             "TFLite's int8 weights are symmetric")
        weights[name] = (q, np.asarray(qp["scales"], np.float32), axis)
        if is_sparse:
            sparse.append(name)
        floats[name], ints[name] = w, q
    report = zeros_check(floats, ints)
    require_zeros_kept(report)
    return TFLiteInt8(content=content, float_bytes=len(float_content), weights=weights, sparse=sparse,
                      report=report)


def run_tflite_int8(content: bytes, inputs: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a flatbuffer on float inputs (quantized here for int8 inputs); float32 outputs (int8 ones dequantized).

    Runs each row of the batch alone when the model's batch is fixed at 1 (as the converter makes it).
    """
    xs = [np.asarray(inputs)] if isinstance(inputs, np.ndarray) else [np.asarray(x) for x in inputs]
    it = _interpreter(content)
    ins, outs = it.get_input_details(), it.get_output_details()
    if len(ins) != len(xs):
        raise ValueError(f"inputs: the model takes {len(ins)} input(s), got {len(xs)}")
    n = xs[0].shape[0]
    rows = [slice(i, i + 1) for i in range(n)] if all(int(d["shape"][0]) == 1 for d in ins) else [slice(0, n)]
    results: list[list[np.ndarray]] = [[] for _ in outs]
    for sl in rows:
        for d, x in zip(ins, xs):
            x = x[sl]
            if list(x.shape) != [int(s) for s in d["shape"]]:
                it.resize_tensor_input(d["index"], list(x.shape))
                it.allocate_tensors()
            if np.dtype(d["dtype"]) == np.int8:
                scale, zp = d["quantization"]
                x = np.clip(np.rint(x / scale) + zp, -128, 127).astype(np.int8)
            it.set_tensor(d["index"], x.astype(d["dtype"]))
        it.invoke()
        for k, d in enumerate(outs):
            y = np.array(it.get_tensor(d["index"]))
            if np.dtype(d["dtype"]) == np.int8:
                scale, zp = d["quantization"]
                y = (y.astype(np.float32) - zp) * np.float32(scale)
            results[k].append(y)
    return [np.concatenate(r) for r in results]
