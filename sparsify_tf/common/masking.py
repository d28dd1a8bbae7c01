"""Masking primitives for ``tf.compat.v1`` graphs: mask variable, masked input, op rewiring.

:func:`mask_op_input` gives a prunable op (MatMul, BatchMatMul*, Conv2D,
Conv3D, DepthwiseConv2dNative, Conv2DBackpropInput) a mask variable (ones,
non-trainable, shared by every op that reads the same weight in a group) and
rewires the op to read ``mask * weight`` (the seed design: two passes over
the weight per training step, the product and its gradient).
:func:`mask_op_gradient` is the lean alternative: the op reads the weight
itself and only the gradient flowing back through the op is multiplied by
the mask (one pass per step); the zeros must then be written into the weight
at each mask update (as :func:`~sparsify_tf.prune_graph` does). :class:`GraphMasks` remembers what
was added to a graph, so a second call returns the same handles and export
(:mod:`sparsify_tf.common.export`) can put the original inputs back. Which values
the masks get is decided elsewhere (the seed API, :func:`~sparsify_tf.prune_graph`).

Example:
    >>> import numpy as np, tensorflow as tf
    >>> tf1 = tf.compat.v1
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf1.placeholder(tf.float32, [None, 2])
    ...     w = tf1.get_variable("w", initializer=np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    ...     y = tf.matmul(x, w)
    ...     op_vars = mask_op_input(y.op, None, "demo")
    ...     zero_first = tf1.assign(op_vars.mask, [[0.0, 1.0], [1.0, 1.0]])
    >>> op_vars.mask.op.name, [p["var"] for p in pruned_inputs(g)]
    ('MatMul_nm_ks/demo/nm_mask', ['w'])
    >>> with tf1.Session(graph=g) as sess:
    ...     sess.run(tf1.global_variables_initializer()); _ = sess.run(zero_first)
    ...     sess.run(y, {x: [[1.0, 0.0]]}).tolist()
    [[0.0, 2.0]]
"""
from __future__ import annotations

import weakref
from collections import namedtuple
from typing import Any, Sequence

import tensorflow as tf

from .graph_utils import (
    PRUNABLE_OP_TYPES, PrunableInput, check_graph_editable, clean_tensor_name, get_tensor_var, prunable_input_of,
    replace_op_input,
)
from .pruning_scope import PruningScope, check_ks_group

__all__ = [
    "PruningOpVars", "GraphMasks", "prunable_input", "mask_op_input", "mask_op_gradient", "gradient_ops_of",
    "pruned_inputs",
    "no_update_op", "sparsity_summaries", "bake_masks", "MASKED_GRADIENT",
]

tf1 = tf.compat.v1

#: Gradient function name of the ``IdentityN([weight, mask])`` ops of :func:`mask_op_gradient`.
MASKED_GRADIENT = "SparsifyMaskedGradient"


def _masked_gradient(op: tf.Operation, *grads: Any) -> list[Any]:
    """Gradient of ``IdentityN([weight, mask])``: the weight's gradient times the mask, none for the mask."""
    grad, mask = grads[0], op.inputs[1]
    if grad is None:
        return [None, None]
    if isinstance(grad, tf.IndexedSlices):
        vals = grad.values
        return [tf.IndexedSlices(vals * tf.cast(tf.gather(mask, grad.indices), vals.dtype), grad.indices,
                                 grad.dense_shape), None]
    return [grad * (mask if mask.dtype == grad.dtype else tf.cast(mask, grad.dtype)), None]


try:
    tf.RegisterGradient(MASKED_GRADIENT)(_masked_gradient)
except KeyError:  # pragma: no cover - already registered (module reloaded)
    pass

PruningOpVars = namedtuple("PruningOpVars", ["op", "op_input", "update", "mask", "masked"])
PruningOpVars.__doc__ = """Handles of one pruned op: the op, its original weight input tensor, the
update op (None for ``create_op_pruning_no_update``), the mask variable and the masked tensor."""


