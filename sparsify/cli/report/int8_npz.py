"""An int8 ``.npz`` (``sparsify export --int8``, :func:`sparsify.int8_format.save_int8_npz`) in a report.

Such a file holds one :mod:`sparsify.int8_format` document: per weight a bitmask, its non-zero
int8 values and one float32 scale per output channel (``"bitmask_int8"``, or ``"int8"`` when
dense is smaller); every other tensor exactly (``"bitmask"`` / ``"dense"``). File version 2 is
one ``uint8`` member named ``int8``, version 1 four members (``__format__``, ``__version__``,
``__index__``, ``__blob__``): :func:`is_int8_members` tells them from a plain ``.npz`` by the
member names, and :func:`int8_npz_stats` measures each tensor: its zeros (a quantized weight's
zeros are its int8 zeros: ``q * scale`` with ``scale > 0``), pattern conformity of the
dequantized values, how it is stored and its stored bytes (before the file's deflate).

Example:
    >>> import numpy as np, tempfile, os
    >>> from sparsify.int8_format import compress_int8, save_int8_npz
    >>> w = np.zeros((4, 16), np.float32); w[:, 0] = [0.5, -1.0, 0.25, 2.0]
    >>> f = os.path.join(tempfile.mkdtemp(), "m.int8.npz")
    >>> _ = save_int8_npz(f, compress_int8({"fc.weight": w, "fc.bias": np.ones(4, np.float32)}))
    >>> [(s.name, s.dtype, s.zeros, s.encoding, s.stored_bytes) for s in int8_npz_stats(f)]
    [('fc.weight', 'int8', 60, 'bitmask_int8', 28), ('fc.bias', 'float32', 0, 'dense', 16)]
"""
from __future__ import annotations

import os
from typing import Any, Iterable

import numpy as np

from sparsify import sparse_format
from sparsify.int8_format import INT8_ENCODINGS, decompress_int8, load_int8_npz

from .limits import DEFAULT_MAX_BYTES
from .stats_record import TensorStats
from .tensor_measures import tensor_stats

__all__ = ["INT8_V1_MEMBERS", "INT8_V2_MEMBERS", "is_int8_members", "read_int8_document", "int8_npz_tensors",
           "int8_npz_stats"]

#: The member names of a version-2 int8 ``.npz`` (one ``uint8`` member).
INT8_V2_MEMBERS = frozenset({"int8"})
#: The member names of a version-1 int8 ``.npz``.
INT8_V1_MEMBERS = frozenset({"__format__", "__version__", "__index__", "__blob__"})


def is_int8_members(names: Iterable[str]) -> bool:
    """Do these ``.npz`` member names (without ``.npy``) look like an int8 file?

    Example:
        >>> is_int8_members(["int8"]), is_int8_members(["w"]), is_int8_members(["__format__", "t0/name"])
        (True, False, False)
    """
    found = frozenset(names)
    return found in (INT8_V1_MEMBERS, INT8_V2_MEMBERS)


def read_int8_document(path: str | os.PathLike) -> dict[str, Any] | None:
    """The int8 document of ``path``, or None when it is a plain ``.npz`` that only has an int8 file's
    member name (one array called ``int8`` that is not such a document).

    Raises:
        ValueError: a version-1 int8 file (its four member names) that is malformed.

    Example:
        >>> import numpy as np, tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "plain.npz"); np.savez(f, int8=np.arange(3, dtype=np.uint8))
        >>> read_int8_document(f) is None
        True
    """
    p = os.fspath(path)
    try:
        return load_int8_npz(p)
    except ValueError:
        with np.load(p, allow_pickle=False) as z:
            if frozenset(z.files) == INT8_V2_MEMBERS:
                return None
        raise


def int8_npz_tensors(path: str | os.PathLike, max_bytes: int | None = DEFAULT_MAX_BYTES
                     ) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """``(document, dense tensors)`` of an int8 ``.npz`` (quantized weights dequantized, ``q * scale``),
    or None for a plain ``.npz`` that only has an int8 file's member name (see :func:`read_int8_document`).

    Raises:
        ValueError: a malformed int8 file, or one declaring more than ``max_bytes`` elements.

    Example:
        >>> import numpy as np, tempfile, os
        >>> from sparsify.int8_format import compress_int8, save_int8_npz
        >>> f = os.path.join(tempfile.mkdtemp(), "m.int8.npz")
        >>> _ = save_int8_npz(f, compress_int8({"w": np.array([[0.0, 2.0]], np.float32)}))
        >>> int8_npz_tensors(f)[1]["w"].tolist()
        [[0.0, 2.0]]
    """
    p = os.fspath(path)
    doc = read_int8_document(p)
    if doc is None:
        return None
    try:
        return doc, decompress_int8(doc, max_elements=max_bytes)
    except ValueError as e:
        raise ValueError(f"{p!r}: {e}") from None


def int8_npz_stats(path: str | os.PathLike, pattern: Any = None, max_bytes: int | None = DEFAULT_MAX_BYTES
                   ) -> list[TensorStats] | None:
    """One :class:`TensorStats` per tensor of an int8 ``.npz``, in file order, with ``encoding`` and
    ``stored_bytes`` set (``dtype`` is ``"int8"`` for a quantized weight, else the tensor's own);
    None for a plain ``.npz`` that only has an int8 file's member name.

    Args:
        path: the file.
        pattern: a pattern name checked on each dequantized weight of rank >= 2 (None: no check).
        max_bytes: refuse a document declaring more elements than this (None: no cap).

    Raises:
        ValueError: a malformed int8 file, or one declaring more than ``max_bytes`` elements.
    """

    read = int8_npz_tensors(path, max_bytes)
    if read is None:
        return None
    doc, dense = read
    out = []
    for name, value in dense.items():
        entry = doc["tensors"][name]
        stats = tensor_stats(name, value, pattern)
        stats.encoding = str(entry["encoding"])
        stats.stored_bytes = int(sparse_format.entry_nbytes(entry))
        if stats.encoding in INT8_ENCODINGS:
            stats.dtype = "int8"
        out.append(stats)
    return out
