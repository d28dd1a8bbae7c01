"""Helpers for editing ``tf.compat.v1`` graphs without ``tf.contrib.graph_editor``.

Finds prunable ops and the variables feeding them (resource variables read
through ``ReadVariableOp`` and legacy ref variables read through
``<var>/read``), rewires an op input in place (``Operation._update_input``),
and builds ``tf.cond`` with v1 control flow so assignments to legacy ref
variables work inside the branches.

Example:
    >>> import tensorflow as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    ...     w = tf.compat.v1.get_variable("w", [3, 2])
    ...     y = tf.matmul(x, w)
    >>> [(p.op.name, p.var_name, p.kind) for p in get_prunable_ops_and_inputs(g)]
    [('MatMul', 'w', 'dense')]
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Iterator, Sequence

import tensorflow as tf

__all__ = [
    "PRUNABLE_OP_TYPES", "PrunableInput", "clean_tensor_name", "is_prunable_op", "get_prunable_ops_and_inputs",
    "get_ops_and_inputs_by_name_or_regex", "prunable_input_of", "trace_variable_name", "get_tensor_var",
    "check_graph_editable", "check_global_step", "global_step_tensor", "v1_cond", "replace_op_input",
    "in_variable_creation_order", "unmaskable_weight_uses",
]

tf1 = tf.compat.v1

PRUNABLE_OP_TYPES = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D", "Conv3D",
                     "DepthwiseConv2dNative", "Conv2DBackpropInput")
_MATMULS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_KS_MARK = "_nm_ks"


@dataclass(frozen=True)
class PrunableInput:
    """A prunable op, the index and tensor of its weight input, the variable and its layout kind."""

    op: tf.Operation
    index: int
    tensor: tf.Tensor
    var_name: str
    kind: str   # sparsify.layout kind: "dense", "embedding" (already (out, in)), "conv", "depthwise", "conv_transpose"


def clean_tensor_name(var_tens) -> str:
    """Name without ``:0``, ``/read`` suffixes (seed helper).

    Example:
        >>> clean_tensor_name("dense/kernel/read:0")
        'dense/kernel'
    """
    name = var_tens if isinstance(var_tens, str) else var_tens.name
    name = re.sub(r"/read/_.+:[0-9]+$", "", name)
    name = re.sub(r"/read:[0-9]+$", "", name)
    return re.sub(r":[0-9]+$", "", name)


def is_prunable_op(op: tf.Operation) -> bool:
    """True for forward MatMul/BatchMatMul/Conv*/DepthwiseConv2dNative/Conv2DBackpropInput ops."""
    return (op.type in PRUNABLE_OP_TYPES and "gradients/" not in op.name and "_grad/" not in op.name
            and _KS_MARK not in op.name)


def trace_variable_name(tensor: tf.Tensor) -> str | None:
    """Name of the variable a tensor reads (through Identity/ReadVariableOp), or None."""
    t = tensor
    for _ in range(8):
        op = t.op
        if op.type in ("VariableV2", "Variable", "VarHandleOp"):
            return op.name
        if op.type == "ReadVariableOp":
            h = op.inputs[0].op
            return h.name if h.type == "VarHandleOp" else None
        if op.type == "Identity" and _KS_MARK not in op.name:
            t = op.inputs[0]
            continue
        return None
    return None


def _kind(op: tf.Operation, index: int) -> str:
    if op.type in ("Conv2D", "Conv3D"):
        return "conv"
    if op.type == "DepthwiseConv2dNative":
        return "depthwise"
    if op.type == "Conv2DBackpropInput":
        return "conv_transpose"
    if op.type == "MatMul":
        ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    else:
        ta, tb = op.get_attr("adj_x"), op.get_attr("adj_y")
    # y = x @ W: W (in, out) unless transposed; y = W @ x: W (out, in) unless transposed.
    if index == 1:
        return "embedding" if tb else "dense"
    return "dense" if ta else "embedding"


def prunable_input_of(op: tf.Operation) -> PrunableInput | None:
    """The variable weight input of a prunable op, or None when it reads no variable."""
    if not is_prunable_op(op):
        return None
    indices = (1, 0) if op.type in _MATMULS else (1,)
    for idx in indices:
        if idx >= len(op.inputs):
            continue
        t = op.inputs[idx]
        name = trace_variable_name(t)
        if name is None:
            continue
        if op.type in _MATMULS and t.shape.rank != 2:
            continue   # batched weights have no canonical (out, in) layout
        return PrunableInput(op, idx, t, name, _kind(op, idx))
    return None


def get_prunable_ops_and_inputs(graph: tf.Graph | None = None) -> list[PrunableInput]:
    """Every prunable op of ``graph`` that reads a variable weight, in graph order."""
    graph = graph or tf1.get_default_graph()
    return [p for p in (prunable_input_of(op) for op in graph.get_operations()) if p is not None]


def _matches(name: str, pattern: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    return name == clean_tensor_name(pattern)


def get_ops_and_inputs_by_name_or_regex(var_names: Sequence[str],
                                        graph: tf.Graph | None = None) -> list[PrunableInput]:
    """Prunable ops whose weight variable matches a name or ``"re:<regex>"`` (``re.match``).

    Every entry of ``var_names`` must match at least one prunable weight, else
    ``ValueError`` naming the entry and the prunable weights. A plain name of a
    variable that exists but feeds no prunable op is reported as not prunable.
    """
    if isinstance(var_names, str) or not isinstance(var_names, (list, tuple)) \
            or not all(isinstance(v, str) for v in var_names) or not var_names:
        raise TypeError(f"var_names must be a non-empty list of variable names or 're:<regex>' strings, "
                        f"got {var_names!r}")
    graph = graph or tf1.get_default_graph()
    candidates = get_prunable_ops_and_inputs(graph)
    prunable_names = list(dict.fromkeys(p.var_name for p in candidates))
    for pattern in var_names:
        if pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except re.error as e:
                raise ValueError(f"var_names holds an invalid regular expression {pattern!r}: {e}") from None
        if not any(_matches(n, pattern) for n in prunable_names):
            clean = clean_tensor_name(pattern)
            var_ops = {v.op.name: v for v in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)}
            if not pattern.startswith("re:") and clean in var_ops:
                raise ValueError(f"var_names entry {pattern!r} is a variable that feeds no prunable op "
                                 f"(prunable op types: {', '.join(PRUNABLE_OP_TYPES)}); "
                                 f"prunable weights are: {prunable_names}")
            raise ValueError(f"var_names entry {pattern!r} matches no prunable weight in the graph; "
                             f"prunable weights are: {prunable_names}")
    return [p for p in candidates if any(_matches(p.var_name, pat) for pat in var_names)]


def get_tensor_var(graph: tf.Graph, var_name: str) -> tf.Variable:
    """The ``tf.Variable`` (resource or ref) named ``var_name`` in ``graph``'s global variables."""
    for v in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES):
        if v.op.name == var_name:
            return v
    raise ValueError(f"no variable named {var_name!r} in the GLOBAL_VARIABLES collection of the graph; "
                     "pruned weights must be tf.Variables created in that collection")


