"""Kernel sparsity (model pruning) on ``tf.compat.v1`` graphs: the seed API.

Same names and arguments as the seed (``sparseml.tensorflow_v1.optim.mask_pruning``)
but working on TensorFlow 2.x graphs without ``tf.contrib.graph_editor``, for
resource and legacy ref variables. The flow:

1. :func:`create_ks_schedule_ops` / :func:`get_or_create_ks_schedule_ops` build
   the ``update_ready`` and ``sparsity`` tensors from the global step (equal to
   the core ``GradualSchedule`` at every step).
2. :func:`create_op_pruning`, :func:`create_graph_ops_pruning` or
   :func:`get_or_create_graph_ops_pruning` add a mask variable per weight, a
   masked input ``mask * weight`` that the op now reads, and an update op
   ``tf.cond(update_ready, update, no_op)`` whose mask values come from the core.
3. :func:`get_scheduled_update_op` groups the updates: run it after each step.

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

import weakref
from collections import namedtuple
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from sparsify.schedules import GradualSchedule

from .graph_utils import (
    PrunableInput, check_global_step, check_graph_editable, clean_tensor_name, global_step_tensor,
    get_ops_and_inputs_by_name_or_regex, get_tensor_var, prunable_input_of, replace_op_input, v1_cond,
)
from .mask_creator import CoreMaskCreator, MaskCreatorLike, get_mask_creator
from .schedule_ops import schedule_tensors

__all__ = [
    "PruningOpVars", "PruningScope", "create_op_pruning_no_update", "create_op_pruning",
    "create_constant_op_pruning", "create_graph_ops_pruning", "get_or_create_graph_ops_pruning",
    "create_summaries_pruning", "apply_op_vars_masks", "create_ks_schedule_ops",
    "get_or_create_ks_schedule_ops", "get_scheduled_update_op", "get_or_create_ks_scheduled_graph_ops",
    "create_ks_scheduled_constant_graph_ops", "pruned_inputs",
]

tf1 = tf.compat.v1

PruningOpVars = namedtuple("PruningOpVars", ["op", "op_input", "update", "mask", "masked"])
PruningOpVars.__doc__ = """Handles of one pruned op: the op, its original weight input tensor, the
update op (None for ``create_op_pruning_no_update``), the mask variable and the masked tensor."""


class PruningScope:
    """Scope and collection naming for kernel sparsity in the graph (seed names).

    Example:
        >>> PruningScope.general("grp", PruningScope.OPS_SCHEDULE)
        'nm_ks_ops/grp/schedule_ops'
        >>> PruningScope.collection_name("grp", PruningScope.VAR_MASK)
        'nm_ks_collection_grp_nm_mask'
    """

    NM_KS = "nm_ks"
    NM_KS_OPS = "nm_ks_ops"

    OPS = "ops"
    OPS_INPUT = "input_ops"
    OPS_UPDATE = "update_ops"
    OPS_SUMMARY = "summary_ops"
    OPS_SCHEDULE = "schedule_ops"
    OPS_SPARSITY = "sparsity_ops"
    OPS_MASK = "ops_mask"            # aligned with OPS: one entry per PruningOpVars
    OPS_MASKED = "ops_masked"

    OP_COND_UPDATE = "nm_conditional_update"
    OP_SPARSITY = "nm_sparsity"
    OP_UPDATE_READY = "nm_update_ready"
    OP_MASKED_VAR = "nm_masked_var"
    OP_MASK_ASSIGN = "nm_mask_assign"
    OP_PRUNE_VARS_ASSIGN = "nm_prune_vars_assign"
    OP_MASK_UPDATE_NO_OP = "nm_mask_update_no_op"
    OP_MASK_UPDATE = "nm_mask_update"
    OP_WEIGHT_UPDATE = "nm_weight_update"
    OP_SAVE = "nm_save"

    VAR_MASK = "nm_mask"
    VAR_THRESHOLD = "nm_threshold"

    @staticmethod
    def general(ks_group: str, additional: str | None = None, trailing_slash: bool = False) -> str:
        """Scope for group-wide ops (schedule, conditional update): ``nm_ks_ops/<group>[/additional]``."""
        return PruningScope._format(PruningScope._format(PruningScope.NM_KS_OPS, ks_group), additional,
                                    trailing_slash)

    @staticmethod
    def model(op_tens: Any, ks_group: str, additional: str | None = None, trailing_slash: bool = False) -> str:
        """Scope for one op's mask and update ops: ``<op>_nm_ks/<group>[/additional]``."""
        op_name = clean_tensor_name(op_tens if isinstance(op_tens, str) else op_tens.name)
        scope = PruningScope._format(f"{op_name}_{PruningScope.NM_KS}", ks_group)
        return PruningScope._format(scope, additional, trailing_slash)

    @staticmethod
    def collection_name(ks_group: str, name: str) -> str:
        """Collection name for ``name`` in ``ks_group``: ``nm_ks_collection_<group>_<name>``."""
        return f"nm_ks_collection_{ks_group}_{name}"

    @staticmethod
    def _format(current: str, additional: str | None = None, trailing_slash: bool = False) -> str:
        scope = current if additional is None else f"{current}/{additional}"
        return scope + "/" if trailing_slash else scope


