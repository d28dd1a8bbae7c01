"""Pruning-config utilities with the ENOT signatures (configs of counts or of fractions).

A pruning config has one entry per prunable group: an integer (channels to
prune) or a float (fraction of the group's channels, in [0, 1)).

Example:
    >>> import numpy as np
    >>> from sparsify.channels.selection import ChannelScores
    >>> info = ChannelScores([np.arange(4), np.arange(4, 7)], [np.array([3., 1., 2., 0.]), np.array([.5, .5, .1])])
    >>> check_pruning_config([0.5, 0.0])
    >>> get_least_important_labels_by_config(info, [0.5, 0.0]), get_least_important_labels_by_config(info, [1, 1])
    ([1, 3], [3, 6])
    >>> get_labels_for_uniform_pruning(info)      # half of 3 channels rounds down: 1
    [1, 3, 6]
"""
from __future__ import annotations

from typing import List, Optional

from sparsify.channels.config import PruningConfigValue, pruning_config_counts, validate_pruning_config
from sparsify.channels.selection import GroupedScores
from sparsify.channels.selection import least_important_labels, uniform_pruning_labels

__all__ = ["check_pruning_config", "get_least_important_labels_by_config", "get_labels_for_uniform_pruning"]


def check_pruning_config(pruning_config: PruningConfigValue, pruning_info: Optional[GroupedScores] = None) -> None:
    """Validate a pruning config.

    Args:
        pruning_config: integers >= 0 (channels to prune per group) or floats in [0, 1) (fractions).
        pruning_info: if given, the config must also fit its groups (one entry
            per prunable group, at least one channel left in each group and in
            each source layer of a concatenated group).

    Raises:
        ValueError: the config is not valid; the message names the entry.
    """
    validate_pruning_config(pruning_config, pruning_info)


def get_least_important_labels_by_config(pruning_info: GroupedScores,
                                         pruning_config: PruningConfigValue) -> List[int]:
    """Labels of the least important channels of each group, as many as ``pruning_config`` says (sorted).

    Raises:
        ValueError: the config does not fit the groups.
    """
    return least_important_labels(pruning_info, pruning_config_counts(pruning_config, pruning_info))


def get_labels_for_uniform_pruning(pruning_info: GroupedScores, pruning_ratio: float = 0.5) -> List[int]:
    """Labels of the least important ``pruning_ratio`` of the channels of every prunable group (sorted).

    Raises:
        ValueError: ``pruning_ratio`` outside [0, 1).
    """
    return uniform_pruning_labels(pruning_info, pruning_ratio)
