"""The limits of `sparsify report`: the cap on declared bytes, and what counts as a readable path.

What a file *declares* (zip entry sizes, array headers, checkpoint shapes) is
checked against the cap before anything is read; only regular files and
directories are opened (a named pipe would block).

Example:
    >>> check_declared("w.npz", 2 << 30, DEFAULT_MAX_BYTES)
    Traceback (most recent call last):
    ...
    ValueError: 'w.npz' declares 2.0 GiB of tensors, more than the cap of 1.0 GiB; pass --max-bytes 2147483648 (max_bytes=) to read it anyway
"""
from __future__ import annotations

import os
import stat
import zipfile
from typing import Any

__all__ = ["DEFAULT_MAX_BYTES", "format_bytes", "check_regular", "check_declared", "zip_declared"]

#: Default cap on the bytes of tensors a report loads (``--max-bytes`` overrides it).
DEFAULT_MAX_BYTES = 1 << 30


def format_bytes(n: int) -> str:
    """Human-readable size.

    Example:
        >>> format_bytes(512), format_bytes(3 * 2**30)
        ('512 B', '3.0 GiB')
    """
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def check_regular(p: str, what: str = "") -> os.stat_result:
    """``os.stat(p)`` if ``p`` is a regular file or a directory; else a ``ValueError`` (a pipe would block)."""
    try:
        st = os.stat(p)
    except OSError as e:
        raise ValueError(f"{p!r} cannot be read: {e.strerror}") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        kind = "a named pipe" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) \
            else "a device"
        raise ValueError(f"{p!r}{what} is {kind}, not a regular file; report reads files and directories only")
    return st


def check_declared(p: str, declared: int, max_bytes: int | None, what: str = "tensors") -> None:
    """A ``ValueError`` if ``p`` declares more than ``max_bytes`` of ``what`` (None: no cap), naming how to override."""
    if max_bytes is not None and declared > max_bytes:
        raise ValueError(f"{p!r} declares {format_bytes(declared)} of {what}, more than the cap of "
                         f"{format_bytes(max_bytes)}; pass --max-bytes {declared} (max_bytes=) to read it anyway")


def zip_declared(p: str, names_filter: Any = None) -> int:
    """Sum of the uncompressed sizes a zip archive declares (optionally of some entries)."""
    try:
        with zipfile.ZipFile(p) as zf:
            return sum(i.file_size for i in zf.infolist() if names_filter is None or names_filter(i.filename))
    except (zipfile.BadZipFile, OSError) as e:
        raise ValueError(f"{p!r} is a corrupt zip archive: {e}") from None
