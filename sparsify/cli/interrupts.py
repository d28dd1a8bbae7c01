"""Ctrl-C that is never swallowed where Python drops exceptions.

Python raises ``KeyboardInterrupt`` in whatever Python code runs when SIGINT is handled. When that
code is a ``gc.callbacks`` function (JAX registers one, and TensorFlow 2.21 imports JAX), a weakref
callback or a ``__del__`` method, Python cannot raise it there: it reports "Exception ignored in ..."
with a traceback and drops it, so the interrupt is lost. Inside :func:`interrupts_not_swallowed`, such
a dropped ``KeyboardInterrupt`` is sent again to the main thread a moment later from another thread
(``signal.pthread_kill``, which also wakes a sleeping main thread), so it is raised in the code that
was running; any other unraisable exception goes to the hook that was there before.

Example:
    >>> import sys
    >>> with interrupts_not_swallowed():
    ...     sys.unraisablehook.__name__
    'send_swallowed_interrupts_again'
"""
from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
from typing import Any, Callable, Iterator

__all__ = ["interrupts_not_swallowed"]


def _send_again(signum: int) -> None:
    if hasattr(signal, "pthread_kill"):
        signal.pthread_kill(threading.main_thread().ident, signum)
    else:                           # pragma: no cover - Windows: raised at the next bytecode, not in a sleep
        _thread.interrupt_main(signum)


def _hook_sending_interrupts_again(previous: Callable[[Any], object]) -> Callable[[Any], None]:
    def send_swallowed_interrupts_again(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            previous(unraisable)
            return
        while True:         # from another thread: raised in here it would be dropped again
            try:
                threading.Timer(0.001, _send_again, (signal.SIGINT,)).start()
                return
            except KeyboardInterrupt:
                # on a loaded machine the signal can come back before this hook has returned (starting
                # the thread waits for it): caught here, it is sent once more
                continue
    return send_swallowed_interrupts_again


@contextlib.contextmanager
def interrupts_not_swallowed() -> Iterator[None]:
    """Inside the block, a ``KeyboardInterrupt`` that Python would drop as unraisable (in a gc callback, a
    weakref callback, ``__del__``) is raised again in the main thread's running code."""
    previous = sys.unraisablehook
    sys.unraisablehook = _hook_sending_interrupts_again(previous)
    try:
        yield
    finally:
        sys.unraisablehook = previous
