"""The distillation term of :class:`sparsify.DistillationConfig` in a Keras train step, for both Kerases.

Written once over an ``ops`` namespace with ``keras.ops``'s names (``keras.ops`` for Keras 3 on every
backend; :data:`sparsify_tf.keras.distillation.TF_DISTILL_OPS` for tf-keras): :func:`kd_term`,
:func:`feature_term` and :func:`weight_value` (``w(step)`` from a step tensor inside the compiled step, as
TF graphs' ``weight_tensor``: nothing recompiles as the step moves, nothing is read on the host). The
checks of the wrapper's arguments (:func:`check_models`, :func:`feature_layers`) are here too, so both
Kerases refuse the same bad input with the same words.

Example:
    >>> import keras
    >>> from sparsify import DistillationConfig
    >>> s, t = keras.ops.convert_to_tensor([[0.0, 0.0]]), keras.ops.convert_to_tensor([[0.0, 2.0]])
    >>> round(float(kd_term(keras.ops, s, t, 2.0)), 5)
    0.44378
    >>> cfg = DistillationConfig(weight=1.0, weight_schedule="linear", start_step=10, end_step=20)
    >>> [round(float(weight_value(keras.ops, cfg, s_)), 3) for s_ in (0, 15, 30)]
    [0.0, 0.5, 1.0]
"""
from __future__ import annotations

from typing import Any, Sequence

from sparsify.distillation import DistillationConfig, ramp_weight

__all__ = ["kd_term", "feature_term", "weight_value", "check_models", "feature_layers", "output_shape"]


def kd_term(ops: Any, student_logits: Any, teacher_logits: Any, temperature: float) -> Any:
    """``T**2 * mean_rows KL(softmax(t/T) || softmax(s/T))`` in float32 (rows: every leading position); no
    gradient reaches the teacher's logits (:func:`sparsify.distillation.kd_loss` is the NumPy reference)."""
    s = ops.cast(student_logits, "float32")
    t = ops.cast(ops.stop_gradient(teacher_logits), "float32")
    log_q = ops.log_softmax(s / temperature, axis=-1)
    log_p = ops.log_softmax(t / temperature, axis=-1)
    kl = ops.sum(ops.exp(log_p) * (log_p - log_q), axis=-1)
    return ops.mean(kl) * (temperature * temperature)


def feature_term(ops: Any, student: Sequence[Any], teacher: Sequence[Any]) -> Any:
    """The mean over the features of their mean squared differences (float32; the teacher's without gradient)."""
    mse = [ops.mean(ops.square(ops.cast(s, "float32") - ops.cast(ops.stop_gradient(t), "float32")))
           for s, t in zip(student, teacher)]
    total = mse[0]
    for m in mse[1:]:
        total = total + m
    return total / len(mse)


def weight_value(ops: Any, config: DistillationConfig, step: Any) -> Any:
    """``w(step)`` as a float32 scalar from a step tensor (``optimizer.iterations``): the core's formula
    (:func:`sparsify.distillation.ramp_weight`) on ``ops`` (a Python float when constant).

    Raises:
        ValueError: a ``"fade"`` weight (the default of the ``"dense_at_start"`` teacher) whose pruning window
            is not known: the :class:`PruningCallback` gives it (``teach_from``).
    """
    if config.weight_schedule == "fade":
        raise ValueError("distillation weight_schedule='fade' (the default weight of the 'dense_at_start' teacher) "
                         "fades over the pruning window, which the PruningCallback gives when fit starts "
                         "(DistillationModel.teach_from(start_step, end_step)): fit with a PruningCallback, or "
                         "give the weight (e.g. weight=1.0)")
    if config.weight_schedule == "constant":
        return config.weight
    return ramp_weight(config, ops.cast(step, "float32"), ops)


def output_shape(model: Any) -> tuple | None:
    """The static output shape of a functional model (``None`` where unknown: subclassed, several outputs)."""
    try:
        outs = model.outputs
    except (AttributeError, ValueError):
        return None
    if not outs or len(outs) != 1:
        return None
    return tuple(None if d is None else int(d) for d in outs[0].shape)


def _class_name(model_class: type) -> str:
    module = model_class.__module__.split(".")[0]
    return f"{module}.Model" if module in ("keras", "tf_keras") else model_class.__name__


def check_models(student: Any, teacher: Any, model_class: type, config: DistillationConfig) -> None:
    """Refuse a student or teacher that cannot take part (``TypeError``/``ValueError`` naming what is wrong).

    ``teacher`` is None for ``config.teacher="dense_at_start"`` (a copy of the student is taken) and the
    caller's model for ``"user"``; ``model_class``: the Keras's ``Model`` class.
    """
    if not isinstance(student, model_class):
        raise TypeError(f"student must be a {_class_name(model_class)} (built), "
                        f"got {type(student).__name__}")
    if not student.built:
        raise ValueError(f"student: model {student.name!r} is not built; build it (call it on a batch or "
                         "model.build(input_shape)) before wrapping it")
    if teacher is None and config.teacher == "user":
        raise ValueError("teacher: distillation teacher='user' needs the teacher model (teacher=a trained model)")
    if teacher is not None and config.teacher != "user":
        raise ValueError(f"teacher: a teacher model was passed but distillation teacher={config.teacher!r}; set "
                         "teacher='user' in the distillation config, or pass no teacher (the dense student is "
                         "copied)")
    if teacher is None:
        return
    if not isinstance(teacher, model_class):
        raise TypeError(f"teacher must be a {_class_name(model_class)} (built), "
                        f"got {type(teacher).__name__}")
    if teacher is student:
        raise ValueError("teacher is the student itself; pass a separate model (the same architecture, "
                         "its weights set from a trained dense model)")
    if not teacher.built:
        raise ValueError(f"teacher: model {teacher.name!r} is not built; build it before wrapping it")
    s_shape, t_shape = output_shape(student), output_shape(teacher)
    if s_shape is not None and t_shape is not None and s_shape[1:] != t_shape[1:]:
        raise ValueError(f"teacher: its output shape {t_shape} differs from the student's {s_shape}; the "
                         "logits must have one shape")


def feature_layers(model: Any, names: Sequence[str], who: str) -> list[Any]:
    """The layers ``names`` of a functional ``model`` (``who``: "student"/"teacher" for the message).

    Raises:
        ValueError: ``model`` is not functional (no symbolic inputs: its intermediate outputs cannot be read),
            or a name is not one of its layers (the names it has are listed).
    """
    if not names:
        return []
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if not inputs:
        raise ValueError(f"features {list(names)}: the {who} {model.name!r} is a subclassed model, whose "
                         "intermediate outputs cannot be read; use a functional or Sequential model, or "
                         "features=[] (logits only)")
    by_name = {layer.name: layer for layer in model.layers}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"features {missing} are not layers of the {who} {model.name!r} "
                         f"(its layers: {list(by_name)[:12]})")
    return [by_name[n] for n in names]
