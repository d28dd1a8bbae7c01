"""Physical channel removal: ``prune_model``.

The model is re-traced (with the inputs recorded at calibration) so the
surgery works on any copy of the calibrated model, then every selected group
is pruned through torch-pruning. Everything is validated before the first
change, so a bad call leaves the model untouched.

Example:
    >>> import torch
    >>> from sparsify_torch.channels import PruningCalibrator
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
    >>> with PruningCalibrator(net) as c:
    ...     net(torch.randn(2, 3, 8, 8)).sum().backward()
    >>> small = prune_model(net, c.pruning_info, [0, 1], inplace=False)
    >>> small[0].out_channels, net[0].out_channels
    (2, 4)
"""
from __future__ import annotations

import copy
from typing import Sequence

from torch import nn

from .graph import analyze_channel_groups, build_dependency_graph, prune_groups
from .info import ModelPruningInfo

__all__ = ["prune_model"]


def prune_model(model: nn.Module, pruning_info: ModelPruningInfo, prune_labels: Sequence[int],
                inplace: bool = True) -> nn.Module:
    """Remove the channels ``prune_labels`` from ``model``.

    Args:
        model: the calibrated model (or a copy of it with the same structure).
        pruning_info: result of calibration on this model.
        prune_labels: global channel labels to remove (see :class:`ModelPruningInfo`).
        inplace: prune ``model`` itself; otherwise a deep copy is pruned.

    Returns:
        A plain ``nn.Module`` with fewer channels (no hooks, no gates).

    Raises:
        TypeError: ``model`` or ``pruning_info`` of the wrong type.
        ValueError: a label that does not exist, is repeated, belongs to an
            unprunable group or would empty a group or one of its segments (a
            source layer of a concatenation), or a model whose structure does
            not match ``pruning_info``. The model is unchanged.
    """
    return _prune_model(model, pruning_info, prune_labels, inplace)


def _prune_model(model: nn.Module, pruning_info: ModelPruningInfo, prune_labels: Sequence[int], inplace: bool,
                 traced=None) -> nn.Module:
    """``prune_model``; ``traced`` is the calibration's (graph, outputs) of this very model, unchanged since
    (``calibrate_and_prune_model`` passes it so the model is not traced twice; only valid with ``inplace``)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(pruning_info, ModelPruningInfo):
        raise TypeError(f"pruning_info must be a ModelPruningInfo, got {type(pruning_info).__name__}")
    if isinstance(prune_labels, (str, bytes)) or not hasattr(prune_labels, "__iter__"):
        raise TypeError(f"prune_labels must be a sequence of integer labels, got {prune_labels!r}")
    per_group = pruning_info.split_labels(list(prune_labels))
    if not inplace:
        model = copy.deepcopy(model)
    if not per_group:
        return model
    modules = dict(model.named_modules())
    for g in per_group:
        group = pruning_info.groups[g]
        root = modules.get(group.root_name)
        n_now = getattr(root, "out_channels", getattr(root, "out_features", None))
        if root is None or n_now != group.n_channels:
            raise ValueError(f"model does not match pruning_info: group {g} root {group.root_name!r} should have "
                             f"{group.n_channels} output channels, found {n_now}")
    if traced is not None and inplace:  # the graph the groups were found on: nothing to re-check
        prune_groups(traced[0], [(modules[pruning_info.groups[g].root_name], local.tolist())
                                 for g, local in per_group.items()])
        return model
    args, kwargs = pruning_info.example_inputs
    graph, out_fns = build_dependency_graph(model, pruning_info.entry_point, args, kwargs)
    fresh = {grp.root_name: grp for grp in analyze_channel_groups(model, pruning_info.entry_point, args, kwargs,
                                                                  graph_and_outputs=(graph, out_fns))}
    for g in per_group:
        expected = pruning_info.groups[g]
        found = fresh.get(expected.root_name)
        if found is None or sorted(found.members) != sorted(expected.members):
            raise ValueError(f"model does not match pruning_info: channel group of {expected.root_name!r} differs "
                             "from the calibrated one")
    prune_groups(graph, [(modules[pruning_info.groups[g].root_name], local.tolist())
                         for g, local in per_group.items()])
    return model
