"""ONNX export of a pruned PyTorch model with its sparse weights stored compressed, checked in onnxruntime.

:func:`sparse_initializers` stores every initializer (a weight held in the
graph) that is at least ``min_sparsity`` zeros, and smaller so, in one of two
encodings:

* ``"sparse_initializer"``: ONNX's own ``SparseTensorProto`` in the graph's
  ``sparse_initializer`` list, the non-zero values plus their linear
  positions. ONNX requires ``int64`` positions, so a float32 weight costs
  ``12 * density`` bytes per element instead of 4: 0.3x the dense size at 90%
  sparsity, 0.15x at 95%, nothing below 67%;
* ``"bitmask"``: one bit per weight and the kept values, rebuilt into the
  dense weight by a few standard ops that read only initializers (a runtime
  folds them when it loads the model): 0.13x at 90%.

:func:`export_onnx` exports a model with ``torch.onnx.export``, applies it,
and checks in onnxruntime (when installed) that the file gives the torch
model's outputs. onnxruntime computes with dense weights either way (it
densifies sparse initializers and folds the bitmask decoder when the session
loads): the file shrinks, the latency does not (``bench/bench_deploy.py``).

Needs ``onnx`` (and ``onnxruntime`` for the check): ``pip install "sparsify-train[deploy]"``.

Example:
    >>> import torch, tempfile, os
    >>> m = torch.nn.Linear(64, 64)
    >>> with torch.no_grad():
    ...     _ = m.weight.mul_((torch.rand(64, 64) > 0.9).float())
    >>> path = os.path.join(tempfile.mkdtemp(), "m.onnx")
    >>> export_onnx(m, torch.randn(2, 64), path)["sparse"]
    ['weight']
"""
from __future__ import annotations

import io
import os
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from sparsify.extras import install_command

__all__ = ["sparse_initializers", "export_onnx", "ONNX_INDEX_BYTES", "ENCODINGS"]

#: Bytes per stored position of an ONNX sparse tensor (the spec's int64 indices).
ONNX_INDEX_BYTES = 8
#: How :func:`sparse_initializers` stores a sparse weight.
ENCODINGS = ("sparse_initializer", "bitmask")


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as e:   # pragma: no cover - the deploy extra installs it
        raise ImportError(f"ONNX export needs the onnx package: {install_command('deploy')}") from e
    return onnx


_SHARED = "sparsify_decode."


def _decoder_constants(onnx: Any) -> list[Any]:
    """The constants every bitmask decoder shares (added once per model)."""
    nh = onnx.numpy_helper
    return [nh.from_array(np.arange(8, dtype=np.uint8).reshape(1, 8), _SHARED + "shifts"),
            nh.from_array(np.array([2], np.uint8), _SHARED + "two"),
            nh.from_array(np.array([-1], np.int64), _SHARED + "flat"),
            nh.from_array(np.array([0], np.int64), _SHARED + "zero")]


def _bitmask_decoder(onnx: Any, name: str, a: np.ndarray) -> tuple[list[Any], list[Any]]:
    """Initializers (packed mask, values after a leading 0) and the standard-op nodes that rebuild ``name``.

    bit ``i`` = (mask[i // 8] >> (i % 8)) mod 2; ``name`` = Gather(values, cumsum(bits) * bits), reshaped:
    a kept weight picks its value, a pruned one the leading 0.
    """
    h, nh = onnx.helper, onnx.numpy_helper
    flat = a.reshape(-1)
    keep = flat != 0
    p, c = f"{name}.sparsify_", _SHARED
    inits = [nh.from_array(np.packbits(keep, bitorder="little"), p + "mask"),
             nh.from_array(np.concatenate([np.zeros(1, a.dtype), flat[keep]]), p + "values"),
             nh.from_array(np.array([flat.size], np.int64), p + "n"),
             nh.from_array(np.array(a.shape, np.int64), p + "shape")]
    t = [f"{p}{i}" for i in range(9)]
    nodes = [h.make_node("Unsqueeze", [p + "mask", c + "flat"], [t[0]]),
             h.make_node("BitShift", [t[0], c + "shifts"], [t[1]], direction="RIGHT"),
             h.make_node("Mod", [t[1], c + "two"], [t[2]]),
             h.make_node("Reshape", [t[2], c + "flat"], [t[3]]),
             h.make_node("Slice", [t[3], c + "zero", p + "n"], [t[4]]),
             h.make_node("Cast", [t[4]], [t[5]], to=onnx.TensorProto.INT64),
             h.make_node("CumSum", [t[5], c + "zero"], [t[6]]),
             h.make_node("Mul", [t[6], t[5]], [t[7]]),
             h.make_node("Gather", [p + "values", t[7]], [t[8]]),
             h.make_node("Reshape", [t[8], p + "shape"], [name])]
    return inits, nodes


