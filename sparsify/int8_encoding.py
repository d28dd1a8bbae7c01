"""Int8 weights encoded: packed bitmask + int8 values + float32 scales per output channel (in memory).

The int8 companion of :mod:`sparsify.sparse_format`; :mod:`sparsify.int8_format` writes and reads
these documents as ``.npz`` files (and re-exports every name here). :func:`compress_int8`
quantizes the weights (:func:`sparsify.quantization.quantize_int8`, symmetric per
channel, so every pruned zero stays zero) and stores each one as

* ``"bitmask_int8"``: one bit per element (1 = non-zero int8 value, packed
  little-endian into ``uint8``), the non-zero int8 values in row-major order,
  and one float32 scale per output channel: ``n/8 + nnz + 4 * channels`` bytes,
  i.e. 0.225 bytes per weight at 90% sparsity (0.056x of float32) before the
  file's own compression;
* ``"int8"``: the int8 array and its scales, when that is smaller (dense layers).

Every other tensor (biases, norms, small or integer tensors) is stored as
:func:`sparsify.sparse_format.encode` stores it (bitmask / dense, exact).
:func:`decompress_int8` gives back dense arrays (quantized weights dequantized,
``q * scale``, in their recorded dtype); :func:`int8_tensors` gives back the
exact int8 values and scales.

Example:
    >>> w = np.zeros((4, 16), np.float32); w[:, 0] = [0.5, -1.0, 0.25, 2.0]
    >>> doc = compress_int8({"fc.weight": w, "fc.bias": np.ones(4, np.float32)})
    >>> e = doc["tensors"]["fc.weight"]
    >>> e["encoding"], e["values"].tolist(), e["mask"].nbytes + e["values"].nbytes + e["scales"].nbytes
    ('bitmask_int8', [127, -127, 127, 127], 28)
    >>> np.array_equal(decompress_int8(doc)["fc.weight"], w), doc["tensors"]["fc.bias"]["encoding"]
    (True, 'dense')
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from . import sparse_format
from .quantization import dequantize_int8, quantize_int8

__all__ = ["FORMAT", "VERSION", "INT8_ENCODINGS", "LAYOUTS", "channel_axes", "encode_int8", "encode_int8_values",
           "decode_int8_values", "compress_int8", "is_int8_document", "checked_entries", "decompress_int8",
           "int8_tensors", "document_nbytes"]

#: Value of an int8 document's ``"format"`` key.
FORMAT = "sparsify.compressed_int8_state_dict"
#: Version of the document (its keys and encodings; the file around it has its own, see :mod:`sparsify.int8_format`).
VERSION = 1
#: The encodings of quantized tensors (the others use :mod:`sparsify.sparse_format`'s).
INT8_ENCODINGS = ("bitmask_int8", "int8")


def encode_int8(weight: np.ndarray, axis: int = 0, name: str = "weight") -> dict[str, Any]:
    """One floating-point weight quantized to int8 and encoded (``"bitmask_int8"`` or ``"int8"``, the smaller).

    Args:
        weight: the weight (any float dtype, at least 1-D).
        axis: its output-channel axis (one scale per index along it).
        name: the layer's name, for error messages.

    Example:
        >>> e = encode_int8(np.array([[0, 0, 0, 0, 0, 0, 0, 0, 0.5]], np.float32))
        >>> e["encoding"], e["mask"].tolist(), e["values"].tolist(), e["scales"].tolist()
        ('bitmask_int8', [0, 1], [127], [0.003937007859349251])
    """
    w = np.asarray(weight)
    q, scales = quantize_int8(w, name, axis)
    return encode_int8_values(q, scales, axis, str(w.dtype))


def encode_int8_values(q: np.ndarray, scales: np.ndarray, axis: int = 0, dtype: str = "float32") -> dict[str, Any]:
    """Already quantized values as an entry (``"bitmask_int8"`` or ``"int8"``, the smaller), checked.

    Args:
        q: the int8 values.
        scales: one positive float32 scale per index along ``axis``.
        axis: the output-channel axis of ``q``.
        dtype: the floating-point dtype :func:`decompress_int8` gives the weight back in.

    Raises:
        ValueError: ``q`` is not int8, the scales do not match, or ``dtype`` is not floating point.

    Example:
        >>> e = encode_int8_values(np.array([[0, 0, 0, 0, 0, 0, 0, 0, 0, 5]], np.int8), np.array([0.5], np.float32))
        >>> e["encoding"], e["values"].tolist(), decompress_int8({"format": FORMAT, "version": 1,
        ...                                                       "tensors": {"w": e}})["w"][0, -1]
        ('bitmask_int8', [5], np.float32(2.5))
    """
    q, scales = np.asarray(q), np.asarray(scales)
    if q.dtype != np.int8 or q.ndim < 1:
        raise ValueError(f"q must be an int8 array with at least one axis, got {q.dtype} of shape {q.shape}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -q.ndim <= axis < q.ndim:
        raise ValueError(f"axis must be an integer in [{-q.ndim}, {q.ndim}), got {axis!r}")
    ax = int(axis) % q.ndim
    head = {"shape": [int(d) for d in q.shape], "dtype": str(dtype), "axis": ax, "scales": scales}
    flat = np.ascontiguousarray(q).reshape(-1)
    nonzero = flat != 0
    sparse = {"encoding": "bitmask_int8", **head, "mask": np.packbits(nonzero, bitorder="little"),
              "values": flat[nonzero]}
    dense = {"encoding": "int8", **head, "values": np.ascontiguousarray(q)}
    entry = sparse if sparse["mask"].nbytes + sparse["values"].nbytes < q.nbytes else dense
    decode_int8_values(entry, "q")          # the scales and shape checked as a reader checks them
    _float_dtype(entry, "q")
    return entry


def _array(entry: Mapping[str, Any], key: str, name: str) -> np.ndarray:
    v = entry.get(key)
    if not isinstance(v, np.ndarray):
        raise ValueError(f"tensor {name!r}: {key!r} must be an array, got {type(v).__name__}")
    return v


def decode_int8_values(entry: Mapping[str, Any], name: str = "tensor",
                       max_elements: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """``(q, scales, axis)`` of an ``"int8"`` / ``"bitmask_int8"`` entry, checked against its declared shape.

    Raises:
        ValueError: a malformed entry, naming the tensor and what is wrong.

    Example:
        >>> q, s, axis = decode_int8_values(encode_int8(np.eye(9, dtype=np.float32)))
        >>> int(q.trace()), s.shape, axis
        (1143, (9,), 0)
    """
    if not isinstance(entry, Mapping) or entry.get("encoding") not in INT8_ENCODINGS:
        raise ValueError(f"tensor {name!r}: not an int8 entry (encoding must be one of {INT8_ENCODINGS})")
    shape = entry.get("shape")
    if not isinstance(shape, (list, tuple)) or not shape or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ValueError(f"tensor {name!r}: shape must be a non-empty list of non-negative integers, got {shape!r}")
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape, dtype=object))
    if max_elements is not None and n > max_elements:
        raise ValueError(f"tensor {name!r} declares {n} elements, more than the {max_elements} allowed")
    axis = entry.get("axis")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not 0 <= axis < len(shape):
        raise ValueError(f"tensor {name!r}: axis must be an integer in [0, {len(shape)}), got {axis!r}")
    scales = _array(entry, "scales", name)
    if scales.shape != (shape[axis],) or scales.dtype != np.float32 or not np.all(np.isfinite(scales)) \
            or np.any(scales <= 0):
        raise ValueError(f"tensor {name!r}: scales must be {shape[axis]} positive finite float32 values, got "
                         f"shape {scales.shape} of {scales.dtype}")
    values = _array(entry, "values", name)
    if values.dtype != np.int8:
        raise ValueError(f"tensor {name!r}: values must be int8, got {values.dtype}")
    if entry["encoding"] == "int8":
        if values.shape != shape:
            raise ValueError(f"tensor {name!r}: int8 values of shape {values.shape}, declared {shape}")
        return values, scales, int(axis)
    mask = _array(entry, "mask", name)
    if mask.dtype != np.uint8 or mask.ndim != 1 or mask.size != (n + 7) // 8:
        raise ValueError(f"tensor {name!r}: mask must hold {(n + 7) // 8} uint8 bytes for {n} elements, "
                         f"got {mask.size} of {mask.dtype}")
    nonzero = np.unpackbits(mask, count=n, bitorder="little").astype(bool)
    if values.ndim != 1 or int(nonzero.sum()) != values.size:
        raise ValueError(f"tensor {name!r}: mask marks {int(nonzero.sum())} non-zeros but {values.size} "
                         "values are stored")
    if np.any(values == 0):
        raise ValueError(f"tensor {name!r}: a stored value is 0 (the mask marks non-zeros only)")
    q = np.zeros(n, np.int8)
    q[nonzero] = values
    return q.reshape(shape), scales, int(axis)


#: Layouts :func:`channel_axes` knows: where the output channels of a stored weight are.
LAYOUTS = ("torch", "keras")


def channel_axes(tensors: Mapping[str, np.ndarray], layout: str) -> dict[str, int]:
    """The output-channel axis of every tensor of at least 2 axes, for :func:`compress_int8`'s ``axes``.

    ``"torch"``: axis 0 (``(out, in, ...)``, the canonical layout; a Hugging Face
    ``Conv1D`` weight is ``(in, out)``: pass its axis yourself). ``"keras"``: the last axis
    (``Dense`` ``(in, out)``, ``Conv2D`` ``(kh, kw, in, out)``), except ``embeddings``
    tables (``(vocab, dim)``: axis 0, one scale per token).

    Raises:
        ValueError: an unknown layout.

    Example:
        >>> t = {"d/kernel": np.zeros((3, 4)), "e/embeddings": np.zeros((9, 4)), "d/bias": np.zeros(4)}
        >>> channel_axes(t, "keras")
        {'d/kernel': -1, 'e/embeddings': 0}
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    out = {}
    for name, a in tensors.items():
        if np.ndim(a) >= 2:
            out[str(name)] = -1 if layout == "keras" and not str(name).endswith("embeddings") else 0
    return out


