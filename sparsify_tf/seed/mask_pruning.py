"""Kernel sparsity (model pruning) on ``tf.compat.v1`` graphs: the seed API.

Same names and arguments as the seed (``sparseml.tensorflow_v1.optim.mask_pruning``)
but working on TensorFlow 2.x graphs without ``tf.contrib.graph_editor``, for
resource and legacy ref variables. This module is the facade; the naming lives
in :mod:`sparsify_tf.common.pruning_scope`, the mask variables and rewired inputs in
:mod:`sparsify_tf.common.masking`, the schedule tensors in :mod:`sparsify_tf.common.schedule_ops`, the
masks in the core engine's externally scheduled update (:mod:`sparsify_tf.seed.mask_creator`). The flow:

1. :func:`create_ks_schedule_ops` / :func:`get_or_create_ks_schedule_ops` build
   the ``update_ready`` and ``sparsity`` tensors from the global step (equal to
   the core ``GradualSchedule`` at every step).
2. :func:`create_op_pruning`, :func:`create_graph_ops_pruning` or
   :func:`get_or_create_graph_ops_pruning` add a mask variable per weight, a
   masked input ``mask * weight`` that the op now reads, and an update op
   ``tf.cond(update_ready, update, no_op)`` whose mask values come from the core.
   A ``mask_creator`` with ``pruning_scope: global`` gives the whole group one
   update op: one core call, one threshold over all its weights (in variable
   creation order, which breaks ties).
3. :func:`get_scheduled_update_op` groups the updates: run it after each step.

Seed semantics are kept: the sparsity of an update is the schedule's at the
current step, and with ``leave_enabled=False`` the ops read the dense weights
once the step is after ``end_step`` (``is_after_end_step``). So is the seed's
count rule: with a ``mask_creator`` given as a name, dict or SparseML class
(:mod:`sparsify_tf.seed.mask_creator_pruning`) an update prunes exactly
``exact_prune_count(s, units)`` units for any s in [0, 1] (1.0 prunes all)
and no per-layer cap applies unless the dict names ``max_sparsity_ratio_per_layer``;
a ``PruningConfig`` or ``Pattern`` object keeps the core's rules (s < 1, one
unit kept, its per-layer cap). The schedule's ``final_sparsity`` is < 1.

Example:
    >>> import numpy as np, tensorflow as tf
    >>> tf1 = tf.compat.v1
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf1.placeholder(tf.float32, [None, 4])
    ...     w = tf1.get_variable("w", initializer=np.arange(1.0, 9.0, dtype=np.float32).reshape(4, 2))
    ...     y = tf.matmul(x, w)
    ...     gs = tf1.train.get_or_create_global_step()
    ...     update, op_vars, ready, sparsity = get_or_create_ks_scheduled_graph_ops(
    ...         g, gs, ["w"], 0, 0, 1, 0.0, 0.5, 3.0, True, "demo", "1x1")
    >>> with tf1.Session(graph=g) as sess:
    ...     sess.run(tf1.global_variables_initializer()); _ = sess.run(update)
    ...     sess.run(op_vars[0].mask).ravel().tolist()
    [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from sparsify.schedules import GradualSchedule

from ..common.graph_utils import (
    PrunableInput, check_global_step, check_graph_editable, get_ops_and_inputs_by_name_or_regex, get_tensor_var,
    global_step_tensor, in_variable_creation_order, v1_cond,
)
from .mask_creator import CoreMaskCreator, MaskCreatorLike
from .mask_creator_coercion import get_mask_creator
from ..common.mask_write import write_update
from ..common.masking import (
    GraphMasks, PruningOpVars, bake_masks, mask_op_input, no_update_op, prunable_input, pruned_inputs,
    sparsity_summaries,
)
from ..common.pruning_scope import PruningScope, check_ks_group
from ..common.schedule_ops import schedule_tensors

__all__ = [
    "PruningOpVars", "PruningScope", "create_op_pruning_no_update", "create_op_pruning",
    "create_constant_op_pruning", "create_graph_ops_pruning", "get_or_create_graph_ops_pruning",
    "create_summaries_pruning", "apply_op_vars_masks", "create_ks_schedule_ops",
    "get_or_create_ks_schedule_ops", "get_scheduled_update_op", "get_or_create_ks_scheduled_graph_ops",
    "create_ks_scheduled_constant_graph_ops", "pruned_inputs",
]

tf1 = tf.compat.v1


def create_op_pruning_no_update(op: tf.Operation, op_input: tf.Tensor, ks_group: str, leave_enabled: bool = True,
                                is_after_end_step: tf.Tensor | None = None) -> PruningOpVars:
    """Add a mask variable and a masked input to ``op`` (no update op).

    The mask (ones, non-trainable, in the op's ``<op>_nm_ks/<group>`` scope)
    is shared by every op reading the same variable in ``ks_group``. ``op`` is
    rewired to read ``mask * op_input`` (or ``op_input`` once
    ``is_after_end_step`` is true when ``leave_enabled`` is False).

    Args:
        op: a prunable op (MatMul, BatchMatMul*, Conv2D, Conv3D, DepthwiseConv2dNative, Conv2DBackpropInput).
        op_input: its weight input tensor (``None``: found automatically).
        ks_group: group identifier used in scopes and collections.
        leave_enabled: keep masking after the end step.
        is_after_end_step: bool tensor, required when ``leave_enabled`` is False.

    Returns:
        ``PruningOpVars(op, op_input, None, mask, masked)``.
    """
    return mask_op_input(op, op_input, ks_group, leave_enabled, is_after_end_step)._replace(update=None)


def _check_static_sparsity(creator: CoreMaskCreator, sparsity: tf.Tensor) -> None:
    value = tf.get_static_value(sparsity) if isinstance(sparsity, tf.Tensor) else None
    if value is not None and np.ndim(value) == 0:
        creator.check_sparsity(float(value), "sparsity")


def _recorded_input(graph: tf.Graph, ks_group: str, op: tf.Operation, op_input: tf.Tensor | None) -> PrunableInput:
    return GraphMasks.of(graph).inputs.get((ks_group, op.name)) or prunable_input(op, op_input)


def _assign_masks(weights: Sequence[tf.Variable], reads: Sequence[tf.Tensor], masks: Sequence[tf.Variable],
                  new_masks: Sequence[tf.Tensor]) -> tf.Operation:
    # the seed's write: mask = new, weight = weight * new (no stored values, optimizer slots untouched)
    return tf.group(*(op for var, weight, mask, new in zip(weights, reads, masks, new_masks)
                      for op in write_update(var, mask, new, dense=weight)))


def create_op_pruning(op: tf.Operation, op_input: tf.Tensor, sparsity: tf.Tensor, update_ready: tf.Tensor,
                      leave_enabled: bool, is_after_end_step: tf.Tensor | None, ks_group: str,
                      mask_creator: MaskCreatorLike) -> PruningOpVars:
    """Mask, masked input and ``tf.cond(update_ready, update, no_op)`` for one op.

    The update computes the new mask of the weight at ``sparsity`` with the core engine
    (criterion and pattern of ``mask_creator``; TF layout to the canonical one and back)
    and assigns both the mask and ``weight * mask``.

    Args:
        op, op_input: the prunable op and its weight input tensor.
        sparsity: float scalar tensor, the target sparsity of an update.
        update_ready: bool scalar tensor, True when the mask must be recomputed.
        leave_enabled, is_after_end_step: see :func:`create_op_pruning_no_update`.
        ks_group: group identifier.
        mask_creator: a SparseML ``PruningMaskCreator`` (``UnstructuredPruningMaskCreator()``,
            ``DimensionPruningMaskCreator("channel")``, ...) or mask type (``"unstructured"``, ``"[4, 1]"``),
            a pattern name (``"1x1"``, ``"4x1"``, ``"2:4"``), config dict, ``sparsify.Pattern`` or
            :class:`~sparsify_tf.seed.mask_creator.CoreMaskCreator`.

    Returns:
        ``PruningOpVars(op, op_input, update, mask, masked)``.
    """
    creator = get_mask_creator(mask_creator)
    ks_group = check_ks_group(ks_group)
    found = GraphMasks.of(op.graph).find(ks_group, op) if isinstance(op, tf.Operation) else None
    if found is not None and found.update is not None:
        return found
    p = _recorded_input(op.graph, ks_group, op, op_input) if found is not None else prunable_input(op, op_input)
    creator.check_shape(p.var_name, tuple(p.tensor.shape.as_list()), p.kind)
    _check_static_sparsity(creator, sparsity)
    init = found or mask_op_input(op, op_input, ks_group, leave_enabled, is_after_end_step)
    graph = op.graph
    var = get_tensor_var(graph, p.var_name)
    scope = PruningScope.model(op, ks_group, additional=PruningScope.OPS_UPDATE, trailing_slash=True)

    def _update():
        with tf1.name_scope(scope):
            weight = var.read_value()
            new_mask = creator.create_sparsity_mask(weight, tf.cast(sparsity, tf.float64), init.mask.read_value(),
                                                    kind=p.kind, name=p.var_name)
            return _assign_masks([var], [weight], [init.mask], [new_mask])

    with graph.as_default(), tf1.name_scope(scope):
        mask_update = v1_cond(update_ready, _update, lambda: no_update_op(scope, p.tensor.dtype.base_dtype),
                              name=PruningScope.OP_MASK_UPDATE)
    tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_MASK_UPDATE), mask_update)
    return GraphMasks.of(graph).record(ks_group, PruningOpVars(op, init.op_input, mask_update, init.mask,
                                                               init.masked))


def create_constant_op_pruning(op: tf.Operation, op_input: tf.Tensor, is_start_step: tf.Tensor,
                               is_end_step: tf.Tensor, ks_group: str) -> PruningOpVars:
    """Lock the current zeros of ``op``'s weight from the start step to the end step.

    At ``is_start_step`` the mask becomes the core's lock mask (1 where the
    weight is non-zero); at ``is_end_step`` the weight is multiplied by the
    mask and the mask reverts to ones (seed semantics).
    """
    ks_group = check_ks_group(ks_group)
    p = prunable_input(op, op_input)
    init = mask_op_input(op, op_input, ks_group)
    graph = op.graph
    var = get_tensor_var(graph, p.var_name)
    mask = init.mask
    scope = PruningScope.model(op, ks_group, additional=PruningScope.OPS_UPDATE, trailing_slash=True)
    pattern = CoreMaskCreator("1x1").pattern

    def _lock(w, start):
        if bool(start):
            return pattern.get_pattern_lock_masks({"w": w})["w"].astype(w.dtype)
        return np.ones_like(w)

    def _set_constant_mask():
        with tf1.name_scope(scope):
            weight = var.read_value()
            old = mask.read_value()
            new_mask = tf.numpy_function(_lock, [weight, is_start_step], weight.dtype, name="nm_core_lock_mask")
            new_mask.set_shape(weight.shape)
            # mask = new, weight = weight * old * new (the old mask is read before the mask changes)
            return tf.group(*write_update(var, mask, new_mask, dense=weight * old))

    with graph.as_default(), tf1.name_scope(scope):
        mask_update = v1_cond(tf.logical_or(is_start_step, is_end_step), _set_constant_mask,
                              lambda: no_update_op(scope, p.tensor.dtype.base_dtype),
                              name=PruningScope.OP_MASK_UPDATE)
    return GraphMasks.of(graph).record(ks_group, PruningOpVars(op, init.op_input, mask_update, mask, init.masked))


def _collect(ks_group: str, op_vars: PruningOpVars) -> None:
    for name, value in ((PruningScope.OPS, op_vars.op), (PruningScope.OPS_INPUT, op_vars.op_input),
                        (PruningScope.OPS_UPDATE, op_vars.update), (PruningScope.OPS_MASK, op_vars.mask),
                        (PruningScope.OPS_MASKED, op_vars.masked)):
        tf1.add_to_collection(PruningScope.collection_name(ks_group, name), value)


def _create_group_pruning(graph: tf.Graph, found: Sequence[PrunableInput], sparsity: tf.Tensor,
                          update_ready: tf.Tensor, leave_enabled: bool, is_after_end_step: tf.Tensor | None,
                          ks_group: str, creator: CoreMaskCreator) -> list[PruningOpVars]:
    """One conditional update for all weights of ``found``: one core call (global scope)."""
    rec = GraphMasks.of(graph)
    recorded = [rec.find(ks_group, p.op) for p in found]
    if all(ov is not None and ov.update is not None for ov in recorded):
        return recorded
    inits = [mask_op_input(p.op, p.tensor, ks_group, leave_enabled, is_after_end_step) for p in found]
    names = in_variable_creation_order(graph, [p.var_name for p in found])
    masks = {p.var_name: ov.mask for p, ov in zip(found, inits)}
    kinds = {p.var_name: p.kind for p in found}
    weights = {n: get_tensor_var(graph, n) for n in names}
    scope = PruningScope.general(ks_group, PruningScope.OPS_UPDATE, trailing_slash=True)

    def _update():
        with tf1.name_scope(scope):
            reads = [weights[n].read_value() for n in names]
            new = creator.create_sparsity_masks(reads, tf.cast(sparsity, tf.float64),
                                                [masks[n].read_value() for n in names], [kinds[n] for n in names],
                                                names)
            return _assign_masks([weights[n] for n in names], reads, [masks[n] for n in names], new)

    with tf1.name_scope(scope):
        update = v1_cond(update_ready, _update, lambda: no_update_op(scope, found[0].tensor.dtype.base_dtype),
                         name=PruningScope.OP_MASK_UPDATE)
    tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_MASK_UPDATE), update)
    return [rec.record(ks_group, PruningOpVars(p.op, p.tensor, update, ov.mask, ov.masked))
            for p, ov in zip(found, inits)]


def create_graph_ops_pruning(graph: tf.Graph, var_names: Sequence[str], sparsity: tf.Tensor,
                             update_ready: tf.Tensor, leave_enabled: bool, is_after_end_step: tf.Tensor | None,
                             ks_group: str, mask_creator: MaskCreatorLike) -> list[PruningOpVars]:
    """:func:`create_op_pruning` for every prunable op whose weight matches ``var_names``.

    ``var_names`` holds variable names (``"dense/kernel"``) or ``"re:<regex>"``
    patterns (``re.match``); ``["re:.*"]`` selects every prunable weight. Ops
    sharing a weight share one mask and one update. A global ``mask_creator``
    (``pruning_scope: global``) gives all of them one update: one core call,
    one threshold. Every name and shape is checked before the graph is changed.
    """
    if not isinstance(graph, tf.Graph):
        raise TypeError(f"graph must be a tf.Graph, got {graph!r}")
    check_graph_editable(graph)
    ks_group = check_ks_group(ks_group)
    creator = get_mask_creator(mask_creator)
    found = get_ops_and_inputs_by_name_or_regex(var_names, graph)
    for p in found:
        creator.check_shape(p.var_name, tuple(p.tensor.shape.as_list()), p.kind)
    _check_static_sparsity(creator, sparsity)
    with graph.as_default():
        if creator.is_global:
            result = _create_group_pruning(graph, found, sparsity, update_ready, leave_enabled, is_after_end_step,
                                           ks_group, creator)
            for op_vars in result:
                _collect(ks_group, op_vars)
            return result
        result, by_var = [], {}
        for p in found:
            if p.var_name in by_var:
                first = by_var[p.var_name]
                init = mask_op_input(p.op, p.tensor, ks_group, leave_enabled, is_after_end_step)
                op_vars = GraphMasks.of(graph).record(
                    ks_group, PruningOpVars(p.op, p.tensor, first.update, init.mask, init.masked))
            else:
                op_vars = create_op_pruning(p.op, p.tensor, sparsity, update_ready, leave_enabled,
                                            is_after_end_step, ks_group, creator)
                by_var[p.var_name] = op_vars
            _collect(ks_group, op_vars)
            result.append(op_vars)
    return result


def get_or_create_graph_ops_pruning(graph: tf.Graph, var_names: Sequence[str], sparsity: tf.Tensor,
                                    update_ready: tf.Tensor, leave_enabled: bool,
                                    is_after_end_step: tf.Tensor | None, ks_group: str,
                                    mask_creator: MaskCreatorLike) -> list[PruningOpVars]:
    """The group's ``PruningOpVars`` from its collections, or :func:`create_graph_ops_pruning`."""
    ks_group = check_ks_group(ks_group)
    cols = [graph.get_collection(PruningScope.collection_name(ks_group, n))
            for n in (PruningScope.OPS, PruningScope.OPS_INPUT, PruningScope.OPS_UPDATE,
                      PruningScope.OPS_MASK, PruningScope.OPS_MASKED)]
    if all(cols) and len({len(c) for c in cols}) == 1:
        return [PruningOpVars(*row) for row in zip(*cols)]
    return create_graph_ops_pruning(graph, var_names, sparsity, update_ready, leave_enabled, is_after_end_step,
                                    ks_group, mask_creator)


