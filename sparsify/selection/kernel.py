"""The pieces every lowest-k cut is built of, written once: the k-th value, the chunk policy, the bracket,
the classification of a chunk against it, the split of the work over threads and of the ties over pieces.

A cut (in memory :class:`~sparsify.selection.lowest_k_cut.LowestKCut`, streamed
:class:`~sparsify.selection.streamed_cut.StreamedCut`) reads its scores in chunks of :data:`CHUNK` elements
(:data:`SCORED_CHUNK` where each chunk's scores are computed first), brackets the k-th value between two
order statistics of a sample (:func:`sample_bracket`, one margin: :data:`SIGMAS`), classifies every
element against the bracket (:func:`classify_chunk`: below pruned, above kept, in between a candidate)
and takes the exact value among the candidates (:func:`kth_smallest`, the one partition); the ties at the
value go to the earlier pieces first (:func:`split_ties`). The sharded cut
(:func:`~sparsify.distributed.sharded_cut.find_cuts`) brackets, takes the k-th value, reads in chunks and
splits ties with the same functions, its counts exchanged between ranks. Where a sample falls and how the
work is split change only how fast the cut is found, never the cut.

Example:
    >>> import numpy as np
    >>> float(kth_smallest(np.array([3.0, 1.0, 2.0]), 1))
    2.0
    >>> split_ties([2, 3, 1], 4)
    [2, 2, 0]
    >>> list(chunk_bounds(0, 10, 4))
    [(0, 4), (4, 8), (8, 10)]
"""
from __future__ import annotations

import math
from typing import Any, Iterator, Sequence

import numpy as np

from ..threads import MIN_PARALLEL, chunk_ranges, current_threads

__all__ = ["CHUNK", "SCORED_CHUNK", "SIGMAS", "kth_smallest", "chunk_bounds", "bracket_ranks", "sample_bracket",
           "classify_chunk", "split_tasks", "split_ties"]

#: elements classified per step of an in-memory array (a few chunk-sized arrays stay in L2)
CHUNK = 1 << 16
#: elements scored and classified per step where the scores are computed on the fly: large enough that the
#: Python between two NumPy calls (which holds the GIL) is a small share of a thread's time, small enough that
#: a chunk's arrays stay in the cache
SCORED_CHUNK = CHUNK << 2
#: the bracket's half-width in standard deviations of the sample's quantile: misses one update in ~15,000 on
#: exchangeable data (then an exact pass, same answer); 6 missed never but held 1.5x the candidates, whose
#: extraction dominates small layers
SIGMAS = 4.0


def kth_smallest(values: np.ndarray, i: int) -> Any:
    """The ``i``-th smallest (0-based) of the flat ``values``: one partition, the only one of the selection."""
    return np.partition(values, i)[i]


def chunk_bounds(start: int, stop: int, step: int = CHUNK) -> Iterator[tuple[int, int]]:
    """``(a, b)`` ranges of at most ``step`` elements covering ``[start, stop)``, in order."""
    for a in range(start, stop, step):
        yield a, min(stop, a + step)


def bracket_ranks(q: float, m: int) -> tuple[int, int, bool, bool]:
    """``(lo, hi, lo_open, hi_open)``: the sample ranks (0-based, of ``m`` samples) around the quantile ``q``,
    :data:`SIGMAS` standard deviations of the sample's quantile either side; ``lo_open`` (``hi_open``) when
    the bracket reaches below the smallest (above the largest) value.

    Example:
        >>> bracket_ranks(0.5, 10000)
        (4798, 5202, False, False)
    """
    margin = SIGMAS * math.sqrt(max(q * (1 - q), 1.0 / m) / m) + 2.0 / m
    lo = min(m - 1, max(0, int(math.floor((q - margin) * m))))
    hi = min(m - 1, max(0, int(math.ceil((q + margin) * m))))
    return lo, hi, not q - margin > 0, not q + margin < 1


def sample_bracket(sample: np.ndarray, q: float, open_ends: bool = True) -> tuple[Any, Any]:
    """``(lo, hi)``: the values of ``sample`` (no NaN) at :func:`bracket_ranks` around the quantile ``q``; with
    ``open_ends`` an end beyond the sample is None (unbounded).

    Example:
        >>> sample_bracket(np.arange(100.0), 0.5)
        (np.float64(28.0), np.float64(72.0))
    """
    lo_i, hi_i, lo_open, hi_open = bracket_ranks(q, sample.size)
    part = np.partition(sample, (lo_i, hi_i))
    lo = None if open_ends and lo_open else part[lo_i]   # scalars of the sample's own dtype
    hi = None if open_ends and hi_open else part[hi_i]
    return lo, hi


def classify_chunk(x: np.ndarray, lo: Any, hi: Any, keep: np.ndarray, tmp: np.ndarray,
                   eligible: np.ndarray | None = None) -> np.ndarray:
    """Classify the chunk ``x`` against ``(lo, hi)`` (None: unbounded): ``keep`` becomes False below ``lo``
    (and where ``eligible`` is False), True elsewhere; returns the candidates (kept and not above ``hi``, NaN
    included: it compares False), ``keep`` itself or ``tmp`` (a bool buffer as long as ``x``).

    Example:
        >>> keep, tmp = np.empty(4, bool), np.empty(4, bool)
        >>> cand = classify_chunk(np.array([1.0, 5.0, 3.0, np.nan]), 2.0, 4.0, keep, tmp)
        >>> keep.tolist(), cand.tolist()
        ([False, True, True, True], [False, False, True, True])
    """
    if lo is None:
        keep[:] = True
    elif eligible is None:
        np.less(x, lo, out=keep)                       # below lo: pruned for sure
        np.logical_not(keep, out=keep)                 # NaN compares False, so it stays a candidate
    else:
        np.less(x, lo, out=tmp)
        np.greater(eligible, tmp, out=keep)            # eligible and not below
    if hi is None:
        return keep
    np.greater(x, hi, out=tmp)                         # above hi: kept for sure
    return np.greater(keep, tmp, out=tmp)              # kept and not above: lo <= x <= hi, or NaN


def split_tasks(sizes: Sequence[int], aligns: Sequence[int]) -> tuple[list[tuple[int, int, int]], int]:
    """``(tasks, threads)``: ``(piece, start, stop)`` ranges of whole multiples of each piece's align,
    about two per thread of :func:`~sparsify.threads.current_threads` (in proportion to the pieces' sizes),
    and the threads to run them on (1 below :data:`~sparsify.threads.MIN_PARALLEL` elements in all).

    Example:
        >>> split_tasks([10, 0], [4, 1])[0]
        [(0, 0, 10), (1, 0, 0)]
    """
    threads = current_threads()
    total = sum(sizes)
    tasks = []
    for j, (n, align) in enumerate(zip(sizes, aligns)):
        pieces = 1 if threads <= 1 or total < MIN_PARALLEL else max(1, round(threads * 2 * n / total))
        tasks += [(j, a, b) for a, b in chunk_ranges(n, pieces, align)]
    return tasks, threads if total >= MIN_PARALLEL else 1


def split_ties(counts: Sequence[int], need: int) -> list[int]:
    """How many of each piece's ``counts`` ties at the cut value are pruned when ``need`` of them are, the
    earlier pieces first (the tie order: earlier layer, chunk or rank first)."""
    out = []
    for c in counts:
        r = min(int(c), need)
        out.append(r)
        need -= r
    return out
