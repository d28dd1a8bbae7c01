"""The ``k`` lowest scores over several layers whose scores are computed row chunk by row chunk: :class:`StreamedCut`.

:class:`~sparsify.selection.lowest_k_cut.LowestKCut` holds every layer's scores. A
:class:`StreamedCut` (the same :class:`~sparsify.selection.cut.Cut`) holds none: each part is a function giving the flat
scores of a range of rows (a row-separable criterion), called again whenever
the cut reads them. It keeps only the keep masks (bool), the bracket's
candidates and, when the bracket misses, a histogram: the exact k-th value is
found by a radix selection over the scores' order-preserving bit patterns (16
bits per pass), and its ties are counted per chunk, then the first ones in
tie order are marked. The answer is :class:`LowestKCut`'s, element for
element: ties to the earlier part, then the lower index in tie order.

Example:
    >>> import numpy as np
    >>> a, b = np.array([[2.0, 0.5], [1.0, 1.0]]), np.array([[1.0, 3.0]])
    >>> cut = StreamedCut([lambda r, out: a[r].ravel(), lambda r, out: b[r].ravel()], [a.shape, b.shape],
    ...                   ["a", "b"], np.dtype(float))
    >>> cut.counts(3)
    [3, 0]
    >>> [k.astype(int).tolist() for k in cut.keeps()]
    [[[1, 0], [0, 0]], [[1, 1]]]
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..threads import current_threads, parallel_map
from . import kernel
from .cut import Cut, sample_offsets
from .kernel import classify_chunk, split_tasks, split_ties
from .score_checks import check_finite, nan_error
from .tie_order import first_in_tie_order, tie_rank

__all__ = ["StreamedCut", "float_keys", "key_value"]

#: most bracket candidates per element of a range before the exact value is used instead (memory bound)
_CANDIDATE_FRACTION = 1 / 16
_CANDIDATE_SLACK = 64
_DIGIT = 16                                            # bits of the radix selection per pass


def float_keys(x: np.ndarray) -> np.ndarray:
    """Unsigned integers in the order of the floats ``x`` (-0.0 and 0.0 equal; NaN not expected).

    Example:
        >>> k = float_keys(np.array([-1.0, -0.0, 0.0, 2.0, -np.inf], dtype=np.float32))
        >>> bool(k[4] < k[0] < k[1] == k[2] < k[3])
        True
    """
    ut = np.uint32 if x.dtype.itemsize == 4 else np.uint64
    top = ut(1) << ut(x.dtype.itemsize * 8 - 1)
    u = (x + x.dtype.type(0)).view(ut)                 # + 0: -0.0 becomes 0.0
    return u ^ np.where(u & top, ut(np.iinfo(ut).max), top)


def key_value(key: int, dtype: np.dtype):
    """The float of ``dtype`` whose :func:`float_keys` is ``key``.

    Example:
        >>> float(key_value(int(float_keys(np.array([-2.5]))[0]), np.dtype(np.float64)))
        -2.5
    """
    bits = dtype.itemsize * 8
    ut = np.uint32 if bits == 32 else np.uint64
    top = 1 << (bits - 1)
    u = key ^ top if key & top else (~key) & ((1 << bits) - 1)
    return np.array([u], dtype=ut).view(dtype)[0]


class _StreamPart:
    """One layer of a :class:`StreamedCut`: its scores function, and the last classification."""

    def __init__(self, rows: Callable[[slice, np.ndarray | None], np.ndarray], shape: tuple[int, ...], name: str,
                 tie_axes: tuple[int, ...] | None, dtype: np.dtype, keep_out: np.ndarray | None = None) -> None:
        self.rows, self.shape, self.name, self.dtype = rows, tuple(shape), name, np.dtype(dtype)
        self.keep_out = keep_out                       # where the first classification writes the keep mask
        self.size = int(np.prod(self.shape))
        self.row_len = max(1, self.size // max(self.shape[0], 1)) if self.shape else 1
        self.align = self.row_len * max(1, kernel.SCORED_CHUNK // self.row_len)   # whole rows, about a chunk
        self.tie_axes = tie_axes if tie_axes is not None and len(self.shape) > 1 and \
            tuple(tie_axes) != tuple(range(len(self.shape))) else None
        self.sample = self.keep = self.idx = self.val = self.bracket = self.exact = None
        self.below = 0
        self.ties: list[tuple[int, int, int]] = []     # exact classification: (start, stop, ties) per chunk
        self.prune: list[tuple[int, int, int]] = []    # ... and how many of those ties the cut prunes

    def buffer(self, start: int, stop: int) -> np.ndarray:
        """A scores buffer for the chunks of ``[start, stop)`` (one per range: each thread has its own)."""
        return np.empty(min(stop - start, self.align), dtype=self.dtype)

    def chunks(self, start: int, stop: int, buf: np.ndarray | None = None):
        """``(a, b, scores)`` of the whole-row chunks of elements ``[start, stop)``; the scores may be written
        into ``buf`` (:meth:`buffer`), valid until the next chunk."""
        rl = self.row_len
        for a in range(start, stop, self.align):
            b = min(stop, a + self.align)
            yield a, b, np.asarray(self.rows(slice(a // rl, b // rl), None if buf is None else buf[: b - a])
                                   ).reshape(-1)

    def take_sample(self, spacing: int) -> np.ndarray:
        """About ``64 bytes per spacing`` scores from rows spread evenly over the layer (2x that many read), one
        drawn (fixed seed) in each run of the rows read."""
        if self.sample is None:
            want = max(1, self.size // spacing) * max(1, 64 // self.dtype.itemsize)
            n_rows = max(self.shape[0], 1) if self.shape else 1
            take = min(n_rows, max(1, -(-want * 2 // self.row_len)))
            idx = np.arange(take, dtype=np.intp) * n_rows // take       # evenly spread, distinct, ascending
            x = np.asarray(self.rows(idx, None)).reshape(-1)
            width = max(1, x.size // want)                 # one element drawn in each run of width: no column bias
            count = x.size // width
            self.sample = x[np.arange(count, dtype=np.intp) * width + sample_offsets(count, width, self.size)]
        return self.sample

    def prepare(self, lo) -> None:
        if self.keep is None:
            if self.keep_out is not None:              # the caller's buffer, for the first mask only
                self.keep, self.keep_out = self.keep_out.reshape(-1), None
            else:
                self.keep = np.empty(self.size, dtype=bool)

    def scan(self, lo, hi, start: int, stop: int):
        """As :meth:`LowestKCut`'s parts: below ``lo`` pruned, above ``hi`` kept, in between a candidate.
        ``lo == hi``: the exact value; its ties are counted per chunk, not listed. Returns
        ``(kept, positions, values, tie counts)``, positions None when the candidates overflow."""
        exact = lo is not None and hi is not None and lo == hi
        self.exact = lo if exact else None
        keep, kept, found, vals, ties = self.keep, 0, [], [], []
        cap, count = int((stop - start) * _CANDIDATE_FRACTION) + _CANDIDATE_SLACK, 0
        tmp = np.empty(min(stop - start, self.align), dtype=bool)
        for a, b, x in self.chunks(start, stop, self.buffer(start, stop)):
            kp = keep[a:b]
            cand = classify_chunk(x, lo, hi, kp, tmp[: b - a])
            kept += int(np.count_nonzero(kp))
            if exact:
                n_eq = int(np.count_nonzero(x == lo))
                if n_eq != int(np.count_nonzero(cand)):   # a candidate not equal to the value: NaN
                    raise nan_error(self.name)
                ties.append((a, b, n_eq))
            elif count <= cap:
                i = cand.nonzero()[0]
                count += i.size
                if i.size:
                    found.append(i + a)
                    vals.append(x[i])
        if not exact and count > cap:
            return kept, None, None, None
        return kept, found, vals, (ties if exact else None)

    def finish(self, results: list, bracket: int) -> None:
        self.below = self.size - sum(r[0] for r in results)
        self.bracket = None if any(r[1] is None for r in results) else bracket
        if results and results[0][3] is not None:      # exact: the ties, counted
            self.ties = [t for r in results for t in r[3]]
            self.idx = np.empty(0, dtype=np.intp)
            self.val = np.broadcast_to(np.zeros((), self.dtype), (sum(t[2] for t in self.ties),))
            return
        self.ties = []
        found = [f for r in results if r[1] is not None for f in r[1]]
        vals = [v for r in results if r[2] is not None for v in r[2]]
        self.idx = np.concatenate(found) if found else np.empty(0, dtype=np.intp)
        self.val = np.concatenate(vals) if vals else np.empty(0, dtype=self.dtype)

    def histogram(self, start: int, stop: int, prefix: int, level: int) -> np.ndarray:
        """Counts of the next 16-bit digit of the keys of ``[start, stop)`` that start with ``prefix``."""
        bits = self.dtype.itemsize * 8
        shift = bits - _DIGIT * (level + 1)
        hist = np.zeros(1 << _DIGIT, dtype=np.int64)
        for _, _, x in self.chunks(start, stop, self.buffer(start, stop)):
            if level == 0:
                check_finite(x, self.name)
            k = float_keys(x)
            if level:
                k = k[(k >> (shift + _DIGIT)) == prefix]
            hist += np.bincount(((k >> shift) & ((1 << _DIGIT) - 1)).astype(np.intp), minlength=1 << _DIGIT)
        return hist

    def mark(self, a: int, b: int, r: int) -> None:
        """Prune (keep = False) the first ``r`` ties of the exact value in ``[a, b)``, in tie order."""
        x = next(self.chunks(a, b, self.buffer(a, b)))[2]
        pos = np.flatnonzero(x == self.exact)
        keys = None if self.tie_axes is None or r >= pos.size else tie_rank(pos + a, self.shape, self.tie_axes)
        self.keep[a + first_in_tie_order(pos, r, keys)] = False


class StreamedCut(Cut):
    """:class:`~sparsify.selection.lowest_k_cut.LowestKCut` over scores computed on demand, row chunk by row chunk.

    Args:
        rows: per part, a function ``rows(r, out)`` of a row ``slice`` (or an index array of rows) giving the
            flat scores of those rows (float32 or float64, ``dtype``; ``-inf`` where a unit was pruned before);
            ``out`` is None or a flat buffer of ``dtype`` as long as those scores, which the function may write
            them into (and return).
        shapes: each part's shape; names: for error messages; tie_axes: as in :class:`LowestKCut`.
        keep_out: per part, None or a bool array of the part's size: the part's keep mask is written there
            (and :meth:`keeps` returns it), instead of a new array.

    NaN raises :class:`~sparsify.selection.score_checks.NaNScoreError` naming a part that holds one.
    """

    def __init__(self, rows: Sequence[Callable], shapes: Sequence[tuple[int, ...]], names: Sequence[str],
                 dtype: np.dtype, tie_axes: Sequence[tuple[int, ...] | None] | None = None,
                 keep_out: Sequence[np.ndarray | None] | None = None) -> None:
        if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"dtype must be float32 or float64, got {dtype}")
        tie_axes = [None] * len(rows) if tie_axes is None else tie_axes
        keep_out = [None] * len(rows) if keep_out is None else keep_out
        for s, n, k in zip(shapes, names, keep_out):
            if k is not None and (not isinstance(k, np.ndarray) or k.dtype != bool or k.size != int(np.prod(s))
                                  or not k.flags.c_contiguous):
                raise ValueError(f"keep_out for {n!r} must be a C-contiguous bool array of {int(np.prod(s))} "
                                 f"elements, got {type(k).__name__} {getattr(k, 'dtype', '')} of {np.size(k)}")
        super().__init__([_StreamPart(f, s, n, t, dtype, k)
                          for f, s, n, t, k in zip(rows, shapes, names, tie_axes, keep_out)])

    def _check_nan(self, parts) -> None:
        for p in parts:
            for _, _, x in p.chunks(0, p.size, p.buffer(0, p.size)):
                check_finite(x, p.name)

    def _exact_value(self, parts, k: int):
        """The k-th smallest score: a radix selection on :func:`float_keys`, 16 bits a pass."""
        dtype = parts[0].dtype
        tasks, threads = split_tasks([p.size for p in parts], [p.align for p in parts])
        prefix, rank = 0, k
        for level in range(dtype.itemsize * 8 // _DIGIT):
            hists = parallel_map(lambda t: parts[t[0]].histogram(t[1], t[2], prefix, level), tasks, threads)
            c = np.cumsum(np.sum(hists, axis=0))
            d = int(np.searchsorted(c, rank))          # the first digit whose cumulative count reaches rank
            rank -= int(c[d - 1]) if d else 0
            prefix = (prefix << _DIGIT) | d
        return key_value(prefix, dtype)

    def _choose(self, members, parts, k):
        if not parts or parts[0].exact is None:
            return super()._choose(members, parts, k)
        # ties in part order, then chunk order, then tie order
        pruned = iter(split_ties([t[2] for p in parts for t in p.ties], k - sum(p.below for p in parts)))
        counts = []
        for p in parts:
            p.prune = [(a, b, r) for (a, b, _), r in zip(p.ties, pruned) if r]
            counts.append(p.below + sum(t[2] for t in p.prune))
        self._last = (members, "ties", None)
        return counts

    def keeps(self) -> list[np.ndarray]:
        if self._last is not None and self._last[1] == "ties":
            members = self._last[0]
            work = [(i, t) for i in members for t in self.parts[i].prune]
            parallel_map(lambda w: self.parts[w[0]].mark(*w[1]), work,
                         current_threads() if len(work) > 1 else 1)
            self._last = (members, "cut", [np.empty(0, dtype=np.intp) for _ in members])
        return super().keeps()
