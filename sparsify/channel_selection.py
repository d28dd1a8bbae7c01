"""Framework-neutral math for structured (channel) pruning.

A model's prunable channels come in *groups*: channels that must be removed
together (a conv's output channels, the BatchNorm after it, the input channels
of every consumer, every branch of a residual add). Each channel has a global
integer *label* and an importance *criterion* (higher = more important). This
module chooses which labels to prune; it never imports torch or tensorflow.

Anything exposing ``group_labels`` and ``group_criteria`` (one 1-D array per
prunable group, same lengths) is accepted where the functions below take
``pruning_info``: the torch adapter's ``ModelPruningInfo`` and the NumPy
:class:`ChannelScores` both do. An optional ``group_segments`` (one integer
array per group, same lengths) names each channel's *segment*: the source layer
it comes from when a group spans a concatenation (DenseNet, Inception, SSD
heads). Every segment keeps at least ``min_channels`` channels (default 1), so
a selection never empties a source layer; within that constraint the least
important channels go first (a partition-matroid greedy, which is optimal).

Example:
    >>> import numpy as np
    >>> info = ChannelScores([np.array([0, 1, 2, 3]), np.array([4, 5])],
    ...                      [np.array([3., 1., 2., 0.]), np.array([5., 4.])])
    >>> get_labels_for_uniform_pruning(info, 0.5)
    [1, 3, 5]
    >>> get_least_important_labels_by_config(info, [1, 0])
    [3]
    >>> concat = ChannelScores([np.arange(5)], [np.array([3., 4., 5., 0., 1.])], [np.array([0, 0, 0, 1, 1])])
    >>> get_labels_for_uniform_pruning(concat, 0.6)  # 3, then 4 would empty segment 1: 0 goes instead
    [0, 1, 3]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

__all__ = [
    "ChannelScores",
    "GroupedScores",
    "least_important_indices",
    "pruning_order",
    "cumulative_pruning_cost",
    "segment_min_channels",
    "max_channels_to_prune",
    "max_prunable_per_group",
    "check_pruning_ratio",
    "n_channels_to_prune",
    "iterate_over_gate_criteria",
    "get_criteria_label_dict",
    "get_labels_for_uniform_pruning",
    "check_pruning_config",
    "get_least_important_labels_by_config",
    "default_architecture_optimization_strategy",
    "split_labels_by_group",
    "segments_from_layer_channels",
    "strategy_min_channels",
    "architecture_search_space",
]


MinChannels = Union[int, Callable[[int], int]]


class GroupedScores(Protocol):
    """What the selection functions need: labels and criteria per prunable group.

    An object may also expose ``group_segments`` (one integer array per group:
    the segment, i.e. source layer, of each channel); without it every group is
    one segment.
    """

    @property
    def group_labels(self) -> Sequence[np.ndarray]: ...

    @property
    def group_criteria(self) -> Sequence[np.ndarray]: ...


@dataclass(frozen=True)
class ChannelScores:
    """Labels, importance criteria and segments of the prunable channel groups, NumPy only.

    Args:
        group_labels: one 1-D integer array of global labels per prunable group.
        group_criteria: one 1-D float array of importances per group, same lengths.
        group_segments: optional, one 1-D integer array per group, same lengths:
            the segment (source layer of a concatenation) of every channel.
            None: every group is a single segment.

    Example:
        >>> import numpy as np
        >>> ChannelScores([np.array([0, 1])], [np.array([0.5, 0.1])]).n_groups
        1
        >>> ChannelScores([np.array([0, 1])], [np.zeros(2)], [np.array([0, 1])]).group_segments[0].tolist()
        [0, 1]
    """

    group_labels: Sequence[np.ndarray]
    group_criteria: Sequence[np.ndarray]
    group_segments: Optional[Sequence[np.ndarray]] = None

    def __post_init__(self) -> None:
        labels = [np.asarray(x) for x in self.group_labels]
        criteria = [np.asarray(x, dtype=np.float64) for x in self.group_criteria]
        if len(labels) != len(criteria):
            raise ValueError(f"group_labels has {len(labels)} groups but group_criteria has {len(criteria)}; "
                             "they must have the same number of groups")
        if self.group_segments is None:
            segments = [np.zeros(lab.shape, dtype=np.int64) for lab in labels]
        else:
            segments = [np.asarray(x) for x in self.group_segments]
            if len(segments) != len(labels):
                raise ValueError(f"group_segments has {len(segments)} groups but group_labels has {len(labels)}; "
                                 "they must have the same number of groups")
        seen: set = set()
        for i, (lab, crit, seg) in enumerate(zip(labels, criteria, segments)):
            if lab.ndim != 1 or crit.ndim != 1 or lab.shape != crit.shape:
                raise ValueError(f"group {i}: labels shape {lab.shape} and criteria shape {crit.shape} must be "
                                 "equal 1-D shapes")
            if seg.shape != lab.shape:
                raise ValueError(f"group {i}: segments shape {seg.shape} must equal labels shape {lab.shape}")
            if lab.size and not np.issubdtype(lab.dtype, np.integer):
                raise ValueError(f"group {i}: labels must be integers, got dtype {lab.dtype}")
            if seg.size and not np.issubdtype(seg.dtype, np.integer):
                raise ValueError(f"group {i}: segments must be integers, got dtype {seg.dtype}")
            if np.isnan(crit).any():
                raise ValueError(f"group {i}: criteria contain NaN")
            dup = seen.intersection(lab.tolist())
            if dup or len(set(lab.tolist())) != lab.size:
                raise ValueError(f"group {i}: labels must be unique across groups, duplicated: "
                                 f"{sorted(dup) or lab.tolist()}")
            seen.update(lab.tolist())
        object.__setattr__(self, "group_labels", [lab.astype(np.int64) for lab in labels])
        object.__setattr__(self, "group_criteria", criteria)
        object.__setattr__(self, "group_segments", [seg.astype(np.int64) for seg in segments])

    @property
    def n_groups(self) -> int:
        """Number of prunable groups."""
        return len(self.group_labels)


def _group_sizes(pruning_info: GroupedScores) -> List[int]:
    return [int(len(x)) for x in pruning_info.group_labels]


def _group_segments(pruning_info: GroupedScores) -> List[np.ndarray]:
    segments = getattr(pruning_info, "group_segments", None)
    if segments is None:
        return [np.zeros(n, dtype=np.int64) for n in _group_sizes(pruning_info)]
    return [np.asarray(s, dtype=np.int64) for s in segments]


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
    """Sorted indices of the ``k`` cheapest channels to prune; ties go to the lower index (DESIGN 2.6).

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


