"""The search space of the latency-driven selector: how many channels each group may keep.

Example:
    >>> default_architecture_optimization_strategy(256), strategy_min_channels(default_architecture_optimization_strategy)(48)
    ((64, 4), 16)
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Callable, List, Tuple

import numpy as np

from .order import segment_min_channels
from .scores import GroupedScores, group_segments, group_sizes

__all__ = ["default_architecture_optimization_strategy", "strategy_min_channels", "architecture_search_space"]


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
        >>> from sparsify.channels.selection import ChannelScores
        >>> info = ChannelScores([np.arange(8), np.arange(8, 14)], [np.zeros(8), np.zeros(6)],
        ...                      [np.array([0, 0, 0, 0, 0, 0, 1, 1]), np.zeros(6, int)])
        >>> architecture_search_space(info, lambda n: (min(n, 2), 2))  # group 0 keeps 2 + 2: one pair per layer
        [[4, 6, 8], [2, 4, 6]]
    """
    space: List[List[int]] = []
    per_segment = strategy_min_channels(architecture_optimization_strategy)
    for n, seg in zip(group_sizes(pruning_info), group_segments(pruning_info)):
        if not n:
            space.append([0])
            continue
        min_keep, step = _strategy_result(architecture_optimization_strategy, n)
        min_keep = max(min_keep, int(segment_min_channels(seg, per_segment)[1].sum()))
        space.append(list(range(min_keep, n, step)) + [n])
    return space
