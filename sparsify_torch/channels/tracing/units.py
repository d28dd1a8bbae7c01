"""Layers as units: what a layer reads at its input boundary and what it writes at its output.

A layer with a kind other than ``TRACED`` (see :mod:`.kinds`) is not followed
op by op. At its input, the positions of its channel dimension are read
(atoms meeting in one position are joined); a producer (conv/linear) gets new
atoms for its output channels; a grouped convolution or GroupNorm joins the
same position of every block. At its output, a producer writes its new atoms
and a layer that passes channels on writes the positions it read.

Example:
    >>> import torch
    >>> from sparsify_torch.channels.tracing import trace_channels
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 1), torch.nn.Conv2d(4, 4, 3, groups=2))
    >>> trace = trace_channels(net, net.forward, (torch.zeros(1, 2, 5, 5),), {})
    >>> trace.units["1"].kind, trace.units["1"].blocks, trace.uf.find(trace.units["1"].in_positions).tolist()
    (<LayerKind.GROUPED_CONV: 'gconv'>, 2, [0, 1, 0, 1])
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from torch import nn

from .kinds import LayerKind, custom_layer
from .op_args import flat_tensors
from .records import DATA, UnitRecord
from .state import TraceState

__all__ = ["enter_opaque", "read_unit_input", "write_unit_output", "unit_channel_dim", "unit_out_size"]

_BLOCKED = (LayerKind.GROUPED_CONV, LayerKind.GROUP_NORM)
_KERNELED = (LayerKind.CONV, LayerKind.GROUPED_CONV, LayerKind.DEPTHWISE, LayerKind.CONV_TRANSPOSE)


def _opaque_record(name: str) -> UnitRecord:
    return UnitRecord(name, LayerKind.OPAQUE, 0, 0, np.zeros(0, np.int64))


def enter_opaque(state: TraceState, module: nn.Module, name: str, args, kwargs) -> None:
    """An opaque layer: what goes in is fixed."""
    state.fix_inputs(args, kwargs, f"inputs of {type(module).__name__} {name!r} (its channels are not followed "
                                   "inside it)")
    state.units.setdefault(name, _opaque_record(name))


def read_unit_input(state: TraceState, module: nn.Module, name: str, kind: LayerKind, args, kwargs) -> None:
    """Record the channels ``module`` reads (a second call joins them with the first's, position by position)."""
    x = args[0] if args else next(iter(kwargs.values()), None)
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        state.units.setdefault(name, _opaque_record(name))
        state.fix_inputs(args, kwargs, f"{type(module).__name__} {name!r} called on unusual inputs")
        return
    size, dim = unit_channel_dim(module, kind, x)
    if size is None:
        state.fix_inputs(args, kwargs, f"cannot tell the channel dimension of {type(module).__name__} {name!r}")
        state.units[name] = _opaque_record(name)
        return
    pos = state.positions(state.origin(x), dim, size, f"{name!r} reads channels mixed with fixed data")
    rec = state.units.get(name)
    if rec is None:
        blocks = int(getattr(module, "groups", 1)) if kind is LayerKind.GROUPED_CONV else \
            int(getattr(module, "num_groups", 1)) if kind is LayerKind.GROUP_NORM else 1
        mult = int(module.out_channels // module.in_channels) if kind is LayerKind.DEPTHWISE else 1
        rec = UnitRecord(name, kind, size, dim, pos, multiplier=mult, blocks=blocks)
        if kind.produces_channels:
            n_out = unit_out_size(module, kind)
            rec.out_atoms = state.new_atoms(n_out, "out", name)
            if kind is LayerKind.GROUPED_CONV:
                ob = rec.out_atoms.reshape(blocks, n_out // blocks)
                for j in range(1, blocks):
                    state.union(ob[0], ob[j])
        state.units[name] = rec
    else:
        both = (rec.in_positions >= 0) & (pos >= 0)
        state.union(rec.in_positions[both], pos[both])
        mixed = ((rec.in_positions == DATA) & (pos >= 0)) | ((pos == DATA) & (rec.in_positions >= 0))
        if mixed.any():
            state.fix(np.concatenate([pos[mixed], rec.in_positions[mixed]]),
                      f"{name!r} is called on fixed data and on channels at the same positions")
        rec.in_positions = np.where(rec.in_positions >= 0, rec.in_positions, pos)
    if kind in _BLOCKED and rec.blocks > 1:
        if size % rec.blocks:
            state.fix(pos, f"{name!r}: {size} channels in {rec.blocks} groups")
        else:
            b = rec.in_positions.reshape(rec.blocks, size // rec.blocks)
            for j in range(1, rec.blocks):
                state.union(b[0], b[j])


def unit_out_size(module: nn.Module, kind: LayerKind) -> int:
    """Output channels of a producing layer."""
    spec = custom_layer(module)
    if spec is not None:
        return spec.n_out(module)
    return int(module.out_features if kind is LayerKind.LINEAR else module.out_channels)


def unit_channel_dim(module: nn.Module, kind: LayerKind, x: torch.Tensor) -> Tuple[Optional[int], int]:
    """``(channels, dimension)`` that ``module`` reads in its input ``x``; ``(None, 0)`` when ``x`` does not fit."""
    spec = custom_layer(module)
    if spec is not None:
        size, dim = spec.n_in(module), spec.channel_dim
        fits = -x.dim() <= dim < x.dim() and x.shape[dim] == size
        return (size, dim) if fits else (None, 0)
    if kind is LayerKind.LINEAR:
        return (int(module.in_features), -1) if x.shape[-1] == module.in_features else (None, 0)
    if kind is LayerKind.LAYER_NORM:
        size = int(module.normalized_shape[0])
        standard = type(module).forward in (nn.LayerNorm.forward, nn.RMSNorm.forward)
        if x.shape[-1] == size and (standard or x.dim() < 2 or x.shape[1] != size):
            return size, -1
        if x.dim() >= 3 and x.shape[1] == size:
            return size, 1
        return None, 0
    if kind in _KERNELED:
        size = int(module.in_channels)
        batched = x.dim() == len(module.kernel_size) + 2
        dim = 1 if batched else 0
        return (size, dim) if x.shape[dim] == size else (None, 0)
    if kind is LayerKind.PER_CHANNEL:
        size = int(getattr(module, "num_features", getattr(module, "num_parameters", 0)))
    else:  # GROUP_NORM
        size = int(module.num_channels)
    dim = 1 if x.dim() >= 2 else 0
    return (size, dim) if x.shape[dim] == size else (None, 0)


def write_unit_output(state: TraceState, module: nn.Module, name: str, kind: LayerKind, output) -> None:
    """Set the origin of ``module``'s output: its new atoms (a producer) or the positions it passes on."""
    rec = state.units.get(name)
    outs = flat_tensors(output)
    if rec is None or rec.kind is LayerKind.OPAQUE or not outs:
        state.set_data(output)
        return
    t = outs[0]
    if kind.produces_channels:
        values = rec.out_atoms
    elif kind is LayerKind.DEPTHWISE:
        values = np.repeat(rec.in_positions, rec.multiplier)
    else:
        values = rec.in_positions
    spec = custom_layer(module)
    if kind.passes_channels or spec is not None:
        dim = rec.in_dim
    elif kind is LayerKind.LINEAR:
        dim = -1
    else:
        dim = 1 if t.dim() >= 2 and rec.in_dim == 1 else 0
    dim %= t.dim()
    if t.shape[dim] != values.size:
        state.set_data(output)
        state.fix(values, f"unexpected output shape of {name!r}")
        return
    shape = [1] * t.dim()
    shape[dim] = values.size
    state.set_origin(t, torch.from_numpy(np.ascontiguousarray(values)).view(shape).expand(t.shape))
    for extra in outs[1:]:
        state.set_data(extra)
