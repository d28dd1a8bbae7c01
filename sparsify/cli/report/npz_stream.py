"""Statistics of an ``.npz`` archive computed in bounded chunks, straight from the zip stream.

An ``.npz`` is a zip of ``.npy`` members. :func:`npz_members` reads only the
member headers (name, shape, dtype); :func:`iter_row_chunks` decompresses one
member a few rows at a time; :func:`streamed_tensor_stats` counts zeros and
checks a pattern chunk by chunk. Memory stays near ``chunk_bytes`` whatever
size the archive declares (a 1 MB archive of a 1 GiB array does not take
1 GiB). A Fortran-ordered member is counted in flat chunks; only a pattern
check on one loads it whole (``np.save`` writes C order unless asked).

Example:
    >>> import numpy as np, tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "w.npz")
    >>> np.savez(f, w=np.array([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 4.0]]))
    >>> [m.name for m in npz_members(f)]
    ['w']
    >>> s = streamed_tensor_stats(f, npz_members(f)[0], pattern="2:4", chunk_bytes=32)
    >>> s.zeros, s.pattern["conforms"], s.pattern["units"]
    (4, True, 2)
"""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from sparsify.layout import to_2d
from sparsify.patterns import get_pattern

from .limits import check_declared
from .stats_record import TensorStats

__all__ = ["CHUNK_BYTES", "NpyMember", "npz_members", "check_declared_npz", "iter_row_chunks", "streamed_tensor_stats"]

