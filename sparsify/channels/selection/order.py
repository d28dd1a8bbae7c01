"""The order in which one group's channels are pruned: least important first, every segment keeps its minimum.

Every segment (source layer of a concatenation) keeps at least
``min_channels`` channels (default 1), so a selection never empties a source
layer; within that constraint the least important channels go first (a
partition-matroid greedy, which is optimal). Ties go to the lower index
(docs/design.md, rule 6).

Example:
    >>> import numpy as np
    >>> pruning_order(np.array([3., 4., 5., 0., 1.]), np.array([0, 0, 0, 1, 1])).tolist()
    [3, 0, 1]
"""
from __future__ import annotations

from numbers import Integral
from typing import Optional, Tuple

import numpy as np

from .scores import MinChannels

__all__ = ["segment_min_channels", "max_channels_to_prune", "pruning_order", "cumulative_pruning_cost",
           "least_important_indices"]


def _check_scores(scores: np.ndarray, segments: Optional[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {scores.shape}")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
    if segments is None:
        return scores, np.zeros(scores.size, dtype=np.int64)
    segments = np.asarray(segments)
    if segments.shape != scores.shape or (segments.size and not np.issubdtype(segments.dtype, np.integer)):
        raise ValueError(f"segments must be integers with the shape of scores {scores.shape}, got "
                         f"{segments.dtype} {segments.shape}")
    return scores, segments.astype(np.int64)


def segment_min_channels(segments: np.ndarray, min_channels: MinChannels = 1) -> Tuple[np.ndarray, np.ndarray]:
    """Per segment: (sizes, channels that must stay), segments in ascending id order.

    Args:
        segments: segment id of every channel of one group.
        min_channels: channels each segment keeps: an integer >= 1, or a function
            of the segment size (e.g. an architecture strategy's minimum);
            clipped to the segment size.

    Raises:
        ValueError: ``min_channels`` (or its result) is not an integer >= 1.

    Example:
        >>> sizes, keep = segment_min_channels(np.array([0, 0, 0, 1]), lambda n: 2)
        >>> sizes.tolist(), keep.tolist()
        ([3, 1], [2, 1])
    """
    _, sizes = np.unique(np.asarray(segments, dtype=np.int64), return_counts=True)
    mins = []
    for size in sizes.tolist():
        m = min_channels(size) if callable(min_channels) else min_channels
        if isinstance(m, (bool, np.bool_)) or not isinstance(m, (Integral, np.integer)) or m < 1:
            raise ValueError(f"min_channels must be an integer >= 1 or a function returning one, got {m!r} "
                             f"for a segment of {size} channels")
        mins.append(min(int(m), size))
    return sizes.astype(np.int64), np.asarray(mins, dtype=np.int64)


def max_channels_to_prune(segments: np.ndarray, min_channels: MinChannels = 1) -> int:
    """Most channels one group can lose: its size minus what every segment must keep.

    Example:
        >>> max_channels_to_prune(np.array([0, 0, 0, 1, 1])), max_channels_to_prune(np.zeros(4, int), 2)
        (3, 2)
    """
    sizes, mins = segment_min_channels(segments, min_channels)
    return int(sizes.sum() - mins.sum())


def pruning_order(scores: np.ndarray, segments: Optional[np.ndarray] = None,
                  min_channels: MinChannels = 1) -> np.ndarray:
    """Channel indices in the order they are pruned, as many as may be pruned.

    Least important first (ties: lower index first), skipping a channel once
    its segment is down to ``min_channels``. The first ``k`` entries are the
    cheapest ``k`` channels to prune under that constraint (the constraint is a
    partition matroid, on which this greedy is optimal).

    Example:
        >>> pruning_order(np.array([3., 4., 5., 0., 1.]), np.array([0, 0, 0, 1, 1])).tolist()
        [3, 0, 1]
    """
    scores, segments = _check_scores(scores, segments)
    if not scores.size:
        return np.zeros(0, dtype=np.int64)
    _, inverse = np.unique(segments, return_inverse=True)
    sizes, mins = segment_min_channels(segments, min_channels)
    caps = sizes - mins
    order = np.argsort(scores, kind="stable")
    seg_in_order = inverse.reshape(-1)[order]
    by_segment = np.argsort(seg_in_order, kind="stable")  # positions grouped by segment, order kept
    grouped = seg_in_order[by_segment]
    rank = np.empty(order.size, dtype=np.int64)
    rank[by_segment] = np.arange(order.size) - np.searchsorted(grouped, grouped, side="left")
    return order[rank < caps[seg_in_order]].astype(np.int64)


def cumulative_pruning_cost(scores: np.ndarray, segments: Optional[np.ndarray] = None,
                            min_channels: MinChannels = 1) -> np.ndarray:
    """``cost[k]`` = total importance removed by pruning the cheapest ``k`` channels.

    Length ``max_channels_to_prune + 1``; ``cost[0] == 0``. This is the
    objective the latency-driven search minimises.

    Example:
        >>> cumulative_pruning_cost(np.array([3., 4., 5., 0., 1.]), np.array([0, 0, 0, 1, 1])).tolist()
        [0.0, 0.0, 3.0, 7.0]
    """
    scores, segments = _check_scores(scores, segments)
    order = pruning_order(scores, segments, min_channels)
    return np.concatenate([[0.0], np.cumsum(scores[order])])


def least_important_indices(scores: np.ndarray, k: int, segments: Optional[np.ndarray] = None,
                            min_channels: MinChannels = 1) -> np.ndarray:
    """Sorted indices of the ``k`` cheapest channels to prune; ties go to the lower index (docs/design.md, rule 6).

    Without ``segments`` any ``k`` up to the number of scores is allowed;
    with them, every segment keeps ``min_channels`` (see :func:`pruning_order`).

    Raises:
        ValueError: ``k`` not an integer in [0, n] (or above what the segments allow).

    Example:
        >>> least_important_indices(np.array([2., 1., 1., 0.]), 2)
        array([1, 3])
        >>> least_important_indices(np.array([2., 1., 1., 0.]), 2, np.array([0, 0, 1, 1])).tolist()
        [1, 3]
        >>> least_important_indices(np.array([2., 1., 1., 0.]), 2, np.array([0, 0, 0, 1])).tolist()
        [1, 2]
    """
    scores, seg = _check_scores(scores, segments)
    if not isinstance(k, Integral) or isinstance(k, bool) or not 0 <= k <= scores.size:
        raise ValueError(f"k must be an integer in [0, {scores.size}], got {k!r}")
    if segments is None:
        return np.sort(np.argsort(scores, kind="stable")[: int(k)])
    order = pruning_order(scores, seg, min_channels)
    if k > order.size:
        raise ValueError(f"k = {k} is too large: the segments must keep {scores.size - order.size} of "
                         f"{scores.size} channels, so at most {order.size} can be pruned")
    return np.sort(order[: int(k)])
