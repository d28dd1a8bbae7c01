"""Prune a whole ``tf.compat.v1`` graph from a :class:`sparsify.PruningConfig`.

:func:`prune_graph` finds every prunable op (MatMul, BatchMatMul*, Conv2D,
Conv3D, DepthwiseConv2dNative, Conv2DBackpropInput) whose weight variable
matches ``config.op_names``, adds the masks, rewires the ops and builds ONE
update op ``tf.cond(update_due, update, no_op)`` that computes all masks
together with :class:`sparsify.PruningEngine` (local or global scope, any
pattern). Run the update after every training step: with
:class:`PruningHook`, with :meth:`GraphPruning.wrap_train_op`, or by hand.

When masks change, the update also zeroes the pruned entries of the
optimizer's slots (Momentum accumulator, Adam ``m``/``v``, RMSProp ``ms``/``mom``,
see :mod:`sparsify_tf.optimizer_slots`), so with a zero gradient through the
mask a pruned weight stays exactly 0.0 through training with any
``tf.compat.v1.train`` optimizer. Slots are found in the graph when the update
op is built: :meth:`GraphPruning.wrap_train_op` and :class:`PruningHook` build
it after the optimizer exists; by hand, use :meth:`GraphPruning.build_update_op`.

Example:
    >>> import numpy as np, tensorflow as tf
    >>> tf1 = tf.compat.v1
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf1.placeholder(tf.float32, [None, 8])
    ...     w1 = tf1.get_variable("fc1/kernel", [8, 8])
    ...     w2 = tf1.get_variable("fc2/kernel", [8, 4])
    ...     y = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
    ...     pruning = prune_graph({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    >>> sorted(pruning.masks)
    ['fc1/kernel', 'fc2/kernel']
    >>> with tf1.Session(graph=g) as sess:
    ...     sess.run(tf1.global_variables_initializer()); _ = sess.run(pruning.update_op)
    ...     {k: float(v) for k, v in sess.run(pruning.layer_sparsity).items()}
    {'fc1/kernel': 0.5, 'fc2/kernel': 0.5}
"""
from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from sparsify.config import PruningConfig
from sparsify.engine import PruningEngine
from sparsify.layout import canonical_to_tf, tf_to_canonical

from .graph_utils import (
    check_global_step, check_graph_editable, get_prunable_ops_and_inputs, get_tensor_var, global_step_tensor,
    v1_cond,
)
from .mask_pruning import PruningOpVars, PruningScope, _check_group, create_op_pruning_no_update, \
    create_summaries_pruning, apply_op_vars_masks
from .optimizer_slots import find_optimizer_slots, unknown_apply_ops
from .schedule_ops import schedule_tensors

__all__ = ["prune_graph", "GraphPruning", "PruningHook"]

tf1 = tf.compat.v1

_PRUNINGS: "weakref.WeakKeyDictionary[tf.Graph, dict[str, GraphPruning]]" = weakref.WeakKeyDictionary()


