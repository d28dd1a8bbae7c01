"""Removing channels from one layer: convolutions, linear layers, normalisations, registered layers, parameters.

Every function builds new parameter tensors (the old ones are left untouched,
so a snapshot of the module's attributes restores it exactly) and updates the
layer's size attributes. Positions are indices in the dimension named by the
role: ``"out"`` output channels, ``"in"`` input channels, ``"through"`` the
channels a per-channel layer passes on.

Example:
    >>> import torch
    >>> conv = torch.nn.Conv2d(4, 6, 3, groups=2)
    >>> remove_channels(conv, out_positions=[0, 3], in_positions=[1, 3])
    >>> conv.in_channels, conv.out_channels, conv.groups, tuple(conv.weight.shape)
    (2, 4, 2, (4, 1, 3, 3))
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import nn

from .tracing import CustomLayer, LayerKind, custom_layer, layer_kind

__all__ = ["remove_channels", "remove_from_tensor", "keep_indices"]


def keep_indices(size: int, removed: Iterable[int]) -> torch.Tensor:
    """Sorted indices of ``range(size)`` not in ``removed``.

    Example:
        >>> keep_indices(5, [1, 3]).tolist()
        [0, 2, 4]
    """
    gone = {int(i) for i in removed}
    return torch.tensor([i for i in range(size) if i not in gone], dtype=torch.long)


def _select(t: torch.Tensor, dim: int, keep: torch.Tensor) -> torch.Tensor:
    new = t.detach().index_select(dim, keep.to(t.device)).clone()
    if isinstance(t, nn.Parameter):
        param = nn.Parameter(new, requires_grad=t.requires_grad)
        if t.grad is not None:
            param.grad = t.grad.detach().index_select(dim, keep.to(t.device)).clone()
        return param
    return new


def _set(module: nn.Module, name: str, value) -> None:
    if name in module._parameters:
        module._parameters[name] = value
    elif name in module._buffers:
        module._buffers[name] = value
    else:
        setattr(module, name, value)


def remove_from_tensor(module: nn.Module, name: str, dim: int, removed: Sequence[int]) -> None:
    """Remove indices ``removed`` of dimension ``dim`` from the parameter or buffer ``module.<name>``."""
    t = getattr(module, name)
    _set(module, name, _select(t, dim, keep_indices(t.shape[dim], removed)))


def _block_local(positions: Sequence[int], size: int, blocks: int, what: str) -> list:
    """Local indices removed in every block; ValueError unless every block loses the same ones."""
    per = size // blocks
    local = sorted({int(p) % per for p in positions})
    expected = {b * per + i for b in range(blocks) for i in local}
    if expected != {int(p) for p in positions}:
        raise ValueError(f"{what}: a grouped layer must lose the same positions in each of its {blocks} groups")
    return local


def remove_channels(module: nn.Module, out_positions: Sequence[int] = (), in_positions: Sequence[int] = (),
                    through_positions: Sequence[int] = ()) -> None:
    """Remove output, input or pass-through channels of one layer in place (new parameter tensors).

    Raises:
        TypeError: a layer type this module does not know.
        ValueError: positions that break the layer (a grouped convolution losing
            different positions in different groups, a GroupNorm whose channels no
            longer divide into its groups).
    """
    out_positions, in_positions = sorted(set(out_positions)), sorted(set(in_positions))
    through_positions = sorted(set(through_positions))
    spec = custom_layer(module)
    kind = layer_kind(module)
    if spec is not None and spec.in_dims:
        _custom(module, spec, out_positions, in_positions or through_positions)
    elif isinstance(module, nn.modules.conv._ConvNd):
        _conv(module, kind, out_positions, in_positions, through_positions)
    elif isinstance(module, nn.Linear):
        if in_positions:
            remove_from_tensor(module, "weight", 1, in_positions)
            module.in_features -= len(in_positions)
        if out_positions:
            remove_from_tensor(module, "weight", 0, out_positions)
            if module.bias is not None:
                remove_from_tensor(module, "bias", 0, out_positions)
            module.out_features -= len(out_positions)
    elif kind in (LayerKind.PER_CHANNEL, LayerKind.LAYER_NORM, LayerKind.GROUP_NORM) and through_positions:
        _norm(module, through_positions)
    elif out_positions or in_positions or through_positions:
        raise TypeError(f"cannot remove channels from a {type(module).__name__}")


def _conv(module: nn.modules.conv._ConvNd, kind: str, out_positions, in_positions, through_positions) -> None:
    name = type(module).__name__
    if kind is LayerKind.DEPTHWISE:
        if not through_positions:
            return
        mult = module.out_channels // module.in_channels
        rows = [p * mult + j for p in through_positions for j in range(mult)]
        remove_from_tensor(module, "weight", 0, rows)
        if module.bias is not None:
            remove_from_tensor(module, "bias", 0, rows)
        module.in_channels -= len(through_positions)
        module.out_channels -= len(rows)
        module.groups -= len(through_positions)
        return
    out_dim, in_dim = (1, 0) if module.transposed else (0, 1)
    if in_positions:
        if module.groups > 1:
            local = _block_local(in_positions, module.in_channels, module.groups, f"{name} input channels")
            remove_from_tensor(module, "weight", in_dim, local)
        else:
            remove_from_tensor(module, "weight", in_dim, in_positions)
        module.in_channels -= len(in_positions)
    if out_positions:
        if module.groups > 1:
            _block_local(out_positions, module.out_channels, module.groups, f"{name} output channels")
        remove_from_tensor(module, "weight", out_dim, out_positions)
        if module.bias is not None:
            remove_from_tensor(module, "bias", 0, out_positions)
        module.out_channels -= len(out_positions)


def _custom(module: nn.Module, spec: CustomLayer, out_positions, in_positions) -> None:
    """A layer registered with ``register_layer_kind``: its tensors lose the positions, its counts shrink."""
    for positions, dims, count in ((in_positions, spec.in_dims, spec.in_channels),
                                   (out_positions, spec.out_dims, spec.out_channels)):
        if not positions:
            continue
        for name, dim in dims.items():
            if isinstance(getattr(module, name, None), torch.Tensor):
                remove_from_tensor(module, name, dim, positions)
        if count:
            setattr(module, count, int(getattr(module, count)) - len(positions))


def _norm(module: nn.Module, positions) -> None:
    if isinstance(module, nn.GroupNorm):
        left = module.num_channels - len(positions)
        if left % module.num_groups:
            raise ValueError(f"GroupNorm with {module.num_groups} groups cannot keep {left} channels")
        module.num_channels = left
    elif isinstance(module, nn.PReLU):
        module.num_parameters -= len(positions)
    elif hasattr(module, "normalized_shape"):
        module.normalized_shape = (int(module.normalized_shape[0]) - len(positions),)
    else:
        module.num_features -= len(positions)
    for tname in ("weight", "bias", "running_mean", "running_var"):
        t = getattr(module, tname, None)
        if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] > 1:
            remove_from_tensor(module, tname, 0, positions)
