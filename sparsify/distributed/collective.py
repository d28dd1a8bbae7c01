"""The two collective operations sharded selection needs, and framework-neutral implementations.

Sharded mask selection (:mod:`sparsify.distributed.sharded_selection`) talks
to the other ranks only through a :class:`Collective`: ``allgather`` of small
1-D arrays (lengths may differ between ranks) and ``allreduce_sum``. An
adapter supplies one over its framework's process group (torch:
``sparsify_torch.distributed.collective.TorchCollective``); this module has

* :class:`SingleProcess`: a world of one rank (no communication);
* :class:`ThreadGroup`: ``world_size`` ranks as threads of one process, for
  tests and for checking a sharding without starting processes;
* :class:`CountingCollective`: wraps another and counts calls and bytes.

Example:
    >>> import numpy as np
    >>> results = ThreadGroup(3).run(lambda c: c.allgather(np.arange(c.rank + 1)))
    >>> [len(r) for r in results[0]], results[2][2].tolist()
    ([1, 2, 3], [0, 1, 2])
    >>> ThreadGroup(2).run(lambda c: int(c.allreduce_sum(np.array([c.rank + 1]))[0]))
    [3, 3]
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

__all__ = ["Collective", "SingleProcess", "ThreadGroup", "CountingCollective"]


@runtime_checkable
class Collective(Protocol):
    """What sharded selection needs from a process group. Every rank calls the same
    operations in the same order (like ``torch.distributed``).

    Attributes:
        rank: this rank's index in ``[0, world_size)``.
        world_size: number of ranks.
    """

    rank: int
    world_size: int

    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        """Every rank's 1-D ``array``, in rank order. All ranks pass the same dtype;
        lengths may differ."""
        ...

    def allreduce_sum(self, array: np.ndarray) -> np.ndarray:
        """Element-wise sum over ranks of ``array`` (same shape and dtype on every rank)."""
        ...


class SingleProcess:
    """A world of one rank: ``allgather`` returns ``[array]``, ``allreduce_sum`` the array.

    Example:
        >>> SingleProcess().allgather(np.array([1, 2]))[0].tolist()
        [1, 2]
    """

    rank = 0
    world_size = 1

    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        return [np.array(array, copy=True).reshape(-1)]

    def allreduce_sum(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True)


class _ThreadRank:
    def __init__(self, group: "ThreadGroup", rank: int) -> None:
        self._group = group
        self.rank = rank
        self.world_size = group.world_size

    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        parts = self._group.exchange(self.rank, np.array(array, copy=True).reshape(-1))
        return [p.copy() for p in parts]

    def allreduce_sum(self, array: np.ndarray) -> np.ndarray:
        a = np.asarray(array)
        parts = self._group.exchange(self.rank, a.copy())
        return np.sum(np.stack(parts), axis=0, dtype=a.dtype)


class ThreadGroup:
    """``world_size`` ranks of one process, one thread each.

    :meth:`run` calls ``fn(collective)`` on every rank in its own thread and
    returns the results in rank order. If a rank raises, the others are
    released from exchanges that cannot complete (``threading.BrokenBarrierError``)
    and the first error (by rank) is raised again.

    Args:
        world_size: number of ranks (>= 1).
        timeout: seconds a rank waits for the others at one collective.

    Example:
        >>> ThreadGroup(2).run(lambda c: c.rank)
        [0, 1]
    """

    def __init__(self, world_size: int, timeout: float = 120.0) -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        self.world_size = world_size
        self.timeout = float(timeout)
        self._cond = threading.Condition()
        self._slots: list[Any] = [None] * world_size
        self._arrived = 0
        self._generation = 0
        self._last: list[Any] = []
        self._broken = False

    def exchange(self, rank: int, value: Any) -> list[Any]:
        """Put ``value`` in this rank's slot and return every rank's value (all ranks call it).

        Raises ``threading.BrokenBarrierError`` if a rank failed before this exchange completed.
        """
        with self._cond:
            if self._broken:
                raise threading.BrokenBarrierError
            generation = self._generation
            self._slots[rank] = value
            self._arrived += 1
            if self._arrived == self.world_size:
                self._last = list(self._slots)
                self._arrived = 0
                self._generation += 1
                self._cond.notify_all()
                return self._last
            self._cond.wait_for(lambda: self._generation != generation or self._broken, self.timeout)
            if self._generation == generation:       # broken, or timed out
                self._broken = True
                self._cond.notify_all()
                raise threading.BrokenBarrierError
            return self._last                        # not replaced before this rank arrives again

    def abort(self) -> None:
        """Release every rank waiting in an exchange that cannot complete (a rank failed)."""
        with self._cond:
            self._broken = True
            self._cond.notify_all()

    def reset(self) -> None:
        """Make the group usable again after :meth:`abort`."""
        with self._cond:
            self._broken = False
            self._arrived = 0

    def collectives(self) -> list[Collective]:
        """One collective per rank; each must be used from its own thread."""
        return [_ThreadRank(self, r) for r in range(self.world_size)]

    def run(self, fn: Callable[[Collective], Any]) -> list[Any]:
        """``fn(collective)`` on every rank, each in a thread; results in rank order."""
        results: list[Any] = [None] * self.world_size
        errors: list[BaseException | None] = [None] * self.world_size

        def target(c: Collective) -> None:
            try:
                results[c.rank] = fn(c)
            except BaseException as e:        # noqa: BLE001 - re-raised below
                errors[c.rank] = e
                self.abort()

        threads = [threading.Thread(target=target, args=(c,), daemon=True) for c in self.collectives()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        real = [e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)]
        if real or any(e is not None for e in errors):
            self.reset()
            raise (real or [e for e in errors if e is not None])[0]
        return results


class CountingCollective:
    """Wraps a :class:`Collective` and counts its calls and the bytes each moves for this rank.

    ``bytes_sent`` counts this rank's payloads; ``bytes_received`` the payloads of
    the other ranks that an ``allgather`` hands back (an ``allreduce_sum`` counts its
    array once each way, as a ring all-reduce moves about that much per rank).

    Example:
        >>> c = CountingCollective(SingleProcess())
        >>> _ = c.allgather(np.zeros(4, np.int64))
        >>> c.calls, c.bytes_sent, c.bytes_received
        (1, 32, 0)
    """

    def __init__(self, inner: Collective) -> None:
        self.inner = inner
        self.rank = inner.rank
        self.world_size = inner.world_size
        self.calls = 0
        self.bytes_sent = 0
        self.bytes_received = 0

    @property
    def bytes_moved(self) -> int:
        """``bytes_sent + bytes_received``."""
        return self.bytes_sent + self.bytes_received

    def reset(self) -> None:
        """Set the counters back to zero."""
        self.calls = self.bytes_sent = self.bytes_received = 0

    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        out = self.inner.allgather(array)
        self.calls += 1
        self.bytes_sent += int(np.asarray(array).nbytes)
        self.bytes_received += sum(int(a.nbytes) for i, a in enumerate(out) if i != self.rank)
        return out

    def allreduce_sum(self, array: np.ndarray) -> np.ndarray:
        out = self.inner.allreduce_sum(array)
        self.calls += 1
        n = int(np.asarray(array).nbytes) if self.world_size > 1 else 0
        self.bytes_sent += n
        self.bytes_received += n
        return out

