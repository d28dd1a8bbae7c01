"""Distillation while pruning a ``tf.compat.v1`` graph: the loss term and the teacher's snapshot.

The teacher in a graph is the user's frozen copy: the same network built a second time under another
variable scope with ``trainable=False`` variables (so no optimizer sees them), set to the student's values
when pruning begins by :func:`teacher_snapshot_op` (run it once, after the variables are initialised or
restored and before the first mask update), or restored from a trained dense checkpoint. The student is
pruned by :func:`sparsify_tf.prune_graph` as usual; :func:`distillation_loss` gives the term of
:class:`sparsify.DistillationConfig` to add to the task loss: ``w(global_step) * (logit_weight * KD +
feature_weight * mean MSE)``, the teacher's tensors behind ``tf.stop_gradient``. Its weight over steps is
the core's :meth:`~sparsify.DistillationConfig.weight_at` computed in the graph.

Example:
    >>> import tensorflow as tf
    >>> from sparsify import DistillationConfig
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     step = tf.compat.v1.train.get_or_create_global_step()
    ...     loss = distillation_loss(tf.constant([[0.0, 0.0]]), tf.constant([[0.0, 2.0]]),
    ...                              DistillationConfig(temperature=2.0), step)
    ...     with tf.compat.v1.Session() as sess:
    ...         sess.run(tf.compat.v1.global_variables_initializer())
    ...         print(round(float(sess.run(loss)), 5))
    0.44378
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import tensorflow as tf

from sparsify.distillation import DistillationConfig

__all__ = ["distillation_loss", "kd_loss", "weight_tensor", "teacher_snapshot_op"]


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


def weight_tensor(config: DistillationConfig, global_step: Any) -> tf.Tensor:
    """``w(global_step)`` as a float32 scalar tensor (the core's ``weight_at``, in float64 then cast)."""
    if config.weight_schedule == "constant":
        return tf.constant(config.weight, tf.float32)
    step = tf.cast(global_step, tf.float64)
    span = float(max(1, config.end_step - config.start_step))
    p = tf.clip_by_value((step - config.start_step) / span, 0.0, 1.0)
    i, t = config.init_weight, config.weight
    ramp = i + (t - i) * (p if config.weight_schedule == "linear" else 1.0 - tf.cos(p * (math.pi / 2.0)))
    w = tf.where(step < config.start_step, tf.constant(i, tf.float64),
                 tf.where(step >= config.end_step, tf.constant(t, tf.float64), ramp))
    return tf.cast(w, tf.float32)


def distillation_loss(student_logits: Any, teacher_logits: Any, config: DistillationConfig | Mapping[str, Any],
                      global_step: Any, student_features: Mapping[str, Any] | None = None,
                      teacher_features: Mapping[str, Any] | None = None) -> tf.Tensor:
    """The distillation term at ``global_step`` (a scalar float32 tensor) to add to the task loss.

    Args:
        student_logits, teacher_logits: logits of one shape, classes last.
        config: a :class:`sparsify.DistillationConfig` or its dict.
        global_step: the step tensor the pruning hook counts (``tf.compat.v1.train.get_global_step()``).
        student_features, teacher_features: tensors by the names of ``config.features``.

    Raises:
        ValueError: a feature of ``config.features`` is missing from either mapping, or one is given
            that it does not name.
    """
    config = DistillationConfig.coerce(config)
    sf, tf_ = dict(student_features or {}), dict(teacher_features or {})
    for who, feats in (("student_features", sf), ("teacher_features", tf_)):
        if sorted(feats) != sorted(config.features):
            raise ValueError(f"{who} must hold the tensors of config.features {config.features}, got {sorted(feats)}")
    total = config.logit_weight * kd_loss(student_logits, teacher_logits, config.temperature)
    if config.features:
        mse = [tf.reduce_mean(tf.square(tf.cast(sf[n], tf.float32) - tf.stop_gradient(tf.cast(tf_[n], tf.float32))))
               for n in config.features]
        total = tf.cast(total, tf.float32) + config.feature_weight * tf.add_n(mse) / len(mse)
    return weight_tensor(config, global_step) * tf.cast(total, tf.float32)


def teacher_snapshot_op(student_vars: Sequence[Any], teacher_vars: Sequence[Any]) -> tf.Operation:
    """One op assigning each student variable's value to the teacher variable at the same place (run it
    once when pruning begins). Shapes must match pairwise.

    Raises:
        ValueError: the lists differ in length or a pair in shape.
    """
    student_vars, teacher_vars = list(student_vars), list(teacher_vars)
    if len(student_vars) != len(teacher_vars) or not student_vars:
        raise ValueError(f"student_vars and teacher_vars must pair up one to one, got {len(student_vars)} and "
                         f"{len(teacher_vars)} variables")
    for s, t in zip(student_vars, teacher_vars):
        if not s.shape.is_compatible_with(t.shape):
            raise ValueError(f"teacher variable {t.name} {t.shape} cannot take student variable {s.name} {s.shape}")
    return tf.group(*[t.assign(s.read_value()) for s, t in zip(student_vars, teacher_vars)],
                    name="distillation_teacher_snapshot")