# ---------------------------------------------------------------------------------------
# Per-graph bookkeeping (Python side): masks per variable, pruned inputs for export.
_REGISTRY: "weakref.WeakKeyDictionary[tf.Graph, dict]" = weakref.WeakKeyDictionary()


def _state(graph: tf.Graph) -> dict:
    st = _REGISTRY.get(graph)
    if st is None:
        st = {"masks": {}, "masked": {}, "opvars": {}, "rewires": [], "save_ops": {}, "meta": {}}
        _REGISTRY[graph] = st
    return st


def pruned_inputs(graph: tf.Graph) -> list[dict[str, Any]]:
    """Every rewired op input of ``graph``: ``op``, ``index``, ``original`` (tensor name),
    ``var`` (weight variable), ``mask`` (mask variable), ``kind``, ``group``. Used by export."""
    return list(_state(graph)["rewires"])


def _check_group(ks_group: Any) -> str:
    if not isinstance(ks_group, str) or not ks_group or "/" in ks_group or " " in ks_group:
        raise ValueError(f"ks_group must be a non-empty string without '/' or spaces, got {ks_group!r}")
    return ks_group


def _prunable(op: tf.Operation, op_input: tf.Tensor) -> PrunableInput:
    if not isinstance(op, tf.Operation):
        raise TypeError(f"op must be a tf.Operation, got {op!r}")
    p = prunable_input_of(op)
    if p is None:
        from .graph_utils import PRUNABLE_OP_TYPES
        raise ValueError(f"op {op.name!r} of type {op.type!r} is not prunable: prunable ops are "
                         f"{', '.join(PRUNABLE_OP_TYPES)} (forward ops) reading a tf.Variable weight")
    if op_input is not None and op_input is not p.tensor:
        raise ValueError(f"op_input {getattr(op_input, 'name', op_input)!r} is not the weight input of op "
                         f"{op.name!r}; its weight input is {p.tensor.name!r}")
    return p


def _existing(graph: tf.Graph, ks_group: str, op: tf.Operation) -> PruningOpVars | None:
    return _state(graph)["opvars"].get((ks_group, op.name))