def in_variable_creation_order(graph: tf.Graph, var_names: Sequence[str]) -> list[str]:
    """``var_names`` (unique) in the creation order of their variables, i.e. the order of
    ``tf.compat.v1.global_variables()``: the model's own weight order, which breaks ties in global scope.

    Names of variables outside that collection follow, in the order given.
    """
    index = {v.op.name: i for i, v in enumerate(graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES))}
    return sorted(dict.fromkeys(var_names), key=lambda n: index.get(n, len(index)))


#: What a weight passes through on its way to a compute op, when graph mode cannot mask it there.
_UNMASKABLE = {
    "Switch": "it is read inside tf.cond (control flow v1)",
    "Enter": "it is read inside tf.while_loop (control flow v1)",
    "If": "it is read inside tf.cond (control flow v2)", "StatelessIf": "it is read inside tf.cond (control flow v2)",
    "While": "it is read inside tf.while_loop (control flow v2)",
    "StatelessWhile": "it is read inside tf.while_loop (control flow v2)",
    "PartitionedCall": "it is read inside a tf.function", "StatefulPartitionedCall": "it is read inside a tf.function",
    "ConcatV2": "it is one partition of a partitioned variable", "Concat": "it is one partition of a partitioned variable",
    "ExpandDims": "it is reshaped (ExpandDims, e.g. by Conv1D) before the op reads it",
    "Reshape": "it is reshaped before the op reads it",
    "GatherV2": "it is read by an embedding lookup (gather)", "ResourceGather": "it is read by an embedding lookup (gather)",
    "Gather": "it is read by an embedding lookup (gather)",
}
_PASS_THROUGH = ("Identity", "ReadVariableOp", "Cast")


