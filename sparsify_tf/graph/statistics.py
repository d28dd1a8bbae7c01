"""What TF graph mode reads besides the weights: input-activation statistics and dense gradients.

Criteria that read activations (``"wanda"``, or any registered with ``needs=("activation",)``)
need, per pruned weight, the sum of squares of the layer's input per input channel, over the
batch and the spatial positions (torch's :class:`sparsify_torch.statistics.ActivationNorms`);
``regrowth="rigl"`` needs the dense gradient of each pruned weight at the update.
:func:`add_collectors` gives each pruned op a *collector*: the op reads
``IdentityN([weight_input, data_input])[0]``, the same value, and the gradient of that
identity (built when the optimizer builds the gradients, so only training steps run it) adds
the data input's per-channel sums of squares to a float32 variable of the weight, counts the
call, and keeps the incoming gradient, which is the dense one (the mask multiplies it further
down), in a variable of the op. The update (:func:`sparsify_tf.prune_graph`) hands the core
their square roots and the gradients summed over the ops reading the weight, then starts the
sums again from zero. The norms (canonical layout, grouped too) and the error for a weight no
training step reached are the core's (:func:`activation_window`,
:class:`sparsify.activation_stats.ActivationWindow`); only the sums of squares are computed
here, with TF ops in the graph. The variables are global variables of the pruning scope, so a
``tf.compat.v1.train.Saver`` checkpoint resumes exactly.

:func:`input_channels` says where the input channels of a pruned op's data input are: MatMul and
BatchMatMul (any transposition, 2-D weight), Conv2D/Conv3D (NHWC or NCHW, grouped too),
DepthwiseConv2dNative (each output channel reads one input channel) and Conv2DBackpropInput
(a transposed convolution's input, not grouped). Anything else is refused, naming the weight.

Example:
    >>> import tensorflow as tf
    >>> from sparsify_tf.common.graph_utils import get_prunable_ops_and_inputs
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    ...     y = tf.matmul(x, tf.compat.v1.get_variable("fc/kernel", [3, 2]))
    >>> data, axis, groups = input_channels(get_prunable_ops_and_inputs(g)[0])
    >>> data.name, axis, groups
    ('Placeholder:0', 1, 1)
    >>> window = activation_window(["fc"], [(2, 3)], [1], [np.array([9.0, 16.0, 0.0], np.float32)], [np.int64(2)])
    >>> window.read()["fc"].tolist()
    [[3.0, 4.0, 0.0]]
    >>> activation_norms([np.array([1.0, 4.0, 9.0, 16.0])], [(2, 2, 1)], [2])[0][:, :, 0].tolist()   # 2 groups
    [[1.0, 2.0], [3.0, 4.0]]
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from sparsify.activation_stats import ActivationWindow

from ..common.graph_utils import PrunableInput, replace_op_input
from ..common.pruning_scope import PruningScope

__all__ = ["COLLECTED_GRADIENT", "UNSEEN", "input_channels", "check_input_channels", "Collectors", "add_collectors",
           "activation_window", "activation_norms"]

tf1 = tf.compat.v1

#: Gradient function name of the collectors' ``IdentityN([weight_input, data_input])`` ops.
COLLECTED_GRADIENT = "SparsifyCollectedGradient"
#: The end of the core's error for weights without input (:class:`~sparsify.activation_stats.ActivationWindow`):
#: here a weight's sums grow in the gradient of its ops, so it had no training step.
UNSEEN = "the ops of {names} computed no gradient since the last update (not trained)"
_MATMULS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_CONVS = ("Conv2D", "Conv3D", "DepthwiseConv2dNative", "Conv2DBackpropInput")
#: collector op -> what its gradient adds (per graph, so the gradient function finds it)
_BY_GRAPH: "weakref.WeakKeyDictionary[tf.Graph, dict[str, _Collector]]" = weakref.WeakKeyDictionary()


@dataclass
class _Collector:
    axis: int | None                      # channel axis of the data input (None: no statistics)
    sums: Any = None                      # float32 (channels,) variable of the weight
    calls: Any = None                     # int64 scalar variable of the weight
    grad: Any = None                      # the op's dense-gradient variable (TF layout)
    seen: Any = None                      # int64 scalar: 1 once a gradient was kept


def input_channels(p: PrunableInput) -> tuple[tf.Tensor, int, int]:
    """The data input of a pruned op, the axis of its input channels (non-negative) and the op's groups.

    A convolution whose input has ``groups`` times the kernel's input channels is grouped (each group
    of output channels reads its own slice of input channels, as in torch); a depthwise kernel is a
    convolution with one group per input channel.

    Raises:
        ValueError: the op's input channels cannot be read (unknown rank or convolution channels, a
            grouped transposed convolution, an op type without a rule), naming the weight.
    """
    op = p.op
    if op.type in _MATMULS:
        x = op.inputs[1 - p.index]
        attrs = ("transpose_a", "transpose_b") if op.type == "MatMul" else ("adj_x", "adj_y")
        flip = op.get_attr(attrs[1 - p.index])
        # y = x @ W: channels on x's last axis (second last when x is transposed); y = W @ x: the reverse
        last = (not flip) if p.index == 1 else bool(flip)
        rel = -1 if last else -2
    elif op.type in _CONVS:
        x = op.inputs[2] if op.type == "Conv2DBackpropInput" else op.inputs[0]
        fmt = op.get_attr("data_format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        rel = 1 if fmt.startswith("NC") else -1
    else:
        raise ValueError(f"the input channels of weight {p.var_name!r} cannot be read: op {op.name!r} of type "
                         f"{op.type!r} has no rule; exclude it with excluded_op_names")
    rank = x.shape.rank
    if rank is None or rank < 2:
        raise ValueError(f"the input channels of weight {p.var_name!r} cannot be read: the data input "
                         f"{x.name!r} of op {op.name!r} has unknown or scalar rank; give it a static rank, or "
                         "exclude the weight with excluded_op_names")
    axis = rel % rank
    if op.type in _MATMULS:
        return x, axis, 1
    width = x.shape[axis]
    w_shape = p.tensor.shape.as_list()
    kernel_in = w_shape[-1] if op.type == "Conv2DBackpropInput" else w_shape[-2]
    if width is None:
        raise ValueError(f"the input channels of weight {p.var_name!r} cannot be read: the data input {x.name!r} "
                         f"of op {op.name!r} has an unknown channel count; give it a static shape, or exclude the "
                         "weight with excluded_op_names")
    if op.type == "DepthwiseConv2dNative":
        return x, axis, width
    if width != kernel_in and (op.type == "Conv2DBackpropInput" or width % kernel_in):
        raise ValueError(f"the input channels of weight {p.var_name!r} cannot be read per weight column: op "
                         f"{op.name!r} reads {width} input channels with a kernel of {kernel_in} (a grouped "
                         "transposed convolution); exclude it with excluded_op_names")
    return x, axis, width // kernel_in


def check_input_channels(candidates: Sequence[PrunableInput], names: Sequence[str], criterion: str) -> None:
    """Raise ``ValueError`` naming the first pruned weight whose op's input channels cannot be read (or whose
    ops read it with different groups)."""
    chosen, groups = set(names), {}
    for p in candidates:
        if p.var_name in chosen:
            try:
                g = input_channels(p)[2]
                if groups.setdefault(p.var_name, g) != g:
                    raise ValueError(f"the ops reading weight {p.var_name!r} read it with {groups[p.var_name]} and "
                                     f"{g} groups; exclude it with excluded_op_names")
            except ValueError as e:
                raise ValueError(f"criterion {criterion!r} needs per-input-channel statistics: {e}") from None


@dataclass
class Collectors:
    """The statistics variables of one pruning (empty lists/dicts for what the config does not need).

    Attributes:
        sums: layer name -> float32 ``(channels,)`` variable, the inputs' sums of squares since the update.
        calls: layer name -> int64 variable, the collector runs (training steps x ops) the sums hold.
        op_grads: layer name -> the dense-gradient variables of the ops reading it (TF layout).
        grads_seen: int64 variable, 1 once a training step kept the gradients (None without RigL).
        groups: layer name -> the groups of its convolution (1 for MatMul; a depthwise kernel has one per
            input channel).
    """

    sums: dict[str, tf.Variable] = field(default_factory=dict)
    calls: dict[str, tf.Variable] = field(default_factory=dict)
    op_grads: dict[str, list[tf.Variable]] = field(default_factory=dict)
    grads_seen: tf.Variable | None = None
    groups: dict[str, int] = field(default_factory=dict)

    def variables(self) -> list[tf.Variable]:
        """Every variable (sums, counts, gradients, seen flag)."""
        out = [*self.sums.values(), *self.calls.values(), *(g for gs in self.op_grads.values() for g in gs)]
        return out + ([self.grads_seen] if self.grads_seen is not None else [])


def _variable(name: str, shape: Any, dtype: tf.DType,
              aggregation: tf.VariableAggregation = tf.VariableAggregation.SUM) -> tf.Variable:
    # under a distribution strategy each replica adds its share (its batch, its gradient: tf.compat.v1
    # optimizers sum the replicas' gradients too); without one the aggregation changes nothing
    return tf1.get_variable(name, shape, dtype, initializer=tf1.zeros_initializer(), trainable=False,
                            use_resource=True, aggregation=aggregation)


def add_collectors(pruned: Sequence[PrunableInput], shapes: Mapping[str, Sequence[int]], ks_group: str, *,
                   activations: bool, grads: bool) -> Collectors:
    """Give every op of ``pruned`` a collector and create the variables (call inside ``graph.as_default()``,
    after the masks were added and before the gradients are built); ``shapes``: the canonical weight shapes."""
    out = Collectors()
    if not (activations or grads):
        return out
    registry = _BY_GRAPH.setdefault(pruned[0].op.graph, {})
    with tf1.variable_scope(PruningScope.general(ks_group)):
        if grads:
            out.grads_seen = _variable("nm_dense_grad_seen", [], tf.int64, tf.VariableAggregation.ONLY_FIRST_REPLICA)
        for p in pruned:
            x, axis, groups = input_channels(p) if activations else (None, None, 1)
            if activations and p.var_name not in out.sums:
                width = shapes[p.var_name][1] * groups           # canonical (out, in / groups, ...)
                out.sums[p.var_name] = _variable(f"nm_activation_sum/{p.var_name}", [width], tf.float32)
                out.calls[p.var_name] = _variable(f"nm_activation_calls/{p.var_name}", [], tf.int64)
                out.groups[p.var_name] = groups
            grad = None
            if grads:
                grad = _variable(f"nm_dense_grad/{p.op.name}", p.tensor.shape, p.tensor.dtype.base_dtype)
                out.op_grads.setdefault(p.var_name, []).append(grad)
            feed = p.op.inputs[p.index]
            graph = p.op.graph
            with tf1.name_scope(PruningScope.model(p.op, ks_group, trailing_slash=True)), \
                    graph.gradient_override_map({"IdentityN": COLLECTED_GRADIENT}):
                collector = tf.identity_n([feed] if x is None else [feed, x], name="nm_collector")[0]
            replace_op_input(p.op, p.index, collector)
            registry[collector.op.name] = _Collector(axis, out.sums.get(p.var_name), out.calls.get(p.var_name),
                                                     grad, out.grads_seen)
    return out


def _collected_gradient(op: tf.Operation, *grads: Any) -> list[Any]:
    """Gradient of a collector: the incoming gradient unchanged, after adding the statistics and keeping it."""
    g = grads[0]
    c = _BY_GRAPH.get(op.graph, {}).get(op.name)
    if g is None or c is None:
        return [g] + [None] * (len(op.inputs) - 1)
    g = tf.convert_to_tensor(g)
    ops = []
    if c.sums is not None:
        x = tf.cast(op.inputs[1], tf.float32)
        others = [a for a in range(x.shape.rank) if a != c.axis]
        ops.append(c.sums.assign_add(tf.reduce_sum(tf.square(x), axis=others), read_value=False))
        ops.append(c.calls.assign_add(tf.constant(1, tf.int64), read_value=False))
    if c.grad is not None:
        ops.append(c.grad.assign(tf.cast(g, c.grad.dtype), read_value=False))
        ops.append(c.seen.assign(tf.constant(1, tf.int64), read_value=False))
    with tf.control_dependencies(ops):
        g = tf.identity(g)
    return [g] + [None] * (len(op.inputs) - 1)


try:
    tf.RegisterGradient(COLLECTED_GRADIENT)(_collected_gradient)
except KeyError:  # pragma: no cover - already registered (module reloaded)
    pass


def activation_window(names: Sequence[str], shapes: Sequence[tuple[int, ...]], groups: Sequence[int],
                      sums: Sequence[Any], calls: Sequence[Any], criterion: str = "wanda") -> ActivationWindow:
    """The core's window (:class:`sparsify.activation_stats.ActivationWindow`) holding the collectors' sums
    of squares and call counts (as the update reads them), per weight in ``names`` order; it owns the norms
    (grouped too) and the error for a weight whose ops computed no gradient (:data:`UNSEEN`)."""
    window = ActivationWindow(dict(zip(names, shapes)), criterion, dict(zip(names, groups)), unseen=UNSEEN)
    window.load(dict(zip(names, sums)), {n: int(c) for n, c in zip(names, calls)})
    return window


def activation_norms(sums: Sequence[np.ndarray], shapes: Sequence[tuple[int, ...]],
                     groups: Sequence[int]) -> list[np.ndarray]:
    """The per-input-channel L2 norms, shaped to broadcast against each canonical weight (torch's layout):
    :meth:`sparsify.activation_stats.ActivationWindow.read` of these sums.

    ``(1, in, 1, ...)`` without groups; with groups (canonical ``(out, in / groups, ...)``; a depthwise
    kernel is ``(in * mult, 1, kh, kw)`` with ``in`` groups) ``(out, in / groups, 1, ...)``: output
    channel ``o`` reads the input channels of its group, ``o // (out / groups)``.
    """
    names = [str(i) for i in range(len(sums))]
    norms = activation_window(names, shapes, groups, sums, [1] * len(names)).read()
    return [norms[n] for n in names]
