"""``"N:M"``: N of every M consecutive weights along the last axis of the 2-D view are pruned.

The naming follows the seed documents: ``"2:4"`` prunes 2 of every 4 (keeps 2),
``"1:4"`` prunes 1 of every 4 (keeps 3). Hardware vendors describe the same
masks by what they *keep*: NVIDIA's "2:4 structured sparsity" keeps 2 of 4,
which is our ``"2:4"`` (the two agree only when N = M/2); their 1:4 (keep 1)
would be our ``"3:4"``.

Example:
    >>> import numpy as np
    >>> PatternNInM("2:4").get_mask_single(np.array([[4.0, 1.0, 3.0, 2.0]]), 0.5).astype(int).tolist()
    [[1, 0, 1, 0]]
    >>> PatternNInM("1:4").get_mask_single(np.array([[4.0, 1.0, 3.0, 2.0]]), 0.25).astype(int).tolist()
    [[1, 0, 1, 1]]
"""
from __future__ import annotations

import math
import re
import sys
from typing import Any, Mapping

import numpy as np

from ..selection import kernel
from ..selection.lowest_k import exact_prune_count
from ..threads import MIN_PARALLEL, chunk_ranges, current_threads, parallel_map
from .base import Pattern
from .registry import register_pattern

__all__ = ["PatternNInM"]

_NINM = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
_WORD_SHIFT = np.left_shift if sys.byteorder == "little" else np.right_shift   # moves a byte to a higher address


def _word_pattern(m: int, size: int, valid) -> np.ndarray | np.uint64:
    """Bytes ``valid(position in group)`` (0/1) of a chunk of ``size`` as uint64 words (one word when ``m`` divides 8)."""
    words = (valid(np.arange(size) % m)).astype(np.uint8).view(np.uint64)
    return words[0] if 8 % m == 0 else words


