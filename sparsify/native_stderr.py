"""Silence what native code writes to file descriptor 2, for one block.

Framework imports (TensorFlow's absl start-up lines, CUDA probes) write to the
process's stderr from C++, below Python's ``sys.stderr``, so
``contextlib.redirect_stderr`` cannot hide them. The application and the
adapters use this around exactly those imports; Python exceptions still
propagate.

Example:
    >>> import os
    >>> with native_stderr_silenced():
    ...     _ = os.write(2, b"native noise nobody sees")
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

__all__ = ["native_stderr_silenced"]


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Send file descriptor 2 (what native code writes to) to /dev/null inside the block."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):      # no real fd 2 (e.g. some embedded interpreters)
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