def max_prunable_per_group(pruning_info: GroupedScores, min_channels: MinChannels = 1) -> List[int]:
    """Most channels each prunable group can lose while every segment keeps ``min_channels``.

    Example:
        >>> info = ChannelScores([np.arange(4), np.arange(4, 7)], [np.zeros(4), np.zeros(3)],
        ...                      [np.array([0, 0, 1, 1]), np.zeros(3, int)])
        >>> max_prunable_per_group(info)
        [2, 2]
    """
    return [max_channels_to_prune(seg, min_channels) if seg.size else 0 for seg in _group_segments(pruning_info)]


def n_channels_to_prune(n_channels: int, pruning_ratio: float) -> int:
    """Exact count rule (DESIGN 2.5): ``min(floor(ratio * n + 0.5), n - 1)``.

    Example:
        >>> n_channels_to_prune(10, 0.25), n_channels_to_prune(3, 0.99)
        (3, 2)
    """
    check_pruning_ratio(pruning_ratio)
    if not isinstance(n_channels, Integral) or n_channels < 1:
        raise ValueError(f"n_channels must be a positive integer, got {n_channels!r}")
    return int(min(math.floor(pruning_ratio * n_channels + 0.5), n_channels - 1))


def check_pruning_ratio(pruning_ratio: float) -> None:
    """Raise ``ValueError`` unless ``pruning_ratio`` is a real number in [0, 1).

    Example:
        >>> check_pruning_ratio(0.5)
    """
    if isinstance(pruning_ratio, bool) or not isinstance(pruning_ratio, Real) or not 0.0 <= pruning_ratio < 1.0:
        raise ValueError(f"pruning_ratio must be a number in [0, 1), got {pruning_ratio!r}")


def iterate_over_gate_criteria(pruning_info: GroupedScores) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """Yield ``(labels, criteria)`` for every prunable group, in group order.

    Example:
        >>> info = ChannelScores([np.array([0, 1])], [np.array([1., 2.])])
        >>> [(lab.tolist(), crit.tolist()) for lab, crit in iterate_over_gate_criteria(info)]
        [([0, 1], [1.0, 2.0])]
    """
    for labels, criteria in zip(pruning_info.group_labels, pruning_info.group_criteria):
        yield np.asarray(labels), np.asarray(criteria, dtype=np.float64)