class GraphMasks:
    """What sparsify_tf added to one graph (Python side, one object per graph).

    Attributes:
        masks: ``(ks_group, var_name)`` -> mask variable.
        masked: ``(ks_group, weight tensor name)`` -> masked tensor ``mask * weight``.
        op_vars: ``(ks_group, op name)`` -> :data:`PruningOpVars` of the pruned op.
        inputs: ``(ks_group, op name)`` -> :class:`~sparsify_tf.common.graph_utils.PrunableInput` of the op.
        rewires: every rewired op input (see :func:`pruned_inputs`).
        bake_ops: ``(ks_group, var_name)`` -> the ``weight = weight * mask`` assign op.
    """

    _BY_GRAPH: "weakref.WeakKeyDictionary[tf.Graph, GraphMasks]" = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.masks: dict[tuple[str, str], tf.Variable] = {}
        self.masked: dict[tuple[str, str], tf.Tensor] = {}
        self.op_vars: dict[tuple[str, str], PruningOpVars] = {}
        self.inputs: dict[tuple[str, str], PrunableInput] = {}
        self.rewires: list[dict[str, Any]] = []
        self.bake_ops: dict[tuple[str, str], tf.Operation] = {}

    @classmethod
    def of(cls, graph: tf.Graph) -> "GraphMasks":
        """The record of ``graph`` (created empty on first use)."""
        found = cls._BY_GRAPH.get(graph)
        if found is None:
            found = cls._BY_GRAPH[graph] = cls()
        return found

    def find(self, ks_group: str, op: tf.Operation) -> PruningOpVars | None:
        """The handles of ``op`` in ``ks_group`` if it was already masked."""
        return self.op_vars.get((ks_group, op.name))

    def record(self, ks_group: str, op_vars: PruningOpVars) -> PruningOpVars:
        """Remember ``op_vars`` (e.g. with its update op) as the handles of its op; returns it."""
        self.op_vars[(ks_group, op_vars.op.name)] = op_vars
        return op_vars


def pruned_inputs(graph: tf.Graph) -> list[dict[str, Any]]:
    """Every rewired op input of ``graph``: ``op``, ``index``, ``original`` (tensor name),
    ``var`` (weight variable), ``mask`` (mask variable), ``kind``, ``group``. Used by export."""
    return list(GraphMasks.of(graph).rewires)


def prunable_input(op: tf.Operation, op_input: tf.Tensor | None) -> PrunableInput:
    """The weight input of ``op``, checked: ``TypeError``/``ValueError`` naming the op otherwise."""
    if not isinstance(op, tf.Operation):
        raise TypeError(f"op must be a tf.Operation, got {op!r}")
    p = prunable_input_of(op)
    if p is None:
        raise ValueError(f"op {op.name!r} of type {op.type!r} is not prunable: prunable ops are "
                         f"{', '.join(PRUNABLE_OP_TYPES)} (forward ops) reading a tf.Variable weight")
    if op_input is not None and op_input is not p.tensor:
        raise ValueError(f"op_input {getattr(op_input, 'name', op_input)!r} is not the weight input of op "
                         f"{op.name!r}; its weight input is {p.tensor.name!r}")
    return p


def _is_resource(var: tf.Variable) -> bool:
    return var.op.type == "VarHandleOp"


def _mask_variable(rec: GraphMasks, op: tf.Operation, p: PrunableInput, ks_group: str) -> tf.Variable:
    """The mask of ``p``'s weight in ``ks_group``: created (ones) on first use, shared afterwards."""
    mask = rec.masks.get((ks_group, p.var_name))
    if mask is None:
        var = get_tensor_var(op.graph, p.var_name)
        with tf1.variable_scope(PruningScope.model(op, ks_group), reuse=tf1.AUTO_REUSE):
            mask = tf1.get_variable(PruningScope.VAR_MASK, p.tensor.shape, initializer=tf1.ones_initializer(),
                                    trainable=False, dtype=p.tensor.dtype.base_dtype,
                                    use_resource=_is_resource(var))
        tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.VAR_MASK), mask)
        rec.masks[(ks_group, p.var_name)] = mask
    return mask


def _rewire(op: tf.Operation, p: PrunableInput, new: tf.Tensor) -> None:
    # Gradient ops built before pruning read the weight directly; point them at the masked weight too.
    grad_mark = f"{op.name}_grad/"
    for consumer in list(p.tensor.consumers()):
        if consumer is not op and grad_mark in consumer.name:
            for i, t in enumerate(consumer.inputs):
                if t is p.tensor:
                    replace_op_input(consumer, i, new)
    replace_op_input(op, p.index, new)