@dataclass(eq=False)
class GraphPruning:
    """Handles returned by :func:`prune_graph`.

    Attributes:
        config, engine: the validated config and its core engine.
        graph, ks_group, global_step: where the ops live.
        update_op: run after each training step (a no-op unless an update point
            was passed since the last update; never loses an update when steps are skipped).
            It zeroes the slots of optimizers that existed when :func:`prune_graph` ran
            (``slots``); :meth:`build_update_op`, :meth:`wrap_train_op` and :meth:`hook`
            also cover optimizers built later.
        update_ready: bool tensor, True when ``update_op`` will recompute masks.
        sparsity: float64 tensor, the target sparsity of the latest update point
            (``engine.target_sparsity(global_step)``).
        schedule_sparsity: float64 tensor, ``schedule.sparsity(global_step)``.
        last_update_step: int64 variable, the step of the last applied update (-1: none).
        masks, weights: layer name (the weight variable's name) -> mask / weight variable.
        masked: layer name -> masked weight tensor (what the ops read).
        kinds: layer name -> layout kind (``"dense"``, ``"conv"``, ...).
        op_vars: ``PruningOpVars`` of every pruned op (shared weights share masks).
        layer_sparsity: layer name -> float tensor, fraction of zeros of its mask.
        total_sparsity: float64 tensor, fraction of zeros over all masks.
        slots: layer name -> optimizer slot variables zeroed by ``update_op`` where the mask is 0.
    """

    config: PruningConfig
    engine: PruningEngine
    graph: tf.Graph
    ks_group: str
    global_step: tf.Variable | tf.Tensor
    update_op: tf.Operation
    update_ready: tf.Tensor
    sparsity: tf.Tensor
    schedule_sparsity: tf.Tensor
    last_update_step: tf.Variable
    masks: dict[str, tf.Variable]
    weights: dict[str, tf.Variable]
    masked: dict[str, tf.Tensor]
    kinds: dict[str, str]
    op_vars: list[PruningOpVars]
    layer_sparsity: dict[str, tf.Tensor]
    total_sparsity: tf.Tensor
    slots: dict[str, list[tf.Variable]] = field(default_factory=dict)
    _build_update: Callable[..., tf.Operation] = field(repr=False, default=None)
    _updates: dict = field(repr=False, default_factory=dict)

    @property
    def layer_names(self) -> list[str]:
        """Pruned layer (weight variable) names in graph order."""
        return list(self.masks)

    def optimizer_slots(self) -> dict[str, list[tf.Variable]]:
        """The optimizer slots of each pruned weight in the graph now (see :mod:`sparsify_tf.optimizer_slots`)."""
        return find_optimizer_slots(self.graph, self.masks)

    def _current_slots(self) -> dict[str, list[tf.Variable]]:
        unknown = unknown_apply_ops(self.graph, self.masks)
        if unknown:
            warnings.warn(f"optimizer apply ops {unknown} update pruned weights but their slot variables are "
                          "unknown to sparsify_tf; they are not zeroed, so pruned weights may drift from 0 "
                          "between mask updates (the forward pass still reads weight * mask)", stacklevel=3)
        return self.optimizer_slots()

    def build_update_op(self) -> tf.Operation:
        """The update op, also zeroing the slots of every optimizer built so far.

        Build the optimizer first, then call this and run the result after
        each training step instead of ``update_op``. Returns ``update_op`` when
        the slots are those it already zeroes; ops are built once per set of slots.

        Example:
                train_op = opt.minimize(loss, global_step=pruning.global_step)
                update = pruning.build_update_op()      # zeroes Momentum/Adam slots of pruned weights
        """
        slots = self._current_slots()
        key = _slots_key(slots)
        op = self._updates.get(key)
        if op is None:
            check_graph_editable(self.graph)
            with self.graph.as_default():
                op = self._build_update(slots)
            self._updates[key] = op
        return op

    def wrap_train_op(self, train_op: tf.Operation | tf.Tensor) -> tf.Operation:
        """A train op that runs ``train_op`` and then the pruning update, in one ``sess.run``.

        The update also zeroes the pruned entries of the optimizer slots found in
        the graph now (build ``train_op`` first, as usual).

        Example:
                train_op = pruning.wrap_train_op(opt.minimize(loss, global_step=gs))
        """
        check_graph_editable(self.graph)
        slots = self._current_slots()
        with self.graph.as_default(), tf.control_dependencies([train_op]):
            update = self._build_update(slots)
        with self.graph.as_default():
            return tf.group(train_op, update, name="nm_train_and_prune")

    def hook(self, run_at_start: bool = True) -> "PruningHook":
        """A :class:`PruningHook` running the update (zeroing optimizer slots too) after each step."""
        return PruningHook(self, run_at_start=run_at_start)

    def summaries(self) -> list[tf.Tensor]:
        """TensorBoard scalars: one per pruned op with its sparsity."""
        return create_summaries_pruning(self.op_vars)

    def apply_masks(self, sess: tf1.Session) -> None:
        """Bake the masks into the weight variables (``weight *= mask``)."""
        apply_op_vars_masks(self.op_vars, self.ks_group, sess)

    def get_masks(self, sess: tf1.Session, canonical: bool = False) -> dict[str, np.ndarray]:
        """Current masks as bool arrays (TF layout, or the core's canonical layout)."""
        vals = sess.run(self.masks)
        if canonical:
            return {n: tf_to_canonical(v, self.kinds[n]) != 0 for n, v in vals.items()}
        return {n: v != 0 for n, v in vals.items()}

    def export_frozen_graph(self, sess: tf1.Session, outputs: Sequence[Any], path: Any = None) -> tf1.GraphDef:
        """See :func:`sparsify_tf.export.export_frozen_graph`."""
        from .export import export_frozen_graph
        return export_frozen_graph(sess, outputs, path)

    def export_saved_model(self, sess: tf1.Session, export_dir: Any, inputs: Mapping[str, tf.Tensor],
                           outputs: Mapping[str, tf.Tensor]) -> str:
        """See :func:`sparsify_tf.export.export_saved_model`."""
        from .export import export_saved_model
        return export_saved_model(sess, export_dir, inputs, outputs)


