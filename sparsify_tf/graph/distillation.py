"""Distillation while pruning a ``tf.compat.v1`` graph: the loss term and the teacher's snapshot.

The teacher in a graph is the user's frozen copy: the same network built a second time under another
variable scope with ``trainable=False`` variables (so no optimizer sees them), set to the student's values
when pruning begins, or restored from a trained dense checkpoint. "When pruning begins" (the teacher
``"dense_at_start"``) is the pruning schedule's ``start_step``: :func:`teacher_train_op` makes the train op
that, in the step reaching ``start_step``, assigns the student's variables to the teacher's after the
optimizer's update and before the mask update of that step (:meth:`GraphPruning.wrap_train_op`); with
``distillation_loss(..., teacher_step=start_step)`` the term is exactly 0 before. (With ``start_step=0``
run :func:`teacher_snapshot_op` once after the variables are initialised or restored.) The student is
pruned by :func:`sparsify_tf.prune_graph` as usual; :func:`distillation_loss` gives the term of
:class:`sparsify.DistillationConfig` to add to the task loss: ``w(global_step) * (logit_weight * KD +
feature_weight * mean MSE)``, the teacher's tensors behind ``tf.stop_gradient``. Its weight over steps is
the core's formula (:func:`sparsify.distillation.ramp_weight`) computed in the graph. With no ``weight`` or
``weight_schedule`` given, the ``"dense_at_start"`` teacher's weight fades: 1 at the pruning ``start_step``,
linearly to 0 at ``start_step + (end_step - start_step) // 2``, then 0; pass ``pruning=`` (the
:func:`sparsify_tf.prune_graph` result) so the term knows the window (and the step the teacher is taken at).

Example:
    >>> import tensorflow as tf
    >>> from sparsify import DistillationConfig
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     step = tf.compat.v1.train.get_or_create_global_step()
    ...     loss = distillation_loss(tf.constant([[0.0, 0.0]]), tf.constant([[0.0, 2.0]]),
    ...                              DistillationConfig(temperature=2.0, weight=1.0), step)
    ...     with tf.compat.v1.Session() as sess:
    ...         sess.run(tf.compat.v1.global_variables_initializer())
    ...         print(round(float(sess.run(loss)), 5))
    0.44378
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Mapping, Sequence

import tensorflow as tf

from sparsify.distillation import DistillationConfig, ramp_weight

__all__ = ["distillation_loss", "kd_loss", "weight_tensor", "teacher_snapshot_op", "teacher_train_op"]


def kd_loss(student_logits: Any, teacher_logits: Any, temperature: float) -> tf.Tensor:
    """``T**2 * mean_rows KL(softmax(t/T) || softmax(s/T))`` (rows: every leading position); no gradient
    reaches the teacher's logits."""
    s = tf.convert_to_tensor(student_logits)
    t = tf.cast(tf.stop_gradient(tf.convert_to_tensor(teacher_logits)), s.dtype)
    s.shape.assert_is_compatible_with(t.shape)
    log_q = tf.nn.log_softmax(s / temperature, axis=-1)
    log_p = tf.nn.log_softmax(t / temperature, axis=-1)
    kl = tf.reduce_sum(tf.exp(log_p) * (log_p - log_q), axis=-1)
    return tf.reduce_mean(kl) * (temperature * temperature)


#: :func:`sparsify.distillation.ramp_weight`'s operations in float64 graph ops.
_RAMP_OPS = SimpleNamespace(
    where=lambda c, x, y: tf.where(c, tf.cast(x, tf.float64), tf.cast(y, tf.float64)), less=tf.less,
    greater_equal=tf.greater_equal, clip=tf.clip_by_value, cos=tf.cos)


def weight_tensor(config: DistillationConfig, global_step: Any) -> tf.Tensor:
    """``w(global_step)`` as a float32 scalar tensor: the core's formula
    (:func:`sparsify.distillation.ramp_weight`) in float64 graph ops, then cast.

    Raises:
        ValueError: a ``"fade"`` whose pruning window is not filled in (``config.for_pruning``).
    """
    if config.weight_schedule == "constant":
        return tf.constant(config.weight, tf.float32)
    return tf.cast(ramp_weight(config, tf.cast(global_step, tf.float64), _RAMP_OPS), tf.float32)


