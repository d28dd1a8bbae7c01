"""The ``k`` lowest scores over several arrays at once, without concatenating them: :class:`LowestKCut`.

The global scope needs one threshold over all layers, ties in layer order.
:class:`LowestKCut` estimates a bracket around the k-th smallest score from a
strided sample, classifies every element against the bracket in cache-sized
chunks (below: pruned, above: kept), and only partitions the few candidates
inside the bracket; a bracket that misses (adversarial data) is replaced by
the exact k-th value of a full partition, with the same answer. It reuses its
classification when it is asked again for a nearby count.

Example:
    >>> import numpy as np
    >>> LowestKCut([np.array([2.0, 0.5]), np.array([1.0, 3.0])], ["a", "b"]).counts(2)
    [1, 1]
"""
from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from .score_checks import check_finite
from .threads import MIN_PARALLEL, chunk_ranges, current_threads, parallel_map
from .tie_order import lowest_k_flags, tie_rank

__all__ = ["LowestKCut", "sample_offsets"]

_CHUNK = 1 << 16          # elements classified per step (a few chunk-sized arrays stay in L2)
_SAMPLE = 1 << 13         # smallest sample used to bracket the k-th value ...
_SAMPLE_MAX = 1 << 18     # ... and the largest (2 n^(2/3) in between: the sample's partition and the
#                           candidates' cost, about n / sqrt(sample), balance there; 1M scores: 20,000)
_SAMPLE_FACTOR = 2.0
_SIGMAS = 4.0             # the bracket's half-width in standard deviations of the sample's quantile: misses
#                           one update in ~15,000 on exchangeable data (then an exact pass, same answer); 6
#                           missed never but held 1.5x the candidates, whose extraction dominates small layers