def create_summaries_pruning(pruning_op_vars: Sequence[PruningOpVars]) -> list[tf.Tensor]:
    """One TensorBoard scalar per pruned op: the fraction of zeros of its masked weight."""
    return sparsity_summaries(pruning_op_vars)


def apply_op_vars_masks(pruning_op_vars: Sequence[PruningOpVars], ks_group: str, sess: tf1.Session) -> None:
    """Bake the masks into the weights (``weight = weight * mask``) with ``sess``.

    The assign ops are created once per weight and reused by later calls.
    """
    bake_masks(pruning_op_vars, ks_group, sess)


def create_ks_schedule_ops(global_step: tf.Variable | tf.Tensor, begin_step: int, end_step: int,
                           update_step_freq: int, init_sparsity: float, final_sparsity: float, exponent: float,
                           ks_group: str) -> tuple[tf.Tensor, tf.Tensor]:
    """``(update_ready, sparsity)`` tensors of the gradual schedule at ``global_step``.

    Equal to ``sparsify.GradualSchedule(init_sparsity, final_sparsity,
    begin_step, end_step, update_step_freq, exponent)``'s ``update_ready(step)``
    and ``sparsity(step)`` at every step, bit for bit (``sparsity`` is float64,
    read from the core's values, see :mod:`sparsify_tf.common.schedule_ops`).
    """
    ks_group = check_ks_group(ks_group)
    sched = GradualSchedule(init_sparsity, final_sparsity, begin_step, end_step, update_step_freq, exponent)
    graph = global_step.graph
    check_graph_editable(graph)
    check_global_step(global_step, graph)
    with graph.as_default():
        with tf1.name_scope(PruningScope.general(ks_group, PruningScope.OPS_SCHEDULE, trailing_slash=True)):
            t = schedule_tensors(sched, global_step_tensor(global_step))
        with tf1.name_scope(PruningScope.general(ks_group, trailing_slash=True)):
            update_ready = tf.identity(t["update_ready"], name=PruningScope.OP_UPDATE_READY)
            sparsity = tf.identity(t["sparsity"], name=PruningScope.OP_SPARSITY)
        tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_UPDATE_READY), update_ready)
        tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_SPARSITY), sparsity)
    return update_ready, sparsity


