"""Distillation from the dense model while pruning, in ``model.fit``: :class:`DistillationModel` (Keras 3).

Wrap the student (the model being pruned), compile the wrapper as you would the student and fit it with
:class:`~sparsify_keras.PruningCallback`: the loss is the compiled task loss plus
``w(step) * (logit_weight * KD + feature_weight * mean MSE(features))`` of :class:`sparsify.DistillationConfig`,
``w`` computed inside the compiled step from ``optimizer.iterations`` (nothing recompiles, no host read).

* The teacher is frozen (``trainable=False``: no trainable weight, no optimizer slot), run with
  ``training=False`` behind ``stop_gradient``. ``config.teacher="dense_at_start"``: a copy of the student
  (``keras.models.clone_model`` + its weights) as it is when pruning begins: the :class:`PruningCallback`
  sets :attr:`~DistillationModel.teacher_step` to its ``start_step`` at the start of ``fit`` (when the
  optimizer has not reached it yet), and the train step that reaches that step assigns the student's weights
  to the teacher's (inside the compiled step, before the callback's mask update at the next batch); the term
  is exactly 0 before. With ``start_step=0`` the copy is the one taken when the wrapper is made.
  ``"user"``: the model passed, frozen in place, teaching from step 0.
* The weight ``w``: as given; with neither ``weight`` nor ``weight_schedule`` given, the ``"dense_at_start"``
  teacher's fades (:meth:`sparsify.DistillationConfig.for_pruning`): 1 at the pruning ``start_step``, linearly
  to 0 at ``start_step + (end_step - start_step) // 2``, then 0; the callback gives the window
  (:meth:`~DistillationModel.teach_from`), so such a wrapper is fit with a :class:`PruningCallback`.
* Only the student is pruned: the callback walks the student (its own weight paths, the masks of a run
  without distillation), and only the student is saved: ``strip_pruning(wrapper)`` returns the plain
  student, whose ``save`` holds none of the teacher.
* ``features``: names of layers of a functional student (and teacher) whose outputs are matched; the
  student's come from the forward pass that gives the logits.
* The term is added in training only: ``evaluate`` reports the task loss.

Example:
    >>> import numpy as np, keras
    >>> from sparsify_keras import DistillationModel, PruningCallback, strip_pruning
    >>> student = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, name="fc"), keras.layers.Dense(3)])
    >>> model = DistillationModel(student, {"temperature": 2.0})      # the weight: 1 -> 0 over step 0 -> 1
    >>> model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> x = np.random.default_rng(0).normal(size=(32, 8)).astype("float32")
    >>> cb = PruningCallback({"target_sparsity": 0.5, "end_step": 2, "pruning_frequency": 1})
    >>> _ = model.fit(x, x[:, :3].argmax(1), batch_size=8, epochs=1, verbose=0, callbacks=[cb])
    >>> student = strip_pruning(model)          # the plain student: model.teacher is not part of it
    >>> cb.sparsity["fc/kernel"], len(student.weights)
    (0.5, 4)
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import keras

from sparsify.distillation import DistillationConfig

from .backend import JaxStateValues, StatefulValues, sync_to_variables, to_numpy
from .distill_terms import check_models, feature_layers, feature_term, kd_term, weight_value
from .layers import PRUNING_ROOT_ATTR

__all__ = ["DistillationModel", "frozen_copy"]


def frozen_copy(model: Any, keras_module: Any = keras) -> Any:
    """A copy of ``model`` (``clone_model`` + its weights) with ``trainable=False``.

    Raises:
        ValueError: the model cannot be cloned (a subclassed model without ``get_config``); pass a teacher.

    Example:
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
        >>> t = frozen_copy(m)
        >>> t.trainable_weights, bool((t.get_weights()[0] == m.get_weights()[0]).all())
        ([], True)
    """
    try:
        teacher = keras_module.models.clone_model(model)
        if not teacher.built:
            raise ValueError("the clone is not built")
        teacher.set_weights(model.get_weights())
    except (NotImplementedError, TypeError, ValueError) as e:
        raise ValueError(f"teacher='dense_at_start': model {model.name!r} cannot be copied ({type(e).__name__}: "
                         f"{e}); build the same model again, set its weights from the student "
                         "(teacher.set_weights(student.get_weights())) and pass it with teacher='user'") from e
    teacher.trainable = False
    return teacher


def _features_model(model: Any, layers: list, keras_module: Any) -> Any:
    """A functional model sharing ``model``'s layers that returns ``[output, *layer outputs]``."""
    outputs = model.outputs
    if len(outputs) != 1:
        raise ValueError(f"features: model {model.name!r} has {len(outputs)} outputs; one (the logits) is needed")
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    return keras_module.Model(inputs, [outputs[0], *[layer.output for layer in layers]])


