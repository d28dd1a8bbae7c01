"""Exact, linear-time selection of the lowest-scoring units.

Pruning fraction ``s`` of ``n`` units prunes exactly
``k = min(floor(s * n + 0.5), n - 1)`` of them (:func:`exact_prune_count`).
Among equal scores the unit with the lower flat index goes first, so the
result never depends on threads or on the sort algorithm.

The kernel never sorts the whole array: it estimates a bracket around the
k-th smallest score from a strided sample, classifies every element against
the bracket in cache-sized chunks, and only partitions the few candidates
inside the bracket. A bracket that misses (adversarial data) falls back to a
full ``np.partition``; the answer is identical either way.

Example:
    >>> import numpy as np
    >>> lowest_k_mask(np.array([3.0, 1.0, 1.0, 2.0]), 2)
    array([False,  True,  True, False])
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["exact_prune_count", "lowest_k_mask", "lowest_k_keep", "check_finite", "NaNScoreError"]

_CHUNK = 1 << 18          # elements classified per step (about L2-sized)
_SAMPLE = 1 << 16         # sample size used to bracket the k-th value
_SMALL = 1 << 15          # below this size a plain partition is fastest


def exact_prune_count(sparsity: float, n_units: int, keep_one: bool = True) -> int:
    """Number of units to prune: ``min(floor(sparsity * n + 0.5), n - 1)``.

    Example:
        >>> exact_prune_count(0.9, 10), exact_prune_count(0.95, 3)
        (9, 2)
    """
    if n_units <= 0:
        return 0
    k = int(math.floor(float(sparsity) * n_units + 0.5))
    upper = n_units - 1 if keep_one else n_units
    return max(0, min(k, upper))


class NaNScoreError(ValueError):
    """A score is NaN (a ``ValueError``, so callers may catch either)."""


def check_finite(values: np.ndarray, name: str) -> None:
    """Raise :class:`NaNScoreError` (a ``ValueError``) naming ``name`` if ``values`` holds a NaN.

    Infinities are legal scores: ``+inf`` keeps a unit, ``-inf`` prunes it first.

    Example:
        >>> check_finite(np.array([1.0, np.nan]), "fc1")
        Traceback (most recent call last):
        ...
        sparsify.selection.NaNScoreError: layer 'fc1': scores contain NaN; fix the weights or gradients before pruning
    """
    if values.dtype.kind not in "fc":
        return
    with np.errstate(over="ignore", invalid="ignore"):
        screen = np.isnan(np.sum(values))                # cheap; inf - inf or overflow only trigger the exact check
    if screen:
        if np.isnan(values).any():
            raise NaNScoreError(f"layer {name!r}: scores contain NaN; fix the weights or gradients before pruning")


def _partition_select(flat: np.ndarray, k: int) -> np.ndarray:
    """Reference path: full partition, ties by lower index. Returns pruned mask."""
    v = np.partition(flat, k - 1)[k - 1]
    pruned = flat < v
    need = k - int(np.count_nonzero(pruned))
    if need:
        ties = np.flatnonzero(flat == v)[:need]
        pruned[ties] = True
    return pruned


def _bracket(flat: np.ndarray, k: int) -> tuple[float, float]:
    n = flat.size
    stride = max(1, n // _SAMPLE)
    sample = flat[::stride]
    m = sample.size
    q = k / n
    margin = 6.0 * math.sqrt(max(q * (1 - q), 1.0 / m) / m) + 2.0 / m
    lo_i = min(m - 1, max(0, int(math.floor((q - margin) * m))))
    hi_i = min(m - 1, max(0, int(math.ceil((q + margin) * m))))
    part = np.partition(sample, (lo_i, hi_i))
    lo = part[lo_i] if q - margin > 0 else -np.inf
    hi = part[hi_i] if q + margin < 1 else np.inf
    return lo, hi


def lowest_k_mask(scores: np.ndarray, k: int, name: str = "scores") -> np.ndarray:
    """Boolean mask (same shape as ``scores``) of the ``k`` lowest scores.

    Ties go to the lower flat (row-major) index. ``-inf`` sorts first, which is
    how callers force already-pruned units to stay pruned. NaN raises
    ``ValueError`` naming ``name``.

    Example:
        >>> lowest_k_mask(np.array([[0.0, 5.0], [0.0, 1.0]]), 1)
        array([[ True, False],
               [False, False]])
    """
    return ~lowest_k_keep(scores, k, name)


def lowest_k_keep(scores: np.ndarray, k: int, name: str = "scores") -> np.ndarray:
    """Complement of :func:`lowest_k_mask` (True = kept), without an extra pass.

    Example:
        >>> lowest_k_keep(np.array([2.0, 1.0, 3.0]), 1).tolist()
        [True, False, True]
    """
    arr = np.asarray(scores)
    flat = arr.reshape(-1)
    n = flat.size
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, {n}] for {name!r}, got {k}")
    if k == 0 or k == n or n <= _SMALL:
        check_finite(flat, name)
        if k == 0 or k == n:
            return np.full(arr.shape, k == 0, dtype=bool)
        return ~_partition_select(flat, k).reshape(arr.shape)

    lo, hi = _bracket(flat, k)
    keep = np.empty(n, dtype=bool)
    tmp = np.empty(min(n, _CHUNK), dtype=bool)
    found: list[np.ndarray] = []
    for start in range(0, n, _CHUNK):                 # cache-sized chunks: each read once from memory
        chunk, kept = flat[start:start + _CHUNK], keep[start:start + _CHUNK]
        t = tmp[: chunk.size]
        np.less(chunk, lo, out=t)                     # below lo: pruned for sure
        np.logical_not(t, out=kept)                   # NaN compares False, so it stays a candidate
        np.greater(chunk, hi, out=t)                  # above hi: kept for sure
        np.logical_not(t, out=t)
        np.logical_and(t, kept, out=t)                # lo <= x <= hi, or NaN
        i = np.flatnonzero(t)
        if i.size:
            found.append(i + start)
    n_below = n - int(np.count_nonzero(keep))
    idx = np.concatenate(found) if found else np.empty(0, dtype=np.intp)
    val = flat[idx]
    check_finite(val, name)
    need = k - n_below
    if need < 0 or need > val.size:                   # bracket missed the k-th value
        return ~_partition_select(flat, k).reshape(arr.shape)
    if need:
        keep[idx[_partition_select(val, need)]] = False
    return keep.reshape(arr.shape)