#: Bytes of one member decompressed at a time.
CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class NpyMember:
    """One ``.npy`` member of an archive, from its header only.

    Attributes:
        name: the array's name (the member name without ``.npy``).
        shape: declared shape.
        dtype: declared dtype.
        fortran_order: True if the data is stored column-major.
        nbytes: declared bytes of data.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    nbytes: int


def _read_header(fh: Any) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fh)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fh)
    return None


def npz_members(path: str | os.PathLike) -> list[NpyMember]:
    """The arrays an ``.npz`` archive declares, read from the member headers only.

    Raises:
        ValueError: not a zip of ``.npy`` members, an unreadable header, or an
            array of Python objects.
    """
    p = os.fspath(path)
    members = []
    try:
        with zipfile.ZipFile(p) as zf:
            infos = zf.infolist()
            bad = [i.filename for i in infos if not i.filename.endswith(".npy")]
            if bad:
                raise ValueError(f"{p!r} is not an .npz archive: it holds {bad[0]!r}, not .npy arrays"
                                 + ("; it is a torch file (--format torch)" if any(n.endswith("data.pkl") for n in bad)
                                    else ""))
            for info in infos:
                with zf.open(info) as fh:
                    header = _read_header(fh)
                name = info.filename[:-4]
                if header is None:
                    raise ValueError(f"{p!r}: array {name!r} has an .npy header version this reader does not know")
                shape, fortran, dtype = header
                if dtype.hasobject:
                    raise ValueError(f"{p!r}: array {name!r} holds Python objects; report reads numeric arrays only")
                shape = tuple(int(d) for d in shape)
                members.append(NpyMember(name, shape, dtype, bool(fortran),
                                         int(np.prod(shape, dtype=np.int64)) * dtype.itemsize))
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"{p!r} cannot be read as an .npz archive: {e}") from None
    return members


def check_declared_npz(path: str | os.PathLike, max_bytes: int | None) -> list[NpyMember]:
    """:func:`npz_members`, after checking the bytes they declare against ``max_bytes`` (None: no cap)."""
    members = npz_members(path)
    check_declared(os.fspath(path), sum(m.nbytes for m in members), max_bytes)
    return members


def _read_exact(fh: Any, n: int, p: str, name: str) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise ValueError(f"{p!r}: array {name!r} is truncated: its header declares more data than the archive holds")
    return data


def iter_row_chunks(path: str | os.PathLike, member: NpyMember, chunk_bytes: int = CHUNK_BYTES,
                    row_multiple: int = 1) -> Iterator[np.ndarray]:
    """Decompress ``member`` a few rows (slices along axis 0) at a time.

    Each chunk holds a multiple of ``row_multiple`` rows (the last one may hold
    fewer) and about ``chunk_bytes`` bytes, at least ``row_multiple`` rows. A
    rank-0 or rank-1 member, or a Fortran-ordered one, comes as flat chunks.

    Example:
        >>> import numpy as np, tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "w.npz"); np.savez(f, w=np.arange(12.0).reshape(6, 2))
        >>> [c.shape for c in iter_row_chunks(f, npz_members(f)[0], chunk_bytes=40, row_multiple=2)]
        [(2, 2), (2, 2), (2, 2)]
    """
    p = os.fspath(path)
    flat = len(member.shape) < 2 or member.fortran_order
    row_items = 1 if flat else int(np.prod(member.shape[1:], dtype=np.int64))
    total_rows = int(np.prod(member.shape, dtype=np.int64)) if flat else member.shape[0]
    row_bytes = max(row_items * member.dtype.itemsize, 1)
    rows = max(row_multiple, chunk_bytes // row_bytes // row_multiple * row_multiple)
    with zipfile.ZipFile(p) as zf, zf.open(member.name + ".npy") as fh:
        _read_header(fh)
        for start in range(0, total_rows, rows):
            n = min(rows, total_rows - start)
            data = _read_exact(fh, n * row_items * member.dtype.itemsize, p, member.name)
            chunk = np.frombuffer(data, dtype=member.dtype)
            yield chunk if flat else chunk.reshape((n, *member.shape[1:]))


def _whole(path: str, member: NpyMember) -> np.ndarray:
    with zipfile.ZipFile(path) as zf, zf.open(member.name + ".npy") as fh:
        return np.lib.format.read_array(fh, allow_pickle=False)


def _chunked_conformity(path: str, member: NpyMember, pattern: Any, chunk_bytes: int) -> dict[str, Any]:
    pat = get_pattern(pattern)
    shape2d = (member.shape[0], int(np.prod(member.shape[1:], dtype=np.int64)))
    reason = pat.fits(shape2d)
    if reason is not None:
        return {"fits": False, "conforms": None, "units": 0, "violations": 0, "reason": reason}
    if member.fortran_order:
        units, violations = pat.conformity(to_2d(_whole(path, member)) != 0)
    else:
        block = getattr(pat, "block_shape", None)     # NxM families; N:M groups lie within one row
        height = block(shape2d)[0] if block is not None else 1
        spans_all_rows = block is not None and shape2d[0] > 1 and block((1, shape2d[1]))[0] == 1 \
            and height == shape2d[0]
        units = violations = 0
        touched = has_nonzero = None
        for chunk in iter_row_chunks(path, member, chunk_bytes, 1 if spans_all_rows else height):
            nonzero = to_2d(chunk) != 0
            if spans_all_rows:                       # a unit spans every row: OR its zeros and non-zeros over chunks
                t, h = pat.unit_pre_pruned(nonzero), pat.unit_pre_pruned(~nonzero)
                touched = t if touched is None else touched | t
                has_nonzero = h if has_nonzero is None else has_nonzero | h
            else:                                    # units of different chunks are disjoint
                u, v = pat.conformity(nonzero)
                units, violations = units + u, violations + v
        if spans_all_rows and touched is not None:
            units, violations = int(touched.size), int((touched & has_nonzero).sum())
    return {"fits": True, "conforms": violations == 0, "units": units, "violations": violations, "reason": None}


def streamed_tensor_stats(path: str | os.PathLike, member: NpyMember, pattern: Any = None,
                          chunk_bytes: int = CHUNK_BYTES) -> TensorStats:
    """:class:`~sparsify.cli.report.stats_record.TensorStats` of one member, read in chunks of ``chunk_bytes``."""
    p = os.fspath(path)
    size = int(np.prod(member.shape, dtype=np.int64))
    nonzero = sum(int(np.count_nonzero(c)) for c in iter_row_chunks(p, member, chunk_bytes))
    is_weight = len(member.shape) >= 2
    conf = _chunked_conformity(p, member, pattern, chunk_bytes) if pattern is not None and is_weight else None
    zeros = size - nonzero
    return TensorStats(name=member.name, shape=member.shape, dtype=str(member.dtype), size=size, zeros=zeros,
                       sparsity=zeros / size if size else 0.0, is_weight=is_weight, pattern=conf)
