"""What the torch adapter reads besides the weights: input-activation norms and dense gradients.

:class:`ActivationNorms` sums, per input channel, the squares of every input a
layer sees (a forward pre-hook) and hands the core their square roots, shaped
to broadcast against the canonical weight: ``(1, in)`` for a Linear,
``(1, in, 1, ...)`` for a convolution, ``(out, in / groups, 1, ...)`` for a
grouped one (each output row sees its own group's channels). Wanda
(``criterion="wanda"``) multiplies ``|w|`` by them.

Example:
    >>> import torch
    >>> from sparsify_torch.layers import prunable_weights
    >>> lin = torch.nn.Linear(2, 1)
    >>> norms = ActivationNorms(prunable_weights(lin))
    >>> _ = lin(torch.tensor([[3.0, 0.0], [4.0, 1.0]]))
    >>> norms.canonical()["weight"].tolist()
    [[5.0, 1.0]]
    >>> norms.remove()
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from .layers import PrunableWeight

__all__ = ["ActivationNorms", "check_activation_layers", "norms_from_sums"]

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def _module_type(module: nn.Module) -> type:
    """The module's own class (FSDP2's ``fully_shard`` swaps it for a subclass ``FSDP<Class>``)."""
    from torch.distributed.fsdp import FSDPModule
    kind = type(module)
    if issubclass(kind, FSDPModule):
        kind = next(b for b in kind.__mro__[1:] if not issubclass(b, FSDPModule))
    return kind


def check_activation_layers(weights: list[PrunableWeight], criterion: str) -> None:
    """Raise ``ValueError`` naming the weights whose inputs cannot be read per channel (only Linear and
    convolutions, not grouped transposed ones, feed their input channels straight to the weight's columns)."""
    bad = [w.name for w in weights
           if not (_module_type(w.module) is nn.Linear or isinstance(w.module, _CONV)) or w.rows is not None
           or (w.conv_transpose_groups and w.conv_transpose_groups != 1)]
    if bad:
        raise ValueError(f"criterion {criterion!r} needs the input channels of each pruned weight; {bad} are not "
                         "Linear or convolution weights (Embedding, attention projections and grouped transposed "
                         "convolutions are not supported): exclude them with excluded_op_names")


def norms_from_sums(weights: list[PrunableWeight], sums: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Per-input-channel sums of squares (keyed by weight name) -> their square roots, broadcastable to each
    weight's canonical shape: ``(1, in, 1, ...)``, or ``(out, in / groups, 1, ...)`` for a grouped convolution
    (row ``o`` reads its group's channels). Weights without sums are left out.

    Example:
        >>> from sparsify_torch.layers import prunable_weights
        >>> norms_from_sums(prunable_weights(nn.Linear(2, 1)), {"weight": torch.tensor([9.0, 16.0])})["weight"].tolist()
        [[3.0, 4.0]]
    """
    out = {}
    for w in weights:
        s = sums.get(w.name)
        if s is None:
            continue
        norms = s.float().sqrt().cpu().numpy()
        groups = getattr(w.module, "groups", 1)
        spatial = (1,) * (len(w.shape) - 2)
        if groups > 1 and not w.conv_transpose_groups:       # row o reads its group's channels
            per = w.shape[1]
            rows_per_group = w.shape[0] // groups
            idx = (np.arange(w.shape[0])[:, None] // rows_per_group) * per + np.arange(per)[None, :]
            out[w.name] = norms[idx].reshape(w.shape[0], per, *spatial)
        else:
            out[w.name] = norms.reshape(1, -1, *spatial)
    return out


class ActivationNorms:
    """Per-input-channel L2 norms of the inputs of each pruned layer since the last :meth:`reset`.

    Args:
        weights: the pruned weights (Linear and convolution weights; see :func:`check_activation_layers`).
    """

    def __init__(self, weights: list[PrunableWeight]) -> None:
        self._weights = list(weights)
        self._sums: dict[int, torch.Tensor] = {}
        self._handles = []
        for module in dict.fromkeys(w.module for w in self._weights):
            self._handles.append(module.register_forward_pre_hook(self._hook))

    @torch.no_grad()
    def _hook(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if not args or not isinstance(args[0], torch.Tensor):
            return
        x = args[0].detach()
        if isinstance(module, nn.Linear):
            sq = x.reshape(-1, x.shape[-1]).float().pow(2).sum(0)
        else:
            spatial = len(module.kernel_size)
            if x.dim() == spatial + 1:               # unbatched input
                x = x.unsqueeze(0)
            sq = x.transpose(0, 1).reshape(x.shape[1], -1).float().pow(2).sum(1)
        key = id(module)
        self._sums[key] = sq if key not in self._sums else self._sums[key] + sq

    def seen(self) -> bool:
        """True when every pruned layer saw at least one input since the last reset."""
        return all(id(w.module) in self._sums for w in self._weights)

    def canonical(self) -> dict[str, np.ndarray]:
        """The norms of each weight, broadcastable to its canonical shape (NumPy float32)."""
        return norms_from_sums(self._weights, self.state())

    def widths(self) -> dict[str, int]:
        """Input channels of each weight's layer (the length of its sums), keyed by weight name."""
        return {w.name: w.module.in_features if isinstance(w.module, nn.Linear) else w.module.in_channels
                for w in self._weights}

    def reset(self) -> None:
        """Start a new window (after an update)."""
        self._sums.clear()

    def state(self) -> dict[str, torch.Tensor]:
        """The sums of squares seen since the last reset, keyed by weight name (for checkpoints)."""
        return {w.name: self._sums[id(w.module)].detach().cpu().clone() for w in self._weights
                if id(w.module) in self._sums}

    def load_state(self, sums: Any) -> None:
        """Restore :meth:`state` output (checked before anything changes, see :meth:`check_state`)."""
        self._sums = self.check_state(sums)

    def check_state(self, sums: Any) -> dict[int, torch.Tensor]:
        """:meth:`state` output, checked, as this object holds it; nothing changes.

        Raises:
            ValueError: a name that is not a pruned weight, or a sum of the wrong shape.
        """
        if not isinstance(sums, dict):
            raise ValueError(f"activation sums must be a dict of tensors keyed by weight name, got {type(sums).__name__}")
        by_name = {w.name: w for w in self._weights}
        new = {}
        for name, value in sums.items():
            w = by_name.get(name)
            if w is None:
                raise ValueError(f"activation sums hold {name!r}, which is not a pruned weight")
            width = w.module.in_features if isinstance(w.module, nn.Linear) else w.module.in_channels
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != (width,):
                raise ValueError(f"activation sums of {name!r} must be a tensor of shape ({width},)")
            new[id(w.module)] = value.detach().float().clone()
        return new

    def remove(self) -> None:
        """Drop the hooks."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
