"""Label selectors: which calibrated channels to prune.

The math lives in :mod:`sparsify.channel_selection`; selectors hold a choice
and remember it in ``labels_for_pruning``.

Example:
    >>> import numpy as np
    >>> from sparsify.channel_selection import ChannelScores
    >>> info = ChannelScores([np.arange(4)], [np.array([3., 1., 2., 0.])])
    >>> UniformPruningLabelSelector(0.5).select(info)
    [1, 3]
"""
from __future__ import annotations

import abc
from typing import List, Optional, Sequence

from sparsify.channel_selection import (GroupedScores, check_pruning_ratio, get_labels_for_uniform_pruning,
                                        get_least_important_labels_by_config)

__all__ = ["PruningLabelSelector", "TopKPruningLabelSelector", "UniformPruningLabelSelector"]


class PruningLabelSelector(abc.ABC):
    """Base class: ``select(pruning_info)`` returns (and stores) the labels to prune.

    Example:
        >>> class Nothing(PruningLabelSelector):
        ...     def _select(self, pruning_info):
        ...         return []
        >>> Nothing().select(None)
        []
    """

    def __init__(self) -> None:
        self._labels: Optional[List[int]] = None

    def select(self, pruning_info: GroupedScores) -> List[int]:
        """Choose labels to prune; they are also kept in ``labels_for_pruning``."""
        labels = sorted(int(x) for x in self._select(pruning_info))
        self._labels = labels
        return list(labels)

    @abc.abstractmethod
    def _select(self, pruning_info: GroupedScores) -> Sequence[int]:
        """Return the labels to prune."""

    @property
    def labels_for_pruning(self) -> List[int]:
        """Labels chosen by the last ``select`` call; RuntimeError before it."""
        if self._labels is None:
            raise RuntimeError(f"{type(self).__name__}.labels_for_pruning is available only after select() ran")
        return list(self._labels)


class TopKPruningLabelSelector(PruningLabelSelector):
    """Prune the ``pruning_cfg[i]`` least important channels of prunable group ``i``.

    Args:
        pruning_cfg: one non-negative integer per prunable group (validated
            against the groups at ``select`` time with ``check_pruning_config``).

    Example:
        >>> import numpy as np
        >>> from sparsify.channel_selection import ChannelScores
        >>> info = ChannelScores([np.arange(3), np.arange(3, 5)], [np.array([1., 0., 2.]), np.array([0., 1.])])
        >>> TopKPruningLabelSelector([2, 1]).select(info)
        [0, 1, 3]
    """

    def __init__(self, pruning_cfg: Sequence[int]) -> None:
        super().__init__()
        if isinstance(pruning_cfg, (str, bytes)) or not hasattr(pruning_cfg, "__len__"):
            raise TypeError(f"pruning_cfg must be a sequence of integers, got {pruning_cfg!r}")
        self.pruning_cfg = list(pruning_cfg)

    def _select(self, pruning_info: GroupedScores) -> Sequence[int]:
        return get_least_important_labels_by_config(pruning_info, self.pruning_cfg)


class UniformPruningLabelSelector(PruningLabelSelector):
    """Prune the same fraction ``pruning_ratio`` of every prunable group.

    Raises:
        ValueError: ``pruning_ratio`` outside [0, 1).
    """

    def __init__(self, pruning_ratio: float) -> None:
        super().__init__()
        check_pruning_ratio(pruning_ratio)
        self.pruning_ratio = float(pruning_ratio)

    def _select(self, pruning_info: GroupedScores) -> Sequence[int]:
        return get_labels_for_uniform_pruning(pruning_info, self.pruning_ratio)
