"""A compressed, framework-neutral encoding of sparse weights: packed bitmask + values, or CSR.

A pruned model saved densely is as large as the dense one; its zeros only
help once they are not stored. :func:`compress_tensors` turns named arrays
into a document of plain arrays, strings, ints and lists (so ``torch.save``
writes it and ``torch.load(weights_only=True)`` reads it back, and NumPy can
hold it too); :func:`decompress_tensors` restores the dense arrays bit for bit,
except that a negative zero (``-0.0``, e.g. a pruned negative weight times 0)
is a zero like any other and comes back as ``0.0``.

Per tensor, the smaller of these is kept:

* ``"bitmask"``: one bit per element (1 = non-zero, packed little-endian into
  ``uint8``) and the non-zero values in row-major order: ``n/8 + nnz * itemsize``
  bytes, e.g. 0.53 bytes per float32 weight at 90% sparsity, 2.1 at 2:4;
* ``"csr"``: compressed sparse rows of the 2-D view ``(shape[0], rest)``:
  ``int32`` row pointers and column indices plus the values,
  ``(rows + 1) * 4 + nnz * (4 + itemsize)`` bytes;
* ``"dense"``: the array itself (small, dense or non-numeric tensors).

Decoding checks every size and index against the declared shape, so a
corrupt or hostile document raises ``ValueError`` instead of allocating
without bound or reading out of range.

Example:
    >>> w = np.array([[0.0, 1.5, 0.0, 0.0], [0.0, 0.0, -2.0, 0.0]], np.float32)
    >>> doc = compress_tensors({"fc": w}, min_elements=1)
    >>> doc["tensors"]["fc"]["encoding"], doc["tensors"]["fc"]["values"].tolist()
    ('bitmask', [1.5, -2.0])
    >>> np.array_equal(decompress_tensors(doc)["fc"], w)
    True
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

__all__ = ["FORMAT", "VERSION", "ENCODINGS", "encode", "decode", "entry_nbytes", "compress_tensors",
           "decompress_tensors", "is_compressed_document"]

#: Value of a document's ``"format"`` key.
FORMAT = "sparsify.compressed_state_dict"
VERSION = 1
#: Encodings :func:`encode` can be asked for (``"dense"`` is always possible).
ENCODINGS = ("bitmask", "csr")
#: dtypes the encoder stores as the raw bits of another dtype (NumPy has no bfloat16).
_VIEW_DTYPES = {"bfloat16": "int16"}


def _view_2d(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return 1, int(shape[0])
    return int(shape[0]), int(np.prod(shape[1:], dtype=np.int64))


def _index_dtype(n: int) -> np.dtype:
    return np.dtype(np.int32) if n < 2 ** 31 else np.dtype(np.int64)


def entry_nbytes(entry: Mapping[str, Any]) -> int:
    """Bytes of the arrays of one encoded entry (what the encoding costs before serialisation)."""
    return int(sum(v.nbytes for v in entry.values() if isinstance(v, np.ndarray)))


def encode(array: np.ndarray, encoding: str = "bitmask", dtype: str | None = None) -> dict[str, Any]:
    """One array as a ``"bitmask"`` or ``"csr"`` entry, or ``"dense"`` if that is not smaller.

    Args:
        array: the tensor (any shape, a numeric dtype).
        encoding: ``"bitmask"`` or ``"csr"``.
        dtype: the dtype to record (default: the array's); lets a caller
            store bfloat16 as its int16 bits and get it back.

    Example:
        >>> e = encode(np.array([0, 0, 0, 0, 0, 0, 0, 0, 3], np.float32))
        >>> e["encoding"], e["mask"].tolist(), e["values"].tolist()
        ('bitmask', [0, 1], [3.0])
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    a = np.asarray(array, order="C")
    shape = [int(d) for d in a.shape]
    dense = {"encoding": "dense", "shape": shape, "dtype": dtype or str(a.dtype), "values": a}
    if a.dtype.kind not in "fiucb" or a.size == 0:
        return dense
    nonzero = a.reshape(-1) != 0
    if encoding == "bitmask":
        entry = {"encoding": "bitmask", "shape": shape, "dtype": dtype or str(a.dtype),
                 "mask": np.packbits(nonzero, bitorder="little"), "values": a.reshape(-1)[nonzero]}
    else:
        rows, cols = _view_2d(a.shape)
        nz2 = nonzero.reshape(rows, cols)
        idx = _index_dtype(max(cols, int(nonzero.sum())) + 1)
        crow = np.zeros(rows + 1, idx)
        np.cumsum(nz2.sum(axis=1), out=crow[1:])
        entry = {"encoding": "csr", "shape": shape, "dtype": dtype or str(a.dtype), "crow_indices": crow,
                 "col_indices": np.nonzero(nz2)[1].astype(idx), "values": a.reshape(-1)[nonzero]}
    return entry if entry_nbytes(entry) < a.nbytes else dense


def _array(entry: Mapping[str, Any], key: str, name: str) -> np.ndarray:
    v = entry.get(key)
    if not isinstance(v, np.ndarray) or v.ndim != 1 and key != "values":
        raise ValueError(f"tensor {name!r}: {key!r} must be a 1-D array, got {type(v).__name__}")
    return v


def decode(entry: Mapping[str, Any], name: str = "tensor", max_elements: int | None = None) -> np.ndarray:
    """The dense array of one entry (checked: sizes, indices, the declared shape).

    Raises:
        ValueError: a malformed entry, naming the tensor and what is wrong.

    Example:
        >>> float(decode(encode(np.eye(8, dtype=np.float32), "csr")).trace())
        8.0
    """
    if not isinstance(entry, Mapping):
        raise ValueError(f"tensor {name!r}: entry must be a mapping, got {type(entry).__name__}")
    shape = entry.get("shape")
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                                       and d >= 0 for d in shape):
        raise ValueError(f"tensor {name!r}: shape must be a list of non-negative integers, got {shape!r}")
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape, dtype=object))
    if max_elements is not None and n > max_elements:
        raise ValueError(f"tensor {name!r} declares {n} elements, more than the {max_elements} allowed")
    kind = entry.get("encoding")
    if kind == "dense":
        values = np.asarray(entry.get("values"))
        if tuple(values.shape) != shape:
            raise ValueError(f"tensor {name!r}: dense values of shape {values.shape}, declared {shape}")
        return values
    values = _array(entry, "values", name)
    if values.ndim != 1 or values.dtype.kind not in "fiucb":
        raise ValueError(f"tensor {name!r}: values must be a 1-D numeric array")
    if kind == "bitmask":
        mask = _array(entry, "mask", name)
        if mask.dtype != np.uint8 or mask.size != (n + 7) // 8:
            raise ValueError(f"tensor {name!r}: mask must hold {(n + 7) // 8} uint8 bytes for {n} elements, "
                             f"got {mask.size} of {mask.dtype}")
        nonzero = np.unpackbits(mask, count=n, bitorder="little").astype(bool)
        if int(nonzero.sum()) != values.size:
            raise ValueError(f"tensor {name!r}: mask marks {int(nonzero.sum())} non-zeros but {values.size} "
                             "values are stored")
        out = np.zeros(n, values.dtype)
        out[nonzero] = values
        return out.reshape(shape)
    if kind == "csr":
        rows, cols = _view_2d(shape)
        crow, col = _array(entry, "crow_indices", name), _array(entry, "col_indices", name)
        if crow.dtype.kind not in "iu" or col.dtype.kind not in "iu":
            raise ValueError(f"tensor {name!r}: CSR indices must be integers")
        if crow.size != rows + 1 or crow[0] != 0 or crow[-1] != values.size or col.size != values.size \
                or np.any(np.diff(crow) < 0):
            raise ValueError(f"tensor {name!r}: CSR row pointers do not match {rows} rows and {values.size} values")
        if col.size and (col.min() < 0 or col.max() >= cols):
            raise ValueError(f"tensor {name!r}: CSR column index out of range [0, {cols})")
        row_of = np.repeat(np.arange(rows), np.diff(crow).astype(np.int64))
        col = col.astype(np.int64)
        if np.any(np.diff(col)[row_of[1:] == row_of[:-1]] <= 0):   # a repeat would overwrite a value silently
            raise ValueError(f"tensor {name!r}: CSR column indices must increase within each row (no repeats)")
        out = np.zeros((rows, cols), values.dtype)
        out[row_of, col] = values
        return out.reshape(shape)
    raise ValueError(f"tensor {name!r}: unknown encoding {kind!r}; expected 'dense', 'bitmask' or 'csr'")


