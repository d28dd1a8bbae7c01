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

import re
from typing import Any, Mapping

import numpy as np

from ..selection import exact_prune_count
from .base import Pattern
from .registry import register_pattern

__all__ = ["PatternNInM"]

_NINM = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


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

    def unit_pre_pruned(self, pre2d):
        return ~self.groups(pre2d).all(axis=-1)

    def expand_keep(self, unit_keep, score2d, aux):
        keep = np.logical_not(aux)                   # aux: the N lowest of each group
        if unit_keep.any():                          # groups left dense keep all M
            groups = self.groups(keep)
            groups |= unit_keep.reshape(score2d.shape[0], score2d.shape[1] // self.M, 1)
        return keep

    def get_block_size_dict(self, data: Mapping[str, np.ndarray]) -> dict[str, list[int]]:
        """``[1, M]`` for each layer (a group is one row by M columns)."""
        return {n: [1, self.M] for n in data}