class _GroupRanker:
    """Rank of every element inside its group of M consecutive elements, in cache-sized chunks.

    An element's rank counts the elements of its group that sort before it
    (lower score, or equal score and lower index); the N with rank < N are
    the N lowest of the group. Comparisons run on whole chunks shifted by
    d = 1..M-1 positions (contiguous, vectorised) and the per-byte results
    are masked and added as uint64 words; when M divides 8 a group never
    straddles a word, so the comparison of a pair read from the other side
    is a byte shift of the first. Pure integer arithmetic: the same bits on
    every machine. Scores must hold no NaN (callers screen for it).
    """

    def __init__(self, n_pruned: int, m: int) -> None:
        self.N, self.M = n_pruned, m
        step = m * 8 // math.gcd(m, 8)
        self.chunk = max(step, kernel.CHUNK // step * step)   # the selection's chunks (working arrays in L2)
        c = self.chunk
        self.shift = 8 % m == 0
        self.forward = [None] + [_word_pattern(m, c, lambda i, d=d: i + d < m) for d in range(1, m)]
        self.backward = [None] + [_word_pattern(m, c, lambda i, d=d: i >= d) for d in range(1, m)]
        self.start = _word_pattern(m, c, lambda i: i) if self.shift else np.uint64(0)   # rank before the shifted terms

    def run(self, flat: np.ndarray, pre: np.ndarray | None, floor, want_sums: bool):
        """``(small, sums)``: True at the N lowest of every group, and their float64 sums in group order
        (None unless ``want_sums``), or None when ``flat`` holds NaN or both infinities.

        ``pre`` (flat, True = kept before) lowers the elements pruned before to ``floor``.
        """
        n = flat.size
        small = np.empty(n, dtype=bool)
        sums = np.empty(n // self.M, dtype=np.float64) if want_sums else None
        threads = current_threads() if n >= MIN_PARALLEL else 1
        ranges = chunk_ranges(n, threads * 2 if threads > 1 else 1, self.chunk)   # whole chunks: whole groups
        seen = parallel_map(lambda r: self._run_range(flat, pre, floor, small, sums, *r), ranges, threads)
        # NaN, or +inf and -inf anywhere in the layer: the exact path (the serial scan's answer, range by range)
        if any(nan for nan, _, _ in seen) or (any(p for _, p, _ in seen) and any(q for _, _, q in seen)):
            return None
        return small, sums

    def _run_range(self, flat: np.ndarray, pre: np.ndarray | None, floor, small: np.ndarray,
                   sums: np.ndarray | None, first: int, stop: int) -> tuple[bool, bool, bool]:
        """Rank elements ``[first, stop)`` (whole chunks) into ``small`` and ``sums``; returns (NaN seen,
        +inf seen, -inf seen), stopping at a NaN or at both infinities (the caller returns None)."""
        n_pruned, m, c_max = self.N, self.M, self.chunk
        want_sums = sums is not None
        t = np.empty(c_max, dtype=bool)
        u = np.empty(c_max, dtype=bool)
        rank = np.empty(c_max, dtype=np.uint8)
        tw, uw, rw = t.view(np.uint64), u.view(np.uint64), rank.view(np.uint64)
        seen_dtype = flat.dtype if pre is None or flat.dtype.kind == "f" else np.dtype(np.float64)
        work = np.empty(c_max, dtype=seen_dtype) if pre is not None else None
        picked64 = np.empty(c_max, dtype=np.float64) if want_sums else None
        lowered = np.empty(c_max, dtype=seen_dtype) if pre is not None else None
        pos_inf = neg_inf = False
        for start in range(first, stop, c_max):
            raw = flat[start:min(stop, start + c_max)]
            c = raw.size
            w8 = -(-c // 8)
            hi, lo = np.maximum.reduce(raw), np.minimum.reduce(raw)
            if hi != hi:                               # NaN (maximum propagates it)
                return True, pos_inf, neg_inf
            chunk_inf = bool(hi == np.inf) or bool(lo == -np.inf)
            pos_inf |= bool(hi == np.inf)
            neg_inf |= bool(lo == -np.inf)
            if pos_inf and neg_inf:
                return False, True, True
            if pre is None:
                x = raw
            else:                                      # elements pruned before score the floor
                x, kept = work[:c], pre[start:start + c]
                if chunk_inf:                          # inf * 0 would be NaN: select instead
                    x[...] = np.where(kept, raw, floor)
                else:                                  # raw * 1 + floor * 0 and raw * 0 + floor are exact
                    fl = lowered[:c]
                    np.multiply(kept, floor, out=fl)
                    np.subtract(floor, fl, out=fl)
                    np.multiply(raw, kept, out=x)
                    np.add(x, fl, out=x)
            r, tt, uu = rw[:w8], tw[:w8], uw[:w8]
            r[...] = self.start
            for d in range(1, m):
                np.less(x[d:], x[:c - d], out=t[:c - d])       # t[p]: element p+d sorts before p
                fwd = self.forward[d] if self.shift else self.forward[d][:w8]
                bwd = self.backward[d] if self.shift else self.backward[d][:w8]
                if self.shift:                                  # u[q] = t[q-d]: q sorts before q-d
                    _WORD_SHIFT(tt, 8 * d, out=uu)
                    np.bitwise_and(uu, bwd, out=uu)
                    np.subtract(r, uu, out=r)
                else:                                           # u[q]: element q-d sorts before q
                    np.less_equal(x[:c - d], x[d:], out=u[d:c])
                    np.bitwise_and(uu, bwd, out=uu)
                    np.add(r, uu, out=r)
                np.bitwise_and(tt, fwd, out=tt)
                np.add(r, tt, out=r)
            sm = small[start:start + c]
            np.less(rank[:c], n_pruned, out=sm)
            if want_sums:
                picked = picked64[:c]                  # the N lowest as float64 (exact), zero elsewhere
                if chunk_inf:
                    picked[...] = np.where(sm, x, 0)
                else:
                    np.multiply(x, sm, out=picked)
                out = sums[start // m:(start + c) // m]
                np.add(picked[0::m], 0.0, out=out)
                for i in range(1, m):                  # added in group order, as the definition says
                    np.add(out, picked[i::m], out=out)
        return False, pos_inf, neg_inf


@register_pattern("N:M")
class PatternNInM(Pattern):
    """``N`` of every ``M`` consecutive weights along the last axis of the 2-D view are pruned.

    A sparsity ratio ``r <= N/M`` prunes the lowest-scoring fraction ``r / (N/M)``
    of the groups (a group scores the sum of its N smallest scores) N:M and
    leaves the rest dense, so N:M can follow a gradual schedule.
    Keywords: ``PatternNInM(n_pruned=2, group_size=4)`` is ``"2:4"``.

    Example:
        >>> p = PatternNInM(n_pruned=1, group_size=2)
        >>> (p.N, p.M, p.max_ratio)
        (1, 2, 0.5)
    """

    examples = ("2:4", "1:4", "4:8")
    summary = "N:M with 0 < N < M: N pruned of every M consecutive weights along the last axis of the 2-D view"
    max_ratio_label = "N/M"

    def __init__(self, config: Any = None, *, n_pruned: int | None = None, group_size: int | None = None) -> None:
        if config is None and (n_pruned is not None or group_size is not None):
            if n_pruned is None or group_size is None:
                raise ValueError("PatternNInM needs both n_pruned and group_size")
            config = f"{n_pruned}:{group_size}"
        super().__init__(config)
        parsed = self.parse(self.pattern)
        if parsed is None:
            raise ValueError(f"pattern must look like 'N:M' (e.g. '2:4'), got {self.pattern!r}")
        self.N: int = parsed["N"]
        self.M: int = parsed["M"]
        # M <= 8: a NaN score always reaches its group's sum (as NaN * 0 or NaN + x), even outside the N lowest
        self.nan_reaches_units = self.M <= 8
        self._ranker: _GroupRanker | None = None

    @classmethod
    def parse(cls, name: str) -> dict[str, Any] | None:
        """``{"N", "M"}`` of an ``"N:M"`` name, else None.

        Example:
            >>> PatternNInM.parse("2:4"), PatternNInM.parse("4x1")
            ({'N': 2, 'M': 4}, None)
        """
        m = _NINM.match(name) if isinstance(name, str) else None
        if not m:
            return None
        n, mm = int(m.group(1)), int(m.group(2))
        if not 0 < n < mm:
            raise ValueError(f"pattern {name!r}: N:M needs 0 < N < M (N pruned of every M), got N={n}, M={mm}")
        return {"N": n, "M": mm}

    @property
    def max_ratio(self) -> float:
        """Highest sparsity this pattern can reach: N/M."""
        return self.N / self.M

    def units_for_ratio(self, ratio, n_units):
        frac = min(float(ratio) / self.max_ratio, 1.0)
        return exact_prune_count(frac, n_units, keep_one=False)

    def unit_count(self, shape2d):
        return shape2d[0] * (shape2d[1] // self.M)

    def fits(self, shape2d):
        if shape2d[1] % self.M:
            return f"its last axis ({shape2d[1]}) is not a multiple of M={self.M}"
        return None

    def groups(self, a2d: np.ndarray) -> np.ndarray:
        """View of a 2-D array as ``(rows, groups, M)``."""
        return a2d.reshape(a2d.shape[0], a2d.shape[1] // self.M, self.M)

    def pre_pruned_scores(self, score2d, pre2d):
        # pruned elements go first inside their group; a finite floor (not -inf) keeps a group
        # holding a pruned element and a +inf score free of -inf + inf
        s2 = score2d if score2d.dtype.kind == "f" else score2d.astype(np.float64)
        return np.where(pre2d, s2, np.finfo(s2.dtype).min / (self.M + 1))

    def smallest_in_group(self, score2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """True at the N lowest scores of every group of M (ties: lower index first),
        and the sum of those N scores per group (float64, added in group order).

        ``+inf`` and ``-inf`` are legal scores. For M <= 8 a group holding a NaN sums to NaN.

        Example:
            >>> small, sums = PatternNInM("2:4").smallest_in_group(np.array([[1.0, 1.0, 0.0, 1.0]]))
            >>> small.tolist(), sums.tolist()
            ([[True, False, True, False]], [[1.0]])
            >>> PatternNInM("2:4").smallest_in_group(np.array([[np.inf, 1.0, 2.0, 3.0]]))[1].tolist()
            [[3.0]]
        """
        fast = self._ranked(score2d, None, True)
        if fast is None:
            return self._smallest_in_group_exact(score2d)
        small, sums = fast
        return small.reshape(score2d.shape), sums.reshape(score2d.shape[0], -1)

    def _ranked(self, score2d: np.ndarray, pre2d: np.ndarray | None, want_sums: bool):
        """The fast kernel's ``(small, sums)`` (flat), or None where it does not apply (M > 8, NaN,
        both infinities, unusual dtypes): callers then use the exact pairwise path."""
        if self.M > 8 or score2d.dtype.kind not in "fiu" or score2d.dtype.itemsize > 8:
            return None
        flat = np.ascontiguousarray(score2d).reshape(-1)
        pre = None if pre2d is None else np.ascontiguousarray(pre2d).reshape(-1)
        floor = None
        if pre is not None:
            dtype = flat.dtype if flat.dtype.kind == "f" else np.dtype(np.float64)
            floor = np.finfo(dtype).min / (self.M + 1)
        if self._ranker is None:
            self._ranker = _GroupRanker(self.N, self.M)
        return self._ranker.run(flat, pre, floor, want_sums)

    def _smallest_in_group_exact(self, score2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reference path of :meth:`smallest_in_group`: pairwise ranks on transposed groups, exact inf repair."""
        g = score2d.reshape(-1, self.M)
        small = np.empty(g.shape, dtype=bool)
        if self.M > 8:
            order = np.argsort(g, axis=-1, kind="stable")[:, : self.N]
            small[:] = False
            np.put_along_axis(small, order, True, axis=-1)
            sums = np.where(small, g, 0).sum(axis=-1, dtype=np.float64)
            return small.reshape(score2d.shape), sums.reshape(score2d.shape[0], -1)
        sums = np.zeros(g.shape[0], dtype=np.float64)
        cols = np.ascontiguousarray(g.T)             # (M, groups): each comparison is one contiguous pass
        rank = np.zeros(cols.shape, dtype=np.uint8)
        j_first = np.empty(cols.shape[1], dtype=bool)
        as_int = j_first.view(np.uint8)
        for i in range(self.M):
            for j in range(i + 1, self.M):
                np.less(cols[j], cols[i], out=j_first)  # ties: the lower index i ranks first
                rank[i] += as_int
                rank[j] += 1
                rank[j] -= as_int
        with np.errstate(invalid="ignore", over="ignore"):   # inf * 0 is repaired below
            for i in range(self.M):
                pick = rank[i] < self.N
                small[:, i] = pick
                sums += cols[i] * pick                  # multiply, not np.where: branch-free and fast
            if cols.dtype.kind in "fc" and np.isnan(np.sum(sums)):
                # inf * 0 from an infinite score outside the N lowest: add those groups' picks only
                bad = np.flatnonzero(np.isnan(sums))
                exact = np.zeros(bad.size, dtype=np.float64)
                for i in range(self.M):
                    exact += np.where(small[bad, i], cols[i, bad], 0)
                sums[bad] = np.where(np.isnan(cols[:, bad]).any(axis=0), np.nan, exact)
        return small.reshape(score2d.shape), sums.reshape(score2d.shape[0], -1)

    def layer_units(self, name, score2d, pre2d=None, need_scores=True, check_nan=True):
        """Group sums (None when ``need_scores`` is False: every group or none is pruned) and the N lowest.

        Example:
            >>> sums, small = PatternNInM("1:2").layer_units("fc", np.array([[1.0, 2.0, 4.0, 3.0]]))
            >>> sums.tolist(), small.astype(int).tolist()
            ([[1.0, 3.0]], [[1, 0, 0, 1]])
            >>> PatternNInM("1:2").layer_units("fc", np.array([[1.0, 2.0, 4.0, 3.0]]), need_scores=False)[0] is None
            True
        """
        fast = self._ranked(score2d, pre2d, need_scores)
        if fast is None:                             # NaN, +inf with -inf, M > 8: the exact path names the error
            return super().layer_units(name, score2d, pre2d, need_scores, check_nan)
        small, sums = fast
        small = small.reshape(score2d.shape)
        if not need_scores:
            return None, small
        return sums.reshape(score2d.shape[0], -1), small

    def conformity(self, nonzero2d: np.ndarray) -> tuple[int, int]:
        """``(groups, violations)``: a group violates ``"N:M"`` when it holds fewer than N zeros.

        Example:
            >>> PatternNInM("2:4").conformity(np.array([[False, True, False, True, True, True, True, False]]))
            (2, 1)
        """
        zeros = (~self.groups(np.asarray(nonzero2d, dtype=bool))).sum(axis=-1)
        return int(zeros.size), int((zeros < self.N).sum())

    def unit_scores(self, score2d):
        small, sums = self.smallest_in_group(score2d)
        return sums, small

    def _group_words(self, a2d: np.ndarray) -> np.ndarray | None:
        """A contiguous boolean 2-D array as one unsigned word per group (M = 2, 4 or 8), else None."""
        if self.M not in (2, 4, 8) or a2d.dtype != np.bool_ or not a2d.flags.c_contiguous:
            return None
        return a2d.view(f"u{self.M}")

    def unit_pre_pruned(self, pre2d):
        words = self._group_words(pre2d)
        if words is not None:                        # a group untouched by earlier pruning is all ones bytes
            return words != np.ones(self.M, dtype=bool).view(words.dtype)[0]
        return ~self.groups(pre2d).all(axis=-1)

    #: expand_keep reads the scores' shape only (global scope may drop the element scores once units are made)
    expand_keep_reads_shape_only = True

    def expand_keep(self, unit_keep, score2d, aux):
        keep = np.logical_not(aux)                   # aux: the N lowest of each group
        if unit_keep.any():                          # groups left dense keep all M
            words = self._group_words(keep)
            if words is not None:                    # 0 or 0x0101..01 per group: one OR per group
                ones = np.ones(self.M, dtype=np.uint8).view(words.dtype)[0]
                dense = unit_keep.reshape(words.shape).view(np.uint8).astype(words.dtype)
                np.multiply(dense, ones, out=dense)
                np.bitwise_or(words, dense, out=words)
            else:
                groups = self.groups(keep)
                groups |= unit_keep.reshape(score2d.shape[0], score2d.shape[1] // self.M, 1)
        return keep

    def get_block_size_dict(self, data: Mapping[str, np.ndarray]) -> dict[str, list[int]]:
        """``[1, M]`` for each layer (a group is one row by M columns)."""
        return {n: [1, self.M] for n in data}