def _var_read(var: tf.Variable) -> tf.Tensor:
    return var.read_value()


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
    ks_group = _check_group(ks_group)
    if not isinstance(leave_enabled, bool):
        raise TypeError(f"leave_enabled must be True or False, got {leave_enabled!r}")
    found = _existing(op.graph, ks_group, op) if isinstance(op, tf.Operation) else None
    if found is not None:
        return found._replace(update=None)
    p = _prunable(op, op_input)
    graph = op.graph
    check_graph_editable(graph)
    if not leave_enabled and is_after_end_step is None:
        raise ValueError("is_after_end_step must be given when leave_enabled is False")
    var = get_tensor_var(graph, p.var_name)
    st = _state(graph)
    mask = st["masks"].get((ks_group, p.var_name))
    with graph.as_default():
        if mask is None:
            with tf1.variable_scope(PruningScope.model(op, ks_group), reuse=tf1.AUTO_REUSE):
                mask = tf1.get_variable(PruningScope.VAR_MASK, p.tensor.shape, initializer=tf1.ones_initializer(),
                                        trainable=False, dtype=p.tensor.dtype.base_dtype,
                                        use_resource=_is_resource(var))
            tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.VAR_MASK), mask)
            st["masks"][(ks_group, p.var_name)] = mask
        key = (ks_group, p.tensor.name)
        masked = st["masked"].get(key)
        if masked is None:
            with tf1.name_scope(PruningScope.model(op, ks_group, trailing_slash=True)):
                masked = tf.multiply(mask, p.tensor, name=PruningScope.OP_MASKED_VAR)
            tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_MASKED_VAR), masked)
            st["masked"][key] = masked
        feed = masked
        if not leave_enabled:
            with tf1.name_scope(PruningScope.model(op, ks_group, trailing_slash=True)):
                feed = tf.where(is_after_end_step, p.tensor, masked, name="nm_masked_or_dense")
        _rewire(op, p, feed)
    st["rewires"].append({"op": op.name, "index": p.index, "original": p.tensor.name, "var": p.var_name,
                          "mask": mask.op.name, "kind": p.kind, "group": ks_group})
    op_vars = PruningOpVars(op, p.tensor, None, mask, masked)
    st["opvars"][(ks_group, op.name)] = op_vars
    st["meta"][(ks_group, op.name)] = p
    return op_vars


def _is_resource(var: tf.Variable) -> bool:
    return var.op.type == "VarHandleOp"


def _rewire(op: tf.Operation, p: PrunableInput, new: tf.Tensor) -> None:
    # Gradient ops built before pruning read the weight directly; point them at the masked weight too.
    grad_mark = f"{op.name}_grad/"
    for consumer in list(p.tensor.consumers()):
        if consumer is not op and grad_mark in consumer.name:
            for i, t in enumerate(consumer.inputs):
                if t is p.tensor:
                    replace_op_input(consumer, i, new)
    replace_op_input(op, p.index, new)


def _no_update(scope: str, dtype) -> tf.Operation:
    with tf1.name_scope(scope):
        return tf.group(tf.constant(0.0, dtype=dtype, name=PruningScope.OP_MASK_UPDATE_NO_OP))


def create_op_pruning(op: tf.Operation, op_input: tf.Tensor, sparsity: tf.Tensor, update_ready: tf.Tensor,
                      leave_enabled: bool, is_after_end_step: tf.Tensor | None, ks_group: str,
                      mask_creator: MaskCreatorLike) -> PruningOpVars:
    """Mask, masked input and ``tf.cond(update_ready, update, no_op)`` for one op.

    The update computes the new mask of the weight at ``sparsity`` with the core
    pattern of ``mask_creator`` (TF layout converted to the canonical layout and
    back) and assigns both the mask and ``weight * mask``.

    Args:
        op, op_input: the prunable op and its weight input tensor.
        sparsity: float scalar tensor, the target sparsity of an update.
        update_ready: bool scalar tensor, True when the mask must be recomputed.
        leave_enabled, is_after_end_step: see :func:`create_op_pruning_no_update`.
        ks_group: group identifier.
        mask_creator: a pattern name (``"1x1"``, ``"4x1"``, ``"2:4"``), config dict,
            ``sparsify.Pattern`` or :class:`~sparsify_tf.mask_creator.CoreMaskCreator`.

    Returns:
        ``PruningOpVars(op, op_input, update, mask, masked)``.
    """
    creator = get_mask_creator(mask_creator)
    ks_group = _check_group(ks_group)
    found = _existing(op.graph, ks_group, op) if isinstance(op, tf.Operation) else None
    if found is not None and found.update is not None:
        return found
    p = _prunable(op, op_input) if found is None else _state(op.graph)["meta"][(ks_group, op.name)]
    creator.check_shape(p.var_name, tuple(p.tensor.shape.as_list()), p.kind)
    init = found or create_op_pruning_no_update(op, op_input, ks_group, leave_enabled, is_after_end_step)
    graph = op.graph
    var = get_tensor_var(graph, p.var_name)
    mask = init.mask
    scope = PruningScope.model(op, ks_group, additional=PruningScope.OPS_UPDATE, trailing_slash=True)
    dtype = p.tensor.dtype.base_dtype

    def _update():
        with tf1.name_scope(scope):
            weight = _var_read(var)
            new_mask = creator.create_sparsity_mask(weight, tf.cast(sparsity, tf.float64), _var_read(mask),
                                                    kind=p.kind, name=p.var_name)
            return tf.group(tf1.assign(mask, new_mask, name=PruningScope.OP_MASK_ASSIGN),
                            tf1.assign(var, weight * new_mask, name=PruningScope.OP_WEIGHT_UPDATE))

    with graph.as_default(), tf1.name_scope(scope):
        mask_update = v1_cond(update_ready, _update, lambda: _no_update(scope, dtype),
                              name=PruningScope.OP_MASK_UPDATE)
    tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_MASK_UPDATE), mask_update)
    op_vars = PruningOpVars(op, init.op_input, mask_update, mask, init.masked)
    _state(graph)["opvars"][(ks_group, op.name)] = op_vars
    return op_vars