def compress_int8(tensors: Mapping[str, np.ndarray], quantize: Iterable[str] | None = None,
                  axes: Mapping[str, int] | None = None, min_elements: int = 64) -> dict[str, Any]:
    """A document of every tensor: the weights quantized to int8 (:func:`encode_int8`), the rest exact.

    Args:
        tensors: named arrays (a state_dict as NumPy arrays, a Keras model's weights).
        quantize: the names to quantize; ``None``: every floating-point tensor with
            at least 2 axes and ``min_elements`` elements (the weights of Linear,
            Conv, Embedding layers; biases and norms stay exact).
        axes: the output-channel axis per name (default 0, the torch / canonical
            layout; ``-1`` for a Keras ``Dense`` kernel).
        min_elements: tensors smaller than this stay dense when ``quantize`` is ``None``.

    Raises:
        ValueError: ``quantize`` or ``axes`` names a tensor not in ``tensors``, or a
            named tensor cannot be quantized (not floating point, NaN, ...).

    Example:
        >>> doc = compress_int8({"w": np.zeros((16, 16), np.float32), "steps": np.array([3])})
        >>> doc["format"], [e["encoding"] for e in doc["tensors"].values()]
        ('sparsify.compressed_int8_state_dict', ['bitmask_int8', 'dense'])
    """
    if isinstance(min_elements, bool) or not isinstance(min_elements, int) or min_elements < 1:
        raise ValueError(f"min_elements must be an integer >= 1, got {min_elements!r}")
    arrays = {str(k): np.asarray(v) for k, v in tensors.items()}
    axes = dict(axes or {})
    if quantize is None:
        names = {k for k, a in arrays.items() if a.dtype.kind == "f" and a.ndim >= 2 and a.size >= min_elements}
    else:
        names = set(quantize) if not isinstance(quantize, str) else {quantize}
        unknown = sorted(names - set(arrays))
        if unknown:
            raise ValueError(f"quantize names tensors that are not given: {unknown}")
        for k in names:
            if arrays[k].dtype.kind != "f":
                raise ValueError(f"quantize: tensor {k!r} is {arrays[k].dtype}, only floating-point tensors can be "
                                 "quantized")
    unknown = sorted(set(axes) - set(arrays))
    if unknown:
        raise ValueError(f"axes names tensors that are not given: {unknown}")
    out = {}
    for name, a in arrays.items():
        if name in names:
            out[name] = encode_int8(a, axes.get(name, 0), name)
        elif a.size >= min_elements:
            out[name] = sparse_format.encode(a, "bitmask")
        else:
            out[name] = {"encoding": "dense", "shape": [int(d) for d in a.shape], "dtype": str(a.dtype), "values": a}
    return {"format": FORMAT, "version": VERSION, "tensors": out}


