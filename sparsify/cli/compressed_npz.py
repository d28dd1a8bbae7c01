"""Compressed weights as a NumPy ``.npz`` archive: the export that needs no framework at all.

The document of :func:`sparsify.sparse_format.compress_tensors` (packed bitmask + values, or CSR, per
tensor) is stored as plain arrays in a compressed ``.npz``: ``__format__`` / ``__version__`` /
``__encoding__`` say what it is, and tensor ``i`` is ``t{i}/name``, ``t{i}/encoding``, ``t{i}/shape``,
``t{i}/dtype`` plus its arrays (``t{i}/mask``, ``t{i}/values``, ...). :func:`load_compressed_npz` gives back
the dense arrays with NumPy only (``allow_pickle=False``), and ``sparsify report`` reads it as the
weights it holds. This is how ``sparsify export`` writes a Keras 3 model without TensorFlow (``--to npz``).

Example:
    >>> import tempfile, os
    >>> w = np.zeros((16, 16), np.float32); w[0, :3] = 1.5
    >>> p = os.path.join(tempfile.mkdtemp(), "w.sparse.npz")
    >>> save_compressed_npz(p, {"dense/kernel": w})
    >>> back = load_compressed_npz(p)
    >>> list(back), np.array_equal(back["dense/kernel"], w)
    (['dense/kernel'], True)
"""
from __future__ import annotations

import io
import os
from typing import Any, Mapping

import numpy as np

from sparsify import sparse_format

from .atomic import atomic_file

__all__ = ["FORMAT_KEY", "document_arrays", "is_compressed_npz", "document_from_arrays", "save_compressed_npz",
           "load_compressed_npz", "compressed_npz_bytes", "document_npz_bytes"]

#: The member that marks an ``.npz`` as a compressed document (its value: ``sparse_format.FORMAT``).
FORMAT_KEY = "__format__"
_STRINGS = ("name", "encoding", "dtype")


def document_arrays(doc: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A :func:`~sparsify.sparse_format.compress_tensors` document as flat ``{member: array}``."""
    out = {FORMAT_KEY: np.array(doc["format"]), "__version__": np.array(doc["version"], np.int64),
           "__encoding__": np.array(doc.get("encoding", ""))}
    for i, (name, entry) in enumerate(doc["tensors"].items()):
        out[f"t{i}/name"] = np.array(str(name))
        for key, v in entry.items():
            out[f"t{i}/{key}"] = np.array(v, np.int64) if key == "shape" else np.asarray(v)
    return out


def is_compressed_npz(arrays: Mapping[str, Any]) -> bool:
    """Do these ``.npz`` members hold a compressed document (its :data:`FORMAT_KEY` says so)?"""
    v = arrays.get(FORMAT_KEY) if FORMAT_KEY in arrays else None
    return v is not None and np.asarray(v).dtype.kind == "U" and str(np.asarray(v)) == sparse_format.FORMAT


def document_from_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The document :func:`document_arrays` flattened (strings and shapes as Python values again).

    Raises:
        ValueError: not such an archive, or a tensor without its name.
    """
    if not is_compressed_npz(arrays):
        raise ValueError(f"not a compressed .npz ({FORMAT_KEY!r} is not {sparse_format.FORMAT!r})")
    entries: dict[str, dict[str, Any]] = {}
    for member, v in arrays.items():
        if not member.startswith("t") or "/" not in member:
            continue
        idx, key = member.split("/", 1)
        a = np.asarray(v)
        entries.setdefault(idx, {})[key] = str(a) if key in _STRINGS else \
            [int(d) for d in a.reshape(-1)] if key == "shape" else a
    tensors = {}
    for idx, entry in sorted(entries.items(), key=lambda kv: int(kv[0][1:]) if kv[0][1:].isdigit() else -1):
        if "name" not in entry:
            raise ValueError(f"compressed .npz: tensor {idx!r} has no name")
        tensors[entry.pop("name")] = entry
    return {"format": sparse_format.FORMAT, "version": int(np.asarray(arrays.get("__version__", -1))),
            "encoding": str(np.asarray(arrays.get("__encoding__", ""))), "tensors": tensors}


def document_npz_bytes(doc: Mapping[str, Any]) -> bytes:
    """The bytes of the compressed ``.npz`` holding a :func:`~sparsify.sparse_format.compress_tensors` document."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **document_arrays(doc))
    return buf.getvalue()


def compressed_npz_bytes(tensors: Mapping[str, np.ndarray], encoding: str = "bitmask") -> bytes:
    """The bytes of the compressed ``.npz`` of ``tensors`` (what :func:`save_compressed_npz` writes)."""
    return document_npz_bytes(sparse_format.compress_tensors(tensors, encoding))


def save_compressed_npz(path: str | os.PathLike, tensors: Mapping[str, np.ndarray], encoding: str = "bitmask") -> None:
    """Write ``tensors`` compressed to ``path``, atomically."""
    data = compressed_npz_bytes(tensors, encoding)
    with atomic_file(path, "wb") as fh:
        fh.write(data)


def load_compressed_npz(path: str | os.PathLike, max_elements: int | None = None) -> dict[str, np.ndarray]:
    """The dense arrays of a compressed ``.npz`` (NumPy only, no pickles).

    Raises:
        ValueError: not such an archive, or a malformed entry.
    """
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return sparse_format.decompress_tensors(document_from_arrays(arrays), max_elements=max_elements)