def get_criteria_label_dict(pruning_info: GroupedScores) -> Dict[int, float]:
    """Map every prunable label to its criterion.

    Example:
        >>> get_criteria_label_dict(ChannelScores([np.array([4, 7])], [np.array([1., 2.])]))
        {4: 1.0, 7: 2.0}
    """
    out: Dict[int, float] = {}
    for labels, criteria in iterate_over_gate_criteria(pruning_info):
        out.update(zip(labels.tolist(), criteria.tolist()))
    return out


def get_labels_for_uniform_pruning(pruning_info: GroupedScores, pruning_ratio: float,
                                   min_channels: MinChannels = 1) -> List[int]:
    """Prune the same fraction of every prunable group, least important first.

    Each group of n channels loses ``min(floor(ratio * n + 0.5), n - 1)``
    channels, so at least one channel survives; a group that spans several
    segments (a concatenation) loses at most what leaves ``min_channels`` in
    every segment, and exactly the requested count whenever that allows it.

    Raises:
        ValueError: ``pruning_ratio`` outside [0, 1).

    Example:
        >>> info = ChannelScores([np.array([0, 1, 2, 3])], [np.array([3., 1., 2., 0.])])
        >>> get_labels_for_uniform_pruning(info, 0.5)
        [1, 3]
        >>> info = ChannelScores([np.arange(4)], [np.array([3., 1., 2., 0.])], [np.array([0, 0, 0, 1])])
        >>> get_labels_for_uniform_pruning(info, 0.5), get_labels_for_uniform_pruning(info, 0.9)
        ([1, 2], [1, 2])
    """
    check_pruning_ratio(pruning_ratio)
    cfg = [min(n_channels_to_prune(n, pruning_ratio), most) if n else 0
           for n, most in zip(_group_sizes(pruning_info), max_prunable_per_group(pruning_info, min_channels))]
    return get_least_important_labels_by_config(pruning_info, cfg, min_channels)


def check_pruning_config(pruning_cfg: Sequence[int], pruning_info: GroupedScores,
                         min_channels: MinChannels = 1) -> None:
    """Validate a pruning config: one count of channels to prune per prunable group.

    Raises:
        ValueError: wrong length, a non-integer entry, or an entry outside
            ``[0, n_channels - 1]`` for its group (one channel must survive),
            or above what leaves ``min_channels`` in every segment of the group.

    Example:
        >>> info = ChannelScores([np.array([0, 1, 2])], [np.zeros(3)])
        >>> check_pruning_config([2], info)
        >>> check_pruning_config([3], info)
        Traceback (most recent call last):
        ...
        ValueError: pruning_cfg[0] = 3 is not allowed: group 0 has 3 channels, so at most 2 can be pruned
        >>> concat = ChannelScores([np.arange(3)], [np.zeros(3)], [np.array([0, 0, 1])])
        >>> check_pruning_config([2], concat)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: pruning_cfg[0] = 2 is not allowed: group 0 has 3 channels, so at most 1 can be pruned (its 2 ...
    """
    sizes = _group_sizes(pruning_info)
    if isinstance(pruning_cfg, (str, bytes, Mapping)) or not hasattr(pruning_cfg, "__len__"):
        raise ValueError(f"pruning_cfg must be a sequence of {len(sizes)} integers, got {pruning_cfg!r}")
    if len(pruning_cfg) != len(sizes):
        raise ValueError(f"pruning_cfg has {len(pruning_cfg)} entries but there are {len(sizes)} prunable groups")
    for i, (value, size, seg) in enumerate(zip(pruning_cfg, sizes, _group_segments(pruning_info))):
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


def get_least_important_labels_by_config(pruning_info: GroupedScores, pruning_cfg: Sequence[int],
                                         min_channels: MinChannels = 1) -> List[int]:
    """Labels of the ``pruning_cfg[i]`` least important channels of every group ``i``.

    Ties between equal criteria prune the channel listed first. In a group that
    spans several segments every segment keeps ``min_channels``; the choice is
    the least total importance under that constraint. The result is sorted.

    Example:
        >>> info = ChannelScores([np.array([0, 1, 2]), np.array([3, 4])],
        ...                      [np.array([1., 1., 0.]), np.array([2., 1.])])
        >>> get_least_important_labels_by_config(info, [2, 1])
        [0, 2, 4]
        >>> concat = ChannelScores([np.arange(5)], [np.array([3., 4., 5., 0., 1.])], [np.array([0, 0, 0, 1, 1])])
        >>> get_least_important_labels_by_config(concat, [2])
        [0, 3]
    """
    check_pruning_config(pruning_cfg, pruning_info, min_channels)
    out: List[int] = []
    for (labels, criteria), seg, k in zip(iterate_over_gate_criteria(pruning_info), _group_segments(pruning_info),
                                          pruning_cfg):
        if k:
            out.extend(labels[np.sort(pruning_order(criteria, seg, min_channels)[: int(k)])].tolist())
    return sorted(int(x) for x in out)


