"""Framework-neutral math for structured (channel) pruning.

A model's prunable channels come in *groups*: channels that must be removed
together (a conv's output channels, the BatchNorm after it, the input channels
of every consumer, every branch of a residual add). Each channel has a global
integer *label* and an importance *criterion* (higher = more important). This
module chooses which labels to prune; it never imports torch or tensorflow.

Anything exposing ``group_labels`` and ``group_criteria`` (one 1-D array per
prunable group, same lengths) is accepted where the functions below take
``pruning_info``: the torch adapter's ``ModelPruningInfo`` and the NumPy
:class:`ChannelScores` both do.

Example:
    >>> import numpy as np
    >>> info = ChannelScores([np.array([0, 1, 2, 3]), np.array([4, 5])],
    ...                      [np.array([3., 1., 2., 0.]), np.array([5., 4.])])
    >>> get_labels_for_uniform_pruning(info, 0.5)
    [1, 3, 5]
    >>> get_least_important_labels_by_config(info, [1, 0])
    [3]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Dict, Iterator, List, Mapping, Protocol, Sequence, Tuple

import numpy as np

__all__ = [
    "ChannelScores",
    "GroupedScores",
    "least_important_indices",
    "check_pruning_ratio",
    "n_channels_to_prune",
    "iterate_over_gate_criteria",
    "get_criteria_label_dict",
    "get_labels_for_uniform_pruning",
    "check_pruning_config",
    "get_least_important_labels_by_config",
    "default_architecture_optimization_strategy",
    "split_labels_by_group",
]


class GroupedScores(Protocol):
    """What the selection functions need: labels and criteria per prunable group."""

    @property
    def group_labels(self) -> Sequence[np.ndarray]: ...

    @property
    def group_criteria(self) -> Sequence[np.ndarray]: ...


@dataclass(frozen=True)
class ChannelScores:
    """Labels and importance criteria of the prunable channel groups, NumPy only.

    Args:
        group_labels: one 1-D integer array of global labels per prunable group.
        group_criteria: one 1-D float array of importances per group, same lengths.

    Example:
        >>> import numpy as np
        >>> ChannelScores([np.array([0, 1])], [np.array([0.5, 0.1])]).n_groups
        1
    """

    group_labels: Sequence[np.ndarray]
    group_criteria: Sequence[np.ndarray]

    def __post_init__(self) -> None:
        labels = [np.asarray(x) for x in self.group_labels]
        criteria = [np.asarray(x, dtype=np.float64) for x in self.group_criteria]
        if len(labels) != len(criteria):
            raise ValueError(f"group_labels has {len(labels)} groups but group_criteria has {len(criteria)}; "
                             "they must have the same number of groups")
        seen: set = set()
        for i, (lab, crit) in enumerate(zip(labels, criteria)):
            if lab.ndim != 1 or crit.ndim != 1 or lab.shape != crit.shape:
                raise ValueError(f"group {i}: labels shape {lab.shape} and criteria shape {crit.shape} must be "
                                 "equal 1-D shapes")
            if lab.size and not np.issubdtype(lab.dtype, np.integer):
                raise ValueError(f"group {i}: labels must be integers, got dtype {lab.dtype}")
            if np.isnan(crit).any():
                raise ValueError(f"group {i}: criteria contain NaN")
            dup = seen.intersection(lab.tolist())
            if dup or len(set(lab.tolist())) != lab.size:
                raise ValueError(f"group {i}: labels must be unique across groups, duplicated: "
                                 f"{sorted(dup) or lab.tolist()}")
            seen.update(lab.tolist())
        object.__setattr__(self, "group_labels", [lab.astype(np.int64) for lab in labels])
        object.__setattr__(self, "group_criteria", criteria)

    @property
    def n_groups(self) -> int:
        """Number of prunable groups."""
        return len(self.group_labels)


def _group_sizes(pruning_info: GroupedScores) -> List[int]:
    return [int(len(x)) for x in pruning_info.group_labels]


def least_important_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` lowest scores; ties go to the lower index (DESIGN 2.6).

    Example:
        >>> least_important_indices(np.array([2., 1., 1., 0.]), 2)
        array([1, 3])
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {scores.shape}")
    if not isinstance(k, Integral) or isinstance(k, bool) or not 0 <= k <= scores.size:
        raise ValueError(f"k must be an integer in [0, {scores.size}], got {k!r}")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
    order = np.argsort(scores, kind="stable")
    return np.sort(order[: int(k)])


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


def get_labels_for_uniform_pruning(pruning_info: GroupedScores, pruning_ratio: float) -> List[int]:
    """Prune the same fraction of every prunable group, least important first.

    Each group of n channels loses ``min(floor(ratio * n + 0.5), n - 1)``
    channels, so at least one channel survives.

    Raises:
        ValueError: ``pruning_ratio`` outside [0, 1).

    Example:
        >>> info = ChannelScores([np.array([0, 1, 2, 3])], [np.array([3., 1., 2., 0.])])
        >>> get_labels_for_uniform_pruning(info, 0.5)
        [1, 3]
    """
    check_pruning_ratio(pruning_ratio)
    cfg = [n_channels_to_prune(n, pruning_ratio) if n else 0 for n in _group_sizes(pruning_info)]
    return get_least_important_labels_by_config(pruning_info, cfg)


def check_pruning_config(pruning_cfg: Sequence[int], pruning_info: GroupedScores) -> None:
    """Validate a pruning config: one count of channels to prune per prunable group.

    Raises:
        ValueError: wrong length, a non-integer entry, or an entry outside
            ``[0, n_channels - 1]`` for its group (one channel must survive).

    Example:
        >>> info = ChannelScores([np.array([0, 1, 2])], [np.zeros(3)])
        >>> check_pruning_config([2], info)
        >>> check_pruning_config([3], info)
        Traceback (most recent call last):
        ...
        ValueError: pruning_cfg[0] = 3 is not allowed: group 0 has 3 channels, so at most 2 can be pruned
    """
    sizes = _group_sizes(pruning_info)
    if isinstance(pruning_cfg, (str, bytes, Mapping)) or not hasattr(pruning_cfg, "__len__"):
        raise ValueError(f"pruning_cfg must be a sequence of {len(sizes)} integers, got {pruning_cfg!r}")
    if len(pruning_cfg) != len(sizes):
        raise ValueError(f"pruning_cfg has {len(pruning_cfg)} entries but there are {len(sizes)} prunable groups")
    for i, (value, size) in enumerate(zip(pruning_cfg, sizes)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (Integral, np.integer)):
            raise ValueError(f"pruning_cfg[{i}] must be an integer, got {value!r}")
        if not 0 <= int(value) <= max(size - 1, 0):
            raise ValueError(f"pruning_cfg[{i}] = {value} is not allowed: group {i} has {size} channels, "
                             f"so at most {max(size - 1, 0)} can be pruned")


def get_least_important_labels_by_config(pruning_info: GroupedScores, pruning_cfg: Sequence[int]) -> List[int]:
    """Labels of the ``pruning_cfg[i]`` least important channels of every group ``i``.

    Ties between equal criteria prune the channel listed first. The result is sorted.

    Example:
        >>> info = ChannelScores([np.array([0, 1, 2]), np.array([3, 4])],
        ...                      [np.array([1., 1., 0.]), np.array([2., 1.])])
        >>> get_least_important_labels_by_config(info, [2, 1])
        [0, 2, 4]
    """
    check_pruning_config(pruning_cfg, pruning_info)
    out: List[int] = []
    for (labels, criteria), k in zip(iterate_over_gate_criteria(pruning_info), pruning_cfg):
        out.extend(labels[least_important_indices(criteria, int(k))].tolist())
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


def split_labels_by_group(labels: Sequence[int], group_offsets: Sequence[int], group_sizes: Sequence[int],
                          prunable: Sequence[bool]) -> Dict[int, np.ndarray]:
    """Turn global labels into ``{group index: sorted local channel indices}``.

    Group ``g`` owns labels ``offsets[g] .. offsets[g] + sizes[g] - 1``.

    Raises:
        ValueError: a label that is not an integer, does not exist, is repeated,
            belongs to an unprunable group, or would leave a group with no channel.

    Example:
        >>> split_labels_by_group([4, 0, 5], [0, 3], [3, 4], [True, True])
        {0: array([0]), 1: array([1, 2])}
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
        out[int(g)] = local
    return dict(sorted(out.items()))
