"""Work of a mask update spread over threads: layers side by side, a large layer in chunks.

:func:`map_layers` runs one function per layer: a layer holding at least
``1/threads`` of all the elements (an embedding, an LM head) runs alone with
every thread (its kernels split it in chunks), the others run side by side, one
thread each. :func:`layer_scores` computes a criterion's scores of one layer,
in row chunks on several threads when the criterion is row-separable. Neither
changes a result: each piece of work is fixed by the data, never by the
threads, and an error is raised for the first layer in order that fails.

Example:
    >>> import numpy as np
    >>> from sparsify.criteria import get_criterion
    >>> map_layers(lambda name: name.upper(), {"a": 10, "b": 20}, threads=2)
    {'a': 'A', 'b': 'B'}
    >>> layer_scores(get_criterion("magnitude"), None, {"weight": np.array([[-2.0, 1.0]])}).tolist()
    [[2.0, 1.0]]
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

import numpy as np

from .threads import MIN_PARALLEL, chunk_ranges, current_threads, parallel_map, use_threads

__all__ = ["map_layers", "layer_scores", "BufferPool"]


def map_layers(fn: Callable[[str], Any], sizes: Mapping[str, int], threads: int | None = None) -> dict[str, Any]:
    """``{name: fn(name)}`` for every layer of ``sizes`` (name -> elements), on ``threads`` threads
    (None: :func:`~sparsify.threads.current_threads`), keyed in ``sizes``' order.

    Raises the exception of the first layer in ``sizes``' order whose ``fn`` raised.
    """
    threads = current_threads() if threads is None else threads
    names = list(sizes)
    total = sum(sizes.values())
    outcome: dict[str, tuple[bool, Any]] = {}

    def attempt(name: str) -> tuple[bool, Any]:
        try:
            return True, fn(name)
        except Exception as e:  # noqa: BLE001 - re-raised below, in the layers' order
            return False, e

    if threads <= 1 or total < MIN_PARALLEL or len(names) == 1:
        big, small = names, []
    else:
        big = [n for n in names if sizes[n] * threads >= total]      # as large as a thread's share: alone
        small = [n for n in names if sizes[n] * threads < total]
    for name in big:
        with use_threads(threads):
            outcome[name] = attempt(name)
    if small:                                   # even after a failure: an earlier layer may fail too
        # the largest first: a big layer started last would leave the other threads idle at the end
        order = sorted(small, key=lambda n: -sizes[n])
        for name, result in zip(order, parallel_map(attempt, order, threads, inner_threads=1)):
            outcome[name] = result
    for name in names:
        if not outcome[name][0]:
            raise outcome[name][1]
    return {name: outcome[name][1] for name in names}


def layer_scores(criterion: Any, config: Any, inputs: Mapping[str, Any], out: np.ndarray | None = None) -> np.ndarray:
    """``criterion.scores(config=config, **inputs)`` as an array, in row chunks on several threads when the
    criterion is row-separable, the weight is a large C-contiguous array and the other inputs have no
    extent along its first axis (the same values either way). ``out``: an array of the weight's shape
    (e.g. from :class:`BufferPool`) the scores are written into where the criterion can
    (:meth:`~sparsify.criteria.Criterion.scores_into`); the result is then ``out``."""
    weight = inputs["weight"]
    threads = current_threads()
    parallel = (threads > 1 and criterion.row_separable and isinstance(weight, np.ndarray) and weight.ndim >= 1
                and weight.size >= MIN_PARALLEL and weight.flags.c_contiguous
                and all(_no_row_extent(v, weight.ndim) for k, v in inputs.items() if k != "weight"))
    if out is not None and out.shape == np.shape(weight):
        ranges = chunk_ranges(weight.shape[0], threads * 2) if parallel else [(0, len(weight))]
        a0, b0 = ranges[0]
        if criterion.scores_into(out[a0:b0], config=config, **{**inputs, "weight": weight[a0:b0]}) is not None:
            parallel_map(lambda r: criterion.scores_into(out[r[0]:r[1]], config=config,
                                                         **{**inputs, "weight": weight[r[0]:r[1]]}),
                         ranges[1:], threads)
            return out
    if parallel:
        ranges = chunk_ranges(weight.shape[0], threads * 2)
        if len(ranges) > 1:
            a0, b0 = ranges[0]
            first = np.asarray(criterion.scores(config=config, **{**inputs, "weight": weight[a0:b0]}))
            if first.shape == (b0 - a0, *weight.shape[1:]):
                out = np.empty(weight.shape, dtype=first.dtype)
                out[a0:b0] = first

                def fill(r: tuple[int, int]) -> None:
                    out[r[0]:r[1]] = criterion.scores(config=config, **{**inputs, "weight": weight[r[0]:r[1]]})

                parallel_map(fill, ranges[1:], threads)
                return out
    return criterion.scores(config=config, **inputs)


class BufferPool:
    """Arrays lent to the layers of one update and taken back: a layer's scores, freed once its mask is made,
    become the next layer's, instead of a fresh allocation the system must map and zero each time (at most
    one buffer per layer in flight; :func:`map_layers` starts with the largest layers).

    Example:
        >>> pool = BufferPool()
        >>> a = pool.take((2, 3), np.float32)
        >>> pool.give(a)
        >>> np.shares_memory(pool.take((3, 2), np.float32), a)
        True
    """

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A C-contiguous array of ``shape`` and ``dtype`` (its contents undefined)."""
        dtype, n = np.dtype(dtype), int(np.prod(shape, dtype=np.int64))
        with self._lock:
            for i, buf in enumerate(self._free):
                if buf.dtype == dtype and buf.size >= n:
                    return self._free.pop(i)[:n].reshape(shape)
        return np.empty(n, dtype=dtype).reshape(shape)

    def give(self, array: np.ndarray) -> None:
        """Take back an array of :meth:`take` (nothing else may hold it any more)."""
        base = array
        while base.base is not None:
            base = base.base
        with self._lock:
            self._free.append(base.reshape(-1))


def _no_row_extent(value: Any, ndim: int) -> bool:
    """True when ``value`` broadcasts against any row slice of a weight of rank ``ndim`` unchanged."""
    shape = np.shape(value)
    return len(shape) < ndim or (len(shape) == ndim and shape[0] == 1)
