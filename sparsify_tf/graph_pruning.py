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
see :mod:`sparsify_tf.optimizer_slots`), so with a zero gradient through the
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

import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from sparsify.config import PruningConfig
from sparsify.criteria import get_criterion
from sparsify.engine import PruningEngine, select_names
from sparsify.layout import tf_to_canonical
from sparsify.protocol import PruningProtocol, config_fingerprint

from .core_update import NEVER, core_update_fn
from .graph_pruning_handles import GraphPruningHandles, slots_key
from .graph_statistics import activation_norms, add_collectors, check_input_channels
from .graph_utils import (
    check_global_step, check_graph_editable, get_prunable_ops_and_inputs, get_tensor_var, global_step_tensor,
    in_variable_creation_order, unmaskable_weight_uses, v1_cond,
)
from .layout_ops import from_canonical, to_canonical
from .mask_write import dense_value, write_update
from .masking import GraphMasks, PruningOpVars, gradient_ops_of, mask_op_gradient, mask_op_input
from .optimizer_slots import find_optimizer_slots
from .pruning_hook import PruningHook
from .pruning_scope import PruningScope, check_ks_group
from .schedule_ops import schedule_tensors

__all__ = ["prune_graph", "GraphPruning", "MASKING_MODES"]

tf1 = tf.compat.v1

#: ``masking`` values of :func:`prune_graph`: where the zeros live between mask updates.
MASKING_MODES = ("weights", "inputs")

_PRUNINGS: "weakref.WeakKeyDictionary[tf.Graph, dict[str, GraphPruning]]" = weakref.WeakKeyDictionary()