def create_constant_op_pruning(op: tf.Operation, op_input: tf.Tensor, is_start_step: tf.Tensor,
                               is_end_step: tf.Tensor, ks_group: str) -> PruningOpVars:
    """Lock the current zeros of ``op``'s weight from the start step to the end step.

    At ``is_start_step`` the mask becomes the core's lock mask (1 where the
    weight is non-zero); at ``is_end_step`` the weight is multiplied by the
    mask and the mask reverts to ones (seed semantics).
    """
    ks_group = _check_group(ks_group)
    p = _prunable(op, op_input)
    init = create_op_pruning_no_update(op, op_input, ks_group)
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
            weight = _var_read(var)
            old = _var_read(mask)
            new_mask = tf.numpy_function(_lock, [weight, is_start_step], weight.dtype, name="nm_core_lock_mask")
            new_mask.set_shape(weight.shape)
            new_weight = weight * old * new_mask
            with tf.control_dependencies([new_weight]):
                return tf.group(tf1.assign(mask, new_mask, name=PruningScope.OP_MASK_ASSIGN),
                                tf1.assign(var, new_weight, name=PruningScope.OP_WEIGHT_UPDATE))

    with graph.as_default(), tf1.name_scope(scope):
        mask_update = v1_cond(tf.logical_or(is_start_step, is_end_step), _set_constant_mask,
                              lambda: _no_update(scope, p.tensor.dtype.base_dtype),
                              name=PruningScope.OP_MASK_UPDATE)
    op_vars = PruningOpVars(op, init.op_input, mask_update, mask, init.masked)
    _state(graph)["opvars"][(ks_group, op.name)] = op_vars
    return op_vars


def _collect(ks_group: str, op_vars: PruningOpVars) -> None:
    for name, value in ((PruningScope.OPS, op_vars.op), (PruningScope.OPS_INPUT, op_vars.op_input),
                        (PruningScope.OPS_UPDATE, op_vars.update), (PruningScope.OPS_MASK, op_vars.mask),
                        (PruningScope.OPS_MASKED, op_vars.masked)):
        tf1.add_to_collection(PruningScope.collection_name(ks_group, name), value)