def get_or_create_ks_schedule_ops(global_step: tf.Variable | tf.Tensor, begin_step: int, end_step: int,
                                  update_step_freq: int, init_sparsity: float, final_sparsity: float,
                                  exponent: float, ks_group: str) -> tuple[tf.Tensor, tf.Tensor]:
    """The group's schedule tensors from its collections, or :func:`create_ks_schedule_ops`."""
    graph = global_step.graph
    ready = graph.get_collection(PruningScope.collection_name(ks_group, PruningScope.OP_UPDATE_READY))
    sparsity = graph.get_collection(PruningScope.collection_name(ks_group, PruningScope.OP_SPARSITY))
    if ready and sparsity:
        return ready[0], sparsity[0]
    return create_ks_schedule_ops(global_step, begin_step, end_step, update_step_freq, init_sparsity,
                                  final_sparsity, exponent, ks_group)


def get_scheduled_update_op(pruning_op_vars: Sequence[PruningOpVars], ks_group: str) -> tf.Operation:
    """One op grouping the update ops of ``pruning_op_vars`` (created once per group)."""
    ks_group = check_ks_group(ks_group)
    if not pruning_op_vars:
        raise ValueError("pruning_op_vars is empty: nothing to update")
    graph = pruning_op_vars[0].op.graph
    existing = graph.get_collection(PruningScope.collection_name(ks_group, PruningScope.OP_COND_UPDATE))
    if existing:
        return existing[0]
    updates = list(dict.fromkeys(v.update for v in pruning_op_vars if v.update is not None))
    with graph.as_default(), tf1.name_scope(PruningScope.general(ks_group, trailing_slash=True)):
        update_op = tf.group(*updates, name=PruningScope.OP_COND_UPDATE)
    tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_COND_UPDATE), update_op)
    return update_op


