"""The exact k-th lowest unit score over scores held by different ranks, moving small data only.

Every rank holds some units of each layer (:class:`~sparsify.distributed.sharded_layer.ShardedLayer`).
:func:`find_cuts` finds, for each :class:`CutProblem`, the value of the k-th
lowest unit over all ranks and how many ties at that value each rank prunes
(first in global order: member order, then unit index): a sample of the
candidates is gathered to bracket the k-th value, the counts below / inside
the bracket are exchanged, the bracket shrinks until its candidates are few
enough to gather, and ties are split by exchanging per-rank tie counts. The
bytes moved depend on the sample sizes, not on the size of the weights. The
bracket, the k-th value, the chunks and the tie split are the selection
kernel's (:mod:`sparsify.selection.kernel`), as in the single-process cuts.

Example:
    >>> from sparsify.distributed import ThreadGroup
    >>> from sparsify.distributed.row_shard import RowShard
    >>> units = np.array([4.0, 1.0, 3.0, 1.0, 2.0, 5.0])
    >>> def rank(c):                      # rank r holds units [3 r, 3 r + 3) of one layer
    ...     layer = ShardedLayer("w", 0, RowShard((2, 3), c.rank, c.rank + 1), units[3 * c.rank:3 * c.rank + 3],
    ...                          None, units_per_row_block=3, starts=[0, 1], stops=[1, 2])
    ...     layer.units = layer.score
    ...     problem = CutProblem([layer], 3, c.world_size)     # prune the 3 lowest
    ...     find_cuts(c, [problem])
    ...     return problem.keep(0, c.rank).astype(int).tolist()
    >>> ThreadGroup(2).run(rank)          # the two 1.0s and the 2.0 go
    [[1, 0, 1], [0, 0, 1]]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..selection.kernel import chunk_bounds, kth_smallest, sample_bracket, split_ties
from .collective import Collective
from .sharded_layer import ShardedLayer

__all__ = ["CutProblem", "find_cuts"]

_MIN_SAMPLE = 256             # samples per selection round (grows with the problem, see _budget)
_MAX_SAMPLE = 8192

def _budget(n: int, sample_size: int | None) -> tuple[int, int]:
    """(samples per round, candidates gathered at once) for a selection over ``n`` units."""
    m = int(min(_MAX_SAMPLE, max(_MIN_SAMPLE, n // 2048))) if sample_size is None else sample_size
    return m, 4 * m


def _values(units: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    return units if idx is None else units[idx]


def _part_counts(units: np.ndarray, idx: np.ndarray | None, p1: Any, p2: Any) -> tuple[int, int]:
    """(#(x < p1), #(p1 <= x <= p2)) over the candidates."""
    if idx is not None:
        v = units[idx]
        a = int(np.count_nonzero(v < p1))
        return a, int(np.count_nonzero(v <= p2)) - a
    a = le = 0
    for s, e in chunk_bounds(0, units.size):
        c = units[s:e]
        a += int(np.count_nonzero(c < p1))
        le += int(np.count_nonzero(c <= p2))
    return a, le - a


def _part_select(units: np.ndarray, idx: np.ndarray | None, p1: Any, p2: Any, part: int) -> np.ndarray:
    """Indices (into ``units``) of the candidates in part 0 (x < p1), 1 (p1 <= x <= p2) or 2 (x > p2)."""
    def pick(v: np.ndarray) -> np.ndarray:
        if part == 0:
            return v < p1
        if part == 2:
            return v > p2
        return (v >= p1) & (v <= p2)
    if idx is not None:
        return idx[pick(units[idx])]
    found = [np.flatnonzero(pick(units[s:e])) + s for s, e in chunk_bounds(0, units.size)]
    return np.concatenate(found) if found else np.empty(0, dtype=np.intp)


def _below_equal(units: np.ndarray, v: Any) -> tuple[int, int]:
    lt = eq = 0
    for s, e in chunk_bounds(0, units.size):
        c = units[s:e]
        lt += int(np.count_nonzero(c < v))
        eq += int(np.count_nonzero(c == v))
    return lt, eq


@dataclass
class CutProblem:
    """Prune the ``k`` lowest units of ``members`` (global order: member order, then unit index)."""

    members: list[ShardedLayer]
    k: int
    world: int
    sample_size: int | None = None
    n: int = 0
    mode: str = "search"                 # "search", "none" (k = 0), "all" (k = n), "cut" (value found)
    value: Any = None                    # the k-th lowest unit score once found
    below: int = 0                       # units ranked below the current candidates, over all ranks
    cand: np.ndarray | None = None       # (members, ranks) candidate counts
    idx: list[np.ndarray | None] = field(default_factory=list)   # local candidates per member (None: all)
    exact_split: bool = False
    sample: int = 0
    gather: int = 0
    allow: np.ndarray | None = None      # (members, ranks) ties at the value pruned
    pruned: np.ndarray | None = None     # (members,) units pruned per member, over all ranks

    def __post_init__(self) -> None:
        self.cand = np.array([[m.unit_range(r)[1] for r in range(self.world)] for m in self.members],
                             dtype=np.int64).reshape(len(self.members), self.world)
        self.n = int(self.cand.sum())
        self.idx = [None] * len(self.members)
        self.sample, self.gather = _budget(self.n, self.sample_size)
        if self.k <= 0:
            self.mode = "none"
            self.pruned = np.zeros(len(self.members), dtype=np.int64)
        elif self.k >= self.n:
            self.mode = "all"
            self.pruned = self.cand.sum(axis=1)

    def counts(self, gathering: bool) -> np.ndarray:
        """(members, ranks) values each rank sends this round."""
        if gathering:
            return self.cand
        total = int(self.cand.sum())
        want = -(-self.sample * self.cand // total)          # ceil, proportional to the candidates
        return np.minimum(want, self.cand)

    def keep(self, j: int, rank: int) -> np.ndarray:
        """Flat keep mask of member ``j``'s local units."""
        units = self.members[j].units
        if self.mode == "none":
            return np.ones(units.size, dtype=bool)
        if self.mode == "all":
            return np.zeros(units.size, dtype=bool)
        keep = np.empty(units.size, dtype=bool)
        for s, e in chunk_bounds(0, units.size):
            np.greater_equal(units[s:e], self.value, out=keep[s:e])
        remaining = int(self.allow[j, rank])             # ties pruned here: the first ones in index order
        for s, e in chunk_bounds(0, units.size):
            if not remaining:
                break
            i = np.flatnonzero(units[s:e] == self.value)[:remaining]
            keep[i + s] = False
            remaining -= i.size
        return keep


def find_cuts(collective: Collective, problems: list[CutProblem]) -> None:
    """Find the cut of every problem; afterwards each has ``mode``, ``value``, ``allow`` and ``pruned``."""
    while True:
        active = [p for p in problems if p.mode == "search"]
        if not active:
            break
        splits = _sample_round(collective, active)
        if splits:
            _narrow(collective, splits)
    _settle_ties(collective, [p for p in problems if p.mode == "cut"])


def _sample_round(collective: Collective, active: list[CutProblem]) -> list[tuple[CutProblem, Any, Any]]:
    """1) Every rank sends a sample of its candidates, or all of them once they are few: a problem whose
    candidates were all gathered gets its cut; the others get two pivots around the wanted rank."""
    rank, world = collective.rank, collective.world_size
    plan = []
    payload = []
    for p in active:
        gathering = int(p.cand.sum()) <= p.gather
        sizes = p.counts(gathering)
        plan.append((p, gathering, sizes))
        for j, m in enumerate(p.members):
            s, c = int(sizes[j, rank]), int(p.cand[j, rank])
            src = p.idx[j]
            if s == c:
                vals = _values(m.units, src)
            else:                                       # evenly strided over the candidates
                pos = (np.arange(s, dtype=np.int64) * c) // s
                vals = m.units[pos] if src is None else m.units[src[pos]]
            payload.append(np.ascontiguousarray(vals).view(np.uint8).reshape(-1))
    parts = collective.allgather(np.concatenate(payload) if payload else np.empty(0, np.uint8))
    offsets = [0] * world
    splits = []
    for p, gathering, sizes in plan:
        vals = []
        for r in range(world):
            for j, m in enumerate(p.members):
                nbytes = int(sizes[j, r]) * m.units.dtype.itemsize
                vals.append(parts[r][offsets[r]:offsets[r] + nbytes].view(m.units.dtype))
                offsets[r] += nbytes
        sample = np.concatenate(vals)
        want = p.k - p.below                               # 1-based rank among the candidates
        if gathering:
            p.value, p.mode = kth_smallest(sample, want - 1), "cut"
            continue
        q, size = want / int(p.cand.sum()), sample.size
        if p.exact_split:
            p1 = p2 = kth_smallest(sample, min(size - 1, max(0, int(q * size))))
        else:
            p1, p2 = sample_bracket(sample, q, open_ends=False)
        splits.append((p, p1, p2))
    return splits


def _narrow(collective: Collective, splits: list[tuple[CutProblem, Any, Any]]) -> None:
    """2) Counts on either side of the two pivots, then every rank keeps the same part of the candidates."""
    local = np.array([c for p, p1, p2 in splits for j, m in enumerate(p.members)
                      for c in _part_counts(m.units, p.idx[j], p1, p2)], dtype=np.int64)
    counts = np.stack(collective.allgather(local))          # (ranks, 2 * members over problems)
    col = 0
    for p, p1, p2 in splits:
        nm = len(p.members)
        a = counts[:, col:col + 2 * nm:2].T                # (members, ranks)
        b = counts[:, col + 1:col + 2 * nm:2].T
        col += 2 * nm
        want, total = p.k - p.below, int(p.cand.sum())
        A, B = int(a.sum()), int(b.sum())
        if want <= A:
            part, new = 0, a
        elif want <= A + B:
            if p1 == p2:
                p.value, p.mode = p1, "cut"
                continue
            part, new = 1, b
            p.below += A
        else:
            part, new = 2, p.cand - a - b
            p.below += A + B
        p.exact_split = 2 * int(new.sum()) > total         # under half gone (ties): split at one value next
        p.cand = np.ascontiguousarray(new, dtype=np.int64)
        p.idx = [_part_select(m.units, p.idx[j], p1, p2, part) for j, m in enumerate(p.members)]


def _settle_ties(collective: Collective, found: list[CutProblem]) -> None:
    """3) Ties at each cut value: exchange per-piece counts, prune the first ones in global order."""
    if not found:
        return
    world = collective.world_size
    local = np.array([c for p in found for m in p.members for c in _below_equal(m.units, p.value)],
                     dtype=np.int64)
    counts = np.stack(collective.allgather(local))
    col = 0
    for p in found:
        nm = len(p.members)
        lt = counts[:, col:col + 2 * nm:2].T
        eq = counts[:, col + 1:col + 2 * nm:2].T
        col += 2 * nm
        need = p.k - int(lt.sum())
        p.allow = np.zeros_like(lt)
        order = [(j, r) for j, m in enumerate(p.members)          # member order, then the ranks' unit order
                 for r in sorted(range(world), key=lambda r: m.unit_range(r)[0])]
        split = split_ties([eq[j, r] for j, r in order], need)
        for (j, r), t in zip(order, split):
            p.allow[j, r] = t
        if sum(split) != need:                                # pragma: no cover - counts are exact
            raise RuntimeError("sharded selection: tie counts do not add up")
        p.pruned = lt.sum(axis=1) + p.allow.sum(axis=1)
        p.idx = [None] * nm
