"""Ctrl-C only at safe points: the command's SIGINT handler sets a flag that the run checks.

Python runs a SIGINT handler in whatever Python code the main thread runs next. Raising
``KeyboardInterrupt`` there (the default) can land inside a framework's C++ code calling back into
Python (TensorFlow's op creation, a pybind11 callback), which turns it into another error ("pybind11::
error_already_set: MISMATCH ... REPLACED BY KeyboardInterrupt"), or inside a gc callback or ``__del__``,
where Python drops it. So inside :func:`handled` (what ``sparsify`` runs every subcommand in):

* the **first** Ctrl-C only sets a flag (:func:`requested`). The run looks at it at safe points: each
  training step or Keras batch end, between the outputs it writes, before and after the commit of a run
  directory; :func:`check` there raises :class:`Interrupted` (a ``KeyboardInterrupt``) in our own Python
  code, so the run stops cleanly and the command exits with status 130 and "sparsify: interrupted";
* the **second** Ctrl-C aborts at once: the handler removes the temporary outputs registered with
  :func:`cleanup_on_abort` (a staging directory, a temporary file), writes "sparsify: interrupted" and
  ends the process with status 130 (``os._exit``: no exception crosses framework code). What it removes
  was never renamed into place, so nothing half-written is left. While a run directory is committed
  (:func:`sparsify.cli.atomic.signals_deferred`) both wait for the end of the commit.

Outside :func:`handled` (sparsify used as a library) nothing changes: Ctrl-C raises ``KeyboardInterrupt``
as usual and :func:`check` does nothing.

Example:
    >>> import os, signal
    >>> with handled():
    ...     os.kill(os.getpid(), signal.SIGINT)     # the first Ctrl-C: a flag, no exception
    ...     requested()
    True
    >>> requested()                                 # reset when the block ends
    False
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["Interrupted", "EXIT_STATUS", "MESSAGE", "handled", "requested", "request", "check",
           "cleanup_on_abort"]

#: Exit status of an interrupted command (128 + SIGINT, as a shell reports it).
EXIT_STATUS = 130
#: What an interrupted command writes on stderr.
MESSAGE = "sparsify: interrupted"


class Interrupted(KeyboardInterrupt):
    """Raised by :func:`check` at a safe point after a Ctrl-C."""


class _State:
    installed = False       # inside handled()
    count = 0               # SIGINTs received
    cleanups: dict[int, Callable[[], None]] = {}
    next_id = 0


_S = _State()


def _abort() -> None:
    """The second Ctrl-C: remove the registered temporary outputs, say so, end the process (status 130)."""
    for fn in list(_S.cleanups.values())[::-1]:
        try:
            fn()
        except BaseException:  # noqa: BLE001 - best effort: the process ends right after
            pass
    try:
        sys.stderr.flush()
        os.write(2, (MESSAGE + "\n").encode())
    finally:
        os._exit(EXIT_STATUS)


def _handler(signum: int, frame: Any) -> None:
    """Never raises: counts the signal; the second one aborts."""
    _S.count += 1
    if _S.count >= 2:
        _abort()


def request() -> None:
    """Act as if Ctrl-C was pressed once (what the handler does on the first SIGINT)."""
    _S.count = max(_S.count, 1)


def requested() -> bool:
    """Has Ctrl-C been pressed inside :func:`handled`?"""
    return _S.count > 0


def check() -> None:
    """A safe point: raise :class:`Interrupted` if Ctrl-C was pressed, else nothing.

    Example:
        >>> check()                     # no Ctrl-C: nothing happens
    """
    if _S.count:
        raise Interrupted()


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Install the flag-setting SIGINT handler for the block (main thread only; elsewhere the block runs as is).

    The flag and the registered clean-ups are reset when the block starts and ends; the previous handler
    comes back.
    """
    if threading.current_thread() is not threading.main_thread() or _S.installed:
        yield
        return
    _S.count, _S.cleanups = 0, {}
    previous = signal.signal(signal.SIGINT, _handler)
    _S.installed = True
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _S.installed = False
        _S.count, _S.cleanups = 0, {}


def _remove(path: Path, only_if_empty: bool) -> None:
    if only_if_empty:
        with contextlib.suppress(OSError):
            path.rmdir()
    elif path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def cleanup_on_abort(path: str | os.PathLike, only_if_empty: bool = False) -> Iterator[None]:
    """Inside the block, a second Ctrl-C removes ``path`` (a temporary file or directory) before it aborts.

    Register before creating ``path``: the handler runs in the main thread, so it sees either no file
    or the file. ``only_if_empty``: remove a directory only if it is empty (an output directory the run made).

    Example:
        >>> with cleanup_on_abort("/tmp/never-made"):
        ...     pass
    """
    p = Path(path)
    key = _S.next_id
    _S.next_id += 1
    _S.cleanups[key] = lambda: _remove(p, only_if_empty)
    try:
        yield
    finally:
        _S.cleanups.pop(key, None)
