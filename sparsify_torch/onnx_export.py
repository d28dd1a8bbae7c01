"""ONNX export of a pruned PyTorch model with sparse initializers (smaller files), checked in onnxruntime.

:func:`sparse_initializers` moves every initializer (a weight stored in the
graph) that is at least ``min_sparsity`` zeros, and smaller so, into the
graph's ``sparse_initializer`` list as ONNX ``SparseTensorProto``: the
non-zero values plus their linear positions. ONNX requires ``int64``
positions, so a float32 weight costs ``12 * density`` bytes per element
instead of 4: 0.3x the dense size at 90% sparsity, 0.15x at 95%, nothing
below 67%. :func:`export_onnx` exports a model with ``torch.onnx.export``,
applies it, and checks in onnxruntime (when installed) that the sparse file
gives the torch model's outputs. onnxruntime reads sparse initializers but
computes with dense weights (it densifies them when the session loads): the
file shrinks, the latency does not (``bench/bench_deploy.py``).

Needs ``onnx`` (and ``onnxruntime`` for the check): ``pip install sparsify[deploy]``.

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

__all__ = ["sparse_initializers", "export_onnx", "ONNX_INDEX_BYTES"]

#: Bytes per stored position of an ONNX sparse tensor (the spec's int64 indices).
ONNX_INDEX_BYTES = 8


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as e:   # pragma: no cover - the deploy extra installs it
        raise ImportError("ONNX export needs the onnx package: pip install sparsify[deploy]") from e
    return onnx


def sparse_initializers(model: Any, min_sparsity: float = 0.5, min_elements: int = 64) -> tuple[Any, list[str]]:
    """A copy of ONNX ``model`` with its sparse initializers as ``SparseTensorProto``; and their names.

    An initializer is moved when it has at least ``min_elements`` elements and ``min_sparsity`` zeros, and the
    sparse form (values + int64 positions) is smaller than the dense one.

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
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"model must be an onnx.ModelProto, got {type(model).__name__}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep, moved, names = [], [], []
    for init in out.graph.initializer:
        a = onnx.numpy_helper.to_array(init)
        nnz = int(np.count_nonzero(a))
        if (a.dtype.kind != "f" or a.size < min_elements or 1 - nnz / a.size < min_sparsity
                or nnz * (a.itemsize + ONNX_INDEX_BYTES) >= a.nbytes):
            keep.append(init)
            continue
        flat = a.reshape(-1)
        pos = np.flatnonzero(flat)
        values = onnx.numpy_helper.from_array(flat[pos], init.name)
        indices = onnx.numpy_helper.from_array(pos.astype(np.int64), f"{init.name}.indices")
        moved.append(onnx.helper.make_sparse_tensor(values, indices, list(a.shape)))
        names.append(init.name)
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    out.graph.sparse_initializer.extend(moved)
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
                dynamic_batch: bool = True, rtol: float = 1e-4, atol: float = 1e-5) -> dict[str, Any]:
    """Export ``model`` to ONNX at ``path`` with sparse initializers; returns what was done.

    Args:
        model: a pruned model (after ``Pruner.remove()``); put in eval mode for the export.
        example_inputs: a tensor or a tuple of positional input tensors (traced, and the check's inputs).
        path: the ``.onnx`` file to write.
        min_sparsity: initializers with at least this fraction of zeros are stored sparse.
        dynamic_batch: the first dimension of every input and output may vary.
        rtol, atol: tolerance of the onnxruntime check.

    Returns:
        ``{"path", "bytes", "dense_bytes", "sparse": [names], "check": str}``.

    Raises:
        ValueError: a bad ``min_sparsity``, or onnxruntime's outputs differ from the model's.
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
    sparse, names = sparse_initializers(onnx.load_from_string(dense), min_sparsity)
    content = sparse.SerializeToString()
    check = _check_in_onnxruntime(content, model, inputs, rtol, atol)
    with open(path, "wb") as f:
        f.write(content)
    return {"path": os.fspath(path), "bytes": len(content), "dense_bytes": len(dense), "sparse": names,
            "check": check}
