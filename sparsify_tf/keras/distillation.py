"""Distillation while pruning a tf-keras (Keras 2) model in ``model.fit``: :class:`DistillationModel`.

The same wrapper as :class:`sparsify_keras.DistillationModel` (the same arguments, checks, teacher and term,
:class:`sparsify_keras.distillation.DistillationMixin`) over ``tf_keras.Model``: ``call`` is the student's,
``compute_loss`` adds ``w(step) * (logit_weight * KD + feature_weight * mean MSE)`` in training steps
(``train_step``; ``evaluate`` reports the task loss), ``w`` computed in the step from
``optimizer.iterations`` with TensorFlow's ops (:data:`TF_DISTILL_OPS`). Fit it with
:class:`sparsify_tf.keras.PruningCallback`: only the student is pruned, and ``strip_pruning(wrapper)``
gives the plain student back. A ``"dense_at_start"`` teacher is the student at the callback's
``start_step`` (assigned in the train step that reaches it; the term is 0 before) and its default weight
fades to 0 halfway through the callback's pruning window, as in Keras 3. tf-keras
logs its compiled loss as ``loss`` (the task loss: its loss tracker is the compiled loss's), so the term is
logged next to it as ``distillation_loss``; Keras 3's ``loss`` is the sum.

Example:
    >>> import numpy as np, tf_keras
    >>> from sparsify_tf.keras import DistillationModel, PruningCallback, strip_pruning
    >>> student = tf_keras.Sequential([tf_keras.layers.InputLayer((8,)), tf_keras.layers.Dense(16, name="fc"),
    ...                                tf_keras.layers.Dense(3)])
    >>> model = DistillationModel(student, {"temperature": 2.0})
    >>> model.compile("adam", tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> x = np.random.default_rng(0).normal(size=(32, 8)).astype("float32")
    >>> cb = PruningCallback({"target_sparsity": 0.5, "end_step": 2, "pruning_frequency": 1})
    >>> _ = model.fit(x, x[:, :3].argmax(1), batch_size=8, epochs=1, verbose=0, callbacks=[cb])
    >>> cb.sparsity["fc/kernel"], strip_pruning(model) is student, model.teacher.trainable_weights
    (0.5, True, [])
"""
from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, Mapping

import tensorflow as tf
import tf_keras

from sparsify.distillation import DistillationConfig
from sparsify_keras.distillation import DistillationMixin

__all__ = ["DistillationModel", "TF_DISTILL_OPS"]

#: ``keras.ops``'s names the distillation term uses (:mod:`sparsify_keras.distill_terms`), as TensorFlow ops.
TF_DISTILL_OPS = SimpleNamespace(
    cast=tf.cast, stop_gradient=tf.stop_gradient, exp=tf.exp, square=tf.square, cos=tf.cos, less=tf.less,
    equal=tf.equal, greater_equal=tf.greater_equal, where=tf.where, clip=tf.clip_by_value, mean=tf.reduce_mean,
    log_softmax=lambda x, axis=-1: tf.nn.log_softmax(x, axis=axis),
    sum=lambda x, axis=None: tf.reduce_sum(x, axis=axis))


#: tf.Variables read and assigned in place (:class:`sparsify_keras.backend.StepValues`'s two calls).
_TF_VALUES = SimpleNamespace(read=lambda v: v.read_value(), write=lambda v, x: v.assign(x))


class DistillationModel(DistillationMixin, tf_keras.Model):
    """:class:`sparsify_keras.DistillationModel` for tf-keras: the student taught by a frozen teacher.

    Args:
        student: the built ``tf_keras`` model being pruned.
        config: a :class:`sparsify.DistillationConfig`, its dict or a YAML path.
        teacher: the teacher for ``config.teacher="user"`` (frozen in place); ``None`` with
            ``"dense_at_start"``: a frozen copy of the student (``tf_keras.models.clone_model``), taken again in
            the train step at the pruning ``start_step`` (``teach_from``, :attr:`teacher_step`).

    Raises:
        TypeError/ValueError: as :class:`sparsify_keras.DistillationModel`, before anything changes.
    """

    _ops = TF_DISTILL_OPS

    def __init__(self, student: Any, config: DistillationConfig | Mapping[str, Any] | str | os.PathLike,
                 teacher: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("name", f"{getattr(student, 'name', 'model')}_distillation")
        super().__init__(**kwargs)
        object.__setattr__(self, "_in_train_step", False)
        self.distillation_tracker = tf_keras.metrics.Mean(name="distillation_loss")
        self._setup(student, config, teacher, tf_keras)

    def _new_step_variable(self) -> Any:
        return tf.Variable(0, dtype=tf.int32, trainable=False, name="teacher_step")

    def call(self, inputs: Any, training: Any = None) -> Any:
        return self._student_call(inputs, training=training)

    def train_step(self, data: Any) -> Any:
        object.__setattr__(self, "_in_train_step", True)       # while the step is traced
        try:
            logs = super().train_step(data)
        finally:
            object.__setattr__(self, "_in_train_step", False)
        self._take_teacher_in_step(_TF_VALUES)
        return logs

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None) -> Any:
        loss = super().compute_loss(x, y, y_pred, sample_weight)
        if not self._in_train_step:
            object.__setattr__(self, "_last", None)
            return loss
        term = tf.cast(self.distillation_loss(x, y_pred), loss.dtype)
        self.distillation_tracker.update_state(term)
        return loss + term