class _Part:
    """One array of a :class:`LowestKCut`: its flat scores and the last classification."""

    __slots__ = ("flat", "eligible", "shape", "name", "tie_axes", "sample", "keep", "below", "idx", "val", "bracket")
    align = _CHUNK                                     # the ranges of a parallel classification are multiples of it

    def __init__(self, scores: np.ndarray, name: str, tie_axes: tuple[int, ...] | None,
                 eligible: np.ndarray | None) -> None:
        arr = np.asarray(scores)
        self.flat = arr.reshape(-1)
        self.shape = arr.shape
        self.name = name
        self.tie_axes = tie_axes if tie_axes is not None and arr.ndim > 1 and \
            tuple(tie_axes) != tuple(range(arr.ndim)) else None
        self.eligible = None if eligible is None else np.asarray(eligible, dtype=bool).reshape(-1)
        if self.eligible is not None and self.flat.dtype.kind != "f":
            self.lower()                               # -inf needs a float type: the scores become float64
        self.sample = None
        self.keep = None
        self.below = 0
        self.idx = self.val = None
        self.bracket = None

    @property
    def size(self) -> int:
        """Elements of the part."""
        return self.flat.size

    @property
    def dtype(self) -> np.dtype:
        """The scores' dtype (float64 once integer scores were lowered)."""
        return self.flat.dtype

    def lower(self) -> None:
        """Write ``-inf`` into the scores of the units that are not eligible (a copy)."""
        if self.eligible is not None:
            self.flat = np.where(self.eligible, self.flat, -np.inf)
            self.eligible = None

    def take_sample(self, spacing: int) -> np.ndarray:
        """One run of a cache line (64 bytes) in every ``spacing`` elements, at an offset drawn (fixed seed) in
        each: few memory reads, spread evenly, and never aligned with a period of the data (a row length: per
        column scales such as Wanda's would bias a sample taken at the same column of every row)."""
        if self.sample is None:
            run = max(1, 64 // self.flat.itemsize)
            n = self.flat.size
            blocks = max(1, n // spacing)
            if blocks == 1 or n < run * blocks:
                take = lambda a: a[:: max(1, n // (run * blocks))][: run * blocks]   # noqa: E731
            else:
                width = n // blocks
                starts = np.arange(blocks, dtype=np.intp) * width + sample_offsets(blocks, width - run + 1, n)
                pos = (starts[:, None] + np.arange(run, dtype=np.intp)).reshape(-1)
                take = lambda a: a[pos]   # noqa: E731
            sample = take(self.flat)
            if self.eligible is not None:
                sample = np.where(take(self.eligible), sample, -np.inf)
            self.sample = sample
        return self.sample

    def prepare(self, lo) -> None:
        """Ready the part for a classification against a bracket whose lower bound is ``lo``."""
        if self.eligible is not None and not (lo is not None and lo > -np.inf):
            self.lower()                               # -inf inside the bracket: ties need the real values
        if self.keep is None:
            self.keep = np.empty(self.flat.size, dtype=bool)

    def scan(self, lo, hi, start: int, stop: int) -> tuple[int, np.ndarray | None]:
        """Classify elements ``[start, stop)`` into ``keep``: below ``lo`` pruned, above ``hi`` kept, in between
        (or NaN) a candidate, kept for now. Returns (kept, candidate positions); ``None`` bounds are open.

        Units that are not eligible score ``-inf``: below any finite ``lo``.
        """
        flat, eligible, keep = self.flat, self.eligible, self.keep
        tmp = np.empty(min(stop - start, _CHUNK), dtype=bool)
        found = []
        kept = 0
        for a in range(start, stop, _CHUNK):           # cache-sized chunks: each read once from memory
            b = min(stop, a + _CHUNK)
            x, kp, t = flat[a:b], keep[a:b], tmp[: b - a]
            if lo is None:
                kp[:] = True
            else:
                np.less(x, lo, out=t)                  # below lo: pruned for sure
                if eligible is None:
                    np.logical_not(t, out=kp)          # NaN compares False, so it stays a candidate
                else:
                    np.greater(eligible[a:b], t, out=kp)
            if hi is None:
                cand = kp
            else:
                np.greater(x, hi, out=t)               # above hi: kept for sure
                np.greater(kp, t, out=t)               # kept and not above: lo <= x <= hi, or NaN
                cand = t
            kept += int(np.count_nonzero(kp))
            i = cand.nonzero()[0]                      # 1-D: flatnonzero's ravel and wrappers cost 10% here
            if i.size:
                found.append(i + a if a else i)
        return kept, (np.concatenate(found) if len(found) > 1 else (found[0] if found else None))

    def finish(self, results: list[tuple[int, np.ndarray | None]], bracket: int) -> None:
        """Combine the :meth:`scan` results of consecutive ranges covering the part, in order."""
        self.below = self.flat.size - sum(r[0] for r in results)
        found = [r[1] for r in results if r[1] is not None]
        self.idx = np.concatenate(found) if len(found) > 1 else (found[0] if found else np.empty(0, dtype=np.intp))
        self.val = self.flat[self.idx]
        self.bracket = bracket


def sample_offsets(count: int, high: int, seed: int) -> np.ndarray:
    """``count`` offsets in ``[0, high)`` drawn with a fixed seed (the same sample, hence the same work, every
    run): where a sample falls changes only how fast a cut is found, never the cut.

    Example:
        >>> bool((sample_offsets(5, 3, 7) == sample_offsets(5, 3, 7)).all()), int(sample_offsets(5, 3, 7).max()) < 3
        (True, True)
    """
    return _offsets(int(count), max(1, int(high)), int(seed))


@functools.lru_cache(maxsize=64)
def _offsets(count: int, high: int, seed: int) -> np.ndarray:
    """:func:`sample_offsets`, kept (read-only) for the next update: a generator costs ~0.1 ms to seed, a tenth
    of a 1M-weight layer's update."""
    out = np.random.default_rng([0x5A3F, seed]).integers(0, high, size=count, dtype=np.intp)
    out.flags.writeable = False
    return out


def classify(parts: Sequence[_Part], lo, hi, bracket: int) -> None:
    """Classify every part against (lo, hi) on :func:`~sparsify.threads.current_threads` threads: each part is
    split into ranges of whole chunks, and the ranges' results are combined in element order, so the answer
    never depends on the thread count. NaN raises naming the first part (in order) that holds one."""
    threads = current_threads()
    total = sum(p.size for p in parts)
    tasks = []
    for j, p in enumerate(parts):
        p.prepare(lo)
        n = p.size
        pieces = 1 if threads <= 1 or total < MIN_PARALLEL else max(1, round(threads * 2 * n / total))
        tasks += [(j, a, b) for a, b in chunk_ranges(n, pieces, p.align)]
    results = parallel_map(lambda t: parts[t[0]].scan(lo, hi, t[1], t[2]), tasks,
                           threads if total >= MIN_PARALLEL else 1)
    for j, p in enumerate(parts):
        p.finish([r for t, r in zip(tasks, results) if t[0] == j], bracket)
        check_finite(p.val, p.name)


class LowestKCut:
    """The ``k`` lowest scores over several arrays, without concatenating them.

    Ties go to the earlier array, then to the lower index in tie order (the
    row-major order of ``array.transpose(tie_axes)``; the memory order when
    ``tie_axes`` is None). Where an ``eligible`` mask is False the score
    counts as ``-inf`` (units pruned before), without a copy of the scores.
    :meth:`counts` gives how many units of each array are among the ``k``
    lowest of a chosen subset of the arrays; :meth:`keeps` turns the last cut
    into boolean keep masks. Asking again for another ``k`` or a subset reuses
    the classification of the elements whenever the new cut falls inside the
    old bracket.

    NaN raises :class:`~sparsify.score_checks.NaNScoreError` naming the first array that holds one
    (NaN where ``eligible`` is False is not looked at).

    Example:
        >>> cut = LowestKCut([np.array([3.0, 1.0]), np.array([[1.0, 0.5], [2.0, 9.0]])], ["a", "b"])
        >>> cut.counts(3)
        [1, 2]
        >>> [k.tolist() for k in cut.keeps()]
        [[True, False], [[False, False], [True, True]]]
    """

    def __init__(self, arrays: Sequence[np.ndarray], names: Sequence[str],
                 tie_axes: Sequence[tuple[int, ...] | None] | None = None,
                 eligible: Sequence[np.ndarray | None] | None = None) -> None:
        n = len(arrays)
        tie_axes = [None] * n if tie_axes is None else tie_axes
        eligible = [None] * n if eligible is None else eligible
        self._start([_Part(a, nm, t, e) for a, nm, t, e in zip(arrays, names, tie_axes, eligible)])
        if not self._fast:
            for p in self.parts:
                p.lower()

    def _start(self, parts: list) -> None:
        self.parts = parts
        self._last: tuple | None = None
        self._brackets = 0
        dtypes = {p.dtype for p in self.parts}
        self._fast = len(dtypes) == 1 and next(iter(dtypes)).kind in "fiu"

    # ----- the cut -----------------------------------------------------------------------
    def counts(self, k: int, members: Sequence[int] | None = None) -> list[int]:
        """Units of each member array (indices into the arrays; default all) among the ``k`` lowest of the members."""
        members = list(range(len(self.parts))) if members is None else list(members)
        parts = [self.parts[i] for i in members]
        n = sum(p.size for p in parts)
        if not 0 <= k <= n:
            raise ValueError(f"k must be in [0, {n}] for {parts[0].name if len(parts) == 1 else 'the arrays'!r}, got {k}")
        if k == 0 or k == n:
            self._check_nan(parts)
            self._last = (members, "all" if k else "none", None)
            return [p.size if k else 0 for p in parts]
        if not self._fast:
            return self._counts_concatenated(members, parts, k)
        if not self._fits(parts, k):                   # the last classification cannot answer: a new bracket
            lo, hi = self._bracket(parts, k, n)
            self._brackets += 1
            classify(parts, lo, hi, self._brackets)
            if not self._fits(parts, k):               # the bracket missed the k-th value: use the exact one
                v = self._exact_value(parts, k)
                self._brackets += 1
                classify(parts, v, v, self._brackets)
        return self._choose(members, parts, k)

    def _check_nan(self, parts: list[_Part]) -> None:
        """Raise NaNScoreError naming the first part (in order) holding a NaN (not where not eligible)."""
        for p in parts:
            p.lower()                                  # NaN in units pruned before is not looked at
            check_finite(p.flat, p.name)

    def _exact_value(self, parts: list[_Part], k: int):
        """The k-th smallest score over ``parts`` (one full partition)."""
        for p in parts:
            p.lower()
        flat = np.concatenate([p.flat for p in parts]) if len(parts) > 1 else parts[0].flat
        return np.partition(flat, k - 1)[k - 1]

    def keeps(self) -> list[np.ndarray]:
        """Keep masks (True = kept, each of its array's shape) of the members of the last :meth:`counts`."""
        if self._last is None:
            raise ValueError("LowestKCut.keeps() needs a cut: call counts(k) first")
        members, how, chosen = self._last
        out = []
        for j, i in enumerate(members):
            p = self.parts[i]
            if how in ("all", "none"):
                keep = np.full(p.size, how == "none", dtype=bool)
            elif how == "concat":
                keep = chosen[j]
            else:
                keep = p.keep
                if chosen[j].size:
                    keep[chosen[j]] = False
                p.keep = None                          # handed out: the next classification allocates anew
                p.bracket = None
            out.append(keep.reshape(p.shape))
        self._last = None
        return out

    # ----- helpers -----------------------------------------------------------------------
    @staticmethod
    def _fits(parts: list[_Part], k: int) -> bool:
        brackets = {p.bracket for p in parts}
        if None in brackets or len(brackets) != 1:     # unclassified, or against different brackets
            return False
        need = k - sum(p.below for p in parts)
        return 0 <= need <= sum(p.val.size for p in parts)

    def _bracket(self, parts: list[_Part], k: int, n: int):
        """(lo, hi) around the k-th smallest from a sample (None: unbounded)."""
        run = max(1, 64 // self.parts[0].dtype.itemsize)
        n_all = sum(p.size for p in self.parts)
        spacing = max(1, n_all * run // min(_SAMPLE_MAX, max(_SAMPLE, int(_SAMPLE_FACTOR * n_all ** (2 / 3)))))
        samples = [p.take_sample(spacing) for p in parts]
        sample = np.concatenate(samples) if len(samples) > 1 else samples[0]
        m = sample.size
        q = k / n
        margin = _SIGMAS * math.sqrt(max(q * (1 - q), 1.0 / m) / m) + 2.0 / m
        lo_i = min(m - 1, max(0, int(math.floor((q - margin) * m))))
        hi_i = min(m - 1, max(0, int(math.ceil((q + margin) * m))))
        if sample.dtype.kind == "f" and np.isnan(sample).any():
            self._check_nan(parts)                     # raise naming the first array holding a NaN
        part = np.partition(sample, (lo_i, hi_i))
        lo = part[lo_i] if q - margin > 0 else None    # scalars of the arrays' own dtype
        hi = part[hi_i] if q + margin < 1 else None
        return lo, hi

    def _choose(self, members: list[int], parts: list[_Part], k: int) -> list[int]:
        need = k - sum(p.below for p in parts)
        sizes = [p.val.size for p in parts]
        total = sum(sizes)
        if need == 0 or need == total:
            chosen = [p.idx if need else p.idx[:0] for p in parts]
        else:
            val = np.concatenate([p.val for p in parts]) if len(parts) > 1 else parts[0].val
            tie_keys = None
            if any(p.tie_axes is not None for p in parts):
                tie_keys = lambda ties: self._tie_keys(parts, sizes, ties)    # noqa: E731
            pick = lowest_k_flags(val, need, tie_keys)
            chosen, off = [], 0
            for p, s in zip(parts, sizes):
                chosen.append(p.idx[pick[off:off + s]])
                off += s
        self._last = (members, "cut", chosen)
        return [p.below + c.size for p, c in zip(parts, chosen)]

    @staticmethod
    def _tie_keys(parts: list[_Part], sizes: list[int], ties: np.ndarray) -> np.ndarray:
        """Global tie order of candidate positions: array order, then tie order inside the array."""
        bounds = np.cumsum([0] + sizes)
        which = np.searchsorted(bounds, ties, side="right") - 1
        keys = np.empty(ties.size, dtype=np.int64)
        base = 0
        for j, p in enumerate(parts):
            sel = which == j
            if sel.any():
                local = p.idx[ties[sel] - bounds[j]]
                keys[sel] = base + tie_rank(local, p.shape, p.tie_axes)
            base += p.size
        return keys

    def _counts_concatenated(self, members: list[int], parts: list[_Part], k: int) -> list[int]:
        """Mixed or unusual dtypes: one partition over the concatenation (the common promoted type)."""
        flat = np.concatenate([p.flat for p in parts]) if len(parts) > 1 else parts[0].flat
        for p in parts:
            check_finite(p.flat, p.name)
        tie_keys = None
        if any(p.tie_axes is not None for p in parts):
            def tie_keys(ties: np.ndarray) -> np.ndarray:
                keys = np.empty(ties.size, dtype=np.int64)
                off = 0
                for p in parts:
                    sel = (ties >= off) & (ties < off + p.flat.size)
                    keys[sel] = off + tie_rank(ties[sel] - off, p.shape, p.tie_axes)
                    off += p.flat.size
                return keys
        pruned = lowest_k_flags(flat, k, tie_keys)
        keeps, off = [], 0
        for p in parts:
            keeps.append(~pruned[off:off + p.flat.size])
            off += p.flat.size
        self._last = (members, "concat", keeps)
        return [p.flat.size - int(np.count_nonzero(kp)) for p, kp in zip(parts, keeps)]
