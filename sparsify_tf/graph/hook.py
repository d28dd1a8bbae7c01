"""A ``SessionRunHook`` that runs the pruning update of :func:`~sparsify_tf.prune_graph`.

For ``MonitoredTrainingSession`` and Estimator users. The hook builds its update
op in ``begin()`` (after the optimizer exists, before the session finalizes
the graph) with :meth:`GraphPruning.build_update_op`, so the update also zeroes
the optimizer slots of pruned weights. It fetches the global step with each
training run and asks the core :class:`sparsify.PruningProtocol` (its
``next_step()``, kept in sync with the graph's done step) whether an update or
the release may be due; only then does it spend an extra ``session.run``.

Example:
        pruning = sparsify_tf.prune_graph(config)
        train_op = opt.minimize(loss, global_step=pruning.global_step)
        with tf1.train.MonitoredTrainingSession(hooks=[PruningHook(pruning)]) as sess:
            while not sess.should_stop(): sess.run(train_op)
"""
from __future__ import annotations

import warnings
from typing import Any

import tensorflow as tf

from sparsify.protocol import PruningProtocol
from sparsify.target_check import warn_if_unreached

from .handles import GraphPruningHandles

__all__ = ["PruningHook"]

tf1 = tf.compat.v1


class PruningHook(tf1.train.SessionRunHook):
    """Runs the pruning update after training steps (MonitoredTrainingSession, Estimator).

    Given a :class:`~sparsify_tf.GraphPruning`, the update runs only when the
    core protocol says an update point (or the release) may have passed since
    the graph's last done step, so most steps cost no extra ``session.run``;
    given a bare update op, the hook runs it after every step.

    Args:
        pruning: a :class:`~sparsify_tf.GraphPruning` or an update op.
        run_at_start: also run the update once when the session is created
            (applies a ``start_step`` of 0, and one-shot pruning, before training).

    Example:
            with tf1.train.MonitoredTrainingSession(hooks=[PruningHook(pruning)]) as sess:
                while not sess.should_stop(): sess.run(train_op)
    """

    def __init__(self, pruning: GraphPruningHandles | tf.Operation, run_at_start: bool = True) -> None:
        if isinstance(pruning, GraphPruningHandles):
            self._pruning: GraphPruningHandles | None = pruning
            self._update = pruning.update_op
            # the hook's own copy of the protocol: it only follows the done step to know the next due step
            self._protocol: PruningProtocol | None = PruningProtocol(pruning.config, pruning.protocol.shapes)
        elif isinstance(pruning, (tf.Operation, tf.Tensor)):
            self._pruning = None
            self._update = pruning
            self._protocol = None
        else:
            raise TypeError(f"pruning must be a GraphPruning (from prune_graph) or an update op, got {pruning!r}")
        if not isinstance(run_at_start, bool):
            raise TypeError(f"run_at_start must be True or False, got {run_at_start!r}")
        self._run_at_start = run_at_start
        self._next = 0
        self._done_after_update: tf.Tensor | None = None

    @property
    def update_op(self) -> tf.Operation | tf.Tensor:
        """The update op (set in ``begin()`` when given a :class:`~sparsify_tf.GraphPruning`)."""
        return self._update

    @property
    def update_fetch(self) -> tf.Operation | tf.Tensor:
        """What the hook runs when an update may be due: the done step read after the update
        (built in ``begin()``), else ``update_op`` itself."""
        return self._update if self._done_after_update is None else self._done_after_update

    @property
    def next_step(self) -> int:
        """The first step at which the protocol has something due (-1: nothing ever again)."""
        return self._next

    def begin(self) -> None:
        pr = self._pruning
        if pr is None:
            return
        if not pr.graph.finalized:
            self._update = pr.build_update_op()
            with pr.graph.as_default(), tf.control_dependencies([self._update]):
                self._done_after_update = tf.identity(pr.last_update_step.read_value(),
                                                      name="nm_done_step_after_update")
            return
        existing = pr.existing_update_op()
        if existing is not None:
            self._update = existing
        else:
            slots = pr.optimizer_slots()
            warnings.warn("PruningHook.begin() ran on a finalized graph: the optimizer slots of pruned weights "
                          f"{ {n: [v.op.name for v in vs] for n, vs in slots.items() if vs} } are not zeroed; "
                          "create the session after the optimizer (or call pruning.build_update_op() "
                          "before finalizing)", stacklevel=2)

    def _run_update(self, session: tf1.Session) -> None:
        if self._pruning is None:
            session.run(self._update)
        elif self._done_after_update is not None:
            self._follow(int(self._pruning.run_update(session, self._done_after_update)))
        else:
            self._pruning.run_update(session, self._update)
            self._follow(int(session.run(self._pruning.last_update_step)))

    def _follow(self, done_step: int) -> None:
        """Set the protocol's done step to the graph's and ask it for the next due step."""
        self._protocol.restore(done_step, self._protocol.masks)
        self._next = self._protocol.next_step()

    def after_create_session(self, session: tf1.Session, coord: Any) -> None:
        if self._pruning is not None:
            self._pruning.check_state(session)     # a checkpoint of another config: refused before training
        if self._run_at_start:
            self._run_update(session)
        elif self._pruning is not None:
            self._follow(int(session.run(self._pruning.last_update_step)))

    def before_run(self, run_context: tf1.train.SessionRunContext) -> Any:
        if self._pruning is None:
            return None
        return tf1.train.SessionRunArgs(self._pruning.global_step)

    def after_run(self, run_context: tf1.train.SessionRunContext, run_values: tf1.train.SessionRunValues) -> None:
        if self._pruning is None:
            run_context.session.run(self._update)
            return
        # The step was read in the same run as the train op, before or after its increment: look one
        # step ahead. The update op re-checks in the graph, so an early call changes nothing.
        if self._next >= 0 and int(run_values.results) + 1 >= self._next:
            self._run_update(run_context.session)

    def end(self, session: tf1.Session) -> None:
        """At the session's end, warn once if training stopped before the schedule reached its target
        (:class:`sparsify.target_check.TargetNotReachedWarning`)."""
        if self._pruning is None:
            return
        pr = self._pruning
        step, done, held = session.run([pr.global_step, pr.last_update_step, pr.total_sparsity])
        self._follow(int(done))
        warn_if_unreached(self._protocol, int(step), where="PruningHook", sparsity=float(held), stacklevel=2)
