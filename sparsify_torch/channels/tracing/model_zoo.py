"""Model-zoo layers that store split sizes: which ones tracing may prune across, and how surgery updates them.

A layer that splits its input with sizes kept in the module (timm's
``MixedConv2d`` splits by a stored list; its CSP stages split in two halves)
would break once the channels change, so tracing normally fixes every channel
such a split reads. For the layers listed in :data:`STORED_SPLIT_OWNERS`,
tracing lets the pieces shrink and surgery rewrites the stored sizes.

Example:
    >>> STORED_SPLIT_OWNERS["MixedConv2d"][0]
    'sizes'
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

from torch import nn

from .kinds import LayerKind, layer_kind
from .state import TraceState

__all__ = ["STORED_SPLIT_OWNERS", "stored_split_policy"]


def _fix_mixed_conv(module: nn.Module) -> None:
    convs = list(module.values())
    module.splits = [int(c.in_channels) for c in convs]
    module.in_channels = sum(module.splits)
    module.out_channels = sum(int(c.out_channels) for c in convs)


def _fix_cross_stage(module: nn.Module) -> None:
    conv = getattr(module.conv_exp, "conv", module.conv_exp)
    module.expand_chs = int(conv.out_channels)


#: class name -> (split policy, function that updates the stored sizes after surgery). "sizes": the pieces may
#: shrink independently (the stored list is rewritten); "equal": the pieces shrink equally (channel i of every
#: piece goes together) and the stored piece size is rewritten.
STORED_SPLIT_OWNERS: Dict[str, Tuple[str, Callable[[nn.Module], None]]] = {
    "MixedConv2d": ("sizes", _fix_mixed_conv),
    "CrossStage": ("equal", _fix_cross_stage),
    "CrossStage3": ("equal", _fix_cross_stage),
}

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def stored_split_policy(state: TraceState) -> Tuple[Optional[str], Optional[str]]:
    """``(policy, owner name)`` of the innermost module being called, if it is a stored-split owner.

    Containers are looked through; the innermost other module traced op by op decides.
    """
    for module, _ in reversed(state.stack):
        entry = STORED_SPLIT_OWNERS.get(type(module).__name__)
        if entry is not None:
            return entry[0], state.names.get(module)
        if layer_kind(module) is LayerKind.TRACED and not isinstance(module, _CONTAINERS):
            return None, None
    return None, None
