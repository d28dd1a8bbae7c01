"""Ship a pruned PyTorch model: a compressed ``state_dict``, and the 2:4 semi-structured check.

* :func:`save_compressed_state_dict` writes the weights as packed bitmask +
  values (or CSR) with :mod:`sparsify.sparse_format`: a plain ``torch.save``
  file of tensors, strings and ints, so ``torch.load(weights_only=True)``
  reads it; :func:`load_compressed_state_dict` turns it back into the exact
  dense ``state_dict`` for ``model.load_state_dict``.
* :func:`semi_structured_violation` says whether a weight meets what
  ``torch.sparse.to_sparse_semi_structured`` needs (2-D, at most 2 non-zeros
  in every 4 consecutive weights of a row, a supported dtype, rows and
  columns multiples of the backend's tile). That function itself needs a CUDA
  GPU; this check does not. :func:`semi_structured_report` checks every
  Linear weight of a model or ``state_dict``.

Example:
    >>> import torch, tempfile, os
    >>> m = torch.nn.Linear(64, 32)
    >>> with torch.no_grad():
    ...     _ = m.weight.mul_((torch.arange(64) % 4 < 2).float())    # 2:4 along each row
    >>> path = os.path.join(tempfile.mkdtemp(), "m.pt")
    >>> save_compressed_state_dict(m, path)["tensors"]
    2
    >>> sd = load_compressed_state_dict(path)
    >>> torch.equal(sd["weight"], m.weight)
    True
    >>> semi_structured_violation(m.weight.half()) is None
    True
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from sparsify import sparse_format

from .layers import is_transformers_conv1d

__all__ = ["SEMI_STRUCTURED_TILES", "save_compressed_state_dict", "load_compressed_state_dict",
           "compressed_document", "semi_structured_violation", "semi_structured_report"]

#: Smallest (rows, cols) tile of the sparse operand per backend and dtype, as
#: ``torch.sparse.SparseSemiStructuredTensorCUTLASS`` / ``...CUSPARSELT`` require
#: (both dimensions must be at least, and a multiple of, these).
SEMI_STRUCTURED_TILES: dict[str, dict[torch.dtype, tuple[int, int]]] = {
    "cutlass": {torch.int8: (16, 128), torch.float16: (32, 64), torch.bfloat16: (32, 64), torch.float32: (32, 32)},
    "cusparselt": {torch.float8_e4m3fn: (32, 32), torch.int8: (32, 32), torch.float16: (16, 16),
                   torch.bfloat16: (16, 16)},
}


def _state_dict(model_or_state: nn.Module | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if isinstance(model_or_state, nn.Module):
        return dict(model_or_state.state_dict())
    if isinstance(model_or_state, Mapping) and all(isinstance(v, torch.Tensor) for v in model_or_state.values()):
        return dict(model_or_state)
    raise TypeError(f"expected an nn.Module or a state_dict (a dict of tensors), got {type(model_or_state).__name__}")


def _to_numpy(t: torch.Tensor) -> tuple[np.ndarray, str | None]:
    t = t.detach().cpu()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy(), "bfloat16"
    return t.contiguous().numpy(), None


def compressed_document(model_or_state: nn.Module | Mapping[str, torch.Tensor], encoding: str = "bitmask"
                        ) -> dict[str, Any]:
    """The document :func:`save_compressed_state_dict` saves (tensors inside), without writing it."""
    if encoding not in sparse_format.ENCODINGS:
        raise ValueError(f"encoding must be one of {sparse_format.ENCODINGS}, got {encoding!r}")
    sd = _state_dict(model_or_state)
    arrays, dtypes = {}, {}
    for name, t in sd.items():
        arrays[name], dt = _to_numpy(t)
        if dt:
            dtypes[name] = dt
    doc = sparse_format.compress_tensors(arrays, encoding, dtypes=dtypes)
    for entry in doc["tensors"].values():
        for k, v in entry.items():
            if isinstance(v, np.ndarray):
                entry[k] = torch.from_numpy(np.asarray(v, order="C"))
    return doc


def save_compressed_state_dict(model_or_state: nn.Module | Mapping[str, torch.Tensor], f: Any,
                               encoding: str = "bitmask") -> dict[str, int]:
    """Save a model's (or a ``state_dict``'s) tensors compressed; returns counts of each encoding used.

    Args:
        model_or_state: an ``nn.Module`` (pruned, after ``Pruner.remove()``) or a ``state_dict``.
        f: a path or a writable binary file object (as for ``torch.save``).
        encoding: ``"bitmask"`` (packed bits + values, the smaller for most
            sparsities) or ``"csr"`` (compressed sparse rows).

    Returns:
        ``{"tensors", "bitmask", "csr", "dense"}`` counts.
    """
    doc = compressed_document(model_or_state, encoding)
    torch.save(doc, f)
    kinds = [e["encoding"] for e in doc["tensors"].values()]
    return {"tensors": len(kinds), **{k: kinds.count(k) for k in ("bitmask", "csr", "dense")}}


def load_compressed_state_dict(f: Any, map_location: Any = "cpu") -> dict[str, torch.Tensor]:
    """The dense ``state_dict`` of a file :func:`save_compressed_state_dict` wrote (``weights_only=True``).

    Raises:
        ValueError: the file is not such a document or is malformed.
    """
    doc = torch.load(f, map_location="cpu", weights_only=True)
    if not sparse_format.is_compressed_document(doc):
        raise ValueError("not a compressed state_dict written by save_compressed_state_dict "
                         f"(expected format {sparse_format.FORMAT!r})")
    entries = doc.get("tensors")
    if not isinstance(entries, Mapping):
        raise ValueError("compressed state_dict: 'tensors' must map names to entries")
    np_doc = {**doc, "tensors": {n: {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in e.items()}
                                 if isinstance(e, Mapping) else e for n, e in entries.items()}}
    arrays = sparse_format.decompress_tensors(np_doc)
    out = {}
    for name, a in arrays.items():
        t = torch.from_numpy(np.array(a))
        if entries[name].get("dtype") == "bfloat16":
            t = t.view(torch.bfloat16)
        out[name] = t.to(map_location) if map_location is not None else t
    return out


def semi_structured_violation(weight: torch.Tensor, dtype: torch.dtype | None = None,
                              backend: str | None = None) -> str | None:
    """Why ``weight`` cannot become a 2:4 semi-structured tensor, or None if it can (no GPU needed).

    Checks what ``torch.sparse.to_sparse_semi_structured`` checks (2-D, dtype
    and tile shape of the backend), and what it silently assumes: at most two
    non-zeros in every group of four consecutive elements of each row.

    Args:
        weight: the tensor (e.g. a Linear weight, ``(out, in)``).
        dtype: the dtype it will have on the GPU (default: its own).
        backend: ``"cutlass"``, ``"cusparselt"`` or None (either one).

    Example:
        >>> semi_structured_violation(torch.ones(32, 64, dtype=torch.float16))
        '512 of 512 groups of 4 hold more than 2 non-zeros'
    """
    if backend is not None and backend not in SEMI_STRUCTURED_TILES:
        raise ValueError(f"backend must be one of {tuple(SEMI_STRUCTURED_TILES)} or None, got {backend!r}")
    dtype = weight.dtype if dtype is None else dtype
    if weight.dim() != 2:
        return f"a {weight.dim()}-D tensor; semi-structured sparsity takes 2-D (Linear) weights"
    rows, cols = weight.shape
    backends = [backend] if backend else list(SEMI_STRUCTURED_TILES)
    shape_reasons = []
    for b in backends:
        tile = SEMI_STRUCTURED_TILES[b].get(dtype)
        if tile is None:
            shape_reasons.append(f"{b} does not take {str(dtype).replace('torch.', '')}")
        elif rows < tile[0] or rows % tile[0] or cols < tile[1] or cols % tile[1]:
            shape_reasons.append(f"{b} needs rows and columns multiples of {tile[0]}x{tile[1]}")
        else:
            shape_reasons = []
            break
    if shape_reasons:
        return f"shape {rows}x{cols}: " + "; ".join(shape_reasons)
    groups = (weight.detach().reshape(rows, cols // 4, 4) != 0).sum(-1)
    bad = int((groups > 2).sum())
    if bad:
        return f"{bad} of {groups.numel()} groups of 4 hold more than 2 non-zeros"
    return None


def semi_structured_report(model_or_state: nn.Module | Mapping[str, torch.Tensor], dtype: torch.dtype | None = None,
                           backend: str | None = None) -> dict[str, str | None]:
    """:func:`semi_structured_violation` of every 2-D weight (Linear layers of a model, or rank-2 tensors).

    A ``transformers`` ``Conv1D`` (GPT-2) is checked as the Linear of its transposed weight
    (``(out, in)``: groups of 4 along the input), the layout a semi-structured kernel multiplies.

    Example:
        >>> m = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
        >>> sorted(semi_structured_report(m, dtype=torch.float16))
        ['0.weight', '2.weight']
    """
    if isinstance(model_or_state, nn.Module):
        weights = {f"{n}.weight" if n else "weight": m.weight.T if is_transformers_conv1d(m) else m.weight
                   for n, m in model_or_state.named_modules()
                   if isinstance(m, nn.Linear) or is_transformers_conv1d(m)}
    else:
        weights = {n: t for n, t in _state_dict(model_or_state).items() if t.dim() == 2 and t.is_floating_point()}
    return {n: semi_structured_violation(w, dtype, backend) for n, w in weights.items()}
