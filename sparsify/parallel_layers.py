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

from typing import Any, Callable, Mapping

import numpy as np

from .threads import MIN_PARALLEL, chunk_ranges, current_threads, parallel_map, use_threads

__all__ = ["map_layers", "layer_scores"]


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


def layer_scores(criterion: Any, config: Any, inputs: Mapping[str, Any]) -> np.ndarray:
    """``criterion.scores(config=config, **inputs)`` as an array, in row chunks on several threads when the
    criterion is row-separable, the weight is a large C-contiguous array and the other inputs have no
    extent along its first axis (the same values either way)."""
    weight = inputs["weight"]
    threads = current_threads()
    if (threads > 1 and criterion.row_separable and isinstance(weight, np.ndarray) and weight.ndim >= 1
            and weight.size >= MIN_PARALLEL and weight.flags.c_contiguous
            and all(_no_row_extent(v, weight.ndim) for k, v in inputs.items() if k != "weight")):
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


def _no_row_extent(value: Any, ndim: int) -> bool:
    """True when ``value`` broadcasts against any row slice of a weight of rank ``ndim`` unchanged."""
    shape = np.shape(value)
    return len(shape) < ndim or (len(shape) == ndim and shape[0] == 1)
