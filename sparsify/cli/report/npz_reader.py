"""Read every tensor of an ``.npz`` archive: plain, compressed (``sparsify export --to npz``) or int8.

A plain archive's arrays come back as stored (``allow_pickle=False``); a compressed
``state_dict`` (:mod:`sparsify.cli.compressed_npz`) is decoded to its dense tensors, and an
int8 file (``sparsify export --int8``, :mod:`sparsify.cli.report.int8_npz`) to its dequantized
ones (``q * scale``: the same zeros as the int8 values). What the members declare is checked
against ``max_bytes`` first.

Example:
    >>> import tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "w.npz"); np.savez(f, w=np.eye(2))
    >>> read_npz(f, None)["w"].tolist()
    [[1.0, 0.0], [0.0, 1.0]]
"""
from __future__ import annotations

import os
import zipfile

import numpy as np

from sparsify import sparse_format

from .. import compressed_npz
from .int8_npz import int8_npz_tensors, is_int8_members
from .npz_stream import check_declared_npz

__all__ = ["read_npz"]


def read_npz(path: str | os.PathLike, max_bytes: int | None) -> dict[str, np.ndarray]:
    """``{name: array}`` of an ``.npz`` (plain, compressed or int8; see the module docstring).

    Raises:
        ValueError: an unreadable or malformed archive, or one declaring more than ``max_bytes``.
    """
    p = os.fspath(path)
    members = check_declared_npz(p, max_bytes)
    if is_int8_members(m.name for m in members):
        read = int8_npz_tensors(p, max_bytes)
        if read is not None:
            return read[1]
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise ValueError(f"{p!r} cannot be read as an .npz archive: {e}") from None
    if not compressed_npz.is_compressed_npz(arrays):
        return arrays
    try:                                                  # written by `sparsify export --to npz`
        return sparse_format.decompress_tensors(compressed_npz.document_from_arrays(arrays), max_elements=max_bytes)
    except ValueError as e:
        raise ValueError(f"{p!r}: {e}") from None
