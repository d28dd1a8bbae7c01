"""Atomic outputs: a file is either the old one or the complete new one, never half written.

Everything the command writes goes through this module:

* :func:`atomic_file` / :func:`write_bytes` / :func:`write_text`: write into a
  temporary file beside the target, flush and ``fsync`` it, then
  ``os.replace`` it over the target. A failure (disk full, an interrupt)
  removes the temporary file and leaves the target as it was.
* :func:`atomic_path`: the same for tools that want a path to write to
  (matplotlib, ``torch.save``, TensorFlow savers): they write a temporary
  path with the same suffix, which is renamed into place when they are done.
* :func:`signals_deferred`: SIGINT/SIGTERM held back for a block that must not be cut in two
  (the commit of a run directory, :mod:`.run_directory`, which stages the outputs of one run and
  commits them together with a manifest).

Example:
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> write_text(os.path.join(d, "a.txt"), "hello")
    >>> open(os.path.join(d, "a.txt")).read(), sorted(os.listdir(d))
    ('hello', ['a.txt'])
"""
from __future__ import annotations

import contextlib
import errno
import inspect
import os
import secrets
import shutil
import signal
import threading
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from . import interrupts

__all__ = ["OutputError", "atomic_file", "atomic_path", "write_bytes", "write_text", "check_destination",
           "signals_deferred", "remove_path"]


class OutputError(OSError):
    """An output could not be written; the message names it and says what was left unchanged."""


def _tmp_name(target: Path, suffix: str | None = None) -> Path:
    suffix = target.suffix if suffix is None else suffix
    return target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}{suffix}")


def _fail(path: str | os.PathLike, e: BaseException, existed: bool) -> OutputError:
    what = e.strerror if isinstance(e, OSError) and e.strerror else " ".join(str(e).split()) or type(e).__name__
    keep = "the existing file is unchanged" if existed else "nothing was written"
    code = e.errno if isinstance(e, OSError) and e.errno else errno.EIO
    return OutputError(code, f"could not write {os.fspath(path)!r}: {what} ({keep})")


def remove_path(p: Path) -> None:
    """Remove a file, link or directory tree if it is there; an error leaves what could not be removed."""
    with contextlib.suppress(OSError):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


@contextlib.contextmanager
def _removed_on_failure(tmp: Path, target: Path, existed: bool) -> Iterator[None]:
    """If the block raises, remove ``tmp``; an ``OSError`` becomes an :class:`OutputError` naming ``target``."""
    try:
        yield
    except BaseException as e:
        remove_path(tmp)
        if isinstance(e, OSError) and not isinstance(e, OutputError):
            raise _fail(target, e, existed) from None
        raise


def check_destination(path: str | os.PathLike) -> None:
    """Check that a file can be written to ``path`` (its directory exists, it is not a directory), before any work.

    Raises:
        OutputError: naming the path and what is wrong.

    Example:
        >>> check_destination("/no/such/dir/x.json")
        Traceback (most recent call last):
        ...
        sparsify.cli.atomic.OutputError: [Errno 2] cannot write '/no/such/dir/x.json': directory '/no/such/dir' does not exist
    """
    _check_parent(Path(path))


def _check_parent(target: Path) -> None:
    parent = target.parent
    if not parent.is_dir():
        raise OutputError(errno.ENOENT, f"cannot write {os.fspath(target)!r}: directory {os.fspath(parent)!r} "
                                        "does not exist")
    if target.is_dir() and not target.is_symlink():
        raise OutputError(errno.EISDIR, f"cannot write {os.fspath(target)!r}: it is a directory")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` atomically.

    Raises:
        OutputError: the directory is missing, or writing failed (e.g. disk full);
            the temporary file is removed and ``path`` is unchanged.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> with atomic_file(p) as fh:
        ...     _ = fh.write(b"data")
        >>> open(p, "rb").read()
        b'data'
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    target = Path(path)
    _check_parent(target)
    existed = target.exists()
    tmp = _tmp_name(target, "")
    with interrupts.cleanup_on_abort(tmp):
        try:
            fh = open(tmp, mode, encoding=encoding if "b" not in mode else None)
        except OSError as e:
            raise _fail(target, e, existed) from None
        with _removed_on_failure(tmp, target, existed):
            with fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Atomically write ``data`` to ``path`` (see :func:`atomic_file`)."""
    with atomic_file(path, "wb") as fh:
        fh.write(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Atomically write UTF-8 ``text`` to ``path`` (see :func:`atomic_file`)."""
    with atomic_file(path, "w", encoding="utf-8") as fh:
        fh.write(text)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` for a tool to write (a file or a directory); renamed into place after.

    The temporary name keeps the target's suffix (matplotlib and Keras choose
    the format by it) unless ``suffix`` is given. If the block raises, what the
    tool wrote is removed and ``path`` is unchanged. An existing *directory*
    at ``path`` is never replaced (``OutputError``).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "plot.png")
        >>> with atomic_path(p) as tmp:
        ...     _ = open(tmp, "wb").write(b"png")
        >>> os.path.exists(p), tmp.suffix
        (True, '.png')
    """
    target = Path(path)
    _check_parent(target)
    existed = target.exists()
    tmp = _tmp_name(target, suffix)
    with interrupts.cleanup_on_abort(tmp), _removed_on_failure(tmp, target, existed):
        yield tmp
        if not tmp.exists():
            raise OutputError(errno.ENOENT, f"nothing was written to {os.fspath(target)!r}")
        if tmp.is_file():
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, target)


@contextlib.contextmanager
def signals_deferred(signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Hold SIGINT/SIGTERM back inside the block; a signal that came meanwhile is re-raised right after.

    A held signal whose handler is a Python function is handled by calling it once right here (Python's
    own SIGINT handler raises ``KeyboardInterrupt`` at the end of the block; the command's sets its flag,
    which :meth:`RunDirectory.commit` looks at right after). Other dispositions (the default action,
    ignore) get the signal again.

    Only the main thread can install signal handlers; elsewhere the block runs as is.

    Example:
        >>> import signal
        >>> with signals_deferred():
        ...     pass
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    saved = {}
    for s in signals:
        saved[s] = signal.getsignal(s)
        signal.signal(s, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        for s in dict.fromkeys(got):
            handler = saved[s]
            if callable(handler):
                handler(s, inspect.currentframe())
            else:
                signal.raise_signal(s)
