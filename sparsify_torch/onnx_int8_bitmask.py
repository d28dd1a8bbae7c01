"""Sparse int8 ONNX: the pruned int8 weights of a quantized ONNX model stored as bitmask + int8 values.

An int8 ONNX model (:func:`sparsify_torch.onnx_quantization.quantize_onnx_int8`) holds each weight as a
dense int8 initializer (``<weight>_quantized``): one byte per weight, pruned or not. ONNX's own sparse
initializer needs int64 positions (9 bytes per kept int8 weight: smaller than dense only below 11%
density), so :func:`bitmask_int8_initializers` stores a pruned int8 weight as a packed bit per weight
plus its non-zero int8 values (``n/8 + nnz`` bytes: 0.225x of dense int8 at 90% sparsity), rebuilt
into the dense int8 tensor by standard ONNX ops that read only initializers (``BitShift``, ``Mod``,
``CumSum``, ``Gather``, ``Reshape``): onnxruntime folds them into the weight when it loads the model,
and the quantized ops (``MatMulInteger``, ``DequantizeLinear``) see the same int8 initializer as before.
:func:`expand_bitmask_int8` is the exact inverse (the dense int8 initializers back, the decoders gone).

Needs ``onnx``: ``pip install "sparsify-train[deploy]"``.

Example:
    >>> import onnx
    >>> q = np.zeros((64, 64), np.int8); q[:, 0] = np.arange(1, 65)
    >>> g = onnx.helper.make_graph([onnx.helper.make_node("Cast", ["w"], ["y"], to=onnx.TensorProto.FLOAT)], "g",
    ...     [], [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [64, 64])],
    ...     [onnx.numpy_helper.from_array(q, "w")])
    >>> small, names = bitmask_int8_initializers(onnx.helper.make_model(g))
    >>> names, sorted(i.name for i in small.graph.initializer if i.name.startswith("w."))
    (['w'], ['w.sparsify_int8_mask', 'w.sparsify_int8_shape', 'w.sparsify_int8_size', 'w.sparsify_int8_values'])
    >>> back = expand_bitmask_int8(small)
    >>> np.array_equal(onnx.numpy_helper.to_array(back.graph.initializer[0]), q), len(back.graph.node)
    (True, 1)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsify.extras import install_command

__all__ = ["BITMASK_INT8_SUFFIXES", "bitmask_int8_initializers", "bitmask_int8_names", "expand_bitmask_int8"]

_P = ".sparsify_int8_"
#: The initializers that store one compressed weight ``w``: ``w`` + each suffix.
BITMASK_INT8_SUFFIXES = (_P + "mask", _P + "values", _P + "size", _P + "shape")
_SHARED = "sparsify_int8_decode."


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as e:   # pragma: no cover - the deploy extra installs it
        raise ImportError(f"sparse int8 ONNX needs the onnx package: {install_command('deploy')}") from e
    return onnx


def _shared_constants(onnx: Any) -> list[Any]:
    nh = onnx.numpy_helper
    return [nh.from_array(np.arange(8, dtype=np.uint8).reshape(1, 8), _SHARED + "shifts"),
            nh.from_array(np.array([2], np.uint8), _SHARED + "two"),
            nh.from_array(np.array([-1], np.int64), _SHARED + "flat"),
            nh.from_array(np.array([0], np.int64), _SHARED + "zero")]


def _decoder(onnx: Any, name: str, q: np.ndarray, k: int) -> tuple[list[Any], list[Any]]:
    """Initializers (packed bits, a 0 then the non-zero values, size, shape) and the nodes that rebuild ``name``:
    bit ``i`` = (mask[i // 8] >> (i % 8)) mod 2; ``name`` = Gather(values, cumsum(bits) * bits), reshaped.
    ``k`` numbers the weight: its intermediate results are ``sparsify_int8_decode.<k>.<i>`` (short names)."""
    h, nh = onnx.helper, onnx.numpy_helper
    flat = q.reshape(-1)
    keep = flat != 0
    mask, values, size, shape = (name + s for s in BITMASK_INT8_SUFFIXES)
    inits = [nh.from_array(np.packbits(keep, bitorder="little"), mask),
             nh.from_array(np.concatenate([np.zeros(1, np.int8), flat[keep]]), values),
             nh.from_array(np.array([flat.size], np.int64), size),
             nh.from_array(np.array(q.shape, np.int64), shape)]
    t = [f"{_SHARED}{k}.{i}" for i in range(9)]
    c = _SHARED
    nodes = [h.make_node("Unsqueeze", [mask, c + "flat"], [t[0]]),
             h.make_node("BitShift", [t[0], c + "shifts"], [t[1]], direction="RIGHT"),
             h.make_node("Mod", [t[1], c + "two"], [t[2]]),
             h.make_node("Reshape", [t[2], c + "flat"], [t[3]]),
             h.make_node("Slice", [t[3], c + "zero", size], [t[4]]),
             h.make_node("Cast", [t[4]], [t[5]], to=onnx.TensorProto.INT64),
             h.make_node("CumSum", [t[5], c + "zero"], [t[6]]),
             h.make_node("Mul", [t[6], t[5]], [t[7]]),
             h.make_node("Gather", [values, t[7]], [t[8]]),
             h.make_node("Reshape", [t[8], shape], [name])]
    return inits, nodes


def bitmask_int8_initializers(model: Any, min_sparsity: float = 0.5, min_elements: int = 64
                              ) -> tuple[Any, list[str]]:
    """A copy of ONNX ``model`` with its sparse int8 initializers stored as bitmask + int8 values; and their names.

    An int8 initializer is stored so when it has at least ``min_elements`` elements and ``min_sparsity``
    zeros, and the encoding (with its decoder) is smaller than the dense tensor.

    Raises:
        TypeError: ``model`` is not an ``onnx.ModelProto``.
        ValueError: ``min_sparsity`` not in [0, 1), ``min_elements`` not a positive integer, a model
            that already holds such weights, or an opset before 13.
    """
    onnx = _onnx()
    if isinstance(min_sparsity, bool) or not isinstance(min_sparsity, (int, float)) or not 0 <= min_sparsity < 1:
        raise ValueError(f"min_sparsity must be a number in [0, 1), got {min_sparsity!r}")
    if isinstance(min_elements, bool) or not isinstance(min_elements, int) or min_elements < 1:
        raise ValueError(f"min_elements must be a positive integer, got {min_elements!r}")
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"model must be an onnx.ModelProto, got {type(model).__name__}")
    if bitmask_int8_names(model):
        raise ValueError(f"the model already stores {bitmask_int8_names(model)} as bitmask + int8 values")
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 13:
        raise ValueError(f"the model's ONNX opset is {opset}; the bitmask decoder needs 13 or later")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep, nodes, names = [], [], []
    for init in out.graph.initializer:
        if init.data_type != onnx.TensorProto.INT8:
            keep.append(init)
            continue
        q = onnx.numpy_helper.to_array(init)
        nnz = int(np.count_nonzero(q))
        if q.size < min_elements or 1 - nnz / q.size < min_sparsity or -(-q.size // 8) + nnz >= q.nbytes:
            keep.append(init)
            continue
        more, decode = _decoder(onnx, init.name, q, len(names))
        if sum(x.ByteSize() for x in more + decode) >= init.ByteSize():      # the decoder costs more than it saves
            keep.append(init)
            continue
        keep += more
        nodes += decode
        names.append(init.name)
    if not names:
        return out, []
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep + _shared_constants(onnx))
    rest = list(out.graph.node)
    del out.graph.node[:]
    out.graph.node.extend(nodes + rest)           # the decoders first: the graph stays topologically sorted
    onnx.checker.check_model(out)
    return out, names


def bitmask_int8_names(model: Any) -> list[str]:
    """The weights :func:`bitmask_int8_initializers` stored compressed in ``model`` (in graph order).

    Example:
        >>> import onnx
        >>> bitmask_int8_names(onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [])))
        []
    """
    suffix = BITMASK_INT8_SUFFIXES[0]
    return [i.name[:-len(suffix)] for i in model.graph.initializer if i.name.endswith(suffix)]


def expand_bitmask_int8(model: Any) -> Any:
    """A copy of ``model`` with each bitmask-stored int8 weight a dense int8 initializer again (decoders removed).

    Raises:
        ValueError: a compressed weight whose mask and values do not agree with its size.
    """
    onnx = _onnx()
    nh = onnx.numpy_helper
    out = onnx.ModelProto()
    out.CopyFrom(model)
    names = bitmask_int8_names(out)
    if not names:
        return out
    inits = {i.name: i for i in out.graph.initializer}
    dense = []
    for name in names:
        mask, values, size, shape = (nh.to_array(inits[name + s]) for s in BITMASK_INT8_SUFFIXES)
        n = int(size.reshape(-1)[0])
        keep = np.unpackbits(mask, bitorder="little")[:n].astype(bool)
        if mask.size != -(-n // 8) or int(keep.sum()) != values.size - 1 or int(np.prod(shape)) != n:
            raise ValueError(f"weight {name!r}: its bitmask ({int(keep.sum())} kept of {n}), values "
                             f"({values.size - 1}) and shape {shape.tolist()} do not agree")
        q = np.zeros(n, np.int8)
        q[keep] = values[1:]
        dense.append(nh.from_array(q.reshape(shape.tolist()), name))
    dropped = {name + s for name in names for s in BITMASK_INT8_SUFFIXES}
    dropped |= {i.name for i in _shared_constants(onnx)}
    kept = [i for i in out.graph.initializer if i.name not in dropped]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept + dense)
    nodes = [n for n in out.graph.node
             if not (n.output and (n.output[0] in names or n.output[0].startswith(_SHARED)))]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
