"""The order ties are broken in: lower index first, in memory order or in that of a transposed view.

Every selection of the core prunes, among equal scores, the unit with the
lower flat index first, so masks never depend on threads or on the sort
algorithm. An element-wise pattern on a >= 3-D weight keeps the canonical
layout but breaks ties in the order of its 2-D view: ``tie_axes`` names the
transpose whose row-major order is the tie order.

Example:
    >>> import numpy as np
    >>> tie_rank(np.array([1, 2]), (2, 2), (1, 0)).tolist()   # (0, 1) and (1, 0) of a 2x2, column by column
    [2, 1]
    >>> partition_select(np.array([2.0, 1.0, 1.0, 3.0]), 2).tolist()
    [False, True, True, False]
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .kernel import kth_smallest

__all__ = ["tie_rank", "first_in_tie_order", "lowest_k_flags", "partition_select"]


def tie_rank(idx: np.ndarray, shape: tuple[int, ...], tie_axes: tuple[int, ...] | None) -> np.ndarray:
    """Position in tie order of the memory-order flat indices ``idx`` of an array of ``shape``.

    The tie order is the row-major order of ``array.transpose(tie_axes)``
    (None: the memory order itself).
    """
    if tie_axes is None:
        return idx
    coords = np.unravel_index(idx, shape)
    return np.ravel_multi_index(tuple(coords[a] for a in tie_axes), tuple(shape[a] for a in tie_axes))


def first_in_tie_order(positions: np.ndarray, count: int, keys: np.ndarray | None) -> np.ndarray:
    """The first ``count`` of ``positions`` (ascending) when ordered by ``keys`` (None: as given)."""
    if keys is None or count >= positions.size:
        return positions[:count]
    return positions[np.argsort(keys, kind="stable")[:count]]


def lowest_k_flags(values: np.ndarray, k: int,
                    tie_keys: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """True at the ``k`` (``0 < k <= values.size``) lowest of the flat ``values``: one partition,
    ties at the k-th value in the order of ``tie_keys(positions)`` (None: the positions' own order)."""
    v = kth_smallest(values, k - 1)
    pick = values < v
    rest = k - int(np.count_nonzero(pick))
    if rest:
        ties = np.flatnonzero(values == v)
        keys = tie_keys(ties) if tie_keys is not None and rest < ties.size else None
        pick[first_in_tie_order(ties, rest, keys)] = True
    return pick


def partition_select(flat: np.ndarray, k: int, shape: tuple[int, ...] | None = None,
                      tie_axes: tuple[int, ...] | None = None) -> np.ndarray:
    """Reference path: full partition, ties in tie order. Returns the pruned mask of ``flat``."""
    return lowest_k_flags(flat, k, None if tie_axes is None else lambda ties: tie_rank(ties, shape, tie_axes))
