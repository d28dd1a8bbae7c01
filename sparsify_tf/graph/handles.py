"""The handles :func:`~sparsify_tf.prune_graph` returns: :class:`GraphPruningHandles`.

The masks, weights, update op and sparsity tensors of one pruned graph, and
what a session does with them: run the update (:meth:`~GraphPruningHandles.run_update`),
build it again once an optimizer exists (:meth:`~GraphPruningHandles.build_update_op`,
:meth:`~GraphPruningHandles.wrap_train_op`), check a restored state, read or bake
the masks, export. :class:`sparsify_tf.GraphPruning` adds the hook.

Example:
    >>> import tensorflow as tf
    >>> from sparsify_tf import prune_graph
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     w = tf.compat.v1.get_variable("fc/kernel", [4, 4])
    ...     y = tf.matmul(tf.ones([1, 4]), w)
    ...     pruning = prune_graph({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    >>> isinstance(pruning, GraphPruningHandles), pruning.layer_names
    (True, ['fc/kernel'])
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from sparsify.config import PruningConfig
from sparsify.engine import PruningEngine
from sparsify.layout import tf_to_canonical
from sparsify.protocol import PruningProtocol, fingerprint_differences

from ..common.core_errors import raise_core_errors_from_session_runs
from ..common.guarded_update import config_mismatch_message
from ..common.export import export_frozen_graph, export_saved_model
from .statistics import Collectors
from ..common.graph_utils import check_graph_editable
from ..common.masking import PruningOpVars, bake_masks, sparsity_summaries
from ..common.optimizer_slots import find_optimizer_slots, unknown_apply_ops

__all__ = ["GraphPruningHandles", "slots_key"]

tf1 = tf.compat.v1


@dataclass(eq=False)
class GraphPruningHandles:
    """What :func:`~sparsify_tf.prune_graph` built, and the session-side operations on it.

    The base of :class:`~sparsify_tf.GraphPruning` (which adds :meth:`~sparsify_tf.GraphPruning.hook`);
    :class:`~sparsify_tf.PruningHook` accepts any of these.

    Attributes:
        config: the validated config.
        protocol: the core :class:`sparsify.PruningProtocol` the update advances
            (restored from the graph's variables at each update; ``protocol.names``
            are the pruned layers in the order handed to the core).
        graph, ks_group, global_step: where the ops live.
        update_op: run after each training step (a no-op unless an update point
            was passed since the last update, or the release is due; never loses an update
            when steps are skipped). It zeroes the slots of optimizers that existed when
            :func:`prune_graph` ran (``slots``); :meth:`build_update_op`, :meth:`wrap_train_op`
            and :meth:`hook` also cover optimizers built later.
        update_ready: bool tensor, True when ``update_op`` will call the core.
        sparsity: float64 tensor, the target sparsity of the latest update point
            (``engine.target_sparsity(global_step)``).
        schedule_sparsity: float64 tensor, ``schedule.sparsity(global_step)``.
        last_update_step: int64 variable, the protocol's done step (-1: none).
        masks, weights: layer name (the weight variable's name) -> mask / weight variable.
        masked: layer name -> masked weight tensor (what the ops read).
        kinds: layer name -> layout kind (``"dense"``, ``"conv"``, ...).
        op_vars: ``PruningOpVars`` of every pruned op (shared weights share masks).
        layer_sparsity: layer name -> float tensor, fraction of zeros of its mask.
        total_sparsity: float64 tensor, fraction of zeros over all masks.
        slots: layer name -> optimizer slot variables zeroed by ``update_op`` where the mask is 0.
        masking: ``"weights"`` (ops read the weights, gradients masked) or ``"inputs"`` (ops read
            ``mask * weight``), see :func:`prune_graph`.
        next_update_step: int64 variable, the first step at which the protocol has something due
            after ``last_update_step`` (int64 max: nothing ever again); ``update_ready`` is
            ``global_step >= next_update_step``. Saved and restored with ``last_update_step``.
        config_fingerprint: int64 variable, :func:`sparsify.config_fingerprint` of ``config``; saved
            with the masks, so resuming a checkpoint of another config is refused naming the keys
            that differ (:meth:`check_state`, and the update itself).
        core_errors: where the update's host function leaves the core's error (read by :meth:`run_update`).
        update_builder: builds an update op for a set of optimizer slots (used by :meth:`build_update_op`).
        stored: layer name -> variable holding the pruned entries' values (0 where kept): the core ranks
            ``weight + stored``, so with ``monotone=False`` a pruned weight can come back by its value.
        built_updates: the update ops built so far, keyed by :func:`slots_key` of their slots.
        collectors: the variables of the input statistics (criteria that read activations, e.g.
            ``"wanda"``) and of the dense gradients (``regrowth="rigl"``), see :mod:`sparsify_tf.graph.statistics`.
    """

    config: PruningConfig
    protocol: PruningProtocol
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
    masking: str = "weights"
    next_update_step: tf.Variable | None = None
    config_fingerprint: tf.Variable | None = None
    stored: dict[str, tf.Variable] = field(default_factory=dict)
    core_errors: dict = field(repr=False, default_factory=dict)
    update_builder: Callable[..., tf.Operation] = field(repr=False, default=None)
    built_updates: dict = field(repr=False, default_factory=dict)
    collectors: Collectors = field(repr=False, default_factory=Collectors)

    def __post_init__(self) -> None:
        # a refused update raises the core's one-line error from any tf.compat.v1 session run of the graph
        raise_core_errors_from_session_runs(self.graph, self.core_errors)

    @property
    def engine(self) -> PruningEngine:
        """The core engine of the config (schedule, pattern): ``protocol.engine``."""
        return self.protocol.engine

    @property
    def layer_names(self) -> list[str]:
        """Pruned layer (weight variable) names, in variable creation order."""
        return list(self.masks)

    def optimizer_slots(self) -> dict[str, list[tf.Variable]]:
        """The optimizer slots of each pruned weight in the graph now (see :mod:`sparsify_tf.common.optimizer_slots`)."""
        return find_optimizer_slots(self.graph, self.masks)

    def _current_slots(self) -> dict[str, list[tf.Variable]]:
        unknown = unknown_apply_ops(self.graph, self.masks)
        if unknown:
            after = ("the forward pass still reads weight * mask" if self.masking == "inputs" else
                     "and the forward pass reads the weights: use masking='inputs' to mask the forward pass")
            warnings.warn(f"optimizer apply ops {unknown} update pruned weights but their slot variables are "
                          "unknown to sparsify_tf; they are not zeroed, so pruned weights may drift from 0 "
                          f"between mask updates ({after})", stacklevel=3)
        return self.optimizer_slots()

    def existing_update_op(self) -> tf.Operation | None:
        """The update op already built for the optimizer slots in the graph now, or None (builds nothing)."""
        return self.built_updates.get(slots_key(self.optimizer_slots()))

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
        key = slots_key(slots)
        op = self.built_updates.get(key)
        if op is None:
            check_graph_editable(self.graph)
            with self.graph.as_default():
                op = self.update_builder(slots)
            self.built_updates[key] = op
        return op

    def wrap_train_op(self, train_op: tf.Operation | tf.Tensor) -> tf.Operation:
        """A train op that runs ``train_op`` and then the pruning update, in one ``sess.run``.

        The update also zeroes the pruned entries of the optimizer slots found in
        the graph now (build ``train_op`` first, as usual). Run it with ``sess.run(train_op,
        feed_dict)`` (or ``pruning.run_update(sess, train_op, feed_dict)``): an update the core
        refuses (NaN weights) raises the core's one-line ``ValueError`` naming the layer instead
        of TensorFlow's long ``InvalidArgumentError`` (see :mod:`sparsify_tf.common.core_errors`), and
        writes nothing.

        Example:
                train_op = pruning.wrap_train_op(opt.minimize(loss, global_step=gs))
        """
        check_graph_editable(self.graph)
        slots = self._current_slots()
        with self.graph.as_default(), tf.control_dependencies([train_op]):
            update = self.update_builder(slots)
        with self.graph.as_default():
            return tf.group(train_op, update, name="nm_train_and_prune")

    def check_state(self, sess: tf1.Session) -> None:
        """Refuse pruning variables saved with another config (call it after restoring a checkpoint).

        :class:`~sparsify_tf.PruningHook` calls it when the session is created; the
        update op refuses the same state too, with a longer TF error.

        Raises:
            ValueError: naming the config keys that differ from the saved ones.
        """
        diff = fingerprint_differences(self.config, sess.run(self.config_fingerprint))
        if diff:
            raise ValueError(config_mismatch_message(self.ks_group, diff))

    def run_update(self, sess: tf1.Session, fetch: Any = None, feed_dict: Any = None) -> Any:
        """``sess.run(fetch or update_op, feed_dict)``; an update refused by the core (NaN weights, another
        config) raises the core's short ``ValueError`` naming the layer or keys instead of TF's long error.
        ``fetch`` may be a :meth:`wrap_train_op` train op with its ``feed_dict``. The session stays
        usable: a refused update writes nothing. (A plain ``sess.run`` of the graph raises the same
        error, see :mod:`sparsify_tf.common.core_errors`.)"""
        self.core_errors.pop("error", None)
        try:
            return sess.run(self.update_op if fetch is None else fetch, feed_dict)
        except tf.errors.OpError:
            err = self.core_errors.pop("error", None)
            if err is None:
                raise
            raise err from None

    def summaries(self) -> list[tf.Tensor]:
        """TensorBoard scalars: one per pruned op with its sparsity."""
        return sparsity_summaries(self.op_vars)

    def apply_masks(self, sess: tf1.Session) -> None:
        """Bake the masks into the weight variables (``weight *= mask``)."""
        bake_masks(self.op_vars, self.ks_group, sess)

    def get_masks(self, sess: tf1.Session, canonical: bool = False) -> dict[str, np.ndarray]:
        """Current masks as bool arrays (TF layout, or the core's canonical layout)."""
        vals = sess.run(self.masks)
        if canonical:
            return {n: tf_to_canonical(v, self.kinds[n]) != 0 for n, v in vals.items()}
        return {n: v != 0 for n, v in vals.items()}

    def export_frozen_graph(self, sess: tf1.Session, outputs: Sequence[Any], path: Any = None) -> tf1.GraphDef:
        """See :func:`sparsify_tf.common.export.export_frozen_graph`."""
        return export_frozen_graph(sess, outputs, path)

    def export_saved_model(self, sess: tf1.Session, export_dir: Any, inputs: Mapping[str, tf.Tensor],
                           outputs: Mapping[str, tf.Tensor]) -> str:
        """See :func:`sparsify_tf.common.export.export_saved_model`."""
        return export_saved_model(sess, export_dir, inputs, outputs)


def slots_key(slots: Mapping[str, Sequence[tf.Variable]]) -> tuple:
    """A hashable key of ``{layer: slot variables}``: one update op is built per key."""
    return tuple((n, tuple(v.op.name for v in vs)) for n, vs in slots.items())
