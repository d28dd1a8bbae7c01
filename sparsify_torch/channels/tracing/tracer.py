"""The tracer: run the entry point once under a dispatch mode and follow every channel, op by op.

Every module gets forward hooks: a layer with a kind (see :mod:`.kinds`) is
handled as a unit at its boundary (:mod:`.units`) and the ops inside it are
not followed; everything else is followed aten op by aten op with the rules of
:mod:`.op_rules`. What reaches the traced output is fixed.

Example:
    >>> net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1))
    >>> trace = trace_channels(net, net.forward, (torch.zeros(1, 3, 8, 8),), {})
    >>> trace.units["2"].in_positions.tolist() == trace.units["0"].out_atoms.tolist()
    True
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Tuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from .kinds import LayerKind, layer_kind
from .op_args import flat_tensors
from .op_rules import apply_op_rule
from .records import ChannelTrace, TraceBudgetExceeded
from .state import TraceState
from .units import enter_opaque, read_unit_input, write_unit_output

__all__ = ["trace_channels"]


class _Annotate(TorchFunctionMode):
    """Records the name of the torch function being run (``chunk`` splits differ from other splits)."""

    def __init__(self, state: TraceState) -> None:
        super().__init__()
        self.s = state

    def __torch_function__(self, func, types, args=(), kwargs=None):
        previous = self.s.fn_name
        self.s.fn_name = getattr(func, "__name__", "")
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.s.fn_name = previous


class _Dispatch(TorchDispatchMode):
    """Runs every aten op, then follows it with its rule (never breaking the user's forward)."""

    def __init__(self, state: TraceState) -> None:
        super().__init__()
        self.s = state

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        s = self.s
        if s.suppress == 0:
            s.n_ops += 1
            if s.n_ops > s.max_ops:
                raise TraceBudgetExceeded(f"tracing stopped after {s.max_ops} aten ops (max_ops)")
            with _disabled_modes():
                try:
                    apply_op_rule(s, func, args, kwargs, out)
                except Exception as err:  # never break the user's forward: what cannot be followed stays
                    reason = f"op {func} could not be followed ({type(err).__name__}: {err})"
                    s.errors.append(reason)
                    s.fix_inputs(args, kwargs, reason)
                    s.set_data(out)
        return out


@contextlib.contextmanager
def _disabled_modes():
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield


def trace_channels(model: nn.Module, entry_point_call: Callable[..., Any], args: Tuple[Any, ...],
                   kwargs: Dict[str, Any], max_ops: int = 2_000_000) -> ChannelTrace:
    """Run ``entry_point_call(*args, **kwargs)`` once and follow every channel of ``model``.

    ``entry_point_call`` is the bound method to trace (``model.forward``,
    ``model.backbone.forward``, ...). Runs under ``torch.no_grad()`` in the
    model's current mode; the caller restores buffers and modes.

    Raises:
        TraceBudgetExceeded: more than ``max_ops`` aten ops.

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> t = trace_channels(net, net.forward, (torch.zeros(2, 3),), {})
        >>> sorted(t.units), t.units["2"].in_positions.tolist()
        (['0', '2'], [0, 1, 2, 3])
    """
    state = TraceState(model, max_ops)
    handles = []

    def pre(module, a, k):
        kind = layer_kind(module)
        name = state.names.get(module, "")
        suppressed = state.suppress > 0
        state.stack.append((module, not suppressed and kind is not LayerKind.TRACED))
        if suppressed or kind is LayerKind.TRACED:
            return None
        with _disabled_modes():
            if kind is LayerKind.OPAQUE:
                enter_opaque(state, module, name, a, k)
            else:
                read_unit_input(state, module, name, kind, a, k)
        state.suppress += 1
        return None

    def post(module, a, k, output):
        _, entered = state.stack.pop() if state.stack else (None, False)
        if not entered:
            return None
        state.suppress -= 1
        with _disabled_modes():
            write_unit_output(state, module, state.names.get(module, ""), layer_kind(module), output)
        return None

    for m in model.modules():
        handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(m.register_forward_hook(post, with_kwargs=True))
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]), _Annotate(state), _Dispatch(state):
            output = entry_point_call(*args, **kwargs)
        with _disabled_modes():
            for t in flat_tensors(output):
                state.fix(state.canon(state.origin(t)).numpy(), "channels reach the traced output")
    finally:
        for h in handles:
            h.remove()
    return ChannelTrace(state.uf, state.atom_ranges, state.fixed, state.reasons, state.units, state.params,
                        state.split_owners, state.n_ops, state.errors)
