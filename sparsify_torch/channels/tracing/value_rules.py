"""Op rules for ops that compute values: pointwise ops, reductions and spatial ops (pooling, upsampling).

Every rule has the signature ``rule(state, func, name, args, kwargs, out)``
(see :mod:`.op_rules`). Example:
    >>> import torch
    >>> from sparsify_torch.channels.tracing import trace_channels
    >>> class Residual(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.a, self.b, self.c = torch.nn.Conv2d(2, 3, 1), torch.nn.Conv2d(2, 3, 1), torch.nn.Conv2d(3, 1, 1)
    ...     def forward(self, x):
    ...         return self.c(self.a(x) + self.b(x))  # the add joins channel i of a with channel i of b
    >>> net = Residual()
    >>> trace = trace_channels(net, net.forward, (torch.zeros(1, 2, 3, 3),), {})
    >>> trace.uf.find(trace.units["a"].out_atoms).tolist() == trace.uf.find(trace.units["b"].out_atoms).tolist()
    True
"""
from __future__ import annotations

import re
from typing import List

import numpy as np
import torch

from .op_args import flat_tensors, normalized_dims, schema_arg, varies
from .records import DATA, FREE
from .state import TraceState

__all__ = ["SHAPE_KEEPING_REDUCTIONS", "spatial", "reduce_origin", "reduction", "pointwise"]

SHAPE_KEEPING_REDUCTIONS = {"_softmax", "_log_softmax", "softmax", "log_softmax", "cumsum", "cumprod",
                             "logcumsumexp", "cummax", "cummin", "_safe_softmax"}


def spatial(state: TraceState, func, name, args, kwargs, out) -> None:
    """Pooling, upsampling, padding and grid sampling: channels pass unless the op mixes them."""
    src = args[0]
    outs = flat_tensors(out)
    if name.startswith("grid_sampler"):
        state.fix(state.canon(state.origin(args[1])).numpy(), f"{name} grid{state.where()}")
    match = re.search(r"(\d)d", name)
    k = int(match.group(1)) if match else max(src.dim() - 2, 0)
    nd = src.dim()
    spatial = list(range(max(nd - k, 0), nd))
    c = state.canon(state.origin(src))
    res = reduce_origin(state, c, spatial, f"{name} over channels{state.where()}")
    for t in outs:
        if t.dim() == nd and all(t.shape[d] == src.shape[d] for d in range(nd - k)):
            state.set_origin(t, res.expand(*t.shape[:nd - k], *([1] * k)).expand(t.shape) if k else res.expand(t.shape))
        else:
            state.fix_inputs(args[:1], {}, f"{name} changes the channel layout{state.where()}")
            state.set_data(t)


def reduce_origin(state: TraceState, c: torch.Tensor, dims: List[int], reason: str) -> torch.Tensor:
    """Keepdim reduction of a canonical origin: the common value, or DATA (and fixed atoms) where mixed."""
    if not dims or c.dim() == 0:
        return c
    hi, lo = c, c
    for d in dims:
        hi = hi.amax(d, keepdim=True)
        lo = lo.amin(d, keepdim=True)
    mixed = hi != lo
    if mixed.any():
        state.fix(c[mixed.expand_as(c)].numpy(), reason)
        hi = torch.where(mixed, torch.full_like(hi, DATA), hi)
    return hi


def reduction(state: TraceState, func, name, args, kwargs, out) -> None:
    """A reduction keeps a channel only where it does not reduce over channels."""
    src = args[0]
    outs = flat_tensors(out)
    if not isinstance(src, torch.Tensor):
        state.set_data(out)
        return
    nd = src.dim()
    c = state.canon(state.origin(src))
    dims = schema_arg(func, args, kwargs, "dim", None)
    if dims is None and nd and name in SHAPE_KEEPING_REDUCTIONS:
        dims = nd - 1
    dims = normalized_dims(dims, nd) if nd else []
    keep = reduce_origin(state, c, dims, f"{name} over channels (dim {dims}){state.where()}")
    full_keep = keep.expand(*[1 if d in dims else src.shape[d] for d in range(nd)]) if nd else keep
    for t in outs:
        if tuple(t.shape) == tuple(src.shape):
            state.set_origin(t, keep.expand(src.shape))
        elif t.numel() == full_keep.numel():
            state.set_origin(t, full_keep.reshape(t.shape))
        else:
            state.set_data(t)


def pointwise(state: TraceState, func, name, args, kwargs, out) -> None:
    """A pointwise op joins the atoms meeting in one element (a residual add, a gate, a layer scale)."""
    outs = flat_tensors(out)
    shape = tuple(outs[0].shape)
    nd = len(shape)
    operands = [t for t in flat_tensors((args, kwargs)) if t.dim() <= nd]
    where = state.where()
    expanded = []
    for t in operands:
        c = state.canon(state.origin(t), materialize=True)
        c = c.reshape([1] * (nd - c.dim()) + list(c.shape))
        bdims = [d for d in range(nd) if (d < nd - t.dim() or t.shape[d - (nd - t.dim())] == 1) and shape[d] > 1]
        expanded.append((t, c, bdims))
    included = []
    for i, (t, c, bdims) in enumerate(expanded):
        if bdims and (c >= 0).any():
            others_vary = any(varies(oc.expand(shape), d) if oc.shape[d] > 1 else False
                              for j, (_, oc, obd) in enumerate(expanded) if j != i for d in bdims)
            if others_vary:
                state.fix(c.numpy(), f"{name}: one operand is broadcast across channels{where}")
                continue
        included.append(c)
    if not included:
        for t in outs:
            state.set_origin(t, torch.full((), FREE, dtype=torch.int64).expand(t.shape))
        return
    compact = [max(c.shape[d] for c in included) for d in range(nd)]
    vals = np.stack([c.expand(compact).contiguous().numpy().reshape(-1) for c in included])
    first = np.full(vals.shape[1], FREE, dtype=np.int64)
    for row in vals:
        first = np.where((first < 0) & (row >= 0), row, first)
    has_data = (vals == DATA).any(axis=0)
    if (has_data & (first >= 0)).any():
        state.fix(vals[:, has_data], f"{name} combines channels with fixed data{where}")
    for row in vals:
        state.union(first, row)
    result = np.where(first >= 0, first, np.where(has_data, DATA, FREE))
    res = torch.from_numpy(result.reshape(compact)).expand(shape)
    for t in outs:
        if tuple(t.shape) == shape:
            # in place on a view: the base keeps its origin; the atoms that met here are joined, so it stays
            # valid (and DATA meeting a channel fixed it)
            state.set_origin(t, res)
        else:
            state.set_data(t)