def compress_tensors(tensors: Mapping[str, np.ndarray], encoding: str = "bitmask", min_elements: int = 64,
                     dtypes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A document holding every tensor, each encoded with :func:`encode` (or dense if smaller).

    Tensors with fewer than ``min_elements`` elements stay dense (biases,
    counters). ``dtypes`` records a dtype per name other than the array's
    (e.g. ``"bfloat16"`` for int16 bits).

    Example:
        >>> doc = compress_tensors({"w": np.zeros((16, 16), np.float32), "b": np.ones(4, np.float32)})
        >>> doc["format"], [e["encoding"] for e in doc["tensors"].values()]
        ('sparsify.compressed_state_dict', ['bitmask', 'dense'])
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    out = {}
    for name, a in tensors.items():
        a = np.asarray(a)
        dt = (dtypes or {}).get(name)
        out[name] = encode(a, encoding, dt) if a.size >= min_elements else \
            {"encoding": "dense", "shape": [int(d) for d in a.shape], "dtype": dt or str(a.dtype), "values": a}
    return {"format": FORMAT, "version": VERSION, "encoding": encoding, "tensors": out}


def is_compressed_document(obj: Any) -> bool:
    """Is ``obj`` a document written by :func:`compress_tensors` (any array type inside)?"""
    return isinstance(obj, Mapping) and obj.get("format") == FORMAT


def decompress_tensors(doc: Mapping[str, Any], max_elements: int | None = None) -> dict[str, np.ndarray]:
    """The dense arrays of a :func:`compress_tensors` document (NumPy arrays inside).

    Args:
        doc: the document.
        max_elements: refuse a document declaring more elements than this in total.

    Raises:
        ValueError: not such a document, an unknown version, or a malformed entry.
    """
    if not is_compressed_document(doc):
        raise ValueError(f"not a compressed state_dict (its 'format' is not {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise ValueError(f"compressed state_dict version {doc.get('version')!r} is not supported (expected {VERSION})")
    entries = doc.get("tensors")
    if not isinstance(entries, Mapping):
        raise ValueError("compressed state_dict: 'tensors' must map names to entries")
    left = max_elements
    out = {}
    for name, entry in entries.items():
        a = decode(entry, str(name), left)
        if left is not None:
            left -= a.size
        out[str(name)] = a
    return out
