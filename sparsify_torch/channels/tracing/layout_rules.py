"""Op rules for layout ops: replayed on the origin tensors, so the channel index maps stay exact.

Every rule has the signature ``rule(state, func, name, args, kwargs, out)``
(see :mod:`.op_rules`). Example:
    >>> import torch
    >>> from sparsify_torch.channels.tracing import trace_channels
    >>> class Swap(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.a, self.b = torch.nn.Conv2d(2, 4, 1), torch.nn.Conv2d(4, 1, 1)
    ...     def forward(self, x):
    ...         return self.b(self.a(x).flip(1))  # the channels are read in reverse order
    >>> net = Swap()
    >>> trace = trace_channels(net, net.forward, (torch.zeros(1, 2, 3, 3),), {})
    >>> trace.units["b"].in_positions.tolist()
    [3, 2, 1, 0]
"""
from __future__ import annotations

import numpy as np
import torch

from sparsify.channels.groups import refine_reshape, shrinking_factor

from ..samples import map_tensors
from .model_zoo import stored_split_policy
from .op_args import flat_tensors, normalized_dims, schema_arg, varies
from .records import DATA
from .state import TraceState

__all__ = ["replay", "reshape", "shuffle", "select", "split"]


def replay(state: TraceState, func, name, args, kwargs, out) -> None:
    """Run the op on the origins of its inputs: the outputs' origins are exact whatever the layout change."""

    def sub(t):
        return state.origin(t)

    def call(materialize: bool):
        a = map_tensors(args, (lambda t: sub(t).contiguous()) if materialize else sub)
        k = map_tensors(kwargs, (lambda t: sub(t).contiguous()) if materialize else sub)
        return func(*a, **k)

    try:
        res = call(False)
    except RuntimeError:
        res = call(True)
    for t, o in zip(flat_tensors(out), flat_tensors(res)):
        state.set_origin(t, o)


def reshape(state: TraceState, func, name, args, kwargs, out) -> None:
    """A reshape: channels dealt over several dimensions are joined where one of them would shrink."""
    src = args[0]
    dst = flat_tensors(out)[0]
    c = state.canon(state.origin(src)).expand(src.shape)
    if c.numel() and (c >= 0).any():
        runs = refine_reshape(tuple(src.shape), tuple(dst.shape))
        if runs is None:
            state.fix(c.numpy(), f"reshape {tuple(src.shape)} -> {tuple(dst.shape)} re-deals channels{state.where()}")
        else:
            refined = [size for run in runs for size in run.sizes]
            cr = c.contiguous().reshape(refined)
            offset = 0
            for run in runs:
                axes = list(range(offset, offset + len(run.sizes)))
                varying = [k for k, ax in enumerate(axes) if varies(cr, ax)]
                if len(varying) >= 2:
                    keep = shrinking_factor(run, varying)
                    others = [axes[k] for k in varying if k != keep]
                    rest = [ax for ax in range(cr.dim()) if ax not in others]
                    cols = cr.permute(rest + others).reshape(-1, int(np.prod([cr.shape[a] for a in others])))
                    cols = cols.numpy()
                    if (cols == DATA).any():
                        bad = (cols == DATA).any(axis=1)
                        state.fix(cols[bad], f"reshape of channels mixed with fixed data{state.where()}")
                    for j in range(1, cols.shape[1]):
                        state.union(cols[:, 0], cols[:, j])
                offset += len(run.sizes)
    replay(state, func, name, args, kwargs, out)


def shuffle(state: TraceState, func, name, args, kwargs, out) -> None:
    """A channel shuffle joins the positions it pairs; pixel (un)shuffles are replayed."""
    src = args[0]
    if name in ("channel_shuffle", "native_channel_shuffle") and src.dim() >= 2:
        groups = int(schema_arg(func, args, kwargs, "groups"))
        size = src.shape[1]
        pos = state.positions(state.origin(src), 1, size, f"channel shuffle{state.where()}")
        blocks = pos.reshape(groups, size // groups)
        for j in range(1, groups):
            state.union(blocks[0], blocks[j])
    replay(state, func, name, args, kwargs, out)


def select(state: TraceState, func, name, args, kwargs, out) -> None:
    """Slicing, indexing and splitting: a partial selection of channels fixes them."""
    src = args[0]
    if not isinstance(src, torch.Tensor) or src.dim() == 0:
        replay(state, func, name, args, kwargs, out)
        return
    c = state.canon(state.origin(src))
    if not (c >= 0).any():
        replay(state, func, name, args, kwargs, out)
        return
    nd = src.dim()
    where = state.where()
    if name == "slice":
        dim = int(schema_arg(func, args, kwargs, "dim", 0)) % nd
        start, end = schema_arg(func, args, kwargs, "start"), schema_arg(func, args, kwargs, "end")
        step = schema_arg(func, args, kwargs, "step", 1) or 1
        size = src.shape[dim]
        full = (start is None or start == 0 or start <= -size) and (end is None or end >= size) and step == 1
        if not full and varies(c, dim):
            state.fix(c.numpy(), f"slice [{start}:{end}:{step}] of channels (dim {dim}){where}")
    elif name in ("select", "unfold", "roll"):
        dims = schema_arg(func, args, kwargs, "dims" if name == "roll" else "dim", 0)
        for d in normalized_dims(dims, nd):
            if varies(c, d):
                state.fix(c.numpy(), f"{name} along channels (dim {d}){where}")
                break
    elif name in ("index_select", "gather"):
        d = int(schema_arg(func, args, kwargs, "dim")) % nd
        if varies(c, d):
            state.fix(c.numpy(), f"{name} of channels (dim {d}){where}")
    elif name in ("index", "_unsafe_index"):
        indices = schema_arg(func, args, kwargs, "indices")
        for d, idx in enumerate(indices or []):
            if idx is not None and d < nd and varies(c, d):
                state.fix(c.numpy(), f"indexing channels (dim {d}){where}")
                break
    elif name in ("split", "split_with_sizes", "unbind", "chunk", "tensor_split"):
        d = int(schema_arg(func, args, kwargs, "dim", 0)) % nd
        if varies(c, d):
            split(state, func, name, src, d, c, flat_tensors(out))
    replay(state, func, name, args, kwargs, out)


def split(state: TraceState, func, name, src, dim, c, pieces) -> None:
    """A split along channels: equal pieces of a ``chunk`` (or a known owner) shrink together; else fixed."""
    sizes = [int(p.shape[dim]) for p in pieces]
    policy, owner = stored_split_policy(state)
    equal = len(set(sizes)) == 1 and len(sizes) > 1
    if equal and (state.fn_name == "chunk" or policy == "equal"):
        pos = state.positions(state.origin(src), dim, int(src.shape[dim]), f"split{state.where()}")
        blocks = pos.reshape(len(sizes), sizes[0])
        if (blocks == DATA).any(axis=0).any():
            state.fix(blocks[:, (blocks == DATA).any(axis=0)],
                      f"split of channels mixed with fixed data{state.where()}")
        for j in range(1, len(sizes)):
            state.union(blocks[0], blocks[j])
        if policy == "equal" and owner:
            state.split_owners.add(owner)
    elif policy == "sizes" and name == "split_with_sizes" and owner:
        state.split_owners.add(owner)
    else:
        what = f"sizes {sizes}" if name == "split_with_sizes" or not equal else f"size {sizes[0]}"
        state.fix(c.numpy(), f"split of channels with {what} stored in the model{state.where()}")
