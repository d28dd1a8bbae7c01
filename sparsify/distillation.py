"""Distillation while pruning: the settings and the framework-neutral math.

The dense model (a frozen copy of the model as it is when pruning begins, at the pruning schedule's
``start_step``, or a teacher the user passes) teaches the pruned one. :class:`DistillationConfig` is the
sibling of :class:`~sparsify.PruningConfig` that says how: the temperature ``T``, the weight ``w(step)``
of the distillation term (constant or ramped over a window of steps), which intermediate outputs to match
and their weight, and where the teacher comes from. The training loss is

    ``task_loss + w(step) * (logit_weight * KD + feature_weight * mean_f MSE(student_f, teacher_f))``

where ``KD = T**2 * mean over rows of KL(softmax(teacher / T) || softmax(student / T))`` (Hinton et al.
2015: the ``T**2`` keeps the gradients' scale as ``T`` changes; a row is one prediction: every leading
position of the logits, batch and time alike) and each feature term is the mean squared difference of one
named intermediate output. :func:`kd_loss` and :func:`feature_loss` are the NumPy references every
adapter's tests compare against; the adapters compute the same terms in their framework.

The weight ``w(step)`` is written once, :func:`ramp_weight`, over a few array operations that each
adapter maps onto its own (Python floats here: :meth:`DistillationConfig.weight_at`). The default teacher
(``"dense_at_start"``, no ``weight`` or ``weight_schedule`` given) gets the weight ``"fade"``: 0 before
the pruning ``start_step`` (there is no teacher yet), 1 at it, falling linearly to 0 at the middle of the
pruning window, ``start_step + (end_step - start_step) // 2``, and 0 after. The pruning schedule fills the
window in (:meth:`DistillationConfig.for_pruning`, called by every adapter). Measured on a small LM at 90%
(bench/RESULTS.md ``lm_teacher_choice``): a constant weight 1 held the student to the weak model that
pruning starts from (+0.27 bits/char against no teacher); the fade does not.

Example:
    >>> cfg = DistillationConfig(temperature=2.0, weight=0.5, weight_schedule="linear", init_weight=0.0,
    ...                          start_step=0, end_step=100)
    >>> cfg.weight_at(0), cfg.weight_at(50), cfg.weight_at(1000)
    (0.0, 0.25, 0.5)
    >>> default = DistillationConfig().for_pruning(100, 500)    # the default teacher's fade
    >>> [default.weight_at(s) for s in (100, 200, 300, 400)]
    [1.0, 0.5, 0.0, 0.0]
    >>> round(kd_loss([[1.0, 2.0, 3.0]], [[3.0, 2.0, 1.0]], temperature=1.0), 6)
    1.150421
    >>> DistillationConfig(temperature=0)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be a finite number > 0, got 0
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import operator
from types import SimpleNamespace
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from . import portable_math
from .config_base import ConfigBase

__all__ = ["DistillationConfig", "TEACHERS", "WEIGHT_SCHEDULES", "ramp_weight", "kd_loss", "feature_loss",
           "distillation_loss"]

#: Where the teacher comes from: a frozen copy of the model at the pruning ``start_step`` (the term is 0 before),
#: or one the user passes.
TEACHERS = ("dense_at_start", "user")
#: How the weight of the distillation term moves over the steps: ``"constant"``; ``"linear"``/``"cos"`` from
#: ``init_weight`` to ``weight`` over the window; ``"fade"`` (the default of the ``"dense_at_start"`` teacher)
#: from ``weight`` at the pruning ``start_step`` to 0 at the middle of the pruning window.
WEIGHT_SCHEDULES = ("constant", "linear", "cos", "fade")
_FADE_FIELDS = ("init_weight", "start_step", "end_step")


def _number(name: str, v: Any, *, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {v!r} ({type(v).__name__})")
    bad = not math.isfinite(v) or (v <= 0 if positive else v < 0)
    if bad:
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {v!r}")
    return float(v)


@dataclass
class DistillationConfig(ConfigBase):
    """How the dense teacher teaches the pruned student; every field checked at construction.

    Attributes:
        temperature: ``T`` > 0 dividing both logits before the softmax (1: the plain KL); the KD term
            is scaled by ``T**2``.
        weight: ``w`` >= 0, the weight of the distillation term added to the task loss (after the ramp);
            not given: 1.
        weight_schedule: ``"constant"`` (``weight`` at every step), ``"linear"`` or ``"cos"`` (from
            ``init_weight`` at ``start_step`` to ``weight`` at ``end_step``, then ``weight``; before
            ``start_step``: ``init_weight``), or ``"fade"`` (``"dense_at_start"`` only: 0 before the
            pruning ``start_step``, ``weight`` at it, linearly to 0 at ``start_step + (end_step -
            start_step) // 2`` of the pruning schedule, then 0; :meth:`for_pruning`). Not given: ``"fade"``
            for the ``"dense_at_start"`` teacher when ``weight`` is not given either, else ``"constant"``
            (an explicit ``weight`` alone is a constant weight).
        init_weight: the weight at ``start_step`` of a ramp, >= 0.
        start_step, end_step: the ramp's window in optimizer steps (``0 <= start_step <= end_step``); a
            ``"fade"`` takes the pruning schedule's (leave these and ``init_weight`` at 0).
        logit_weight: the weight of the logits' KD term inside the distillation term, >= 0.
        features: names of intermediate outputs to match (torch: module names as in
            ``named_modules()``; TF graphs: the tensors the caller passes), each the same name in
            student and teacher.
        feature_weight: the weight of the features' term (the mean of their MSEs), >= 0 (unused
            without ``features``).
        teacher: ``"dense_at_start"`` (a frozen copy of the model as it is when pruning begins: at the
            pruning schedule's ``start_step``, its first mask update, however early pruning was set up;
            the term is 0 before) or ``"user"`` (the caller passes the teacher; it teaches from step 0).

    Example:
        >>> DistillationConfig.from_dict({"temperature": 2, "features": ["blocks.0"]}).features
        ['blocks.0']
        >>> DistillationConfig(weight_schedule="ramp")
        Traceback (most recent call last):
        ...
        ValueError: weight_schedule must be one of ('constant', 'linear', 'cos', 'fade'), got 'ramp'
    """

    temperature: float = 2.0
    weight: float | None = None
    weight_schedule: str | None = None
    init_weight: float = 0.0
    start_step: int = 0
    end_step: int = 0
    logit_weight: float = 1.0
    features: list[str] = field(default_factory=list)
    feature_weight: float = 1.0
    teacher: str = "dense_at_start"

    def __post_init__(self) -> None:
        self.temperature = _number("temperature", self.temperature, positive=True)
        self._choice("teacher", TEACHERS)
        if self.weight_schedule is None:      # the default: the fade for the teacher taken at the pruning start
            default_fade = self.weight is None and self.teacher == "dense_at_start"
            self.weight_schedule = "fade" if default_fade else "constant"
        if self.weight is None:
            self.weight = 1.0
        for name in ("weight", "init_weight", "logit_weight", "feature_weight"):
            setattr(self, name, _number(name, getattr(self, name)))
        self._choice("weight_schedule", WEIGHT_SCHEDULES)
        for name in ("start_step", "end_step"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
            setattr(self, name, int(v))
        if self.start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {self.start_step}")
        if self.end_step < self.start_step:
            raise ValueError(f"end_step must be >= start_step ({self.start_step}), got {self.end_step}")
        if self.weight_schedule == "fade":
            if self.teacher != "dense_at_start":
                raise ValueError(f"weight_schedule='fade' is the 'dense_at_start' teacher's (0 before the pruning "
                                 f"start_step), got teacher={self.teacher!r}; use 'constant', 'linear' or 'cos'")
            set_ = {name: getattr(self, name) for name in _FADE_FIELDS if getattr(self, name) != 0}
            if set_:
                raise ValueError(f"weight_schedule='fade' (the default weight of the 'dense_at_start' teacher) takes "
                                 f"its window from the pruning schedule, so init_weight, start_step and end_step "
                                 f"stay 0, got {set_}; for a window of your own set weight_schedule='linear' or "
                                 "'cos' (and weight)")
        feats = [self.features] if isinstance(self.features, str) else self.features
        if not isinstance(feats, (list, tuple)) or not all(isinstance(f, str) and f for f in feats):
            raise TypeError(f"features must be a list of non-empty names (strings), got {self.features!r}")
        if len(set(feats)) != len(feats):
            raise ValueError(f"features names an output twice: {list(feats)!r}")
        self.features = list(feats)

    def _choice(self, name: str, allowed: tuple[str, ...]) -> None:
        v = getattr(self, name)
        if v not in allowed:
            hint = difflib.get_close_matches(str(v), allowed, n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ValueError(f"{name} must be one of {allowed}, got {v!r}{extra}")

    # ----- construction / export (from_dict, from_yaml, coerce, to_dict: ConfigBase) ---
    KEY_WORD = "distillation"          # unknown distillation key 'temprature' (did you mean 'temperature'?)
    PARAMETER = "distillation"         # distillation must be a DistillationConfig, a dict or a YAML file path
    YAML_SECTION = "distillation"      # a top-level distillation: key is accepted

    # ----- the math over steps ---------------------------------------------------------
    def for_pruning(self, start_step: int, end_step: int) -> "DistillationConfig":
        """This config over the pruning window ``[start_step, end_step]`` (the pruning schedule's): a
        ``"fade"`` becomes its ramp, ``"linear"`` from ``weight`` at ``start_step`` to 0 at
        ``start_step + (end_step - start_step) // 2`` (the term is 0 before ``start_step``: the teacher is
        taken there); any other schedule is returned as it is.

        Raises:
            ValueError: the window is not ``0 <= start_step <= end_step`` (or ``end_step=-1``, no end), or a
                ``"fade"`` gets no end or a window of fewer than 2 steps (it would be 0 throughout).

        Example:
            >>> fade = DistillationConfig().for_pruning(60, 420)
            >>> fade.weight_schedule, fade.init_weight, fade.weight, fade.start_step, fade.end_step
            ('linear', 1.0, 0.0, 60, 240)
            >>> DistillationConfig(weight=1.0).for_pruning(60, 420).weight_schedule     # explicit: as it is
            'constant'
        """
        for name, v in (("start_step", start_step), ("end_step", end_step)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"pruning {name} must be an integer, got {v!r} ({type(v).__name__})")
        start, end = int(start_step), int(end_step)
        if start < 0 or (end < start and end != -1):
            raise ValueError(f"pruning window: 0 <= start_step <= end_step (or end_step=-1), got start_step={start}, "
                             f"end_step={end}")
        if self.weight_schedule != "fade":
            return self
        if end == -1 or end - start < 2:
            raise ValueError(f"distillation weight_schedule='fade' (the default weight of the 'dense_at_start' "
                             f"teacher) falls to 0 halfway through the pruning window, which needs an end_step at "
                             f"least 2 steps after start_step, got start_step={start}, end_step={end}; give the "
                             f"weight (e.g. weight=1.0, a constant weight) or a weight_schedule of your own")
        return dataclasses.replace(self, weight_schedule="linear", init_weight=self.weight, weight=0.0,
                                   start_step=start, end_step=start + (end - start) // 2)

    def weight_at(self, step: int) -> float:
        """``w(step)``: the weight of the distillation term at optimizer step ``step`` (a Python float):
        :func:`ramp_weight` on Python floats (:mod:`sparsify.portable_math`'s cosine).

        Raises:
            ValueError: a ``"fade"`` whose pruning window is not filled in yet (:meth:`for_pruning`).

        Example:
            >>> cfg = DistillationConfig(weight=2.0, weight_schedule="cos", start_step=10, end_step=20)
            >>> cfg.weight_at(5), cfg.weight_at(20), round(cfg.weight_at(15), 4)
            (0.0, 2.0, 0.5858)
        """
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"step must be an integer, got {step!r} ({type(step).__name__})")
        return float(ramp_weight(self, float(step), _FLOAT_OPS))


#: :func:`ramp_weight`'s operations on Python floats.
_FLOAT_OPS = SimpleNamespace(where=lambda c, x, y: x if c else y, less=operator.lt, greater_equal=operator.ge,
                             clip=lambda x, lo, hi: min(max(x, lo), hi), cos=portable_math.cos)
_HALF_PI = math.pi / 2.0


def ramp_weight(config: DistillationConfig, step: Any, ops: Any) -> Any:
    """``w(step)`` of ``config``, the one formula every framework computes: ``weight`` when constant; for a
    ramp from ``i = init_weight`` to ``w = weight`` over ``[b, e] = [start_step, end_step]``, with
    ``p = clip((step - b) / max(1, e - b), 0, 1)``: ``i`` before ``b``, ``w`` from ``e`` on, between them
    ``i + (w - i) * p`` (``"linear"``) or ``i + (w - i) * (1 - cos(p * pi / 2))`` (``"cos"``).

    Args:
        config: the settings (a ``"fade"`` after :meth:`DistillationConfig.for_pruning`).
        step: the optimizer step as a float (or a float tensor of the adapter's framework).
        ops: the array operations, named as ``keras.ops``'s: ``where(cond, x, y)``, ``less(a, b)``,
            ``greater_equal(a, b)``, ``clip(x, lo, hi)``, ``cos(x)``.

    Raises:
        ValueError: a ``"fade"`` whose pruning window is not filled in.

    Example:
        >>> import numpy as np
        >>> cfg = DistillationConfig(weight=1.0, weight_schedule="linear", start_step=10, end_step=20)
        >>> ramp_weight(cfg, np.array([5.0, 15.0, 30.0]), np)
        array([0. , 0.5, 1. ])
    """
    if config.weight_schedule == "constant":
        return config.weight
    if config.weight_schedule == "fade":
        raise ValueError("distillation weight_schedule='fade' (the default weight of the 'dense_at_start' teacher) "
                         "fades over the pruning window, which is not known here: prune with the distillation "
                         "(it fills the window in: DistillationConfig.for_pruning(start_step, end_step)), or give "
                         "the weight (e.g. weight=1.0)")
    i, w = config.init_weight, config.weight
    b, e = float(config.start_step), float(config.end_step)
    p = ops.clip((step - b) / max(1.0, e - b), 0.0, 1.0)
    shape = p if config.weight_schedule == "linear" else 1.0 - ops.cos(p * _HALF_PI)
    return ops.where(ops.less(step, b), i, ops.where(ops.greater_equal(step, e), w, i + (w - i) * shape))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _logits(name: str, x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim < 1 or a.shape[-1] < 1 or not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite logits with a class axis last, got shape {a.shape}")
    return a


def kd_loss(student_logits: Any, teacher_logits: Any, temperature: float = 1.0) -> float:
    """NumPy reference of the KD term: ``T**2 * mean_rows KL(softmax(t/T) || softmax(s/T))`` (float64).

    Rows are every leading position (all axes but the last, the classes).

    Example:
        >>> kd_loss([[0.0, 1.0]], [[0.0, 1.0]], temperature=3.0)
        0.0
        >>> round(kd_loss([[0.0, 0.0]], [[0.0, 2.0]], temperature=2.0), 6)
        0.443776
    """
    s, t = _logits("student_logits", student_logits), _logits("teacher_logits", teacher_logits)
    if s.shape != t.shape:
        raise ValueError(f"student_logits {s.shape} and teacher_logits {t.shape} must have one shape")
    temp = _number("temperature", temperature, positive=True)
    log_p, log_q = _log_softmax(t / temp), _log_softmax(s / temp)
    kl = (np.exp(log_p) * (log_p - log_q)).sum(axis=-1)
    return float(temp * temp * kl.mean())


def feature_loss(student: Any, teacher: Any) -> float:
    """NumPy reference of one feature term: the mean squared difference (float64).

    Example:
        >>> feature_loss([[1.0, 2.0]], [[1.0, 4.0]])
        2.0
    """
    s, t = np.asarray(student, dtype=np.float64), np.asarray(teacher, dtype=np.float64)
    if s.shape != t.shape:
        raise ValueError(f"the student's output {s.shape} and the teacher's {t.shape} must have one shape")
    return float(np.mean((s - t) ** 2))


def distillation_loss(config: DistillationConfig, step: int, student_logits: Any, teacher_logits: Any,
                      student_features: Sequence[Any] = (), teacher_features: Sequence[Any] = ()) -> float:
    """NumPy reference of the whole term added to the task loss at ``step`` (see the module docstring).

    Example:
        >>> cfg = DistillationConfig(temperature=1.0, weight=0.5)
        >>> round(distillation_loss(cfg, 0, [[1.0, 2.0, 3.0]], [[3.0, 2.0, 1.0]]), 6)
        0.57521
    """
    if len(student_features) != len(config.features) or len(teacher_features) != len(config.features):
        raise ValueError(f"features: {len(config.features)} named ({config.features}), got "
                         f"{len(student_features)} of the student's and {len(teacher_features)} of the teacher's")
    total = config.logit_weight * kd_loss(student_logits, teacher_logits, config.temperature)
    if config.features:
        total += config.feature_weight * float(np.mean([feature_loss(s, t) for s, t in
                                                        zip(student_features, teacher_features)]))
    return config.weight_at(step) * total