def unmaskable_weight_uses(graph: tf.Graph) -> dict[str, str]:
    """Trainable weights (2-D or more) that no prunable op reads directly, with why graph mode cannot mask them.

    Graph mode masks a weight where a MatMul/Conv op reads it; a weight that
    reaches its op through control flow, a partition concat, a reshape or a
    gather would be left dense without a word, so :func:`sparsify_tf.prune_graph`
    names these in a warning.

    Example:
        >>> g = tf.Graph()
        >>> with g.as_default():
        ...     x = tf.compat.v1.placeholder(tf.float32, [2, 5, 3])
        ...     k = tf.compat.v1.get_variable("conv1d/kernel", [2, 3, 4])
        ...     y = tf.compat.v1.nn.conv1d(x, k, 1, "VALID")
        >>> unmaskable_weight_uses(g)
        {'conv1d/kernel': 'it is reshaped (ExpandDims, e.g. by Conv1D) before the op reads it'}
    """
    prunable = {p.var_name for p in get_prunable_ops_and_inputs(graph)}
    out: dict[str, str] = {}
    for var in graph.get_collection(tf1.GraphKeys.TRAINABLE_VARIABLES):
        name = var.op.name
        if name in prunable or var.shape.rank is None or var.shape.rank < 2:
            continue
        frontier, seen = list(var.op.outputs), set()
        for _ in range(6):                        # a few hops: handle -> read -> identity -> consumer
            nxt = []
            for t in frontier:
                for consumer in t.consumers():
                    if consumer.name in seen or "gradients/" in consumer.name or _KS_MARK in consumer.name:
                        continue
                    seen.add(consumer.name)
                    if consumer.type in _UNMASKABLE and name not in out:
                        out[name] = _UNMASKABLE[consumer.type]
                    elif consumer.type in _PASS_THROUGH:
                        nxt.extend(consumer.outputs)
            frontier = nxt
    return out


def check_graph_editable(graph: tf.Graph) -> None:
    """``ValueError`` if ``graph`` is finalized (nothing can be added)."""
    if graph.finalized:
        raise ValueError("graph is finalized (e.g. by MonitoredTrainingSession); build the pruning ops before "
                         "the session is created")


def check_global_step(global_step, graph: tf.Graph):
    """Validate the global step (scalar int32/int64 variable or tensor of ``graph``) without adding ops.

    Returns:
        ``global_step`` itself; read it with :func:`global_step_tensor`.
    """
    if not isinstance(global_step, (tf.Variable, tf.Tensor)):
        raise TypeError(f"global_step must be a scalar integer tf.Variable or tf.Tensor, got {global_step!r}")
    name = global_step.name
    if global_step.graph is not graph:
        raise ValueError(f"global_step {name!r} belongs to another graph than the one being pruned")
    if global_step.dtype.base_dtype not in (tf.int32, tf.int64):
        raise TypeError(f"global_step must have an integer dtype (int32 or int64), got "
                        f"{global_step.dtype.base_dtype.name} ({name})")
    if global_step.shape.rank != 0:
        raise ValueError(f"global_step must be a scalar, got shape {tuple(global_step.shape.as_list())} ({name})")
    return global_step


def global_step_tensor(global_step) -> tf.Tensor:
    """A fresh int64 read of the (validated) global step."""
    if isinstance(global_step, tf.Variable):
        return tf.cast(global_step.read_value(), tf.int64)
    return tf.cast(tf.identity(global_step), tf.int64)


@contextlib.contextmanager
def _v1_control_flow() -> Iterator[None]:
    from tensorflow.python.ops import control_flow_util

    old = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        yield
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = old


def v1_cond(pred, true_fn, false_fn, name: str | None = None):
    """``tf.compat.v1.cond`` built with v1 control flow (Switch/Merge).

    Control flow v2 (the TF2 default) cannot assign legacy ref variables inside
    a branch; v1 control flow handles both ref and resource variables.
    """
    with _v1_control_flow():
        return tf1.cond(pred, true_fn, false_fn, name=name)


def replace_op_input(op: tf.Operation, index: int, new: tf.Tensor) -> None:
    """Make ``op`` read ``new`` at input ``index`` (in-place edge update)."""
    op._update_input(index, new)  # noqa: SLF001 - the supported replacement for graph_editor.swap_inputs