def _recorded(op: Any, ks_group: str) -> PruningOpVars | None:
    """The handles of ``op`` in ``ks_group`` if it was already masked (None for a non-op: checked later)."""
    return GraphMasks.of(op.graph).find(ks_group, op) if isinstance(op, tf.Operation) else None


def _record_rewire(rec: GraphMasks, ks_group: str, p: PrunableInput, mask: tf.Variable,
                   masked: tf.Tensor) -> PruningOpVars:
    """Remember the rewired input of ``p.op`` (for export and the seed API) and return its handles."""
    rec.rewires.append({"op": p.op.name, "index": p.index, "original": p.tensor.name, "var": p.var_name,
                        "mask": mask.op.name, "kind": p.kind, "group": ks_group})
    rec.inputs[(ks_group, p.op.name)] = p
    return rec.record(ks_group, PruningOpVars(p.op, p.tensor, None, mask, masked))


def mask_op_input(op: tf.Operation, op_input: tf.Tensor | None, ks_group: str, leave_enabled: bool = True,
                  is_after_end_step: tf.Tensor | None = None) -> PruningOpVars:
    """Add a mask variable and a masked input to ``op``; ``op`` then reads ``mask * op_input``.

    The mask (ones, non-trainable, in the op's ``<op>_nm_ks/<group>`` scope,
    in the group's ``nm_mask`` collection) is shared by every op reading the
    same variable in ``ks_group``. With ``leave_enabled=False`` the op reads
    ``op_input`` itself once ``is_after_end_step`` is true. A second call for
    the same op and group returns the recorded handles and adds nothing.

    Returns:
        ``PruningOpVars(op, op_input, update, mask, masked)`` (``update`` as recorded, None at first).
    """
    ks_group = check_ks_group(ks_group)
    if not isinstance(leave_enabled, bool):
        raise TypeError(f"leave_enabled must be True or False, got {leave_enabled!r}")
    found = _recorded(op, ks_group)
    if found is not None:
        return found
    p = prunable_input(op, op_input)
    graph = op.graph
    check_graph_editable(graph)
    if not leave_enabled and is_after_end_step is None:
        raise ValueError("is_after_end_step must be given when leave_enabled is False")
    rec = GraphMasks.of(graph)
    with graph.as_default():
        mask = _mask_variable(rec, op, p, ks_group)
        key = (ks_group, p.tensor.name)
        masked = rec.masked.get(key)
        if masked is None:
            with tf1.name_scope(PruningScope.model(op, ks_group, trailing_slash=True)):
                masked = tf.multiply(mask, p.tensor, name=PruningScope.OP_MASKED_VAR)
            tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_MASKED_VAR), masked)
            rec.masked[key] = masked
        feed = masked
        if not leave_enabled:
            with tf1.name_scope(PruningScope.model(op, ks_group, trailing_slash=True)):
                feed = tf.where(is_after_end_step, p.tensor, masked, name="nm_masked_or_dense")
        _rewire(op, p, feed)
    return _record_rewire(rec, ks_group, p, mask, masked)


def gradient_ops_of(op: tf.Operation, op_input: tf.Tensor | None = None) -> list[str]:
    """Names of gradient ops already built for ``op`` that read its weight input (``[]`` when none).

    :func:`mask_op_gradient` cannot mask a gradient that already exists: build pruning before the optimizer.
    """
    p = prunable_input(op, op_input)
    mark = f"{op.name}_grad/"
    return [c.name for c in p.tensor.consumers() if c is not op and mark in c.name]


