"""Prune a whole ``tf.compat.v1`` graph from a :class:`sparsify.PruningConfig`.

:func:`prune_graph` finds every prunable op (MatMul, BatchMatMul*, Conv2D,
Conv3D, DepthwiseConv2dNative, Conv2DBackpropInput) whose weight variable
matches ``config.op_names``, adds the masks, rewires the ops and builds ONE
update op ``tf.cond(update_due, update, no_op)``. The update protocol is the
core's :class:`sparsify.PruningProtocol`: inside the update, the protocol is
restored from the graph's variables (the masks and the last done step, so
checkpoints carry everything) and advanced to the global step; it decides
what is due (an update, the release after ``end_step`` when
``leave_enabled=False``, or both) and computes all masks together (local or
global scope, any pattern). The graph only converts weights to the canonical
layout (``sparsify.layout``) and writes masks back. A cheap in-graph guard
keeps most steps out of Python: the update runs only when the schedule's last
update point is after the done step, or the release is due. Run the update
after every training step: with :class:`~sparsify_tf.PruningHook`, with
:meth:`GraphPruning.wrap_train_op`, or by hand.

**Layer order.** Layers are handed to the core in the graph's own weight
order, the creation order of the weight variables (the order of
``tf.compat.v1.global_variables()``), not the order of the ops reading them.
Global scope breaks ties across layers in that order, as the torch
(``named_parameters()``) and Keras (``model.weights``) adapters do.

**Release.** With ``leave_enabled=False`` the first update after ``end_step``
releases the masks: they become all ones, and the weights keep the zeros of
the last masks (training may then regrow them), as in the torch and Keras adapters.

When masks change, the update also zeroes the pruned entries of the
optimizer's slots (Momentum accumulator, Adam ``m``/``v``, RMSProp ``ms``/``mom``,
see :mod:`sparsify_tf.common.optimizer_slots`), so with a zero gradient through the
mask a pruned weight stays exactly 0.0 through training with any
``tf.compat.v1.train`` optimizer. Slots are found in the graph when the update
op is built: :meth:`GraphPruning.wrap_train_op` and the hook build it after
the optimizer exists; by hand, use :meth:`GraphPruning.build_update_op`.

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
    >>> pruning.layer_names
    ['fc1/kernel', 'fc2/kernel']
    >>> with tf1.Session(graph=g) as sess:
    ...     sess.run(tf1.global_variables_initializer()); _ = sess.run(pruning.update_op)
    ...     {k: float(v) for k, v in sess.run(pruning.layer_sparsity).items()}
    {'fc1/kernel': 0.5, 'fc2/kernel': 0.5}
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from sparsify.config import PruningConfig
from sparsify.selection_summary import UNSUPPORTED, SelectionSummary, SummaryRow, summarize

from ..common.graph_utils import (check_global_step, get_tensor_var, global_step_tensor, unmaskable_weight_uses,
                                  v1_cond)
from ..common.guarded_update import GuardedLayer, GuardVariables, build_guarded_update, core_update_fn
from ..common.optimizer_slots import find_optimizer_slots
from ..common.pruning_scope import PruningScope, check_ks_group
from ..common.schedule_ops import schedule_tensors
from .handles import GraphPruningHandles, slots_key
from .hook import PruningHook
from .setup import (
    MASKING_MODES, Selection, StateVariables, add_masks, add_state_variables, add_stored_values,
    check_arguments, check_free_to_prune, check_gradients_not_built, collected, select_layers, warn_unmaskable,
)
from .statistics import Collectors, activation_window, add_collectors

__all__ = ["prune_graph", "GraphPruning", "MASKING_MODES"]

tf1 = tf.compat.v1

_PRUNINGS: "weakref.WeakKeyDictionary[tf.Graph, dict[str, GraphPruning]]" = weakref.WeakKeyDictionary()


@dataclass(eq=False)
class GraphPruning(GraphPruningHandles):
    """Handles returned by :func:`prune_graph` (see :class:`~sparsify_tf.graph.handles.GraphPruningHandles`
    for the attributes), plus :meth:`hook`."""

    def hook(self, run_at_start: bool = True) -> PruningHook:
        """A :class:`~sparsify_tf.PruningHook` running the update (zeroing optimizer slots too) after each step."""
        return PruningHook(self, run_at_start=run_at_start)

    def summary(self) -> SelectionSummary:
        """Every trainable variable of rank 2+ of the graph when :func:`prune_graph` ran: the pruned weights
        (variable name, the op reading it, shape, pattern, target) and the others with why they are left dense
        (``"not matched"``, ``"excluded"``, ``"unsupported type"``: no prunable op reads it, ``"graph mode
        cannot mask it: ..."``); ``print(pruning.summary())`` shows a table
        (:class:`sparsify.selection_summary.SelectionSummary`).

        Example:
            >>> g = tf.Graph()
            >>> with g.as_default():
            ...     x = tf1.placeholder(tf.float32, [None, 4])
            ...     w = tf1.get_variable("fc/kernel", [4, 8])
            ...     e = tf1.get_variable("emb/table", [10, 8])
            ...     y = tf.matmul(x, w) + tf.reduce_sum(e)
            ...     print(prune_graph({"target_sparsity": 0.5}).summary())
            1 weight selected (32 parameters), 1 skipped (80 parameters: 1 unsupported type)
            name       type      shape    pattern  target  status
            fc/kernel  MatMul    (4, 8)   1x1      0.5     selected
            emb/table  Variable  (10, 8)  -        -       skipped: unsupported type
        """
        return summarize(self.config, self._summary_rows, unfit=self.protocol.skipped)

def prune_graph(config: PruningConfig | Mapping[str, Any] | str, graph: tf.Graph | None = None,
                global_step: tf.Variable | tf.Tensor | None = None, *, ks_group: str = "sparsify",
                masking: str = "weights") -> GraphPruning:
    """Add scheduled pruning to every selected weight of a ``tf.compat.v1`` graph.

    Call it after building the model and before building the optimizer (so
    gradients flow through the masks and pruned weights get zero gradients),
    then run the update after every training step (:class:`~sparsify_tf.PruningHook`,
    :meth:`GraphPruning.wrap_train_op`, or :meth:`GraphPruning.build_update_op`
    by hand). When masks change, the update also zeroes the pruned entries of
    the optimizer slots (Momentum, Adam, RMSProp...), so pruned weights stay
    exactly zero through training. A second call for the same graph and
    ``ks_group`` returns the same handles and creates nothing.

    Args:
        config: a ``PruningConfig``, dict or YAML path. ``op_names`` /
            ``excluded_op_names`` select weights by variable name (``re.search``).
            Criteria scored from weights and input activations work (``"magnitude"``,
            ``"wanda"``, registered ones); per-step gradient criteria (``"snip"``,
            ``"snip_momentum"``) are refused, and so is ``pruned_gradient="straight_through"``
            (pruned weights get no gradient here). Activation criteria and ``regrowth="rigl"``
            read the pruned ops' inputs and dense gradients in their gradients
            (:mod:`sparsify_tf.graph.statistics`): build the optimizer after this call.
        graph: the graph (default: the default graph).
        global_step: scalar integer variable/tensor (default: the graph's global
            step, created if missing).
        ks_group: name of the scopes and collections of this pruning.
        masking: where the zeros live between mask updates. ``"weights"``
            (default): the ops read the weights themselves; each mask update
            writes the zeros into the weights (and optimizer slots) and the
            gradients through the pruned ops are multiplied by the masks, so
            pruned weights stay exactly zero at one elementwise pass per
            step. ``"inputs"``: the seed design, the ops read ``mask * weight``
            (the forward pass is masked whatever writes the weights, at two
            passes per step). ``"weights"`` needs the gradients to be built
            after ``prune_graph``.

    Returns:
        :class:`GraphPruning` with ``update_op``, ``masks``, ``sparsity`` and more.

    Raises:
        ValueError/TypeError: bad config, finalized graph, bad global step,
            nothing selected, a weight that does not fit the pattern, an
            unknown ``masking``, gradients already built for a pruned op with
            ``masking="weights"`` (or with an activation criterion or RigL), a pruned
            op whose input channels an activation criterion cannot read (grouped
            transposed convolution, unknown rank) — all before the graph is changed.

    Example:
            pruning = prune_graph(PruningConfig(target_sparsity=0.8, end_step=1000))
            train_op = opt.minimize(loss, global_step=tf1.train.get_or_create_global_step())
            with tf1.train.MonitoredTrainingSession(hooks=[pruning.hook()]) as sess: ...
    """
    cfg = PruningConfig.coerce(config)
    graph = check_arguments(cfg, graph, masking)
    ks_group = check_ks_group(ks_group)
    cached = _PRUNINGS.get(graph, {}).get(ks_group)
    if cached is not None:
        if cached.config != cfg or cached.masking != masking:
            what = "config" if cached.config != cfg else f"masking ({cached.masking!r})"
            raise ValueError(f"ks_group {ks_group!r} of this graph was already pruned with another {what}; "
                             "use a different ks_group")
        return cached
    check_free_to_prune(graph, cfg, ks_group, global_step)
    selection = select_layers(graph, cfg)
    check_gradients_not_built(selection, cfg, masking)
    warn_unmaskable(graph, cfg)
    rows = _summary_rows(graph, selection)
    with graph.as_default():
        pruning = _build(cfg, graph, global_step, ks_group, masking, selection)
    pruning._summary_rows = rows
    _PRUNINGS.setdefault(graph, {})[ks_group] = pruning
    return pruning


def _summary_rows(graph: tf.Graph, selection: Selection) -> list:
    """Per trainable variable of rank 2+ (creation order): ``(name, op type, shape)`` for a candidate weight of a
    prunable op (the config decides), else a skipped :class:`SummaryRow` (:meth:`GraphPruning.summary`)."""
    op_type: dict[str, str] = {}
    for p in selection.candidates:
        op_type.setdefault(p.var_name, p.op.type)
    unmaskable = unmaskable_weight_uses(graph)
    rows: list = []
    seen: set[str] = set()
    for v in graph.get_collection(tf1.GraphKeys.TRAINABLE_VARIABLES):
        name = v.op.name
        shape = v.shape.as_list() if v.shape.rank is not None else []
        if name in seen or len(shape) < 2 or any(d is None for d in shape):
            continue
        seen.add(name)
        if name in selection.shapes:
            rows.append((name, op_type.get(name, "Variable"), tuple(shape)))
        elif name in unmaskable:
            rows.append(SummaryRow(name, "Variable", shape, selected=False,
                                   reason=f"graph mode cannot mask it: {unmaskable[name]}"))
        else:
            rows.append(SummaryRow(name, "Variable", shape, selected=False, reason=UNSUPPORTED))
    return rows


def _build(cfg: PruningConfig, graph: tf.Graph, global_step: Any, ks_group: str, masking: str,
           selection: Selection) -> GraphPruning:
    """Add the pruning's variables and ops to the (default) graph; its handles."""
    names = selection.names
    gs = global_step if global_step is not None else tf1.train.get_or_create_global_step(graph)
    check_global_step(gs, graph)
    state = add_state_variables(ks_group, selection.protocol)
    sparsity, schedule_sparsity = _schedule_ops(selection, ks_group, gs)
    op_vars, first = add_masks(selection, masking, ks_group)
    masks = {n: first[n].mask for n in names}
    # Wanda's input statistics and RigL's dense gradients, kept by the gradients of the pruned ops
    collectors = add_collectors(selection.pruned, selection.shapes, ks_group, **collected(cfg))
    weights = {n: get_tensor_var(graph, n) for n in names}
    stored = add_stored_values(ks_group, weights)
    core_errors: dict = {}
    host = _host_function(selection, collectors, ks_group, core_errors)

    def build_update(slots: Mapping[str, Sequence[tf.Variable]]) -> tuple[tf.Tensor, Any]:
        layers = [GuardedLayer(weights[n], masks[n], stored[n], slots.get(n, ()), _summed_grad(collectors, n),
                               selection.kinds[n]) for n in names]
        return _guarded_update(host, layers, state, _statistics(collectors, names), collectors, gs, ks_group)

    initial_slots = find_optimizer_slots(graph, masks)
    update_ready, update_op = build_update(initial_slots)
    for key, value in ((PruningScope.OP_COND_UPDATE, update_op), (PruningScope.OP_UPDATE_READY, update_ready),
                       (PruningScope.OP_SPARSITY, sparsity)):
        tf1.add_to_collection(PruningScope.collection_name(ks_group, key), value)
    layer_sparsity, total = _sparsity_ops(masks, ks_group)
    return GraphPruning(cfg, selection.protocol, graph, ks_group, gs, update_op, update_ready, sparsity,
                        schedule_sparsity, state.done, masks, weights, {n: first[n].masked for n in names},
                        {n: selection.kinds[n] for n in names}, op_vars, layer_sparsity, total,
                        slots=initial_slots, masking=masking, next_update_step=state.next_due,
                        config_fingerprint=state.fingerprint, stored=stored, core_errors=core_errors,
                        update_builder=lambda slots: build_update(slots)[1],
                        built_updates={slots_key(initial_slots): update_op}, collectors=collectors)


def _schedule_ops(selection: Selection, ks_group: str, gs: Any) -> tuple[tf.Tensor, tf.Tensor]:
    """The target sparsity of the latest update point and the schedule's sparsity, at the global step."""
    with tf1.name_scope(PruningScope.general(ks_group, PruningScope.OPS_SCHEDULE, trailing_slash=True)):
        t = schedule_tensors(selection.protocol.engine.schedule, global_step_tensor(gs))
    with tf1.name_scope(PruningScope.general(ks_group, trailing_slash=True)):
        return (tf.identity(t["target_sparsity"], name=PruningScope.OP_SPARSITY),
                tf.identity(t["sparsity"], name="nm_schedule_sparsity"))


def _host_function(selection: Selection, collectors: Collectors, ks_group: str, core_errors: dict) -> Callable:
    """The update's ``numpy_function`` body: the core (canonical arrays in), with the activation norms
    from the statistics that follow the arrays (the sums of squares, then the call counts)."""
    names, cfg = selection.names, selection.protocol.config
    core_fn = core_update_fn(selection.protocol, ks_group, core_errors)
    n_acts = 2 * len(collectors.sums)
    shapes, groups = [selection.shapes[n] for n in names], [collectors.groups.get(n, 1) for n in names]

    def norms(sums: Sequence[np.ndarray], calls: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        return activation_window(names, shapes, groups, sums, calls, cfg.criterion).read()

    def host(step, done_step, fp, *arrays):
        arrays, acts = arrays[:len(arrays) - n_acts], arrays[len(arrays) - n_acts:]
        extra = {"activations": lambda: norms(acts[:n_acts // 2], acts[n_acts // 2:])} if n_acts else {}
        return core_fn(step, done_step, fp, *arrays, **extra)

    return host


def _summed_grad(collectors: Collectors, name: str) -> Callable[[], tf.Tensor] | None:
    """The dense gradient RigL reads (the sum over the ops reading the weight), or None."""
    grads = collectors.op_grads.get(name)
    return None if grads is None else (lambda: tf.add_n([g.read_value() for g in grads]))


def _statistics(collectors: Collectors, names: Sequence[str]) -> list[tf.Variable]:
    """The statistics the host function reads after the arrays: the sums of squares, then the call counts,
    each in the core's layer order."""
    return [*(collectors.sums[n] for n in names if n in collectors.sums),
            *(collectors.calls[n] for n in names if n in collectors.calls)]


def _guarded_update(host: Callable, layers: Sequence[GuardedLayer], state: StateVariables,
                    statistics: Sequence[tf.Variable], collectors: Collectors, gs: Any,
                    ks_group: str) -> tuple[tf.Tensor, Any]:
    """The update op (:func:`~sparsify_tf.common.guarded_update.build_guarded_update`) and its guard.

    One comparison per step: the protocol's next due step (update point or release) is kept in a variable
    next to the done step; the core re-checks when the branch runs. The statistics wait for a training step:
    none since the last update (or no gradient kept yet for RigL) leaves the update for the next step. That
    is the core's wait-for-data rule (:meth:`sparsify.activation_stats.ActivationWindow.waiting`: no weight
    had a call), evaluated here in the graph because it is the conditional's predicate.
    """
    with tf1.name_scope(PruningScope.general(ks_group, PruningScope.OPS_UPDATE, trailing_slash=True)):
        step = global_step_tensor(gs)
        waits = []
        if collectors.calls:
            waits.append(tf.greater(tf.add_n([c.read_value() for c in collectors.calls.values()]), 0))
        if collectors.grads_seen is not None:
            waits.append(tf.greater(collectors.grads_seen.read_value(), 0))
        ready = None if not waits else waits[0] if len(waits) == 1 else tf.logical_and(*waits)
        guard = GuardVariables(step, state.done, state.next_due, state.fingerprint, statistics)
        return build_guarded_update(host, layers, guard, ready=ready, cond=v1_cond, name=PruningScope.OP_COND_UPDATE)


def _sparsity_ops(masks: Mapping[str, tf.Variable], ks_group: str) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    """Each mask's fraction of zeros, and the fraction over all masks (float64)."""
    with tf1.name_scope(PruningScope.general(ks_group, PruningScope.OPS_SPARSITY, trailing_slash=True)):
        layer_sparsity = {n: tf.math.zero_fraction(m) for n, m in masks.items()}
        size = sum(int(np.prod(m.shape.as_list())) for m in masks.values())
        kept = tf.add_n([tf.math.count_nonzero(m, dtype=tf.int64) for m in masks.values()])
        return layer_sparsity, 1.0 - tf.cast(kept, tf.float64) / float(size)