def get_or_create_ks_scheduled_graph_ops(graph: tf.Graph, global_step: tf.Variable | tf.Tensor,
                                         var_names: Sequence[str], begin_step: int, end_step: int,
                                         update_step_freq: int, init_sparsity: float, final_sparsity: float,
                                         exponent: float, leave_enabled: bool, ks_group: str,
                                         mask_creator: MaskCreatorLike
                                         ) -> tuple[tf.Operation, list[PruningOpVars], tf.Tensor, tf.Tensor]:
    """Schedule, masks and grouped update op for ``var_names`` in one call (idempotent).

    Everything is checked when the graph is built, before it changes: the
    schedule, the weights' shapes against the pattern, and the sparsities the
    pattern must reach (an N:M ``mask_creator`` prunes at most N/M, so
    ``"2:4"`` needs ``init_sparsity`` and ``final_sparsity`` <= 0.5).

    Returns:
        ``(update_op, pruning_op_vars, update_ready, sparsity)``.
    """
    if not isinstance(graph, tf.Graph):
        raise TypeError(f"graph must be a tf.Graph, got {graph!r}")
    check_graph_editable(graph)
    ks_group = check_ks_group(ks_group)
    creator = get_mask_creator(mask_creator)
    check_global_step(global_step, graph)
    GradualSchedule(init_sparsity, final_sparsity, begin_step, end_step, update_step_freq, exponent, leave_enabled)
    creator.check_sparsity(init_sparsity, "init_sparsity")
    creator.check_sparsity(final_sparsity, "final_sparsity")
    existing = graph.get_collection(PruningScope.collection_name(ks_group, PruningScope.OPS))
    if not existing:   # raise before anything is created
        for p in get_ops_and_inputs_by_name_or_regex(var_names, graph):
            creator.check_shape(p.var_name, tuple(p.tensor.shape.as_list()), p.kind)
    update_ready, sparsity = get_or_create_ks_schedule_ops(global_step, begin_step, end_step, update_step_freq,
                                                           init_sparsity, final_sparsity, exponent, ks_group)
    after = None
    if not leave_enabled:
        with graph.as_default(), tf1.name_scope(PruningScope.general(ks_group, trailing_slash=True)):
            after = tf.greater(global_step_tensor(global_step), end_step, name="nm_is_after_end_step")
    op_vars = get_or_create_graph_ops_pruning(graph, var_names, sparsity, update_ready, leave_enabled, after,
                                              ks_group, creator)
    return get_scheduled_update_op(op_vars, ks_group), op_vars, update_ready, sparsity


