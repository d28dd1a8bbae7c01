"""Framework-neutral bookkeeping for channel dependency analysis: which channels must be removed together.

A framework adapter traces a model and gives every output channel of every
producing layer an integer *atom* id. Whenever two channels must be removed
together (a residual add, a depthwise convolution, the same position of every
block of a grouped convolution), it records their union. The connected
components are the *labels*: one label is one prunable unit, removed as a
whole. This module holds the framework-neutral parts of that bookkeeping:

- :class:`LabelUnionFind`, a vectorised union-find (the smallest id is the root);
- :func:`refine_reshape` and :func:`shrinking_factor`, which tell how a
  reshape of a channel dimension splits it into factors, and which factor the
  model code is assumed to shrink when channels are removed;
- :func:`rectangular_dim`, which tells along which dimension a set of a
  tensor's elements forms whole slices (how a free parameter is pruned).

Example:
    >>> uf = LabelUnionFind()
    >>> ids = uf.new(6)
    >>> uf.union(np.array([1, 4]), np.array([3, 5]))
    True
    >>> uf.find(ids).tolist()
    [0, 1, 2, 1, 4, 4]
    >>> refine_reshape((2, 6, 5), (2, 2, 3, 5))[1]  # the 6 channels split into 2 x 3
    Run(in_dims=[1], out_dims=[1, 2], sizes=[2, 3], in_factors=[[0, 1]], out_factors=[[0], [1]])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

__all__ = ["LabelUnionFind", "Run", "refine_reshape", "shrinking_factor", "rectangular_dim"]


class LabelUnionFind:
    """Union-find over the integer ids ``0 .. len - 1``; ids are added with :meth:`new`.

    Unions and look-ups take whole arrays. The root of a set is its smallest
    id, so an id that never joins another one is its own root.

    Example:
        >>> uf = LabelUnionFind()
        >>> a, b = uf.new(3), uf.new(3)
        >>> uf.union(a, b[::-1])  # 0~5, 1~4, 2~3
        True
        >>> uf.find(b).tolist(), uf.union(a, b[::-1])
        ([2, 1, 0], False)
    """

    def __init__(self) -> None:
        self._buffer = np.zeros(0, dtype=np.int64)
        self._parent = self._buffer[:0]

    def __len__(self) -> int:
        return int(self._parent.size)

    def new(self, count: int) -> np.ndarray:
        """Add ``count`` fresh ids (each its own set) and return them."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ValueError(f"count must be a non-negative integer, got {count!r}")
        start, stop = self._parent.size, self._parent.size + int(count)
        if stop > self._buffer.size:  # grow geometrically: many small additions stay linear overall
            grown = np.empty(max(stop, 2 * self._buffer.size), dtype=np.int64)
            grown[:start] = self._parent
            self._buffer = grown
        self._buffer[start:stop] = np.arange(start, stop, dtype=np.int64)
        self._parent = self._buffer[:stop]
        return np.arange(start, stop, dtype=np.int64)

    def find(self, ids) -> np.ndarray:
        """Root of every id (same shape as ``ids``)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self._parent.size):
            raise ValueError(f"ids must lie in [0, {self._parent.size}), got {ids.min()}..{ids.max()}")
        roots = self._parent[ids]
        while True:
            up = self._parent[roots]
            if np.array_equal(up, roots):
                return roots
            roots = up

    def union(self, a, b) -> bool:
        """Join the set of ``a[i]`` with the set of ``b[i]`` for every i; True if any set changed."""
        a = np.asarray(a, dtype=np.int64).reshape(-1)
        b = np.asarray(b, dtype=np.int64).reshape(-1)
        if a.shape != b.shape:
            raise ValueError(f"a and b must have the same number of ids, got {a.size} and {b.size}")
        changed = False
        while a.size:
            ra, rb = self.find(a), self.find(b)
            differ = ra != rb
            if not differ.any():
                break
            a, b = a[differ], b[differ]
            lo, hi = np.minimum(ra[differ], rb[differ]), np.maximum(ra[differ], rb[differ])
            self._parent[hi] = lo  # a root repeated in hi keeps one of its partners; the loop joins the rest
            changed = True
            self._compress()
        return changed

    def roots(self) -> np.ndarray:
        """Root of every id."""
        self._compress()
        return self._parent.copy()

    def _compress(self) -> None:
        parent = self._parent
        while True:
            up = parent[parent]
            if np.array_equal(up, parent):
                break
            parent = up
        self._parent[:] = parent


@dataclass(frozen=True)
class Run:
    """A stretch of dimensions a reshape maps onto each other, in its finest common factorisation.

    Attributes:
        in_dims: the input dimensions of the run.
        out_dims: the output dimensions of the run.
        sizes: the factors, outermost first; their product is the run's size.
        in_factors: for every input dimension, the indices of the factors it consists of.
        out_factors: the same for every output dimension.
    """

    in_dims: List[int]
    out_dims: List[int]
    sizes: List[int]
    in_factors: List[List[int]]
    out_factors: List[List[int]]


def _factors(dims: Sequence[int], shape: Sequence[int], cuts: Sequence[int]) -> List[List[int]]:
    out, stride = [], int(np.prod([shape[d] for d in dims], dtype=np.int64))
    for d in dims:
        inner = stride // shape[d]
        out.append([k for k in range(len(cuts) - 1) if cuts[k] <= stride and cuts[k + 1] >= inner])
        stride = inner
    return out


def refine_reshape(in_shape: Sequence[int], out_shape: Sequence[int]) -> Optional[List[Run]]:
    """Group the dimensions of a reshape ``in_shape -> out_shape`` into runs and factor each run.

    Returns None when the shapes have different sizes, contain a zero, or a run
    has no common factorisation (e.g. ``(2, 3) -> (3, 2)``: elements are
    re-dealt, no dimension survives as a factor).

    Example:
        >>> [r.sizes for r in refine_reshape((4, 6), (4, 2, 3))]
        [[4], [2, 3]]
        >>> refine_reshape((2, 3), (3, 2)) is None
        True
    """
    in_shape, out_shape = [int(s) for s in in_shape], [int(s) for s in out_shape]
    if 0 in in_shape or 0 in out_shape or int(np.prod(in_shape, dtype=np.int64)) != int(np.prod(out_shape,
                                                                                                 dtype=np.int64)):
        return None
    runs: List[Run] = []
    i = j = 0
    while i < len(in_shape) or j < len(out_shape):
        di: List[int] = []
        dj: List[int] = []
        a = b = 1
        if i < len(in_shape):
            a *= in_shape[i]
            di.append(i)
            i += 1
        if j < len(out_shape):
            b *= out_shape[j]
            dj.append(j)
            j += 1
        while a != b:
            if a < b and i < len(in_shape):
                a *= in_shape[i]
                di.append(i)
                i += 1
            elif b < a and j < len(out_shape):
                b *= out_shape[j]
                dj.append(j)
                j += 1
            else:
                return None
        strides = set()
        for dims, shape in ((di, in_shape), (dj, out_shape)):
            stride = a
            strides.add(stride)
            for d in dims:
                stride //= shape[d]
                strides.add(stride)
        cuts = sorted(strides, reverse=True)  # a, ..., 1
        if any(cuts[k] % cuts[k + 1] for k in range(len(cuts) - 1)):
            return None
        sizes = [cuts[k] // cuts[k + 1] for k in range(len(cuts) - 1)]
        runs.append(Run(di, dj, sizes, _factors(di, in_shape, cuts), _factors(dj, out_shape, cuts)))
    return runs


def shrinking_factor(run: Run, varying: Sequence[int]) -> int:
    """The factor of ``run`` assumed to shrink when channels are removed, among the ``varying`` ones.

    A reshape of a channel dimension is written in model code with all factors
    but one fixed (``x.view(b, groups, c // groups, h, w)``, ``(b, heads, c //
    heads)``). The factor that is a whole output dimension on its own is the one
    the code computes; among several, the largest (ties: the innermost). The
    others are assumed to be constants, so channels must be removed at the same
    position of every one of their values.

    Raises:
        ValueError: ``varying`` is empty or names a factor the run does not have.

    Example:
        >>> run = refine_reshape((8, 5), (2, 4, 5))[0]  # channel shuffle: 8 -> 2 x 4
        >>> shrinking_factor(run, [0, 1])
        1
        >>> run = refine_reshape((6, 5), (3, 10))[0]  # 6 x 5 -> 3 x (2 x 5): the 2 sits inside a fixed size
        >>> run.sizes, shrinking_factor(run, [0, 1])
        ([3, 2, 5], 0)
    """
    varying = sorted(int(v) for v in varying)
    if not varying or varying[0] < 0 or varying[-1] >= len(run.sizes):
        raise ValueError(f"varying must name factors in 0..{len(run.sizes) - 1}, got {varying}")
    alone_out = {f[0] for f in run.out_factors if len(f) == 1}
    alone_in = {f[0] for f in run.in_factors if len(f) == 1}
    for pool in ([v for v in varying if v in alone_out], [v for v in varying if v in alone_in], varying):
        if pool:
            return max(pool, key=lambda v: (run.sizes[v], v))
    raise AssertionError("unreachable")  # pragma: no cover


def rectangular_dim(shape: Sequence[int], flat_indices) -> Optional[int]:
    """The dimension along which the elements ``flat_indices`` of a ``shape`` tensor are whole slices.

    The elements must be exactly ``{x : x[dim] in R}`` for some set ``R``;
    among several such dimensions the first one where ``R`` is not everything
    is returned. None if there is no such dimension.

    Example:
        >>> rectangular_dim((4, 1, 1), [2])  # a (channels, 1, 1) layer scale
        0
        >>> rectangular_dim((1, 3, 4), [1, 5, 9])  # column 1 of every row of a (1, tokens, channels) embedding
        2
        >>> rectangular_dim((2, 2), [0, 3]) is None
        True
    """
    shape = tuple(int(s) for s in shape)
    flat = np.unique(np.asarray(flat_indices, dtype=np.int64))
    if not flat.size:
        return None
    coords = np.unravel_index(flat, shape)
    total = int(np.prod(shape, dtype=np.int64))
    fallback = None
    for dim, size in enumerate(shape):
        kept = np.unique(coords[dim])
        if flat.size == kept.size * (total // size):
            if kept.size < size:
                return dim
            fallback = dim if fallback is None else fallback
    return fallback