class DistillationMixin:
    """What :class:`DistillationModel` and tf-keras's share: the teacher, the features and the term.

    Subclasses call :meth:`_setup` in ``__init__`` and provide :attr:`_ops` (``keras.ops``-like),
    :meth:`_step` (the optimizer's step as a tensor in the step being traced) and :meth:`_new_step_variable`;
    their train step calls :meth:`_take_teacher_in_step` after the optimizer's update.
    """

    _ops: Any = None

    def _setup(self, student: Any, config: Any, teacher: Any, keras_module: Any) -> None:
        cfg = DistillationConfig.coerce(config)
        check_models(student, teacher, keras_module.Model, cfg)
        s_layers = feature_layers(student, cfg.features, "student")
        if teacher is None:
            teacher = frozen_copy(student, keras_module)
        else:
            teacher.trainable = False                          # frozen in place
        t_layers = feature_layers(teacher, cfg.features, "teacher")
        pairs = list(zip(student.weights, teacher.weights)) if cfg.teacher == "dense_at_start" else []
        if pairs and len(student.weights) != len(teacher.weights):
            raise ValueError(f"teacher='dense_at_start': the copy of model {student.name!r} has "
                             f"{len(teacher.weights)} weights, the model {len(student.weights)}")
        self.config = cfg
        self.student = student
        self.teacher = teacher
        #: the optimizer step from which the term counts; a dense_at_start teacher is the student at this step
        self.teacher_step = self._new_step_variable()
        # shares the student's (teacher's) layers: not tracked again, so no weight is listed twice
        extra = {"_s_feats": _features_model(student, s_layers, keras_module) if s_layers else None,
                 "_t_feats": _features_model(teacher, t_layers, keras_module) if t_layers else None,
                 "_last": None, PRUNING_ROOT_ATTR: student, "_teacher_pairs": pairs, "_copy_in_step": False,
                 "_given_config": cfg}
        for name, value in extra.items():
            object.__setattr__(self, name, value)
        self.built = True

    # ----- the forward pass: the student's ---------------------------------------------------
    def _student_call(self, inputs: Any, training: Any = None) -> Any:
        if self._s_feats is None:
            return self.student(inputs, training=training)
        logits, *feats = self._s_feats(inputs, training=training)
        object.__setattr__(self, "_last", (logits, feats))     # the features of this pass, for the loss
        return logits

    def _teacher_outputs(self, inputs: Any) -> tuple[Any, list]:
        if self._t_feats is None:
            return self.teacher(inputs, training=False), []
        logits, *feats = self._t_feats(inputs, training=False)
        return logits, feats

    def _student_features(self, inputs: Any, y_pred: Any) -> list:
        last = self._last
        object.__setattr__(self, "_last", None)
        if last is not None and last[0] is y_pred:
            return last[1]
        return self._s_feats(inputs, training=True)[1:]      # y_pred came from another pass: run it again

    def distillation_loss(self, x: Any, y_pred: Any, step: Any = None) -> Any:
        """The distillation term (a float32 scalar) for inputs ``x`` and the student's logits ``y_pred`` at
        ``step`` (default: the optimizer's step; needs the wrapper compiled unless the weight is constant).

        Raises:
            ValueError: the teacher's logits and ``y_pred`` differ in shape.
        """
        ops, cfg = self._ops, self.config
        t_logits, t_feats = self._teacher_outputs(x)
        s_shape, t_shape = tuple(y_pred.shape), tuple(t_logits.shape)
        if len(s_shape) != len(t_shape) or any(a is not None and b is not None and a != b
                                               for a, b in zip(s_shape, t_shape)):
            raise ValueError(f"teacher: its logits {t_shape} and the student's {s_shape} must have one shape")
        total = kd_term(ops, y_pred, t_logits, cfg.temperature) * cfg.logit_weight
        if cfg.features:
            total = total + cfg.feature_weight * feature_term(ops, self._student_features(x, y_pred), t_feats)
        if self._teacher_pairs:            # dense_at_start: exactly 0 before the step the teacher is taken at
            now = self._step() if step is None and getattr(self, "optimizer", None) is not None else step
            if now is not None:
                total = ops.where(ops.greater_equal(ops.cast(now, "int32"), ops.cast(self.teacher_step, "int32")),
                                  total, 0.0)
        if cfg.weight_schedule == "constant":
            return total * cfg.weight
        return total * weight_value(ops, cfg, self._step() if step is None else step)

    def teach_from(self, start_step: int, end_step: int | None = None) -> None:
        """Take the ``"dense_at_start"`` teacher at optimizer step ``start_step`` (the pruning schedule's
        first update; :class:`PruningCallback` calls this at the start of ``fit`` with its window), the term
        being 0 before: only when the optimizer has not reached ``start_step`` yet (else the teacher stays as
        it is). ``end_step``: the pruning schedule's, over which a ``"fade"`` weight falls to 0 (halfway:
        :attr:`config` becomes its ramp). Nothing for a ``"user"`` teacher (whose weight is as given).

        Raises:
            ValueError: a bad step, or a ``"fade"`` without ``end_step`` or with a window it cannot fade over;
                before anything changes.
        """
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"start_step must be an integer >= 0, got {start_step!r}")
        given = self._given_config
        if given.weight_schedule == "fade" and end_step is None:
            raise ValueError("end_step: the distillation weight fades over the pruning window (the default of the "
                             "'dense_at_start' teacher): teach_from(start_step, end_step), or give the weight "
                             "(e.g. weight=1.0)")
        if end_step is not None:
            self.config = given.for_pruning(start_step, end_step)
        if not self._teacher_pairs:
            return
        sync_to_variables(self)
        optimizer = getattr(self, "optimizer", None)
        now = int(to_numpy(optimizer.iterations)) if optimizer is not None else 0
        if start_step > now:
            self.teacher_step.assign(start_step)
            # the train step copies the student from now on (read when fit traces it: the callback's first
            # attach makes fit build the train function again); without a deferred start it never copies
            object.__setattr__(self, "_copy_in_step", True)

    def _take_teacher_in_step(self, values: Any) -> None:
        """In the train step, after the optimizer's update: when the step count reaches :attr:`teacher_step`,
        the teacher's weights become the student's (``values``: a :class:`~sparsify_keras.backend.StepValues`)."""
        if not self._teacher_pairs or not self._copy_in_step:
            return
        ops = self._ops
        take = ops.equal(ops.cast(values.read(self.optimizer.iterations), "int32"),
                         ops.cast(values.read(self.teacher_step), "int32"))
        for s, t in self._teacher_pairs:
            values.write(t, ops.where(take, values.read(s), values.read(t)))

    def _step(self) -> Any:
        optimizer = getattr(self, "optimizer", None)
        if optimizer is None:
            raise ValueError(f"step: the distillation weight follows a {self.config.weight_schedule!r} schedule "
                             "over optimizer steps; compile the model first or pass step=")
        return optimizer.iterations