def sparse_initializers(model: Any, min_sparsity: float = 0.5, min_elements: int = 64,
                        encoding: str = "sparse_initializer") -> tuple[Any, list[str]]:
    """A copy of ONNX ``model`` with its sparse weights stored compressed; and their names.

    Encodings (see :data:`ENCODINGS`): ``"sparse_initializer"``, ONNX's own ``SparseTensorProto`` (values +
    int64 positions: 12 bytes per kept float32 weight); ``"bitmask"``, a packed bit per weight + the kept
    values, rebuilt by standard ONNX ops (BitShift, Mod, CumSum, Gather) that depend on nothing but
    initializers, so a runtime folds them into the dense weight when it loads the model (onnxruntime does):
    ``n/8 + 4 * nnz`` bytes, 0.13x at 90%. A weight is stored so when it has at least ``min_elements``
    elements and ``min_sparsity`` zeros, and the encoding is smaller than the dense tensor.

    Example:
        >>> import onnx
        >>> w = np.zeros((8, 16), np.float32); w[0, :4] = 1.0
        >>> g = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        ...     [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
        ...     [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 16])],
        ...     [onnx.numpy_helper.from_array(w, "w")])
        >>> sparse, names = sparse_initializers(onnx.helper.make_model(g))
        >>> names, len(sparse.graph.initializer), list(sparse.graph.sparse_initializer[0].dims)
        (['w'], 0, [8, 16])
    """
    onnx = _onnx()
    if isinstance(min_sparsity, bool) or not isinstance(min_sparsity, (int, float)) or not 0 <= min_sparsity < 1:
        raise ValueError(f"min_sparsity must be a number in [0, 1), got {min_sparsity!r}")
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"model must be an onnx.ModelProto, got {type(model).__name__}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep, moved, nodes, names = [], [], [], []
    for init in out.graph.initializer:
        a = onnx.numpy_helper.to_array(init)
        nnz = int(np.count_nonzero(a))
        cost = (nnz * (a.itemsize + ONNX_INDEX_BYTES) if encoding == "sparse_initializer"
                else -(-a.size // 8) + (nnz + 1) * a.itemsize + 600)      # + the decoder's nodes and constants
        if a.dtype.kind != "f" or a.size < min_elements or 1 - nnz / a.size < min_sparsity or cost >= a.nbytes:
            keep.append(init)
            continue
        names.append(init.name)
        if encoding == "bitmask":
            more, decode = _bitmask_decoder(onnx, init.name, a)
            keep += more
            nodes += decode
            continue
        flat = a.reshape(-1)
        pos = np.flatnonzero(flat)
        values = onnx.numpy_helper.from_array(flat[pos], init.name)
        indices = onnx.numpy_helper.from_array(pos.astype(np.int64), f"{init.name}.indices")
        moved.append(onnx.helper.make_sparse_tensor(values, indices, list(a.shape)))
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    out.graph.sparse_initializer.extend(moved)
    if nodes:
        out.graph.initializer.extend(_decoder_constants(onnx))
        rest = list(out.graph.node)
        del out.graph.node[:]
        out.graph.node.extend(nodes + rest)       # the decoders first: the graph stays topologically sorted
    onnx.checker.check_model(out)
    return out, names


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _check_in_onnxruntime(content: bytes, model: nn.Module, inputs: tuple[Any, ...], rtol: float, atol: float,
                          ) -> str:
    try:
        import onnxruntime as ort
    except ImportError:
        return "not checked: onnxruntime is not installed"
    sess = ort.InferenceSession(content, providers=["CPUExecutionProvider"])
    feed = {i.name: t.detach().cpu().numpy() for i, t in zip(sess.get_inputs(), inputs)}
    got = sess.run(None, feed)
    with torch.no_grad():
        want = model(*inputs)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if not np.allclose(g, w.detach().cpu().numpy(), rtol=rtol, atol=atol):
            raise ValueError(f"onnxruntime's output {i} of the sparse ONNX model differs from the torch model's "
                             f"(max abs diff {np.abs(g - w.detach().cpu().numpy()).max()}); nothing was written")
    return f"onnxruntime gives the torch model's {len(got)} output(s) (rtol={rtol}, atol={atol})"


def export_onnx(model: nn.Module, example_inputs: Any, path: str | os.PathLike, min_sparsity: float = 0.5, *,
                encoding: str = "sparse_initializer", dynamic_batch: bool = True, rtol: float = 1e-4,
                atol: float = 1e-5) -> dict[str, Any]:
    """Export ``model`` to ONNX at ``path`` with sparse initializers; returns what was done.

    Args:
        model: a pruned model (after ``Pruner.remove()``); put in eval mode for the export.
        example_inputs: a tensor or a tuple of positional input tensors (traced, and the check's inputs).
        path: the ``.onnx`` file to write.
        min_sparsity: initializers with at least this fraction of zeros are stored sparse.
        encoding: ``"sparse_initializer"`` (ONNX's SparseTensorProto) or ``"bitmask"`` (smaller; rebuilt by
            standard ops that runtimes fold at load), see :func:`sparse_initializers`.
        dynamic_batch: the first dimension of every input and output may vary.
        rtol, atol: tolerance of the onnxruntime check.

    Returns:
        ``{"path", "bytes", "dense_bytes", "sparse": [names], "check": str}``.

    Raises:
        ValueError: a bad ``min_sparsity`` or ``encoding``, or onnxruntime's outputs differ from the model's.
    """
    onnx = _onnx()
    inputs = _as_tuple(example_inputs)
    model.eval()
    in_names = [f"input_{i}" for i in range(len(inputs))]
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)    # the TorchScript exporter: still torch's own
        with torch.no_grad():
            torch.onnx.export(model, inputs, buf, dynamo=False, input_names=in_names,
                              dynamic_axes={n: {0: "batch"} for n in in_names} if dynamic_batch else None)
    dense = buf.getvalue()
    sparse, names = sparse_initializers(onnx.load_from_string(dense), min_sparsity, encoding=encoding)
    content = sparse.SerializeToString()
    check = _check_in_onnxruntime(content, model, inputs, rtol, atol)
    with open(path, "wb") as f:
        f.write(content)
    return {"path": os.fspath(path), "bytes": len(content), "dense_bytes": len(dense), "sparse": names,
            "check": check}
