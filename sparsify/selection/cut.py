"""The one routine that finds the ``k`` lowest scores over several parts: :class:`Cut`.

A part is a run of scores in tie order: an in-memory array
(:class:`~sparsify.selection.lowest_k_cut.LowestKCut`) or a layer whose
scores are computed row chunk by row chunk
(:class:`~sparsify.selection.streamed_cut.StreamedCut`). The routine is the
same for both: a strided sample of every part brackets the k-th smallest
score (:func:`~sparsify.selection.kernel.sample_bracket`), every element is
classified against the bracket in chunks on several threads (below: pruned,
above: kept, in between: a candidate), and the k-th value is taken among the
few candidates (:func:`~sparsify.selection.tie_order.lowest_k_flags`), ties to
the earlier part, then the lower index in tie order. A bracket that misses
(adversarial data) is replaced by the exact k-th value, with the same answer.
A new count inside the old bracket reuses the classification.

A part has ``size``, ``dtype``, ``shape``, ``name``, ``tie_axes``, ``align`` and the fields of its last
classification (``keep``, ``below``, ``idx``, ``val``, ``bracket``), and the methods ``take_sample(spacing)``,
``prepare(lo)``, ``scan(lo, hi, start, stop)``, ``finish(results, bracket)`` and ``lower()``.

Example:
    >>> import numpy as np
    >>> from sparsify.selection.lowest_k_cut import LowestKCut
    >>> LowestKCut([np.array([2.0, 0.5]), np.array([1.0, 3.0])], ["a", "b"]).counts(2)
    [1, 1]
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from ..threads import parallel_map
from .kernel import sample_bracket, split_tasks
from .score_checks import check_finite
from .tie_order import lowest_k_flags, tie_rank

__all__ = ["Cut", "classify", "sample_offsets", "sample_spacing"]

_SAMPLE = 1 << 13         # smallest sample used to bracket the k-th value ...
_SAMPLE_MAX = 1 << 18     # ... and the largest (2 n^(2/3) in between: the sample's partition and the
#                           candidates' cost, about n / sqrt(sample), balance there; 1M scores: 20,000)
_SAMPLE_FACTOR = 2.0


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


def sample_spacing(n: int, itemsize: int) -> int:
    """Elements between two sampled runs of a cache line (64 bytes) over ``n`` scores of ``itemsize`` bytes:
    a sample of ``2 n^(2/3)`` scores, clipped to [8k, 256k].

    Example:
        >>> sample_spacing(1 << 20, 4)            # 1M float32: 20,642 runs of 16 sampled
        812
    """
    run = max(1, 64 // itemsize)
    return max(1, n * run // min(_SAMPLE_MAX, max(_SAMPLE, int(_SAMPLE_FACTOR * n ** (2 / 3)))))


def classify(parts: Sequence[Any], lo, hi, bracket: int) -> None:
    """Classify every part against (lo, hi) on :func:`~sparsify.threads.current_threads` threads: each part is
    split into ranges of whole ``align`` multiples (:func:`~sparsify.selection.kernel.split_tasks`), and the
    ranges' results are combined in element order, so the answer never depends on the thread count. NaN
    raises naming the first part (in order) that holds one."""
    for p in parts:
        p.prepare(lo)
    tasks, threads = split_tasks([p.size for p in parts], [p.align for p in parts])
    results = parallel_map(lambda t: parts[t[0]].scan(lo, hi, t[1], t[2]), tasks, threads)
    for j, p in enumerate(parts):
        p.finish([r for t, r in zip(tasks, results) if t[0] == j], bracket)
        check_finite(p.val, p.name)


class Cut:
    """The ``k`` lowest scores over ``parts`` (see the module): :meth:`counts` gives how many units of each
    member part are among the ``k`` lowest of the chosen members; :meth:`keeps` turns the last cut into
    boolean keep masks. Subclasses make the parts and say how to check them for NaN (:meth:`_check_nan`) and
    how to find the exact k-th value when a bracket misses (:meth:`_exact_value`).
    """

    def __init__(self, parts: list) -> None:
        self.parts = parts
        self._last: tuple | None = None
        self._brackets = 0
        dtypes = {p.dtype for p in self.parts}
        self._fast = len(dtypes) == 1 and next(iter(dtypes)).kind in "fiu"

    # ----- the cut -----------------------------------------------------------------------
    def counts(self, k: int, members: Sequence[int] | None = None) -> list[int]:
        """Units of each member part (indices into the parts; default all) among the ``k`` lowest of the members."""
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
            return self._counts_slow(members, parts, k)
        if not self._fits(parts, k):                   # the last classification cannot answer: a new bracket
            lo, hi = self._bracket(parts, k, n)
            self._brackets += 1
            classify(parts, lo, hi, self._brackets)
            if not self._fits(parts, k):               # the bracket missed the k-th value: use the exact one
                v = self._exact_value(parts, k)
                self._brackets += 1
                classify(parts, v, v, self._brackets)
        return self._choose(members, parts, k)

    def keeps(self) -> list[np.ndarray]:
        """Keep masks (True = kept, each of its part's shape) of the members of the last :meth:`counts`."""
        if self._last is None:
            raise ValueError(f"{type(self).__name__}.keeps() needs a cut: call counts(k) first")
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

    # ----- what a kind of part supplies ----------------------------------------------------
    def _check_nan(self, parts: list) -> None:
        """Raise NaNScoreError naming the first part (in order) holding a NaN."""
        raise NotImplementedError

    def _exact_value(self, parts: list, k: int):
        """The k-th smallest score over ``parts``."""
        raise NotImplementedError

    def _counts_slow(self, members: list[int], parts: list, k: int) -> list[int]:
        """The cut of parts of mixed or unusual dtypes."""
        raise NotImplementedError

    # ----- helpers -----------------------------------------------------------------------
    @staticmethod
    def _fits(parts: list, k: int) -> bool:
        brackets = {p.bracket for p in parts}
        if None in brackets or len(brackets) != 1:     # unclassified, or against different brackets
            return False
        need = k - sum(p.below for p in parts)
        return 0 <= need <= sum(p.val.size for p in parts)

    def _bracket(self, parts: list, k: int, n: int):
        """(lo, hi) around the k-th smallest from a sample (None: unbounded)."""
        spacing = sample_spacing(sum(p.size for p in self.parts), self.parts[0].dtype.itemsize)
        samples = [p.take_sample(spacing) for p in parts]
        sample = np.concatenate(samples) if len(samples) > 1 else samples[0]
        if sample.dtype.kind == "f" and np.isnan(sample).any():
            self._check_nan(parts)                     # raise naming the first part holding a NaN
        return sample_bracket(sample, k / n)

    def _choose(self, members: list[int], parts: list, k: int) -> list[int]:
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
    def _tie_keys(parts: list, sizes: list[int], ties: np.ndarray) -> np.ndarray:
        """Global tie order of candidate positions: part order, then tie order inside the part."""
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
