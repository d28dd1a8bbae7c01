"""Channel tracing: follow every channel of a model through one forward pass, op by op.

The entry point runs once under a ``TorchDispatchMode``. Every output channel
of a *producer* (a convolution or linear layer) gets an integer *atom* id, and
every tensor of the pass gets an *origin* tensor of the same shape that says
which atom each element carries (``FREE``: a constant that follows the shape,
``DATA``: anything that cannot be removed, such as the model input). Each
aten op maps the origins of its inputs to the origins of its outputs with the
rule :mod:`.op_rules` dispatches to: layout ops are replayed on the origins,
pointwise ops join the atoms meeting in one element, reductions and pooling
keep a channel only if they do not mix channels, and anything else (a matmul,
an unknown op, a partial slice of the channels) *fixes* the atoms it reads,
with a reason: they will not be pruned.

Layers are handled as units at their module boundary, by their
:class:`LayerKind` (:mod:`.kinds`, :mod:`.units`); a custom layer can declare
its kind with :func:`register_layer_kind`. Model-zoo layers with split sizes
stored in the module are listed in :mod:`.model_zoo`. The result, a
:class:`ChannelTrace`, is plain data (NumPy arrays and names) that
:mod:`sparsify_torch.channels.graph` turns into channel groups.

Modules: ``kinds`` (layer kinds, registration), ``records`` (the result),
``state`` (atoms and origins during a trace), ``op_args``, ``op_rules`` (the
table), ``layout_rules`` and ``value_rules`` (the rules), ``units`` (layer
boundaries), ``model_zoo``, ``tracer`` (the entry point).

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Conv2d(4, 2, 1))
    >>> trace = trace_channels(net, net.forward, (torch.zeros(1, 3, 8, 8),), {})
    >>> trace.units["1"].kind, trace.units["2"].in_positions.tolist() == trace.units["0"].out_atoms.tolist()
    (<LayerKind.PER_CHANNEL: 'norm'>, True)
"""
from .kinds import CustomLayer, LayerKind, custom_layer, input_channel_dim, layer_kind, register_layer_kind, \
    unregister_layer_kind
from .model_zoo import STORED_SPLIT_OWNERS
from .op_rules import OP_RULES, apply_op_rule, rule_for
from .records import DATA, FREE, ChannelTrace, TraceBudgetExceeded, UnitRecord
from .tracer import trace_channels

__all__ = ["FREE", "DATA", "UnitRecord", "ChannelTrace", "TraceBudgetExceeded", "trace_channels", "LayerKind",
           "CustomLayer", "register_layer_kind", "unregister_layer_kind", "custom_layer", "layer_kind",
           "input_channel_dim", "STORED_SPLIT_OWNERS", "OP_RULES", "rule_for", "apply_op_rule"]
