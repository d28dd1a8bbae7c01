"""Model cost measures for structured pruning: MACs and parameter counts.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))
    >>> count_macs(net, torch.zeros(1, 3, 8, 8)), count_params(net)
    (4176, 402)
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import nn

__all__ = ["count_macs", "count_params"]


def count_params(model: nn.Module) -> int:
    """Number of parameter elements."""
    return int(sum(p.numel() for p in model.parameters()))


def count_macs(model: nn.Module, *args: Any, kwargs: Optional[Dict[str, Any]] = None,
               return_output: bool = False) -> Union[int, Tuple[int, Any]]:
    """Multiply-accumulates of conv and linear layers in one ``model(*args, **kwargs)`` call.

    Runs under ``torch.no_grad()`` in the model's current mode (use eval mode
    to keep BatchNorm statistics). Convolutions count
    ``out.numel() * in_channels / groups * prod(kernel)``; linears
    ``out.numel() * in_features``. With ``return_output=True`` returns
    ``(macs, model output)`` so the same forward pass serves both.
    """
    total = [0]

    def hook(module, _inputs, output):
        if not isinstance(output, torch.Tensor):
            return
        if isinstance(module, nn.modules.conv._ConvNd):
            k = 1
            for s in module.kernel_size:
                k *= s
            total[0] += output.numel() * (module.in_channels // module.groups) * k
        elif isinstance(module, nn.Linear):
            total[0] += output.numel() * module.in_features

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (nn.modules.conv._ConvNd, nn.Linear))]
    try:
        with torch.no_grad():
            output = model(*args, **(kwargs or {}))
    finally:
        for h in handles:
            h.remove()
    return (int(total[0]), output) if return_output else int(total[0])
