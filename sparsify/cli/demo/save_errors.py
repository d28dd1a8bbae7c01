"""The operating-system error behind a framework saver's failure, with the file it hit.

Savers hide a full disk behind their own words: torch's zip writer says
"[enforce fail at inline_container.cc:672] unexpected pos" (the ``OSError``
its Python file raised is lost), TensorFlow says "Graph execution error: ...
SaveV2" with the file and "No space left on device" deep inside. These
helpers get the OS error back:

* :class:`WatchedFile` wraps a Python file handed to a saver and keeps the
  first ``OSError`` one of its writes raised;
* :func:`os_error_in` finds an OS error (its ``strerror`` text, the file
  before it) in a framework's message.

Example:
    >>> import errno
    >>> e = os_error_in("Graph execution error: ... Node: 'save/SaveV2'\\n/d/model.ckpt.data-00000-of-00001"
    ...                 ".tempstate123; No space left on device\\n [[{{node save/SaveV2}}]]")
    >>> e.errno == errno.ENOSPC, e.strerror, e.filename
    (True, 'No space left on device', '/d/model.ckpt.data-00000-of-00001')
"""
from __future__ import annotations

import errno
import os
import re
from typing import IO, Any

__all__ = ["WatchedFile", "os_error_in"]

#: Errors a write can meet, most specific first.
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)


class WatchedFile:
    """A binary file whose first failed write is kept in :attr:`error` (and still raised).

    Example:
        >>> import io
        >>> class Full(io.BytesIO):
        ...     def write(self, b):
        ...         raise OSError(errno.ENOSPC, "No space left on device")
        >>> f = WatchedFile(Full(), "model.pt")
        >>> try:
        ...     f.write(b"x")
        ... except OSError:
        ...     pass
        >>> f.error.strerror, f.error.filename
        ('No space left on device', 'model.pt')
    """

    def __init__(self, fh: IO[bytes], path: str | os.PathLike) -> None:
        self._fh = fh
        self.path = os.fspath(path)
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        """Write ``data``; an ``OSError`` is kept (the first one) and raised."""
        try:
            return self._fh.write(data)
        except OSError as e:
            if self.error is None:
                self.error = OSError(e.errno, e.strerror or str(e), e.filename or self.path)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def os_error_in(message: str) -> OSError | None:
    """The OS error a framework's ``message`` reports (``strerror`` and, where it says, the file), else None.

    A TensorFlow temporary name (``<file>.tempstate<digits>``) is reported as ``<file>``.

    Example:
        >>> os_error_in("could not open x: File too large").strerror
        'File too large'
        >>> os_error_in("unexpected pos 34944 vs 34896") is None
        True
    """
    for code in _WRITE_ERRNOS:
        text = os.strerror(code)
        at = message.find(text)
        if at < 0:
            continue
        before = message[:at].rstrip(" ;:,")
        m = re.search(r"(\S+)$", before)
        filename = m.group(1).strip("'\"") if m and ("/" in m.group(1) or os.sep in m.group(1)) else None
        if filename is not None:
            filename = re.sub(r"\.tempstate\d+$", "", filename)
        return OSError(code, text, filename)
    return None
