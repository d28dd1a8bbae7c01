"""Reading calibrated channel importance: per group, its labels and criteria.

Example:
    >>> import torch
    >>> from sparsify_torch.channels import calibrate_model_for_pruning
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
    >>> info = calibrate_model_for_pruning(net, [torch.randn(2, 3, 8, 8)], lambda out, x: out.pow(2).mean())
    >>> [(group_id, labels) for group_id, labels, _ in iterate_over_gate_criteria(info)]
    [(0, [0, 1, 2, 3])]
    >>> sorted(get_criteria_label_dict(info)["0"])
    ['criteria', 'labels']
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Tuple

import numpy as np

from sparsify.channels.selection import GroupedScores

from .info import ModelPruningInfo

__all__ = ["iterate_over_gate_criteria", "get_criteria_label_dict", "group_ids", "group_names"]


def group_ids(pruning_info: GroupedScores) -> List[int]:
    """Global index of every prunable group: its index among all groups of a :class:`ModelPruningInfo`
    (unprunable ones included, as in ``summary(1)``), else its position."""
    if isinstance(pruning_info, ModelPruningInfo):
        return pruning_info.prunable_group_indices
    return list(range(len(pruning_info.group_labels)))


def group_names(pruning_info: GroupedScores) -> List[str]:
    """Name of every prunable group: the layer whose output channels define it (``"group<i>"`` without one)."""
    if isinstance(pruning_info, ModelPruningInfo):
        return [pruning_info.groups[g].root_name for g in pruning_info.prunable_group_indices]
    return [f"group{i}" for i in range(len(pruning_info.group_labels))]


def iterate_over_gate_criteria(pruning_info: GroupedScores) -> Iterator[Tuple[int, List[int], List[float]]]:
    """Yield ``(group_id, labels, criteria)`` for every prunable group (gate), in group order.

    Args:
        pruning_info: calibration result.

    Yields:
        group_id: global index of the group (see :func:`group_ids`).
        labels: the group's channel labels (list of int).
        criteria: the channels' importance values (list of float, same order).

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> list(iterate_over_gate_criteria(ChannelScores([np.array([0, 1])], [np.array([1., 2.])])))
        [(0, [0, 1], [1.0, 2.0])]
    """
    for group_id, labels, criteria in zip(group_ids(pruning_info), pruning_info.group_labels,
                                          pruning_info.group_criteria):
        yield int(group_id), np.asarray(labels).astype(int).tolist(), np.asarray(criteria, dtype=float).tolist()


def get_criteria_label_dict(pruning_info: GroupedScores) -> Dict[str, Dict[str, np.ndarray]]:
    """Channel importance in readable form: ``{group name: {"labels": array, "criteria": array}}``.

    Group names are the layers whose output channels define the groups (see
    :func:`group_names`).

    Example:
        >>> from sparsify.channels.selection import ChannelScores
        >>> d = get_criteria_label_dict(ChannelScores([np.array([4, 7])], [np.array([1., 2.])]))
        >>> d["group0"]["labels"].tolist(), d["group0"]["criteria"].tolist()
        ([4, 7], [1.0, 2.0])
    """
    return {name: {"labels": np.asarray(labels, dtype=np.int64).copy(),
                   "criteria": np.asarray(criteria, dtype=np.float64).copy()}
            for name, labels, criteria in zip(group_names(pruning_info), pruning_info.group_labels,
                                              pruning_info.group_criteria)}