def mask_op_gradient(op: tf.Operation, op_input: tf.Tensor | None, ks_group: str) -> PruningOpVars:
    """Add a mask variable to ``op`` and mask the gradient ``op`` sends to its weight.

    ``op`` reads ``IdentityN([weight, mask])[0]``, which is the weight itself
    (no per-step product in the forward pass); the gradient of that identity
    is the incoming gradient times the mask, so pruned entries get exactly
    zero gradient through ``op`` and one elementwise pass per training step
    remains. The zeros themselves must be written into the weight whenever
    the mask changes (:func:`~sparsify_tf.prune_graph` does, and zeroes the
    optimizer slots), so with an optimizer that does not move a zero weight
    whose gradient and slots are zero (all ``tf.compat.v1.train`` ones),
    pruned weights stay exactly zero. The mask is created and shared as in
    :func:`mask_op_input`; a second call for the same op and group returns the
    recorded handles.

    Raises:
        ValueError: ``op`` already has gradient ops reading its weight (build
            pruning before the optimizer, or mask the input instead).

    Example:
        >>> import numpy as np, tensorflow as tf
        >>> tf1 = tf.compat.v1
        >>> g = tf.Graph()
        >>> with g.as_default():
        ...     x = tf.constant([[1.0, 1.0]])
        ...     w = tf1.get_variable("w", initializer=np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
        ...     y = tf.matmul(x, w)
        ...     op_vars = mask_op_gradient(y.op, None, "demo")
        ...     zero_first = tf1.assign(op_vars.mask, [[0.0, 1.0], [1.0, 1.0]])
        ...     grad = tf.gradients(tf.reduce_sum(y), w)[0]
        >>> with tf1.Session(graph=g) as sess:
        ...     sess.run(tf1.global_variables_initializer()); _ = sess.run(zero_first)
        ...     sess.run(y).tolist(), sess.run(grad).tolist()
        ([[4.0, 6.0]], [[0.0, 1.0], [1.0, 1.0]])
    """
    ks_group = check_ks_group(ks_group)
    found = _recorded(op, ks_group)
    if found is not None:
        return found
    p = prunable_input(op, op_input)
    graph = op.graph
    check_graph_editable(graph)
    existing = gradient_ops_of(op, p.tensor)
    if existing:
        raise ValueError(f"op {op.name!r} already has gradient ops reading its weight ({existing[:3]}), so its "
                         "weight gradient cannot be masked any more: build the pruning before the optimizer, "
                         "or mask the op input instead (masking='inputs')")
    rec = GraphMasks.of(graph)
    with graph.as_default():
        mask = _mask_variable(rec, op, p, ks_group)
        key = (ks_group, p.tensor.name)
        masked = rec.masked.get(key)
        if masked is None:
            with tf1.name_scope(PruningScope.model(op, ks_group, trailing_slash=True)), \
                    graph.gradient_override_map({"IdentityN": MASKED_GRADIENT}):
                masked = tf.identity_n([p.tensor, mask.read_value() if _is_resource(mask) else mask],
                                       name=PruningScope.OP_MASKED_GRAD)[0]
            tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_MASKED_VAR), masked)
            rec.masked[key] = masked
        _rewire(op, p, masked)
    return _record_rewire(rec, ks_group, p, mask, masked)


def no_update_op(scope: str, dtype: tf.DType) -> tf.Operation:
    """The ``no_op`` branch of a conditional mask update (seed op name)."""
    with tf1.name_scope(scope):
        return tf.group(tf.constant(0.0, dtype=dtype, name=PruningScope.OP_MASK_UPDATE_NO_OP))


def sparsity_summaries(pruning_op_vars: Sequence[PruningOpVars]) -> list[tf.Tensor]:
    """One TensorBoard scalar per pruned op: the fraction of zeros of its masked weight."""
    summaries, seen = [], set()
    for op_vars in pruning_op_vars:
        if op_vars.op.name in seen:
            continue
        seen.add(op_vars.op.name)
        with op_vars.op.graph.as_default():
            summaries.append(tf1.summary.scalar(f"nm_ks_sparsity/{clean_tensor_name(op_vars.op.name)}",
                                                tf.math.zero_fraction(op_vars.masked)))
    return summaries


def bake_masks(pruning_op_vars: Sequence[PruningOpVars], ks_group: str, sess: tf1.Session) -> None:
    """Run ``weight = weight * mask`` for the weights of ``pruning_op_vars`` with ``sess``.

    The assign ops are created once per weight and reused by later calls.
    """
    ks_group = check_ks_group(ks_group)
    ops = []
    for op_vars in pruning_op_vars:
        graph = op_vars.op.graph
        rec = GraphMasks.of(graph)
        p = rec.inputs.get((ks_group, op_vars.op.name)) or prunable_input(op_vars.op, None)
        key = (ks_group, p.var_name)
        if key not in rec.bake_ops:
            var = get_tensor_var(graph, p.var_name)
            with graph.as_default(), tf1.name_scope(PruningScope.model(op_vars.op, ks_group, PruningScope.OP_SAVE)):
                rec.bake_ops[key] = tf1.assign(var, var.read_value() * op_vars.mask.read_value()).op
        ops.append(rec.bake_ops[key])
    if ops:
        sess.run(list(dict.fromkeys(ops)))