def distillation_loss(student_logits: Any, teacher_logits: Any, config: DistillationConfig | Mapping[str, Any],
                      global_step: Any, student_features: Mapping[str, Any] | None = None,
                      teacher_features: Mapping[str, Any] | None = None, teacher_step: int | None = None,
                      pruning: Any = None) -> tf.Tensor:
    """The distillation term at ``global_step`` (a scalar float32 tensor) to add to the task loss.

    Args:
        student_logits, teacher_logits: logits of one shape, classes last.
        config: a :class:`sparsify.DistillationConfig` or its dict.
        global_step: the step tensor the pruning hook counts (``tf.compat.v1.train.get_global_step()``).
        student_features, teacher_features: tensors by the names of ``config.features``.
        teacher_step: the step the teacher is taken at (the pruning ``start_step`` of
            :func:`teacher_train_op`): the term is exactly 0 while ``global_step`` is below it; ``None``:
            the ``start_step`` of ``pruning`` for a ``"dense_at_start"`` teacher, else from step 0 (a teacher
            taken before training, or a trained one).
        pruning: the :func:`sparsify_tf.prune_graph` result pruning the student (its ``config``'s window):
            needed by the default ``"fade"`` weight, from 1 at its ``start_step`` to 0 at
            ``start_step + (end_step - start_step) // 2`` (:meth:`sparsify.DistillationConfig.for_pruning`).

    Raises:
        ValueError: a feature of ``config.features`` is missing from either mapping, or one is given
            that it does not name; ``teacher_step`` is not an integer >= 0; a ``"fade"`` weight without
            ``pruning`` or with a window it cannot fade over.
    """
    config = DistillationConfig.coerce(config)
    if teacher_step is not None and (isinstance(teacher_step, bool) or not isinstance(teacher_step, int)
                                     or teacher_step < 0):
        raise ValueError(f"teacher_step must be None or an integer >= 0, got {teacher_step!r}")
    window = getattr(pruning, "config", None)
    if pruning is not None and not (hasattr(window, "start_step") and hasattr(window, "end_step")):
        raise ValueError(f"pruning must be the result of sparsify_tf.prune_graph (its config gives the pruning "
                         f"window), got {type(pruning).__name__}")
    if config.weight_schedule == "fade" and pruning is None:
        raise ValueError("pruning: the distillation weight fades over the pruning window (the default of the "
                         "'dense_at_start' teacher): pass pruning= (the prune_graph result), or give the weight "
                         "(e.g. weight=1.0)")
    if pruning is not None:
        config = config.for_pruning(int(window.start_step), int(window.end_step))
        if teacher_step is None and config.teacher == "dense_at_start":
            teacher_step = int(window.start_step)
    sf, tf_ = dict(student_features or {}), dict(teacher_features or {})
    for who, feats in (("student_features", sf), ("teacher_features", tf_)):
        if sorted(feats) != sorted(config.features):
            raise ValueError(f"{who} must hold the tensors of config.features {config.features}, got {sorted(feats)}")
    total = config.logit_weight * kd_loss(student_logits, teacher_logits, config.temperature)
    if config.features:
        mse = [tf.reduce_mean(tf.square(tf.cast(sf[n], tf.float32) - tf.stop_gradient(tf.cast(tf_[n], tf.float32))))
               for n in config.features]
        total = tf.cast(total, tf.float32) + config.feature_weight * tf.add_n(mse) / len(mse)
    term = weight_tensor(config, global_step) * tf.cast(total, tf.float32)
    if teacher_step:
        term = tf.where(tf.cast(global_step, tf.int64) >= teacher_step, term, tf.zeros_like(term))
    return term


def teacher_snapshot_op(student_vars: Sequence[Any], teacher_vars: Sequence[Any], global_step: Any = None,
                        at_step: int | None = None) -> tf.Operation:
    """One op assigning each student variable's value to the teacher variable at the same place (run it
    once when pruning begins). Shapes must match pairwise. With ``global_step`` and ``at_step``: only when
    ``global_step`` (read when the op runs) equals ``at_step``; else each teacher variable keeps its value
    (the op to run after every optimizer step, as :func:`teacher_train_op` does).

    Raises:
        ValueError: the lists differ in length or a pair in shape; only one of ``global_step``/``at_step``.
    """
    if (global_step is None) != (at_step is None):
        raise ValueError(f"global_step and at_step go together, got global_step={global_step!r}, at_step={at_step!r}")
    student_vars, teacher_vars = list(student_vars), list(teacher_vars)
    if len(student_vars) != len(teacher_vars) or not student_vars:
        raise ValueError(f"student_vars and teacher_vars must pair up one to one, got {len(student_vars)} and "
                         f"{len(teacher_vars)} variables")
    for s, t in zip(student_vars, teacher_vars):
        if not s.shape.is_compatible_with(t.shape):
            raise ValueError(f"teacher variable {t.name} {t.shape} cannot take student variable {s.name} {s.shape}")
    if global_step is None:
        return tf.group(*[t.assign(s.read_value()) for s, t in zip(student_vars, teacher_vars)],
                        name="distillation_teacher_snapshot")
    take = tf.equal(tf.cast(global_step, tf.int64), at_step)
    return tf.group(*[t.assign(tf.where(take, s.read_value(), t.read_value()))
                      for s, t in zip(student_vars, teacher_vars)], name="distillation_teacher_snapshot_at_step")


def teacher_train_op(train_op: Any, student_vars: Sequence[Any], teacher_vars: Sequence[Any],
                     pruning: Any) -> tf.Operation:
    """The train op of a pruned student taught by the ``"dense_at_start"`` teacher: ``train_op``, then (in the
    step that brings ``pruning.global_step`` to the schedule's ``start_step``) the teacher's variables set to
    the student's, then the pruning update (``pruning.wrap_train_op``): the teacher is the student as it is
    when pruning begins, however early the graph was built. Pass ``pruning=pruning`` to
    :func:`distillation_loss` for a term of exactly 0 before (and the default weight's window).

    Args:
        train_op: the optimizer's op (``opt.minimize(loss, global_step=pruning.global_step)``).
        student_vars, teacher_vars: the variables of student and teacher, paired in order.
        pruning: the :func:`sparsify_tf.prune_graph` result pruning the student.

    Raises:
        ValueError: as :func:`teacher_snapshot_op`; ``start_step=0`` (no step reaches it: run
            :func:`teacher_snapshot_op` once after initialising instead, and use ``pruning.wrap_train_op``).
    """
    start = int(pruning.config.start_step)
    if start == 0:
        raise ValueError("teacher_train_op: the pruning start_step is 0, which no training step reaches: run "
                         "teacher_snapshot_op(student_vars, teacher_vars) once after initialising the variables "
                         "and train with pruning.wrap_train_op(train_op)")
    with pruning.graph.as_default(), tf.control_dependencies([train_op]):   # reads after the optimizer's update
        snapshot = teacher_snapshot_op(student_vars, teacher_vars, tf.identity(pruning.global_step), start)
        step = tf.group(train_op, snapshot)
    return pruning.wrap_train_op(step)