def create_graph_ops_pruning(graph: tf.Graph, var_names: Sequence[str], sparsity: tf.Tensor,
                             update_ready: tf.Tensor, leave_enabled: bool, is_after_end_step: tf.Tensor | None,
                             ks_group: str, mask_creator: MaskCreatorLike) -> list[PruningOpVars]:
    """:func:`create_op_pruning` for every prunable op whose weight matches ``var_names``.

    ``var_names`` holds variable names (``"dense/kernel"``) or ``"re:<regex>"``
    patterns (``re.match``); ``["re:.*"]`` selects every prunable weight. Ops
    sharing a weight share one mask and one update. Every name and shape is
    checked before the graph is changed.
    """
    if not isinstance(graph, tf.Graph):
        raise TypeError(f"graph must be a tf.Graph, got {graph!r}")
    check_graph_editable(graph)
    ks_group = _check_group(ks_group)
    creator = get_mask_creator(mask_creator)
    found = get_ops_and_inputs_by_name_or_regex(var_names, graph)
    for p in found:
        creator.check_shape(p.var_name, tuple(p.tensor.shape.as_list()), p.kind)
    result, by_var = [], {}
    with graph.as_default():
        for p in found:
            if p.var_name in by_var:
                first = by_var[p.var_name]
                init = create_op_pruning_no_update(p.op, p.tensor, ks_group, leave_enabled, is_after_end_step)
                op_vars = PruningOpVars(p.op, p.tensor, first.update, init.mask, init.masked)
                _state(graph)["opvars"][(ks_group, p.op.name)] = op_vars
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
    ks_group = _check_group(ks_group)
    cols = [graph.get_collection(PruningScope.collection_name(ks_group, n))
            for n in (PruningScope.OPS, PruningScope.OPS_INPUT, PruningScope.OPS_UPDATE,
                      PruningScope.OPS_MASK, PruningScope.OPS_MASKED)]
    if all(cols) and len({len(c) for c in cols}) == 1:
        return [PruningOpVars(*row) for row in zip(*cols)]
    return create_graph_ops_pruning(graph, var_names, sparsity, update_ready, leave_enabled, is_after_end_step,
                                    ks_group, mask_creator)


def create_summaries_pruning(pruning_op_vars: Sequence[PruningOpVars]) -> list[tf.Tensor]:
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


def apply_op_vars_masks(pruning_op_vars: Sequence[PruningOpVars], ks_group: str, sess: tf1.Session) -> None:
    """Bake the masks into the weights (``weight = weight * mask``) with ``sess``.

    The assign ops are created once per weight and reused by later calls.
    """
    ks_group = _check_group(ks_group)
    ops = []
    for op_vars in pruning_op_vars:
        graph = op_vars.op.graph
        st = _state(graph)
        p = st["meta"].get((ks_group, op_vars.op.name)) or _prunable(op_vars.op, None)
        key = (ks_group, p.var_name)
        if key not in st["save_ops"]:
            var = get_tensor_var(graph, p.var_name)
            with graph.as_default(), tf1.name_scope(PruningScope.model(op_vars.op, ks_group, PruningScope.OP_SAVE)):
                st["save_ops"][key] = tf1.assign(var, _var_read(var) * _var_read(op_vars.mask)).op
        ops.append(st["save_ops"][key])
    if ops:
        sess.run(list(dict.fromkeys(ops)))


def create_ks_schedule_ops(global_step: tf.Variable | tf.Tensor, begin_step: int, end_step: int,
                           update_step_freq: int, init_sparsity: float, final_sparsity: float, exponent: float,
                           ks_group: str) -> tuple[tf.Tensor, tf.Tensor]:
    """``(update_ready, sparsity)`` tensors of the gradual schedule at ``global_step``.

    Equal to ``sparsify.GradualSchedule(init_sparsity, final_sparsity,
    begin_step, end_step, update_step_freq, exponent)``'s ``update_ready(step)``
    and ``sparsity(step)`` at every step (``sparsity`` is float64).
    """
    ks_group = _check_group(ks_group)
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
    ks_group = _check_group(ks_group)
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

    Returns:
        ``(update_op, pruning_op_vars, update_ready, sparsity)``.
    """
    if not isinstance(graph, tf.Graph):
        raise TypeError(f"graph must be a tf.Graph, got {graph!r}")
    check_graph_editable(graph)
    ks_group = _check_group(ks_group)
    creator = get_mask_creator(mask_creator)
    check_global_step(global_step, graph)
    GradualSchedule(init_sparsity, final_sparsity, begin_step, end_step, update_step_freq, exponent, leave_enabled)
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
    ks_group = _check_group(ks_group)
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
