"""Which labels to prune: per-group counts, uniform ratios and the seed's selection functions.

Example:
    >>> import numpy as np
    >>> from sparsify.channels.selection import ChannelScores
    >>> info = ChannelScores([np.array([0, 1, 2, 3]), np.array([4, 5])],
    ...                      [np.array([3., 1., 2., 0.]), np.array([5., 4.])])
    >>> uniform_pruning_labels(info, 0.5)
    [1, 3, 5]
    >>> least_important_labels(info, [1, 0])
    [3]
    >>> concat = ChannelScores([np.arange(5)], [np.array([3., 4., 5., 0., 1.])], [np.array([0, 0, 0, 1, 1])])
    >>> uniform_pruning_labels(concat, 0.6)  # 3, then 4 would empty segment 1: 0 goes instead
    [0, 1, 3]
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Dict, Iterator, List, Mapping, Sequence, Tuple

import numpy as np

from ...selection.lowest_k import exact_prune_count
from .order import max_channels_to_prune, pruning_order, segment_min_channels
from .scores import GroupedScores, MinChannels, group_segments, group_sizes

__all__ = ["max_prunable_per_group", "n_channels_to_prune", "check_pruning_ratio", "iter_group_scores",
           "criterion_by_label", "uniform_pruning_labels", "check_pruning_counts",
           "least_important_labels"]


def max_prunable_per_group(pruning_info: GroupedScores, min_channels: MinChannels = 1) -> List[int]:
    """Most channels each prunable group can lose while every segment keeps ``min_channels``.

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> info = ChannelScores([np.arange(4), np.arange(4, 7)], [np.zeros(4), np.zeros(3)],
        ...                      [np.array([0, 0, 1, 1]), np.zeros(3, int)])
        >>> max_prunable_per_group(info)
        [2, 2]
    """
    return [max_channels_to_prune(seg, min_channels) if seg.size else 0 for seg in group_segments(pruning_info)]


def n_channels_to_prune(n_channels: int, pruning_ratio: float) -> int:
    """Exact count rule (docs/design.md, rule 5): ``min(ceil(ratio * n - 0.5), n - 1)``.

    Example:
        >>> n_channels_to_prune(10, 0.25), n_channels_to_prune(10, 0.26), n_channels_to_prune(3, 0.99)
        (2, 3, 2)
    """
    check_pruning_ratio(pruning_ratio)
    if not isinstance(n_channels, Integral) or n_channels < 1:
        raise ValueError(f"n_channels must be a positive integer, got {n_channels!r}")
    return exact_prune_count(pruning_ratio, n_channels)


def check_pruning_ratio(pruning_ratio: float) -> None:
    """Raise ``ValueError`` unless ``pruning_ratio`` is a real number in [0, 1).

    Example:
        >>> check_pruning_ratio(0.5)
    """
    if isinstance(pruning_ratio, bool) or not isinstance(pruning_ratio, Real) or not 0.0 <= pruning_ratio < 1.0:
        raise ValueError(f"pruning_ratio must be a number in [0, 1), got {pruning_ratio!r}")


def iter_group_scores(pruning_info: GroupedScores) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """Yield ``(labels, criteria)`` for every prunable group, in group order.

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> info = ChannelScores([np.array([0, 1])], [np.array([1., 2.])])
        >>> [(lab.tolist(), crit.tolist()) for lab, crit in iter_group_scores(info)]
        [([0, 1], [1.0, 2.0])]
    """
    for labels, criteria in zip(pruning_info.group_labels, pruning_info.group_criteria):
        yield np.asarray(labels), np.asarray(criteria, dtype=np.float64)


def criterion_by_label(pruning_info: GroupedScores) -> Dict[int, float]:
    """Map every prunable label to its criterion.

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> criterion_by_label(ChannelScores([np.array([4, 7])], [np.array([1., 2.])]))
        {4: 1.0, 7: 2.0}
    """
    out: Dict[int, float] = {}
    for labels, criteria in iter_group_scores(pruning_info):
        out.update(zip(labels.tolist(), criteria.tolist()))
    return out


def uniform_pruning_labels(pruning_info: GroupedScores, pruning_ratio: float,
                                   min_channels: MinChannels = 1) -> List[int]:
    """Prune the same fraction of every prunable group, least important first.

    Each group of n channels loses ``min(ceil(ratio * n - 0.5), n - 1)``
    channels, so at least one channel survives; a group that spans several
    segments (a concatenation) loses at most what leaves ``min_channels`` in
    every segment, and exactly the requested count whenever that allows it.

    Raises:
        ValueError: ``pruning_ratio`` outside [0, 1).

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> info = ChannelScores([np.array([0, 1, 2, 3])], [np.array([3., 1., 2., 0.])])
        >>> uniform_pruning_labels(info, 0.5)
        [1, 3]
        >>> info = ChannelScores([np.arange(4)], [np.array([3., 1., 2., 0.])], [np.array([0, 0, 0, 1])])
        >>> uniform_pruning_labels(info, 0.5), uniform_pruning_labels(info, 0.9)
        ([1, 2], [1, 2])
    """
    check_pruning_ratio(pruning_ratio)
    cfg = [min(n_channels_to_prune(n, pruning_ratio), most) if n else 0
           for n, most in zip(group_sizes(pruning_info), max_prunable_per_group(pruning_info, min_channels))]
    return least_important_labels(pruning_info, cfg, min_channels)


def check_pruning_counts(pruning_cfg: Sequence[int], pruning_info: GroupedScores,
                         min_channels: MinChannels = 1) -> None:
    """Validate a pruning config: one count of channels to prune per prunable group.

    Raises:
        ValueError: wrong length, a non-integer entry, or an entry outside
            ``[0, n_channels - 1]`` for its group (one channel must survive),
            or above what leaves ``min_channels`` in every segment of the group.

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> info = ChannelScores([np.array([0, 1, 2])], [np.zeros(3)])
        >>> check_pruning_counts([2], info)
        >>> check_pruning_counts([3], info)
        Traceback (most recent call last):
        ...
        ValueError: pruning_cfg[0] = 3 is not allowed: group 0 has 3 channels, so at most 2 can be pruned
        >>> concat = ChannelScores([np.arange(3)], [np.zeros(3)], [np.array([0, 0, 1])])
        >>> check_pruning_counts([2], concat)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: pruning_cfg[0] = 2 is not allowed: group 0 has 3 channels, so at most 1 can be pruned (its 2 ...
    """
    sizes = group_sizes(pruning_info)
    if isinstance(pruning_cfg, (str, bytes, Mapping)) or not hasattr(pruning_cfg, "__len__"):
        raise ValueError(f"pruning_cfg must be a sequence of {len(sizes)} integers, got {pruning_cfg!r}")
    if len(pruning_cfg) != len(sizes):
        raise ValueError(f"pruning_cfg has {len(pruning_cfg)} entries but there are {len(sizes)} prunable groups")
    for i, (value, size, seg) in enumerate(zip(pruning_cfg, sizes, group_segments(pruning_info))):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (Integral, np.integer)):
            raise ValueError(f"pruning_cfg[{i}] must be an integer, got {value!r}")
        seg_sizes, mins = segment_min_channels(seg, min_channels) if size else (np.zeros(0), np.zeros(0))
        most = int(seg_sizes.sum() - mins.sum())
        if not 0 <= int(value) <= max(most, 0):
            why = "" if seg_sizes.size <= 1 and most == size - 1 else \
                (f" (its {seg_sizes.size} segments, the source layers of a concatenation, keep at least "
                 f"{mins.tolist()} channels)" if seg_sizes.size > 1 else f" (it keeps at least {int(mins.sum())})")
            raise ValueError(f"pruning_cfg[{i}] = {value} is not allowed: group {i} has {size} channels, "
                             f"so at most {max(most, 0)} can be pruned{why}")


def least_important_labels(pruning_info: GroupedScores, pruning_cfg: Sequence[int],
                                         min_channels: MinChannels = 1) -> List[int]:
    """Labels of the ``pruning_cfg[i]`` least important channels of every group ``i``.

    Ties between equal criteria prune the channel listed first. In a group that
    spans several segments every segment keeps ``min_channels``; the choice is
    the least total importance under that constraint. The result is sorted.

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> info = ChannelScores([np.array([0, 1, 2]), np.array([3, 4])],
        ...                      [np.array([1., 1., 0.]), np.array([2., 1.])])
        >>> least_important_labels(info, [2, 1])
        [0, 2, 4]
        >>> concat = ChannelScores([np.arange(5)], [np.array([3., 4., 5., 0., 1.])], [np.array([0, 0, 0, 1, 1])])
        >>> least_important_labels(concat, [2])
        [0, 3]
    """
    check_pruning_counts(pruning_cfg, pruning_info, min_channels)
    out: List[int] = []
    for (labels, criteria), seg, k in zip(iter_group_scores(pruning_info), group_segments(pruning_info),
                                          pruning_cfg):
        if k:
            out.extend(labels[np.sort(pruning_order(criteria, seg, min_channels)[: int(k)])].tolist())
    return sorted(int(x) for x in out)