@dataclass(eq=False)
class GraphPruning(GraphPruningHandles):
    """Handles returned by :func:`prune_graph` (see :class:`~sparsify_tf.graph_pruning_handles.GraphPruningHandles`
    for the attributes), plus :meth:`hook`."""

    def hook(self, run_at_start: bool = True) -> PruningHook:
        """A :class:`~sparsify_tf.PruningHook` running the update (zeroing optimizer slots too) after each step."""
        return PruningHook(self, run_at_start=run_at_start)


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
            ``"snip_momentum"``) are refused, as is ``pruned_gradient="straight_through"``
            (and SR-STE's ``pruned_decay``). Activation criteria and ``regrowth="rigl"``
            read the pruned ops' inputs and dense gradients in their gradients
            (:mod:`sparsify_tf.graph_statistics`): build the optimizer after this call.
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
    missing = sorted(set(get_criterion(cfg.criterion).needs) - {"weight", "activation"})
    if missing:
        raise ValueError(f"criterion {cfg.criterion!r} needs {missing}, which graph-mode pruning does not collect "
                         "(criteria scored from each step's gradients or a running state); use a criterion that "
                         "needs only 'weight' and 'activation' (magnitude, wanda)")
    if cfg.pruned_gradient != "none":
        raise ValueError(f"pruned_gradient={cfg.pruned_gradient!r} (pruned_decay={cfg.pruned_decay!r}) is not supported "
                         "in TF graph mode (pruned weights get no gradient there); use Keras 3 (sparsify_keras) or "
                         "PyTorch, or leave pruned_gradient='none'")
    needs = PruningEngine(cfg).needs
    if masking not in MASKING_MODES:
        raise ValueError(f"masking must be one of {MASKING_MODES}, got {masking!r}")
    if graph is None:
        graph = tf1.get_default_graph()
    if not isinstance(graph, tf.Graph):
        raise TypeError(f"graph must be a tf.Graph, got {graph!r}")
    ks_group = check_ks_group(ks_group)
    cached = _PRUNINGS.get(graph, {}).get(ks_group)
    if cached is not None:
        if cached.config != cfg or cached.masking != masking:
            what = "config" if cached.config != cfg else f"masking ({cached.masking!r})"
            raise ValueError(f"ks_group {ks_group!r} of this graph was already pruned with another {what}; "
                             "use a different ks_group")
        return cached
    check_graph_editable(graph)
    if global_step is not None:
        check_global_step(global_step, graph)
    else:
        existing = tf1.train.get_global_step(graph)
        if existing is not None:
            check_global_step(existing, graph)
    # ops pruned under another ks_group read their weight through our marked ops: not candidates any more
    owners = {n: g for (g, n) in GraphMasks.of(graph).masks if g != ks_group}
    taken = {n: owners[n] for n in select_names(owners, cfg.op_names, cfg.excluded_op_names)}
    if taken:
        raise ValueError(f"weights already pruned under another ks_group of this graph: "
                         f"{', '.join(f'{n!r} ({g!r})' for n, g in sorted(taken.items()))}; a weight can be pruned "
                         "by one ks_group only: leave them out with excluded_op_names, or use that ks_group")
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
    ordered = in_variable_creation_order(graph, list(shapes))
    protocol = PruningProtocol(cfg, {n: shapes[n] for n in ordered})
    names = list(protocol.names)
    for n in names:
        get_tensor_var(graph, n)
    chosen = set(names)
    pruned = [p for p in candidates if p.var_name in chosen]
    collect = {"activations": "activation" in needs, "grads": "grad" in needs}
    if collect["activations"]:
        check_input_channels(pruned, names, cfg.criterion)
    if masking == "weights" or any(collect.values()):
        built = [op for p in pruned for op in gradient_ops_of(p.op, p.tensor)]
        if built:
            why = ("masking='weights' masks the gradients of the pruned ops" if masking == "weights" else
                   f"criterion={cfg.criterion!r} with regrowth={cfg.regrowth!r} reads the pruned ops' inputs or "
                   "gradients in their gradient")
            raise ValueError(f"{why}, but gradient ops reading their weights exist already ({built[:3]}): call "
                             "prune_graph before building the optimizer"
                             + (" (recommended), or pass masking='inputs'" if masking == "weights" else ""))
    schedule = protocol.engine.schedule
    left_dense = unmaskable_weight_uses(graph)
    left_dense = {n: left_dense[n] for n in select_names(left_dense, cfg.op_names, cfg.excluded_op_names)}
    if left_dense:
        warnings.warn("prune_graph leaves these weights matched by op_names dense, because graph mode cannot "
                      "mask them: " + "; ".join(f"{n!r}: {why}" for n, why in left_dense.items())
                      + ". Exclude them with excluded_op_names to silence this", stacklevel=2)

    with graph.as_default():
        gs = global_step if global_step is not None else tf1.train.get_or_create_global_step(graph)
        check_global_step(gs, graph)
        with tf1.variable_scope(PruningScope.general(ks_group)):
            done = tf1.get_variable("nm_last_update_step", [], tf.int64, initializer=tf1.constant_initializer(-1),
                                    trainable=False, use_resource=True)
            # protocol.next_step() for that done step (written with it; int64 max: never): the per-step guard
            first_due = protocol.next_step()
            next_due = tf1.get_variable("nm_next_update_step", [], tf.int64, trainable=False, use_resource=True,
                                        initializer=tf1.constant_initializer(NEVER if first_due < 0 else first_due))
            fp = config_fingerprint(cfg)
            fingerprint = tf1.get_variable("nm_config_fingerprint", fp.shape, tf.int64, trainable=False,
                                           use_resource=True, initializer=tf1.constant_initializer(fp))
        with tf1.name_scope(PruningScope.general(ks_group, PruningScope.OPS_SCHEDULE, trailing_slash=True)):
            t = schedule_tensors(schedule, global_step_tensor(gs))
        with tf1.name_scope(PruningScope.general(ks_group, trailing_slash=True)):
            sparsity = tf.identity(t["target_sparsity"], name=PruningScope.OP_SPARSITY)
            schedule_sparsity = tf.identity(t["sparsity"], name="nm_schedule_sparsity")

        op_vars: list[PruningOpVars] = []
        first: dict[str, PruningOpVars] = {}
        for p in candidates:
            if p.var_name in chosen:
                ov = (mask_op_gradient if masking == "weights" else mask_op_input)(p.op, p.tensor, ks_group)
                first.setdefault(p.var_name, ov)
                op_vars.append(ov)
        masks = {n: first[n].mask for n in names}
        # Wanda's input statistics and RigL's dense gradients, kept by the gradients of the pruned ops
        collectors = add_collectors(pruned, shapes, ks_group, **collect)
        n_acts = 2 * len(collectors.sums)           # the sums of squares, then the call counts
        masked = {n: first[n].masked for n in names}
        weights = {n: get_tensor_var(graph, n) for n in names}
        with tf1.variable_scope(PruningScope.general(ks_group)):
            # the pruned entries' values (0 where kept): the weights stay dense under the masks for the core
            stored = {n: tf1.get_variable(f"nm_stored/{n}", weights[n].shape, weights[n].dtype.base_dtype,
                                          initializer=tf1.zeros_initializer(), trainable=False, use_resource=True)
                      for n in names}
        layer_kinds = {n: kinds[n] for n in names}
        core_errors: dict = {}
        core_fn = core_update_fn(protocol, ks_group, core_errors)

        def np_fn(step, done_step, fp, *arrays):
            arrays, acts = arrays[:len(arrays) - n_acts], arrays[len(arrays) - n_acts:]
            extra = {"activations": lambda: _norms(acts[:n_acts // 2], acts[n_acts // 2:])} if n_acts else {}
            return core_fn(step, done_step, fp, *arrays, **extra)

        def _norms(sums, calls):
            unseen = [n for n, c in zip(names, calls) if int(c) == 0]
            if unseen:
                raise ValueError(f"criterion {cfg.criterion!r} needs the inputs of every pruned weight, but the ops "
                                 f"of {unseen} computed no gradient since the last update (not trained)")
            return dict(zip(names, activation_norms(sums, [shapes[n] for n in names],
                                                    [collectors.groups[n] for n in names])))
        scope = PruningScope.general(ks_group, PruningScope.OPS_UPDATE, trailing_slash=True)

        def _build_update(slots: Mapping[str, Sequence[tf.Variable]]) -> tuple[tf.Tensor, tf.Operation]:
            with tf1.name_scope(scope):
                step = global_step_tensor(gs)
                # one comparison per step: the protocol's next due step (update point or release) is kept
                # in a variable next to the done step; the core re-checks when the branch runs
                ready = tf.greater_equal(step, next_due.read_value())
                # the statistics wait for a training step: none since the last update (or no gradient
                # kept yet for RigL) leaves the update for the next step
                if collectors.calls:
                    calls = tf.add_n([c.read_value() for c in collectors.calls.values()])
                    ready = tf.logical_and(ready, tf.greater(calls, 0))
                if collectors.grads_seen is not None:
                    ready = tf.logical_and(ready, tf.greater(collectors.grads_seen.read_value(), 0))

                def _update():
                    reads = [dense_value(weights[n], stored[n]) for n in names]
                    canon_w = [to_canonical(r, layer_kinds[n]) for n, r in zip(names, reads)]
                    # masks travel as 0/1 in their own float dtype: oneDNN logs an error line whenever a
                    # bool or integer tensor is transposed
                    canon_m = [to_canonical(masks[n].read_value(), layer_kinds[n]) for n in names]
                    canon_g = [to_canonical(tf.add_n([g.read_value() for g in collectors.op_grads[n]]),
                                            layer_kinds[n]) for n in names if n in collectors.op_grads]
                    stats = [*(collectors.sums[n].read_value() for n in names if n in collectors.sums),
                             *(collectors.calls[n].read_value() for n in names if n in collectors.calls)]
                    done_before = done.read_value()
                    inputs = [step, done_before, fingerprint.read_value(), *canon_w, *canon_m, *canon_g, *stats]
                    outs = tf.numpy_function(np_fn, inputs,
                                             [m.dtype for m in canon_m] * 2 + [tf.int64, tf.int64], stateful=False,
                                             name="nm_core_masks")
                    k = len(names)
                    assigns = []
                    for i, (n, r) in enumerate(zip(names, reads)):
                        outs[i].set_shape(canon_m[i].shape)
                        outs[k + i].set_shape(canon_m[i].shape)
                        # the new mask; the weight keeps its value where kept now (the rest moves to the
                        # stored values); optimizer state only where kept throughout (sparsify_tf.mask_write)
                        keep = from_canonical(outs[i], layer_kinds[n], r.shape)
                        keep_now = from_canonical(outs[k + i], layer_kinds[n], r.shape)
                        assigns.extend(write_update(weights[n], masks[n], keep, keep_now, stored=stored[n],
                                                    slots=slots.get(n, ()), dense=r))
                    for out, var in ((outs[-2], done), (outs[-1], next_due)):
                        out.set_shape([])
                        assigns.append(tf1.assign(var, out))
                    updated = tf.not_equal(outs[-2], done_before)           # an update: a new window
                    for var in [*collectors.sums.values(), *collectors.calls.values()]:
                        assigns.append(var.assign(tf.where(updated, tf.zeros_like(var), var.read_value()),
                                                  read_value=False))
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

    pruning = GraphPruning(cfg, protocol, graph, ks_group, gs, update_op, update_ready, sparsity, schedule_sparsity,
                           done, masks, weights, masked, layer_kinds, op_vars, layer_sparsity, total,
                           slots=initial_slots, masking=masking, next_update_step=next_due,
                           config_fingerprint=fingerprint, stored=stored, core_errors=core_errors,
                           update_builder=lambda slots: _build_update(slots)[1],
                           built_updates={slots_key(initial_slots): update_op}, collectors=collectors)
    _PRUNINGS.setdefault(graph, {})[ks_group] = pruning
    return pruning