def is_int8_document(obj: Any) -> bool:
    """Is ``obj`` a document written by :func:`compress_int8`?"""
    return isinstance(obj, Mapping) and obj.get("format") == FORMAT


def checked_entries(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``"tensors"`` of a :func:`compress_int8` document, after checking its format and version.

    Raises:
        ValueError: not such a document, or a version this module does not read.

    Example:
        >>> list(checked_entries(compress_int8({"b": np.ones(3, np.float32)})))
        ['b']
    """
    if not is_int8_document(doc):
        raise ValueError(f"not a compressed int8 document (its 'format' is not {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise ValueError(f"compressed int8 document version {doc.get('version')!r} is not supported "
                         f"(expected {VERSION})")
    entries = doc.get("tensors")
    if not isinstance(entries, Mapping):
        raise ValueError("compressed int8 document: 'tensors' must map names to entries")
    return entries


def _float_dtype(entry: Mapping[str, Any], name: str) -> np.dtype:
    try:
        dt = np.dtype(str(entry.get("dtype")))
    except TypeError:
        dt = None
    if dt is None or dt.kind != "f":
        raise ValueError(f"tensor {name!r}: dtype of a quantized tensor must be a NumPy floating-point dtype, "
                         f"got {entry.get('dtype')!r}")
    return dt


def decompress_int8(doc: Mapping[str, Any], max_elements: int | None = None) -> dict[str, np.ndarray]:
    """The dense arrays of a :func:`compress_int8` document: int8 weights dequantized (``q * scale``).

    Args:
        doc: the document.
        max_elements: refuse a document declaring more elements than this in total.

    Raises:
        ValueError: not such a document, an unknown version, or a malformed entry.
    """
    left = max_elements
    out = {}
    for name, entry in checked_entries(doc).items():
        name = str(name)
        if isinstance(entry, Mapping) and entry.get("encoding") in INT8_ENCODINGS:
            q, scales, axis = decode_int8_values(entry, name, left)
            a = dequantize_int8(q, scales, _float_dtype(entry, name), axis)
        else:
            a = sparse_format.decode(entry, name, left)
        if left is not None:
            left -= a.size
        out[name] = a
    return out


def int8_tensors(doc: Mapping[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """The exact int8 values of every quantized tensor: ``{name: (q, scales, axis)}``.

    Example:
        >>> q, s, axis = int8_tensors(compress_int8({"w": np.eye(9, dtype=np.float32)}))["w"]
        >>> q.dtype.name, int(np.count_nonzero(q)), float(s[0] * 127)
        ('int8', 9, 1.0)
    """
    return {str(n): decode_int8_values(e, str(n)) for n, e in checked_entries(doc).items()
            if isinstance(e, Mapping) and e.get("encoding") in INT8_ENCODINGS}


def document_nbytes(doc: Mapping[str, Any]) -> int:
    """Bytes of all the arrays of a document (its size before serialisation)."""
    return int(sum(sparse_format.entry_nbytes(e) for e in checked_entries(doc).values()))
