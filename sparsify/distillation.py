"""Distillation while pruning: the settings and the framework-neutral math.

The dense model (a frozen copy of the model as it is when pruning begins, at the pruning schedule's
``start_step``, or a teacher the user passes) teaches the pruned one. :class:`DistillationConfig` is the
sibling of :class:`~sparsify.PruningConfig` that says how: the temperature ``T``, the weight ``w(step)``
of the distillation term (constant or ramped over a window of steps, with the curves of
:mod:`sparsify.schedules.decay`), which intermediate outputs to match and their weight, and where the
teacher comes from. The training loss is

    ``task_loss + w(step) * (logit_weight * KD + feature_weight * mean_f MSE(student_f, teacher_f))``

where ``KD = T**2 * mean over rows of KL(softmax(teacher / T) || softmax(student / T))`` (Hinton et al.
2015: the ``T**2`` keeps the gradients' scale as ``T`` changes; a row is one prediction: every leading
position of the logits, batch and time alike) and each feature term is the mean squared difference of one
named intermediate output. :func:`kd_loss` and :func:`feature_loss` are the NumPy references every
adapter's tests compare against; the adapters compute the same terms in their framework.

Example:
    >>> cfg = DistillationConfig(temperature=2.0, weight=0.5, weight_schedule="linear", init_weight=0.0,
    ...                          start_step=0, end_step=100)
    >>> cfg.weight_at(0), cfg.weight_at(50), cfg.weight_at(1000)
    (0.0, 0.25, 0.5)
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
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .schedules.decay import DECAY_CURVES
from .config_keys import checked_fields

__all__ = ["DistillationConfig", "TEACHERS", "WEIGHT_SCHEDULES", "kd_loss", "feature_loss", "distillation_loss"]

#: Where the teacher comes from: a frozen copy of the model at the pruning ``start_step`` (the term is 0 before),
#: or one the user passes.
TEACHERS = ("dense_at_start", "user")
#: How the weight of the distillation term moves from ``init_weight`` to ``weight`` over the window.
WEIGHT_SCHEDULES = ("constant", "linear", "cos")


def _number(name: str, v: Any, *, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {v!r} ({type(v).__name__})")
    bad = not math.isfinite(v) or (v <= 0 if positive else v < 0)
    if bad:
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {v!r}")
    return float(v)


@dataclass
class DistillationConfig:
    """How the dense teacher teaches the pruned student; every field checked at construction.

    Attributes:
        temperature: ``T`` > 0 dividing both logits before the softmax (1: the plain KL); the KD term
            is scaled by ``T**2``.
        weight: ``w`` >= 0, the weight of the distillation term added to the task loss (after the ramp).
        weight_schedule: ``"constant"`` (``weight`` at every step), ``"linear"`` or ``"cos"`` (from
            ``init_weight`` at ``start_step`` to ``weight`` at ``end_step``, then ``weight``; before
            ``start_step``: ``init_weight``).
        init_weight: the weight at ``start_step`` of a ramp, >= 0.
        start_step, end_step: the ramp's window in optimizer steps (``0 <= start_step <= end_step``).
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
        ValueError: weight_schedule must be one of ('constant', 'linear', 'cos'), got 'ramp'
    """

    temperature: float = 2.0
    weight: float = 1.0
    weight_schedule: str = "constant"
    init_weight: float = 0.0
    start_step: int = 0
    end_step: int = 0
    logit_weight: float = 1.0
    features: list[str] = field(default_factory=list)
    feature_weight: float = 1.0
    teacher: str = "dense_at_start"

    def __post_init__(self) -> None:
        self.temperature = _number("temperature", self.temperature, positive=True)
        for name in ("weight", "init_weight", "logit_weight", "feature_weight"):
            setattr(self, name, _number(name, getattr(self, name)))
        self._choice("weight_schedule", WEIGHT_SCHEDULES)
        self._choice("teacher", TEACHERS)
        for name in ("start_step", "end_step"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
            setattr(self, name, int(v))
        if self.start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {self.start_step}")
        if self.end_step < self.start_step:
            raise ValueError(f"end_step must be >= start_step ({self.start_step}), got {self.end_step}")
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

    # ----- construction / export -------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DistillationConfig":
        """Build from a dict; unknown keys raise ``ValueError`` with a "did you mean" hint.

        Example:
            >>> DistillationConfig.from_dict({"temprature": 2})
            Traceback (most recent call last):
            ...
            ValueError: unknown distillation key 'temprature' (did you mean 'temperature'?)
        """
        return cls(**checked_fields(cls, data, "distillation"))

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "DistillationConfig":
        """Load from a YAML file; a top-level ``distillation:`` key is accepted."""
        from .yaml_io import load_yaml_mapping    # PyYAML loads only when a YAML file is read
        data = load_yaml_mapping(path)
        if set(data) == {"distillation"} and isinstance(data["distillation"], Mapping):
            data = data["distillation"]
        return cls.from_dict(data)

    @classmethod
    def coerce(cls, config: "DistillationConfig | Mapping[str, Any] | str | os.PathLike") -> "DistillationConfig":
        """Accept a ``DistillationConfig``, a dict or a YAML path."""
        if isinstance(config, cls):
            return config
        if isinstance(config, Mapping):
            return cls.from_dict(config)
        if isinstance(config, (str, os.PathLike)):
            return cls.from_yaml(config)
        raise TypeError(f"distillation must be a DistillationConfig, a dict or a YAML file path, "
                        f"got {type(config).__name__}")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict that ``from_dict`` turns back into an equal config."""
        return dataclasses.asdict(self)

    # ----- the math over steps ---------------------------------------------------------
    def weight_at(self, step: int) -> float:
        """``w(step)``: the weight of the distillation term at optimizer step ``step`` (a Python float).

        Example:
            >>> cfg = DistillationConfig(weight=2.0, weight_schedule="cos", start_step=10, end_step=20)
            >>> cfg.weight_at(5), cfg.weight_at(20), round(cfg.weight_at(15), 4)
            (0.0, 2.0, 0.5858)
        """
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"step must be an integer, got {step!r} ({type(step).__name__})")
        if self.weight_schedule == "constant":
            return self.weight
        if step < self.start_step:
            return self.init_weight
        if step >= self.end_step:
            return self.weight
        p = (int(step) - self.start_step) / (self.end_step - self.start_step)
        return float(DECAY_CURVES[self.weight_schedule][0](self.init_weight, self.weight, p))


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
