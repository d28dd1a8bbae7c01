"""Labels, importance criteria and segments of prunable channel groups (the data the selection reads).

A model's prunable channels come in *groups*: channels that must be removed
together (a conv's output channels, the BatchNorm after it, the input channels
of every consumer, every branch of a residual add). Each channel has a global
integer *label* and an importance *criterion* (higher = more important).
Anything exposing ``group_labels`` and ``group_criteria`` (one 1-D array per
prunable group, same lengths) is accepted where the selection functions take
``pruning_info`` (:class:`GroupedScores`): the torch adapter's
``ModelPruningInfo`` and the NumPy :class:`ChannelScores` both do. An optional
``group_segments`` names each channel's *segment*: the source layer it comes
from when a group spans a concatenation (DenseNet, Inception, SSD heads).

Example:
    >>> import numpy as np
    >>> info = ChannelScores([np.array([0, 1, 2]), np.array([3, 4])], [np.zeros(3), np.ones(2)])
    >>> group_sizes(info), [s.tolist() for s in group_segments(info)]
    ([3, 2], [[0, 0, 0], [0, 0]])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Protocol, Sequence, Union

import numpy as np

__all__ = ["GroupedScores", "ChannelScores", "MinChannels", "group_sizes", "group_segments"]


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


def group_sizes(pruning_info: GroupedScores) -> List[int]:
    """Number of channels of every prunable group."""
    return [int(len(x)) for x in pruning_info.group_labels]


def group_segments(pruning_info: GroupedScores) -> List[np.ndarray]:
    """Segment id of every channel of every group (all zeros where the object has no ``group_segments``)."""
    segments = getattr(pruning_info, "group_segments", None)
    if segments is None:
        return [np.zeros(n, dtype=np.int64) for n in group_sizes(pruning_info)]
    return [np.asarray(s, dtype=np.int64) for s in segments]
