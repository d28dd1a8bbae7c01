"""Compressed int8 weights in a file: a NumPy ``.npz`` of one :mod:`sparsify.int8_encoding` document.

:mod:`sparsify.int8_encoding` quantizes and encodes the weights (bitmask + int8 values +
float32 scales per output channel; every other tensor exact) and this module re-exports its
names, so ``from sparsify.int8_format import compress_int8, save_int8_npz`` is the one import.
:func:`save_int8_npz` / :func:`load_int8_npz` write and read the document as a NumPy ``.npz``
(``allow_pickle=False``, written atomically).

File version 2 (:data:`FILE_VERSION`, what :func:`int8_npz_bytes` writes) holds a single
deflated ``uint8`` member, ``int8.npy``: a compact JSON index (format, document version, per
tensor its name, encoding, shape, dtype, axis and the dtype and shape of each of its arrays),
a newline, then the bytes of every array in index order. One member instead of version 1's
four (``__format__``, ``__version__``, ``__index__``, ``__blob__``) saves their zip and ``.npy``
headers, ~700 bytes: several percent of a small model's file. :func:`load_int8_npz` reads both
versions.

Example:
    >>> w = np.zeros((4, 16), np.float32); w[:, 0] = [0.5, -1.0, 0.25, 2.0]
    >>> data = int8_npz_bytes(compress_int8({"fc.weight": w}))
    >>> list(np.load(io.BytesIO(data)).keys()), len(data) < 400
    (['int8'], True)
    >>> int8_tensors(load_int8_npz(io.BytesIO(data)))["fc.weight"][0][:, 0].tolist()
    [127, -127, 127, 127]
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from typing import IO, Any, Iterable, Mapping

import numpy as np

from .int8_encoding import (FORMAT, INT8_ENCODINGS, LAYOUTS, VERSION, channel_axes, checked_entries, compress_int8,
                            decode_int8_values, decompress_int8, document_nbytes, encode_int8, encode_int8_values,
                            int8_tensors, is_int8_document)
from .quantization import LayerZeros, require_zeros_kept, zeros_check

__all__ = ["FORMAT", "VERSION", "FILE_VERSION", "INT8_ENCODINGS", "LAYOUTS", "channel_axes", "encode_int8",
           "encode_int8_values", "decode_int8_values", "compress_int8", "is_int8_document", "decompress_int8",
           "int8_tensors", "int8_npz_bytes", "save_int8_npz", "load_int8_npz", "save_checked_int8_npz",
           "document_nbytes"]

#: Version of the ``.npz`` layout :func:`int8_npz_bytes` writes (1: four members; 2: one).
FILE_VERSION = 2
_MEMBER = "int8"                                  # the one member of a version-2 file
_KINDS = "fiucb"                                  # dtype kinds an array may have (no objects, no strings)


def _arrays_and_index(doc: Mapping[str, Any]) -> tuple[list[np.ndarray], list[list[Any]]]:
    """Every array of the document (little-endian, C order) and the version-2 index of the tensors."""
    index, arrays = [], []
    for name, entry in checked_entries(doc).items():
        fields: dict[str, Any] = {}
        specs = []
        for key, v in entry.items():
            if isinstance(v, np.ndarray):
                a = np.asarray(v, order="C")
                a = a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a
                if a.dtype.kind not in _KINDS:
                    raise ValueError(f"tensor {name!r}: {key!r} of dtype {a.dtype} cannot be stored")
                specs.append([str(key), a.dtype.str, [int(d) for d in a.shape]])
                arrays.append(a)
            else:
                fields[str(key)] = [int(d) for d in v] if key == "shape" else int(v) if key == "axis" else str(v)
        index.append([str(name), fields, specs])
    return arrays, index


def _zip_member(name: str, array: np.ndarray) -> bytes:
    """A one-member ``.npz`` (deflate level 9, a fixed timestamp: the same document gives the same bytes)."""
    npy = io.BytesIO()
    np.lib.format.write_array(npy, array, allow_pickle=False)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, npy.getvalue(), compresslevel=9)
    return buf.getvalue()


def int8_npz_bytes(doc: Mapping[str, Any]) -> bytes:
    """The bytes of the compressed ``.npz`` (file version 2) holding a :func:`compress_int8` document."""
    arrays, index = _arrays_and_index(doc)
    head = json.dumps({"format": FORMAT, "version": doc["version"], "file_version": FILE_VERSION, "tensors": index},
                      separators=(",", ":")).encode()
    body = [np.frombuffer(head + b"\n", np.uint8)] + [a.reshape(-1).view(np.uint8) for a in arrays]
    return _zip_member(_MEMBER, np.concatenate(body))


def save_int8_npz(path: str | os.PathLike, doc: Mapping[str, Any]) -> int:
    """Write a :func:`compress_int8` document to ``path`` as a compressed ``.npz``, atomically; returns its bytes."""
    data = int8_npz_bytes(doc)
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(data)


def _array_from(blob: np.ndarray, start: int, spec: Any, where: str, name: str, key: str) -> tuple[np.ndarray, int]:
    """The array ``spec`` (dtype, shape) describes at ``start`` of ``blob``, and the offset after it."""
    try:
        dt, shape = np.dtype(spec[0]), tuple(int(d) for d in spec[1])
    except (TypeError, KeyError, IndexError, ValueError):
        raise ValueError(f"{where}: tensor {name!r}: array {key!r} has a malformed index") from None
    if dt.kind not in _KINDS or min(shape, default=0) < 0:
        raise ValueError(f"{where}: tensor {name!r}: array {key!r} has a malformed index")
    nbytes = int(np.prod(shape, dtype=object)) * dt.itemsize
    if start + nbytes > blob.size:
        raise ValueError(f"{where}: tensor {name!r}: array {key!r} does not fit the stored bytes")
    return blob[start:start + nbytes].view(dt).reshape(shape).copy(), start + nbytes


def _load_v2(data: np.ndarray, where: str) -> dict[str, Any]:
    if data.dtype != np.uint8 or data.ndim != 1:
        raise ValueError(f"{where}: the {_MEMBER!r} member must be a 1-D uint8 array, got {data.dtype} {data.shape}")
    raw = data.tobytes()
    end = raw.find(b"\n")
    try:
        head = json.loads(raw[:end].decode()) if end >= 0 else None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{where}: the index is not valid JSON ({e})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise ValueError(f"{where} is not a compressed int8 .npz (its index does not name {FORMAT!r})")
    if head.get("file_version") != 2 or not isinstance(head.get("tensors"), list):
        raise ValueError(f"{where}: file version {head.get('file_version')!r} is not supported (expected 1 or 2)")
    blob, offset = data[end + 1:], 0
    tensors: dict[str, dict[str, Any]] = {}
    for item in head["tensors"]:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], dict)
                and isinstance(item[2], list)):
            raise ValueError(f"{where}: every tensor of the index needs a name, its fields and its arrays")
        name, entry = item[0], dict(item[1])
        for spec in item[2]:
            key = spec[0] if isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str) else None
            if key is None:
                raise ValueError(f"{where}: tensor {name!r}: an array of the index is malformed")
            entry[key], offset = _array_from(blob, offset, spec[1:], where, name, key)
        tensors[name] = entry
    if offset != blob.size:
        raise ValueError(f"{where}: {blob.size - offset} stored bytes are not in the index")
    return {"format": FORMAT, "version": head.get("version"), "tensors": tensors}


def _load_v1(arrays: Mapping[str, np.ndarray], where: str) -> dict[str, Any]:
    """A version-1 file: ``__format__``, ``__version__``, a JSON ``__index__`` with offsets, one ``__blob__``."""
    fmt = arrays.get("__format__")
    if fmt is None or fmt.dtype.kind != "U" or str(fmt) != FORMAT:
        raise ValueError(f"{where} is not a compressed int8 .npz ('__format__' is not {FORMAT!r})")
    blob, raw = arrays.get("__blob__"), arrays.get("__index__")
    if blob is None or blob.dtype != np.uint8 or blob.ndim != 1 or raw is None or raw.dtype.kind != "U":
        raise ValueError(f"{where}: the '__index__' or '__blob__' member is missing or malformed")
    try:
        index = json.loads(str(raw))
    except ValueError as e:
        raise ValueError(f"{where}: '__index__' is not valid JSON ({e})") from None
    if not isinstance(index, list):
        raise ValueError(f"{where}: '__index__' must be a list of tensors")
    tensors: dict[str, dict[str, Any]] = {}
    for item in index:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                or not isinstance(item.get("arrays"), dict):
            raise ValueError(f"{where}: every tensor of '__index__' needs a name and its arrays")
        entry = {k: v for k, v in item.items() if k not in ("name", "arrays")}
        for key, spec in item["arrays"].items():
            try:
                start, nbytes = int(spec["offset"]), int(spec["nbytes"])
                dtype, shape = spec["dtype"], spec["shape"]
            except (TypeError, KeyError, ValueError):
                raise ValueError(f"{where}: tensor {item['name']!r}: array {key!r} has a malformed index") from None
            if start < 0 or nbytes < 0 or start + nbytes > blob.size:
                raise ValueError(f"{where}: tensor {item['name']!r}: array {key!r} does not fit the stored bytes")
            entry[key], stop = _array_from(blob, start, (dtype, shape), where, item["name"], key)
            if stop - start != nbytes:
                raise ValueError(f"{where}: tensor {item['name']!r}: array {key!r} does not fit the stored bytes")
        tensors[item["name"]] = entry
    return {"format": FORMAT, "version": int(arrays.get("__version__", np.array(-1))), "tensors": tensors}


def load_int8_npz(path: str | os.PathLike | IO[bytes]) -> dict[str, Any]:
    """The document of an ``.npz`` :func:`save_int8_npz` wrote, file version 2 or 1 (a path or a binary file;
    NumPy only, no pickles).

    Read it with :func:`decompress_int8` (dense) or :func:`int8_tensors` (exact int8);
    those check every entry against its declared shape.

    Raises:
        ValueError: not such an archive, or an index that does not match the stored bytes.
    """
    where = repr(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else "the file"
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    if set(arrays) == {_MEMBER}:
        return _load_v2(arrays[_MEMBER], where)
    return _load_v1(arrays, where)


def save_checked_int8_npz(path: str | os.PathLike, tensors: Mapping[str, np.ndarray],
                          axes: Mapping[str, int] | None = None, quantize: Iterable[str] | None = None
                          ) -> tuple[int, dict[str, LayerZeros]]:
    """Quantize and write ``tensors`` (:func:`compress_int8`), then read the file back before it takes ``path``.

    The file as written must give back every int8 value and scale of the document, every
    other tensor exactly, and no zero of ``tensors`` may be non-zero in it; only then is it
    renamed to ``path`` (nothing is left otherwise). What an export command calls.

    Returns:
        ``(bytes written, zeros report per quantized tensor)`` (:func:`sparsify.quantization.zeros_check`).

    Raises:
        ValueError: bad arguments (see :func:`compress_int8`), or the read-back check failed.

    Example:
        >>> import tempfile
        >>> w = np.zeros((8, 16), np.float32); w[:, 0] = 1.0
        >>> n, report = save_checked_int8_npz(os.path.join(tempfile.mkdtemp(), "w.int8.npz"), {"w": w})
        >>> report["w"].zeros_before, report["w"].lost_zeros
        (120, 0)
    """
    doc = compress_int8(tensors, quantize=quantize, axes=axes)
    data = int8_npz_bytes(doc)
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        back = load_int8_npz(tmp)
        exact, expected = int8_tensors(back), int8_tensors(doc)
        bad = [n for n, (q, s, axis) in expected.items() if n not in exact or not np.array_equal(exact[n][0], q)
               or not np.array_equal(exact[n][1], s) or exact[n][2] != axis]
        dense = decompress_int8(back)
        bad += [n for n, a in tensors.items() if n not in expected and not np.array_equal(
            dense.get(n), np.asarray(a), equal_nan=np.asarray(a).dtype.kind == "f")]
        if bad or set(dense) != set(tensors):
            raise ValueError(f"{path!r}: the int8 file does not give back {sorted(bad)[:3] or 'the same names'}; "
                             "nothing was written")
        report = zeros_check({n: np.asarray(tensors[n]) for n in expected}, {n: q for n, (q, _, _) in exact.items()})
        require_zeros_kept(report)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(data), report
