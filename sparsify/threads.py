"""How many threads a mask update uses, and the helpers that share work between them.

A mask update runs layers in parallel and splits a large layer into chunks
(NumPy releases the GIL in the comparison, partition and ``abs`` kernels the
selection uses). The masks never depend on the thread count: every piece of
work is a fixed range of elements, and the results are combined in element
order (``docs/design.md``, canonical rules 5 and 6).

The count comes from, in order: the config key ``num_threads``
(:func:`use_threads` around the update), the environment variable
``SPARSIFY_NUM_THREADS``, and the cores this process may run on
(``os.sched_getaffinity``).

Example:
    >>> with use_threads(2):
    ...     current_threads()
    2
    >>> parallel_map(lambda r: sum(r), [range(3), range(4)], threads=2)
    [3, 6]
    >>> chunk_ranges(10, 3, 4)
    [(0, 4), (4, 8), (8, 10)]
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator

__all__ = ["ENV_VAR", "check_threads", "default_threads", "current_threads", "use_threads", "parallel_map",
           "chunk_ranges", "MIN_PARALLEL"]

#: The environment variable that sets the thread count when the config does not.
ENV_VAR = "SPARSIFY_NUM_THREADS"

#: Fewest elements worth a thread of their own (below, thread start-up costs more than it saves).
MIN_PARALLEL = 1 << 20

_CURRENT: contextvars.ContextVar[int | None] = contextvars.ContextVar("sparsify_num_threads", default=None)

_POOL: ThreadPoolExecutor | None = None            # the process's one pool (see _pool)
_POOL_SIZE = 0
_OUTGROWN: list[ThreadPoolExecutor] = []           # pools a larger one replaced: idle, kept (a caller may hold one)
_POOL_LOCK = threading.Lock()


def check_threads(value: Any, what: str = "num_threads") -> int:
    """``value`` as a thread count (an integer >= 1); ``TypeError``/``ValueError`` naming ``what`` otherwise.

    Example:
        >>> check_threads(4)
        4
        >>> check_threads(0)
        Traceback (most recent call last):
        ...
        ValueError: num_threads must be an integer >= 1 (or None: the cores available), got 0
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer >= 1 (or None: the cores available), got {value!r} "
                        f"({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{what} must be an integer >= 1 (or None: the cores available), got {value!r}")
    return int(value)


def default_threads() -> int:
    """``SPARSIFY_NUM_THREADS`` if set, else the cores this process may run on.

    Raises:
        ValueError: the variable is set to something other than an integer >= 1.
    """
    raw = os.environ.get(ENV_VAR, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"environment variable {ENV_VAR} must be an integer >= 1 (or unset: the cores "
                             f"available), got {raw!r}") from None
        if value < 1:
            raise ValueError(f"environment variable {ENV_VAR} must be an integer >= 1 (or unset: the cores "
                             f"available), got {raw!r}")
        return value
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):                  # not Linux
        return max(1, os.cpu_count() or 1)


def current_threads() -> int:
    """The thread count of the update in progress (:func:`use_threads`), else :func:`default_threads`."""
    value = _CURRENT.get()
    return default_threads() if value is None else value


@contextlib.contextmanager
def use_threads(threads: int | None) -> Iterator[int]:
    """Run the enclosed selections with ``threads`` threads (None: :func:`default_threads`)."""
    n = default_threads() if threads is None else check_threads(threads)
    token = _CURRENT.set(n)
    try:
        yield n
    finally:
        _CURRENT.reset(token)


def parallel_map(fn: Callable[[Any], Any], items: Iterable[Any], threads: int | None = None,
                 inner_threads: int = 1) -> list[Any]:
    """``[fn(x) for x in items]`` on up to ``threads`` threads (None: :func:`current_threads`), in order.

    Each call runs with ``inner_threads`` as its :func:`current_threads`. An exception
    is raised for the first failing item in ``items``' order, whatever the threads' timing.
    The threads are the calling one and ``threads - 1`` of the process's one pool (made once, grown when a
    call asks for more): the caller takes items too, so a call made inside another never waits on a busy pool.
    """
    items = list(items)
    threads = current_threads() if threads is None else threads
    workers = min(threads, len(items))

    def run(x: Any) -> Any:
        with use_threads(inner_threads):
            return fn(x)

    if workers <= 1:
        return [run(x) for x in items]
    results: list[Any] = [None] * len(items)
    failed: list[BaseException | None] = [None] * len(items)
    lock = threading.Lock()
    todo = iter(range(len(items)))

    def drain() -> None:                              # take the next item until none is left
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                results[i] = run(items[i])
            except BaseException as e:  # noqa: BLE001 - raised below, in the items' order
                failed[i] = e

    helpers = [_pool(workers - 1).submit(drain) for _ in range(workers - 1)]
    drain()
    for h in helpers:                                 # a helper still queued (the pool busy) is not waited for
        if not h.cancel():
            h.result()
    for e in failed:                                  # in order: the first failure in items' order raises
        if e is not None:
            raise e
    return results


def _pool(size: int) -> ThreadPoolExecutor:
    """The process's one thread pool, with at least ``size`` threads (started as work arrives)."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < size:
            if _POOL is not None:
                _OUTGROWN.append(_POOL)
            _POOL, _POOL_SIZE = ThreadPoolExecutor(max_workers=size, thread_name_prefix="sparsify"), size
        return _POOL


def chunk_ranges(n: int, pieces: int, align: int = 1) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges splitting ``range(n)`` into at most ``pieces`` nearly equal parts,
    each boundary a multiple of ``align``."""
    if n <= 0:
        return [(0, 0)]
    align = max(align, 1)
    pieces = max(1, min(pieces, -(-n // align)))
    step = -(-(-(-n // pieces)) // align) * align
    return [(a, min(n, a + step)) for a in range(0, n, step)]