def _np_update_fn(engine: PruningEngine, names: list[str], kinds: dict[str, str]) -> Callable:
    n = len(names)

    def fn(last_step, *arrays):
        ws, ms = arrays[:n], arrays[n:]
        canon = {name: tf_to_canonical(w, kinds[name]) for name, w in zip(names, ws)}
        pre = {name: tf_to_canonical(m, kinds[name]) != 0 for name, m in zip(names, ms)}
        new = engine.compute_masks(canon, int(last_step), pre_masks=pre)
        return [canonical_to_tf(new[name], kinds[name], w.shape).astype(w.dtype) for name, w in zip(names, ws)]

    return fn


def _slots_key(slots: Mapping[str, Sequence[tf.Variable]]) -> tuple:
    return tuple((n, tuple(v.op.name for v in vs)) for n, vs in slots.items())


def prune_graph(config: PruningConfig | Mapping[str, Any] | str, graph: tf.Graph | None = None,
                global_step: tf.Variable | tf.Tensor | None = None, *, ks_group: str = "sparsify") -> GraphPruning:
    """Add scheduled pruning to every selected weight of a ``tf.compat.v1`` graph.

    Call it after building the model and before building the optimizer (so
    gradients flow through the masks and pruned weights get zero gradients),
    then run the update after every training step (:class:`PruningHook`,
    :meth:`GraphPruning.wrap_train_op`, or :meth:`GraphPruning.build_update_op`
    by hand). When masks change, the update also zeroes the pruned entries of
    the optimizer slots (Momentum, Adam, RMSProp...), so pruned weights stay
    exactly zero through training. A second call for the same graph and
    ``ks_group`` returns the same handles and creates nothing.

    Args:
        config: a ``PruningConfig``, dict or YAML path. ``op_names`` /
            ``excluded_op_names`` select weights by variable name (``re.search``).
            Criterion must be ``"magnitude"``.
        graph: the graph (default: the default graph).
        global_step: scalar integer variable/tensor (default: the graph's global
            step, created if missing).
        ks_group: name of the scopes and collections of this pruning.

    Returns:
        :class:`GraphPruning` with ``update_op``, ``masks``, ``sparsity`` and more.

    Raises:
        ValueError/TypeError: bad config, finalized graph, bad global step,
            nothing selected, a weight that does not fit the pattern —
            all before the graph is changed.

    Example:
            pruning = prune_graph(PruningConfig(target_sparsity=0.8, end_step=1000))
            train_op = opt.minimize(loss, global_step=tf1.train.get_or_create_global_step())
            with tf1.train.MonitoredTrainingSession(hooks=[pruning.hook()]) as sess: ...
    """
    cfg = PruningConfig.coerce(config)
    engine = PruningEngine(cfg)
    if engine.needs_gradients:
        raise ValueError(f"criterion {cfg.criterion!r} needs gradients, which graph-mode pruning does not "
                         "collect; use criterion='magnitude'")
    if graph is None:
        graph = tf1.get_default_graph()
    if not isinstance(graph, tf.Graph):
        raise TypeError(f"graph must be a tf.Graph, got {graph!r}")
    ks_group = _check_group(ks_group)
    cached = _PRUNINGS.get(graph, {}).get(ks_group)
    if cached is not None:
        if cached.config != cfg:
            raise ValueError(f"ks_group {ks_group!r} of this graph was already pruned with another config; "
                             "use a different ks_group")
        return cached
    check_graph_editable(graph)
    if global_step is not None:
        check_global_step(global_step, graph)
    else:
        existing = tf1.train.get_global_step(graph)
        if existing is not None:
            check_global_step(existing, graph)
    candidates = get_prunable_ops_and_inputs(graph)
    shapes, kinds = {}, {}
    for p in candidates:
        if p.var_name not in shapes:
            tf_shape = tuple(p.tensor.shape.as_list())
            if any(d is None for d in tf_shape):
                continue
            shapes[p.var_name] = tf_to_canonical(np.zeros(tf_shape, np.float32), p.kind).shape
            kinds[p.var_name] = p.kind
    if not shapes:
        raise ValueError("the graph has no prunable op (MatMul, BatchMatMul, Conv2D, Conv3D, "
                         "DepthwiseConv2dNative, Conv2DBackpropInput) reading a tf.Variable weight")
    names = engine.select_layers(list(shapes), shapes)
    engine.check_layers({n: shapes[n] for n in names})
    for n in names:
        get_tensor_var(graph, n)
    chosen = set(names)

    with graph.as_default():
        gs = global_step if global_step is not None else tf1.train.get_or_create_global_step(graph)
        check_global_step(gs, graph)
        step = global_step_tensor(gs)
        with tf1.variable_scope(PruningScope.general(ks_group)):
            done = tf1.get_variable(f"nm_last_update_step", [], tf.int64, initializer=tf1.constant_initializer(-1),
                                    trainable=False, use_resource=True)
        with tf1.name_scope(PruningScope.general(ks_group, PruningScope.OPS_SCHEDULE, trailing_slash=True)):
            t = schedule_tensors(engine.schedule, step)
        with tf1.name_scope(PruningScope.general(ks_group, trailing_slash=True)):
            after_end = None
            if not cfg.leave_enabled:
                after_end = tf.greater(step, cfg.end_step, name="nm_is_after_end_step")
            sparsity = tf.identity(t["target_sparsity"], name=PruningScope.OP_SPARSITY)
            schedule_sparsity = tf.identity(t["sparsity"], name="nm_schedule_sparsity")

        op_vars: list[PruningOpVars] = []
        masks, weights, masked = {}, {}, {}
        for p in candidates:
            if p.var_name not in chosen:
                continue
            ov = create_op_pruning_no_update(p.op, p.tensor, ks_group, cfg.leave_enabled, after_end)
            masks.setdefault(p.var_name, ov.mask)
            masked.setdefault(p.var_name, ov.masked)
            weights.setdefault(p.var_name, get_tensor_var(graph, p.var_name))
            op_vars.append(ov)
        layer_kinds = {n: kinds[n] for n in masks}
        np_fn = _np_update_fn(engine, list(masks), layer_kinds)
        scope = PruningScope.general(ks_group, PruningScope.OPS_UPDATE, trailing_slash=True)

        def _build_update(slots: Mapping[str, Sequence[tf.Variable]]) -> tuple[tf.Tensor, tf.Operation]:
            with tf1.name_scope(scope):
                last = schedule_tensors(engine.schedule, global_step_tensor(gs))["last_update_step"]
                ready = tf.greater(last, done.read_value())

                def _update():
                    reads = [weights[n].read_value() for n in masks]
                    mreads = [masks[n].read_value() for n in masks]
                    outs = tf.numpy_function(np_fn, [last, *reads, *mreads], [r.dtype for r in reads],
                                             stateful=False, name="nm_core_masks")
                    assigns = []
                    for n, r, o in zip(masks, reads, outs):
                        o.set_shape(r.shape)
                        assigns.append(tf1.assign(masks[n], o, name=PruningScope.OP_MASK_ASSIGN))
                        assigns.append(tf1.assign(weights[n], r * o, name=PruningScope.OP_WEIGHT_UPDATE))
                        keep = tf.cast(o, tf.bool) if slots.get(n) else None
                        for slot in slots.get(n, ()):
                            # optimizer state of pruned entries: zero, so a zero gradient keeps them at 0.0
                            value = slot.read_value()
                            assigns.append(tf1.assign(slot, tf.where(keep, value, tf.zeros_like(value)),
                                                      name="nm_slot_zero"))
                    assigns.append(tf1.assign(done, last))
                    return tf.group(*assigns)

                def _noop():
                    return tf.group(tf.constant(0, name=PruningScope.OP_MASK_UPDATE_NO_OP))

                return ready, v1_cond(ready, _update, _noop, name=PruningScope.OP_COND_UPDATE)

        initial_slots = find_optimizer_slots(graph, masks)
        update_ready, update_op = _build_update(initial_slots)
        tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_COND_UPDATE), update_op)
        tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_UPDATE_READY), update_ready)
        tf1.add_to_collection(PruningScope.collection_name(ks_group, PruningScope.OP_SPARSITY), sparsity)
        with tf1.name_scope(PruningScope.general(ks_group, PruningScope.OPS_SPARSITY, trailing_slash=True)):
            layer_sparsity = {n: tf.math.zero_fraction(m) for n, m in masks.items()}
            size = sum(int(np.prod(m.shape.as_list())) for m in masks.values())
            kept = tf.add_n([tf.math.count_nonzero(m, dtype=tf.int64) for m in masks.values()])
            total = 1.0 - tf.cast(kept, tf.float64) / float(size)

    pruning = GraphPruning(cfg, engine, graph, ks_group, gs, update_op, update_ready, sparsity, schedule_sparsity,
                           done, masks, weights, masked, layer_kinds, op_vars, layer_sparsity, total,
                           slots=initial_slots, _build_update=lambda slots: _build_update(slots)[1],
                           _updates={_slots_key(initial_slots): update_op})
    _PRUNINGS.setdefault(graph, {})[ks_group] = pruning
    return pruning


