"""The ``k`` lowest scores over several in-memory arrays at once, without concatenating them: :class:`LowestKCut`.

The global scope needs one threshold over all layers, ties in layer order.
:class:`LowestKCut` is the :class:`~sparsify.selection.cut.Cut` over arrays:
each array is a part whose sample is a run of a cache line in every few
thousand elements and whose classification reads it in
:data:`~sparsify.selection.kernel.CHUNK`-sized chunks. Arrays of mixed or
unusual dtypes are cut with one partition of their concatenation.

Example:
    >>> import numpy as np
    >>> LowestKCut([np.array([2.0, 0.5]), np.array([1.0, 3.0])], ["a", "b"]).counts(2)
    [1, 1]
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import kernel
from .cut import Cut, sample_offsets
from .kernel import chunk_bounds, classify_chunk, kth_smallest
from .score_checks import check_finite
from .tie_order import lowest_k_flags, tie_rank

__all__ = ["LowestKCut"]


class _Part:
    """One array of a :class:`LowestKCut`: its flat scores and the last classification."""

    __slots__ = ("flat", "eligible", "shape", "name", "tie_axes", "sample", "keep", "below", "idx", "val", "bracket",
                 "align")

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
        self.align = kernel.CHUNK                      # the ranges of a parallel classification are multiples of it
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
        flat, eligible, keep, step = self.flat, self.eligible, self.keep, kernel.CHUNK
        tmp = np.empty(min(stop - start, step), dtype=bool)
        found = []
        kept = 0
        for a, b in chunk_bounds(start, stop, step):   # cache-sized chunks: each read once from memory
            kp = keep[a:b]
            cand = classify_chunk(flat[a:b], lo, hi, kp, tmp[: b - a], None if eligible is None else eligible[a:b])
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


class LowestKCut(Cut):
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

    NaN raises :class:`~sparsify.selection.score_checks.NaNScoreError` naming the first array that holds one
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
        super().__init__([_Part(a, nm, t, e) for a, nm, t, e in zip(arrays, names, tie_axes, eligible)])
        if not self._fast:
            for p in self.parts:
                p.lower()

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
        return kth_smallest(flat, k - 1)

    def _counts_slow(self, members: list[int], parts: list[_Part], k: int) -> list[int]:
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
