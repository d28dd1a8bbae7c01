"""Pruning configs: how much of each prunable channel group to prune.

A *pruning config* has one entry per prunable group, in group order, and is
either a sequence of integers (the number of channels to prune in each group)
or a sequence of floats (the fraction of each group's channels to prune, in
[0, 1)). A fraction ``r`` of ``n`` channels means ``min(ceil(r * n - 0.5), n - 1)``
channels (docs/design.md, rule 5), further limited by what the group's segments (source
layers of a concatenation) must keep. NumPy only.

Example:
    >>> import numpy as np
    >>> from sparsify.channels.selection import ChannelScores
    >>> info = ChannelScores([np.arange(4), np.arange(4, 10)], [np.zeros(4), np.zeros(6)])
    >>> validate_pruning_config([0.5, 0.25])
    >>> pruning_config_counts([0.5, 0.25], info), pruning_config_counts([1, 5], info)
    ([2, 1], [1, 5])
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import List, Mapping, Optional, Sequence, Union

import numpy as np

from .selection import GroupedScores, MinChannels, check_pruning_counts, max_prunable_per_group, n_channels_to_prune

__all__ = ["PruningConfigValue", "is_ratio_config", "validate_pruning_config", "pruning_config_counts",
           "uniform_pruning_config"]

PruningConfigValue = Union[Sequence[int], Sequence[float]]


def _is_int(value) -> bool:
    return isinstance(value, (Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_float(value) -> bool:
    return isinstance(value, (Real, np.floating)) and not isinstance(value, (bool, np.bool_)) and not _is_int(value)


def is_ratio_config(pruning_config: PruningConfigValue) -> bool:
    """True for a config of floats (fractions), False for one of integers (counts).

    Example:
        >>> is_ratio_config([0.5, 0.0]), is_ratio_config([3, 0]), is_ratio_config([])
        (True, False, False)
    """
    return bool(len(pruning_config)) and all(_is_float(v) for v in pruning_config)


def validate_pruning_config(pruning_config: PruningConfigValue, pruning_info: Optional[GroupedScores] = None,
                            min_channels: MinChannels = 1) -> None:
    """Raise ``ValueError`` unless ``pruning_config`` is a valid config (for ``pruning_info``, if given).

    Without ``pruning_info`` only the form is checked: a sequence of integers
    >= 0, or a sequence of floats in [0, 1) (not a mix). With it, the length
    must equal the number of prunable groups and every count must leave one
    channel in the group (and ``min_channels`` in each of its segments).

    Example:
        >>> validate_pruning_config([1, 0, 4])
        >>> validate_pruning_config([0.5, 2])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: pruning_config must hold only integers (...) or only floats (...); got a mix: [0.5, 2]
    """
    if isinstance(pruning_config, (str, bytes, Mapping)) or not hasattr(pruning_config, "__len__") \
            or not hasattr(pruning_config, "__iter__"):
        raise ValueError("pruning_config must be a sequence of integers (channels to prune per group) or of floats "
                         f"(fractions in [0, 1)), got {pruning_config!r}")
    values = list(pruning_config)
    ints = [_is_int(v) for v in values]
    floats = [_is_float(v) for v in values]
    for i, v in enumerate(values):
        if not ints[i] and not floats[i]:
            raise ValueError(f"pruning_config[{i}] must be an integer or a float, got {v!r}")
    if any(ints) and any(floats):
        raise ValueError("pruning_config must hold only integers (channels to prune per group) or only floats "
                         f"(fractions in [0, 1)); got a mix: {values!r}")
    for i, v in enumerate(values):
        if ints[i] and int(v) < 0:
            raise ValueError(f"pruning_config[{i}] = {v} is negative; counts must be >= 0")
        if floats[i] and not (math.isfinite(float(v)) and 0.0 <= float(v) < 1.0):
            raise ValueError(f"pruning_config[{i}] = {v!r} is not a fraction in [0, 1)")
    if pruning_info is not None:
        check_pruning_counts(pruning_config_counts(values, pruning_info, min_channels), pruning_info, min_channels)


def pruning_config_counts(pruning_config: PruningConfigValue, pruning_info: GroupedScores,
                          min_channels: MinChannels = 1) -> List[int]:
    """The number of channels to prune in each group: counts as given, fractions converted.

    A fraction becomes ``min(ceil(r * n - 0.5), n - 1)`` channels, limited to
    what the group may lose while each segment keeps ``min_channels`` (like
    uniform pruning). Counts are returned unchanged (validate them with
    :func:`validate_pruning_config`).

    Raises:
        ValueError: a malformed config or one whose length is not the number
            of prunable groups.

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> info = ChannelScores([np.arange(5)], [np.zeros(5)], [np.array([0, 0, 0, 1, 1])])
        >>> pruning_config_counts([0.9], info)  # 4 of 5, but each segment keeps one: 3
        [3]
    """
    validate_pruning_config(pruning_config)
    sizes = [int(len(x)) for x in pruning_info.group_labels]
    if len(pruning_config) != len(sizes):
        raise ValueError(f"pruning_config has {len(pruning_config)} entries but there are {len(sizes)} prunable "
                         "groups")
    if not is_ratio_config(pruning_config):
        return [int(v) for v in pruning_config]
    most = max_prunable_per_group(pruning_info, min_channels)
    return [min(n_channels_to_prune(n, float(r)), m) if n else 0
            for n, r, m in zip(sizes, pruning_config, most)]


def uniform_pruning_config(pruning_info: GroupedScores, pruning_ratio: float,
                           min_channels: MinChannels = 1) -> List[int]:
    """Counts that prune the same fraction ``pruning_ratio`` of every group (see :func:`pruning_config_counts`).

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> uniform_pruning_config(ChannelScores([np.arange(4), np.arange(4, 7)], [np.zeros(4), np.zeros(3)]), 0.5)
        [2, 1]
    """
    n_groups = len(pruning_info.group_labels)
    if isinstance(pruning_ratio, bool) or not isinstance(pruning_ratio, Real) \
            or not 0.0 <= float(pruning_ratio) < 1.0:
        raise ValueError(f"pruning_ratio must be a number in [0, 1), got {pruning_ratio!r}")
    return pruning_config_counts([float(pruning_ratio)] * n_groups, pruning_info, min_channels) if n_groups else []