class PruningHook(tf1.train.SessionRunHook):
    """Runs the pruning update after training steps (MonitoredTrainingSession, Estimator).

    Given a :class:`GraphPruning`, the hook builds its update op in ``begin()``
    (before the session finalizes the graph, after the optimizer exists) with
    :meth:`GraphPruning.build_update_op`, so it also zeroes the optimizer slots
    of pruned weights. It fetches the global step with each training run and
    calls the update only when the core schedule says an update point may have
    passed since the last applied update (so most steps cost no extra
    ``session.run``); given a bare update op, it runs it after every step.

    Args:
        pruning: a :class:`GraphPruning` or an update op.
        run_at_start: also run the update once when the session is created
            (applies a begin step of 0, and one-shot pruning, before training).

    Example:
            with tf1.train.MonitoredTrainingSession(hooks=[PruningHook(pruning)]) as sess:
                while not sess.should_stop(): sess.run(train_op)
    """

    def __init__(self, pruning: GraphPruning | tf.Operation, run_at_start: bool = True) -> None:
        if isinstance(pruning, GraphPruning):
            self._pruning: GraphPruning | None = pruning
            self._update = pruning.update_op
        elif isinstance(pruning, (tf.Operation, tf.Tensor)):
            self._pruning = None
            self._update = pruning
        else:
            raise TypeError(f"pruning must be a GraphPruning (from prune_graph) or an update op, got {pruning!r}")
        if not isinstance(run_at_start, bool):
            raise TypeError(f"run_at_start must be True or False, got {run_at_start!r}")
        self._run_at_start = run_at_start
        self._done = -1
        self._done_after_update: tf.Tensor | None = None

    @property
    def update_op(self) -> tf.Operation | tf.Tensor:
        """The op the hook runs (set in ``begin()`` when given a :class:`GraphPruning`)."""
        return self._update

    def begin(self) -> None:
        pr = self._pruning
        if pr is None:
            return
        if not pr.graph.finalized:
            self._update = pr.build_update_op()
            with pr.graph.as_default(), tf.control_dependencies([self._update]):
                self._done_after_update = pr.last_update_step.read_value()   # read once the update is done
            return
        slots = pr.optimizer_slots()
        key = _slots_key(slots)
        if key in pr._updates:
            self._update = pr._updates[key]
        else:
            warnings.warn("PruningHook.begin() ran on a finalized graph: the optimizer slots of pruned weights "
                          f"{ {n: [v.op.name for v in vs] for n, vs in slots.items() if vs} } are not zeroed; "
                          "create the session after the optimizer (or call pruning.build_update_op() "
                          "before finalizing)", stacklevel=2)

    def after_create_session(self, session: tf1.Session, coord: Any) -> None:
        if self._run_at_start:
            session.run(self._update)
        if self._pruning is not None:
            self._done = int(session.run(self._pruning.last_update_step))

    def before_run(self, run_context: tf1.train.SessionRunContext) -> Any:
        if self._pruning is None:
            return None
        return tf1.train.SessionRunArgs(self._pruning.global_step)

    def after_run(self, run_context: tf1.train.SessionRunContext, run_values: tf1.train.SessionRunValues) -> None:
        pr = self._pruning
        if pr is None:
            run_context.session.run(self._update)
            return
        # Skip the extra session call unless an update point may have been passed. The step was
        # read in the same run as the train op, before or after its increment: look one step ahead.
        # The update op itself re-checks in the graph, so an early call changes nothing.
        if pr.engine.update_due(self._done, int(run_values.results) + 1):
            if self._done_after_update is not None:
                self._done = int(run_context.session.run(self._done_after_update))
            else:
                run_context.session.run(self._update)
                self._done = int(run_context.session.run(pr.last_update_step))
