"""Exact, linear-time selection of the lowest-scoring units.

Pruning fraction ``s`` of ``n`` units prunes exactly
``k = min(ceil(s * n - 0.5), n - 1)`` of them (rounded half down) (:func:`exact_prune_count`).
Among equal scores the unit with the lower flat index goes first, so the
result never depends on threads or on the sort algorithm.

The kernel never sorts the whole array: it estimates a bracket around the
k-th smallest score from a strided sample, classifies every element against
the bracket in cache-sized chunks (below: pruned, above: kept), and only
partitions the few candidates inside the bracket. A bracket that misses
(adversarial data) is replaced by the exact k-th value from a full
``np.partition``; the answer is identical either way. :class:`LowestKCut`
(:mod:`sparsify.selection.lowest_k_cut`) does the same over several arrays at once (the global scope: one threshold
over all layers, ties in layer order) without concatenating them, and reuses
its classification when it is asked again for a nearby count.

Example:
    >>> import numpy as np
    >>> lowest_k_mask(np.array([3.0, 1.0, 1.0, 2.0]), 2)
    array([False,  True,  True, False])
"""
from __future__ import annotations

import math

import numpy as np

from .lowest_k_cut import LowestKCut
from .score_checks import check_finite
from .kernel import kth_smallest
from .tie_order import first_in_tie_order, partition_select, tie_rank

__all__ = ["exact_prune_count", "lowest_k_mask", "lowest_k_keep"]

_SMALL = 1 << 19          # up to this size a plain partition is fastest (the bracket's sample costs more)
_SMALL_ELIGIBLE = 1 << 18  # the same with ``eligible`` (the eligible scores are gathered first)


def exact_prune_count(sparsity: float, n_units: int, keep_one: bool = True) -> int:
    """Number of units to prune: ``min(ceil(sparsity * n - 0.5), n - 1)``.

    The nearest integer to ``sparsity * n``; an exact half rounds *down*, so the
    extra unit is kept (as tfmot and torch.ao do: 90% of 125 weights prunes
    112, not 113). See ``docs/design.md``, canonical rule 5.

    Example:
        >>> exact_prune_count(0.9, 10), exact_prune_count(0.95, 3), exact_prune_count(0.9, 125)
        (9, 2, 112)
    """
    if n_units <= 0:
        return 0
    k = int(math.ceil(float(sparsity) * n_units - 0.5))
    upper = n_units - 1 if keep_one else n_units
    return max(0, min(k, upper))


def _keep_among_eligible(arr: np.ndarray, k: int, name: str, tie_axes: tuple[int, ...] | None,
                         eligible: np.ndarray) -> np.ndarray | None:
    """:func:`lowest_k_keep` of a small float array with ``eligible`` without writing ``-inf`` into a copy.

    The units that are not eligible are pruned first (they score ``-inf``); the rest of ``k`` is the
    lowest of the eligible scores: the kernel's k-th value of the eligible scores gives the cut value, the
    ties at it go in tie order. None when that shortcut does not give the same answer: fewer than
    all of the non-eligible units are pruned, or an eligible score is ``-inf`` (it would tie with them).
    """
    flat = arr.reshape(-1)
    el = np.broadcast_to(eligible, arr.shape).reshape(-1)
    vals = np.compress(el, flat)
    need = k - (flat.size - vals.size)
    if need < 0:
        return None
    check_finite(vals, name)
    if vals.size and vals.min() == -np.inf:
        return None
    if need == 0:
        return el.copy().reshape(arr.shape)
    if need == vals.size:
        return np.zeros(arr.shape, dtype=bool)
    v = kth_smallest(vals, need - 1)
    rest = need - int(np.count_nonzero(vals < v))          # ties at v still to prune
    keep = flat > v                                          # classified on the whole array: no scatter back
    keep &= el
    at_v = (flat == v) & el
    if rest < np.count_nonzero(at_v):                       # keep the ties after the first `rest` in tie order
        ties = np.flatnonzero(at_v)                         # (counted first: their positions rarely matter)
        keys = None if tie_axes is None else tie_rank(ties, arr.shape, tie_axes)
        pruned = first_in_tie_order(ties, rest, keys)
        keep[ties] = True
        keep[pruned] = False
    return keep.reshape(arr.shape)


def lowest_k_mask(scores: np.ndarray, k: int, name: str = "scores", *,
                  tie_axes: tuple[int, ...] | None = None, eligible: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask (same shape as ``scores``) of the ``k`` lowest scores.

    Ties go to the lower flat (row-major) index, or to the lower index of
    ``scores.transpose(tie_axes)`` when ``tie_axes`` is given. ``-inf`` sorts
    first, which is how callers force already-pruned units to stay pruned
    (``eligible=False`` does the same without a copy of the scores).
    NaN raises ``ValueError`` naming ``name``.

    Example:
        >>> lowest_k_mask(np.array([[0.0, 5.0], [0.0, 1.0]]), 1)
        array([[ True, False],
               [False, False]])
        >>> lowest_k_mask(np.array([[0.0, 0.0], [0.0, 1.0]]), 2, tie_axes=(1, 0))   # ties column by column
        array([[ True, False],
               [ True, False]])
        >>> lowest_k_mask(np.array([0.0, 5.0, 1.0]), 1, eligible=np.array([True, False, True]))
        array([False,  True, False])
    """
    return ~lowest_k_keep(scores, k, name, tie_axes=tie_axes, eligible=eligible)


def lowest_k_keep(scores: np.ndarray, k: int, name: str = "scores", *,
                  tie_axes: tuple[int, ...] | None = None, eligible: np.ndarray | None = None) -> np.ndarray:
    """Complement of :func:`lowest_k_mask` (True = kept), without an extra pass.

    Example:
        >>> lowest_k_keep(np.array([2.0, 1.0, 3.0]), 1).tolist()
        [True, False, True]
    """
    arr = np.asarray(scores)
    n = arr.size
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, {n}] for {name!r}, got {k}")
    if k == 0 or k == n or n <= (_SMALL if eligible is None else _SMALL_ELIGIBLE):
        if eligible is not None and 0 < k < n and arr.dtype.kind == "f":
            keep = _keep_among_eligible(arr, k, name, tie_axes, np.asarray(eligible, dtype=bool))
            if keep is not None:
                return keep
        if eligible is not None:
            arr = np.where(eligible, arr, -np.inf)
        flat = arr.reshape(-1)
        check_finite(flat, name)
        if k == 0 or k == n:
            return np.full(arr.shape, k == 0, dtype=bool)
        return ~partition_select(flat, k, arr.shape, tie_axes).reshape(arr.shape)
    cut = LowestKCut([arr], [name], [tie_axes], [eligible])
    cut.counts(k)
    return cut.keeps()[0]