def default_architecture_optimization_strategy(current_layer_channels: int, absolute_min_channels: int = 16,
                                               relative_min_channels: float = 0.25) -> Tuple[int, int]:
    """Search space of one group for the latency-driven selector.

    Returns ``(min_channels, step)``: keep at least
    ``min(n, max(absolute_min_channels, ceil(relative_min_channels * n)))``
    channels, and search the kept count in steps of 1 for groups of up to 64
    channels, 4 above.

    Example:
        >>> default_architecture_optimization_strategy(256)
        (64, 4)
        >>> default_architecture_optimization_strategy(32)
        (16, 1)
        >>> default_architecture_optimization_strategy(8)
        (8, 1)
    """
    for name, value in (("current_layer_channels", current_layer_channels),
                        ("absolute_min_channels", absolute_min_channels)):
        if isinstance(value, bool) or not isinstance(value, (Integral, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(relative_min_channels, bool) or not isinstance(relative_min_channels, Real) \
            or not 0.0 <= relative_min_channels <= 1.0:
        raise ValueError(f"relative_min_channels must be a number in [0, 1], got {relative_min_channels!r}")
    n = int(current_layer_channels)
    min_channels = min(n, max(int(absolute_min_channels), math.ceil(relative_min_channels * n)))
    return min_channels, (1 if n <= 64 else 4)


def _strategy_result(strategy: Callable[[int], Tuple[int, int]], n: int) -> Tuple[int, int]:
    result = strategy(n)
    ok = isinstance(result, tuple) and len(result) == 2 and all(
        isinstance(v, (Integral, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in result)
    if not ok or not 1 <= result[0] <= n or result[1] < 1:
        shown = f"({result[0]!r}, {result[1]!r})" if isinstance(result, tuple) and len(result) == 2 else repr(result)
        raise ValueError(f"architecture_optimization_strategy({n}) returned {shown}; "
                         f"need 1 <= min_channels <= {n} and step >= 1")
    return int(result[0]), int(result[1])


def strategy_min_channels(architecture_optimization_strategy: Callable[[int], Tuple[int, int]]
                          ) -> Callable[[int], int]:
    """``n -> min_channels`` of a strategy: what one segment (source layer) of n channels keeps.

    Example:
        >>> strategy_min_channels(default_architecture_optimization_strategy)(48)
        16
    """
    return lambda n: _strategy_result(architecture_optimization_strategy, n)[0]


def architecture_search_space(pruning_info: GroupedScores,
                              architecture_optimization_strategy: Callable[[int], Tuple[int, int]] =
                              default_architecture_optimization_strategy) -> List[List[int]]:
    """Per prunable group, the numbers of channels the latency search may keep (ascending, ending at n).

    A group of n channels keeps ``min_channels`` of ``strategy(n)`` or more, in
    steps of ``step``; a group spanning several segments also keeps the
    strategy's minimum of every segment, so each candidate is a valid network.

    Raises:
        ValueError: the strategy returns something other than
            ``(1 <= min_channels <= n, step >= 1)``.

    Example:
        >>> info = ChannelScores([np.arange(8), np.arange(8, 14)], [np.zeros(8), np.zeros(6)],
        ...                      [np.array([0, 0, 0, 0, 0, 0, 1, 1]), np.zeros(6, int)])
        >>> architecture_search_space(info, lambda n: (min(n, 2), 2))  # group 0 keeps 2 + 2: one pair per layer
        [[4, 6, 8], [2, 4, 6]]
    """
    space: List[List[int]] = []
    per_segment = strategy_min_channels(architecture_optimization_strategy)
    for n, seg in zip(_group_sizes(pruning_info), _group_segments(pruning_info)):
        if not n:
            space.append([0])
            continue
        min_keep, step = _strategy_result(architecture_optimization_strategy, n)
        min_keep = max(min_keep, int(segment_min_channels(seg, per_segment)[1].sum()))
        space.append(list(range(min_keep, n, step)) + [n])
    return space


def segments_from_layer_channels(n_channels: int, layer_channels: Sequence[Sequence[int]]) -> np.ndarray:
    """Segment id of every channel of a group, from the channel sets of the layers it touches.

    ``layer_channels[j]`` is the set of group channels that make up *all* of
    some layer's channels (a concat input, a split output). Pruning all of one
    set would empty that layer. Segments are the atoms of these sets (channels
    that lie in the same sets), numbered by first channel, so keeping one
    channel per segment keeps one in every layer. Sets covering the whole group
    (or nothing) add no constraint.

    Example:
        >>> segments_from_layer_channels(6, [[0, 1, 2, 3], [4, 5], range(6)]).tolist()
        [0, 0, 0, 0, 1, 1]
        >>> segments_from_layer_channels(4, [[0, 1], [1, 2, 3]]).tolist()
        [0, 1, 2, 2]
    """
    sets = [frozenset(int(c) for c in s if 0 <= int(c) < n_channels) for s in layer_channels]
    sets = [s for s in sets if 0 < len(s) < n_channels]
    ids: Dict[tuple, int] = {}
    return np.asarray([ids.setdefault(tuple(j for j, s in enumerate(sets) if c in s), len(ids))
                       for c in range(n_channels)], dtype=np.int64)


def split_labels_by_group(labels: Sequence[int], group_offsets: Sequence[int], group_sizes: Sequence[int],
                          prunable: Sequence[bool],
                          group_segments: Optional[Sequence[np.ndarray]] = None) -> Dict[int, np.ndarray]:
    """Turn global labels into ``{group index: sorted local channel indices}``.

    Group ``g`` owns labels ``offsets[g] .. offsets[g] + sizes[g] - 1``.
    ``group_segments`` (one array per group, all groups) gives each channel's
    segment; no segment may lose all its channels.

    Raises:
        ValueError: a label that is not an integer, does not exist, is repeated,
            belongs to an unprunable group, or would leave a group or a segment
            with no channel.

    Example:
        >>> split_labels_by_group([4, 0, 5], [0, 3], [3, 4], [True, True])
        {0: array([0]), 1: array([1, 2])}
        >>> segments = [np.zeros(3, int), np.array([0, 0, 1, 1])]
        >>> split_labels_by_group([3, 4], [0, 3], [3, 4], [True, True], segments)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: labels would prune all 2 channels of segment 0 (labels 3..4) of group 1; at least one ...
    """
    n_total = int(sum(group_sizes))
    values: List[int] = []
    for label in labels:
        if isinstance(label, (bool, np.bool_)) or not isinstance(label, (Integral, np.integer)):
            raise ValueError(f"labels must be integers, got {label!r}")
        if not 0 <= int(label) < n_total:
            raise ValueError(f"label {label} does not exist: labels are 0..{n_total - 1}")
        values.append(int(label))
    arr = np.asarray(values, dtype=np.int64)
    uniq, counts = np.unique(arr, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"labels are repeated: {uniq[counts > 1].tolist()}")
    offsets = np.asarray(group_offsets, dtype=np.int64)
    group_of = np.searchsorted(offsets, arr, side="right") - 1
    out: Dict[int, np.ndarray] = {}
    for g in np.unique(group_of).tolist():
        local = np.sort(arr[group_of == g] - offsets[g])
        if not prunable[g]:
            raise ValueError(f"labels {sorted((local + offsets[g]).tolist())} belong to group {g}, which is not "
                             "prunable")
        if local.size >= group_sizes[g]:
            raise ValueError(f"labels would prune all {group_sizes[g]} channels of group {g}; "
                             "at least one channel must stay")
        if group_segments is not None:
            seg = np.asarray(group_segments[g], dtype=np.int64)
            ids, sizes = np.unique(seg, return_counts=True)
            for s, size in zip(ids.tolist(), sizes.tolist()):
                if int((seg[local] == s).sum()) >= size:
                    where = np.flatnonzero(seg == s) + offsets[g]
                    span = f"{where[0]}..{where[-1]}" if where[-1] - where[0] + 1 == where.size else where.tolist()
                    raise ValueError(f"labels would prune all {size} channels of segment {s} (labels "
                                     f"{span}) of group {g}; at least one channel of each "
                                     "segment (source layer of a concatenation) must stay")
        out[int(g)] = local
    return dict(sorted(out.items()))