class DistillationModel(DistillationMixin, keras.Model):
    """The student (``call``) taught by a frozen teacher (the loss): fit it with a :class:`PruningCallback`.

    Args:
        student: the built Keras 3 model being pruned.
        config: a :class:`sparsify.DistillationConfig`, its dict or a YAML path.
        teacher: the teacher model for ``config.teacher="user"`` (frozen in place); ``None`` with
            ``"dense_at_start"``: a frozen copy of the student, taken again (in the train step) at the
            pruning ``start_step`` when a :class:`PruningCallback` starts there (:meth:`teach_from`).

    Attributes:
        student: the model being pruned (what ``call`` runs).
        teacher: the frozen teacher.
        config: the validated :class:`sparsify.DistillationConfig` (a ``"fade"`` weight: its ramp over the
            pruning window once :meth:`teach_from` gave it).
        teacher_step: an int32 variable (saved with the wrapper's weights): the optimizer step from which
            the term counts (0 unless :meth:`teach_from` moved it); a ``"dense_at_start"`` teacher is the
            student as it is when the optimizer reaches it.

    Raises:
        TypeError/ValueError: a student or teacher that is not a built Keras 3 model, a teacher whose output
            shape differs, a feature that is not a layer of both (or a subclassed model with features), a
            teacher with ``"dense_at_start"`` or none with ``"user"``: before anything changes.
    """

    _ops = keras.ops

    def __init__(self, student: Any, config: DistillationConfig | Mapping[str, Any] | str | os.PathLike,
                 teacher: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("name", f"{getattr(student, 'name', 'model')}_distillation")
        super().__init__(**kwargs)
        object.__setattr__(self, "_step_in_trace", None)
        self._setup(student, config, teacher, keras)

    def _new_step_variable(self) -> Any:
        return keras.Variable(0, dtype="int32", trainable=False, name="teacher_step")

    def call(self, inputs: Any, training: Any = None) -> Any:
        return self._student_call(inputs, training=training)

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None,
                     training: bool = True) -> Any:
        loss = super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)
        if not training:
            object.__setattr__(self, "_last", None)
            return loss
        return loss + keras.ops.cast(self.distillation_loss(x, y_pred), loss.dtype)

    def train_step(self, *args: Any) -> Any:
        if keras.backend.backend() != "jax":
            logs = super().train_step(*args)
            self._take_teacher_in_step(StatefulValues())
            return logs
        if self.config.weight_schedule == "constant" and not self._teacher_pairs:
            return super().train_step(*args)
        # JAX's step is stateless: the optimizer's step is the value in the state passed in, not the variable
        state = args[0]
        found = [i for i, v in enumerate(self.optimizer.variables) if v is self.optimizer.iterations]
        if not found:
            raise ValueError(f"optimizer {type(self.optimizer).__name__}: its iterations is not one of its "
                             "variables; the distillation weight schedule and the dense_at_start teacher cannot "
                             "follow it (use a constant weight and teacher='user')")
        object.__setattr__(self, "_step_in_trace", state[2][found[0]])
        try:
            logs, new_state = super().train_step(*args)
        finally:
            object.__setattr__(self, "_step_in_trace", None)
        values = JaxStateValues(self, new_state)
        self._take_teacher_in_step(values)
        return logs, values.state()

    def _step(self) -> Any:
        return self._step_in_trace if self._step_in_trace is not None else super()._step()