def create_ks_scheduled_constant_graph_ops(graph: tf.Graph, global_step: tf.Variable | tf.Tensor,
                                           var_names: Sequence[str], begin_step: int, end_step: int,
                                           ks_group: str) -> tuple[tf.Operation, list[PruningOpVars]]:
    """Constant pruning (lock existing zeros) of ``var_names`` between ``begin_step`` and ``end_step``.

    Returns:
        ``(update_op, pruning_op_vars)``.
    """
    if not isinstance(graph, tf.Graph):
        raise TypeError(f"graph must be a tf.Graph, got {graph!r}")
    check_graph_editable(graph)
    ks_group = check_ks_group(ks_group)
    check_global_step(global_step, graph)
    for name, v in (("begin_step", begin_step), ("end_step", end_step)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an integer, got {v!r}")
    found = get_ops_and_inputs_by_name_or_regex(var_names, graph)
    with graph.as_default(), tf1.name_scope(PruningScope.general(ks_group, trailing_slash=True)):
        s = global_step_tensor(global_step)
        is_start = tf.equal(s, begin_step, name="nm_is_start_step")
        is_end = tf.equal(s, end_step, name="nm_is_end_step")
    op_vars = []
    for p in found:
        ov = create_constant_op_pruning(p.op, p.tensor, is_start, is_end, ks_group)
        _collect(ks_group, ov)
        op_vars.append(ov)
    return get_scheduled_update_op(op_vars, ks_group), op_vars
