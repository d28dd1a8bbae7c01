"""Ctrl-C that is never lost in a garbage-collector callback.

Python raises ``KeyboardInterrupt`` in whatever Python code runs when SIGINT is handled. When that
code is a ``gc.callbacks`` function (JAX registers one, and TensorFlow 2.21 imports JAX), the
collector reports the exception as "Exception ignored in ..." with a traceback and drops it: the
interrupt is lost and the user sees a traceback. :func:`interrupts_outside_gc_callbacks` installs a
SIGINT handler that, inside such a callback, has the signal sent again a moment later from another
thread (``_thread.interrupt_main``), so it is raised in the code the collection interrupted.

Example:
    >>> import signal
    >>> with interrupts_outside_gc_callbacks():
    ...     signal.getsignal(signal.SIGINT).__name__
    'interrupt_outside_gc_callbacks'
"""
from __future__ import annotations

import _thread
import contextlib
import gc
import signal
import threading
from types import FrameType
from typing import Iterator

__all__ = ["interrupts_outside_gc_callbacks", "interrupt_outside_gc_callbacks"]


def _in_gc_callback(frame: FrameType | None) -> bool:
    codes = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def interrupt_outside_gc_callbacks(signum: int, frame: FrameType | None) -> None:
    """SIGINT handler: ``KeyboardInterrupt`` now, or once the running gc callback has returned."""
    if _in_gc_callback(frame):      # again from another thread: from this one it would come back at once
        threading.Timer(0.001, _thread.interrupt_main, (signum,)).start()
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_outside_gc_callbacks() -> Iterator[None]:
    """Use :func:`interrupt_outside_gc_callbacks` for SIGINT inside the block (main thread only; a handler
    someone else installed is kept)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, interrupt_outside_gc_callbacks)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
