"""Sparsity schedules: pure functions of the training step.

Every schedule answers three questions, vectorised over arrays of steps:

* ``sparsity(step)``: the target sparsity at ``step``;
* ``update_ready(step)``: whether masks are recomputed at ``step``;
* ``last_update_step(step)``: the latest update point ``<= step`` (or -1),
  so a caller that skips steps (Keras ``steps_per_execution``, a resumed run)
  can ask ``update_due(done_step, step)`` and never lose an update.

Example:
    >>> s = GradualSchedule(0.0, 0.9, begin_step=0, end_step=100, update_frequency=10)
    >>> float(s.sparsity(50)), bool(s.update_ready(50)), bool(s.update_ready(55))
    (0.7875, True, False)
    >>> int(s.last_update_step(57)), bool(s.update_due(50, 57)), bool(s.update_due(50, 60))
    (50, False, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

__all__ = [
    "Schedule", "GradualSchedule", "ConstantSchedule", "DecaySchedule",
    "DECAY_TYPES", "get_schedule",
]

DECAY_TYPES = ("linear", "exp", "cos", "cube")


def _check_ratio(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number in [0, 1), got {value!r} ({type(value).__name__})")
    v = float(value)
    if math.isnan(v) or not 0.0 <= v < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return v


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    return int(value)


class Schedule:
    """Base class: begin/end window plus update points every ``update_frequency`` steps."""

    begin_step: int
    end_step: int
    update_frequency: int

    def _validate_window(self) -> None:
        self.begin_step = _check_int("begin_step", self.begin_step)
        self.end_step = _check_int("end_step", self.end_step)
        self.update_frequency = _check_int("update_frequency", self.update_frequency)
        if self.begin_step < 0:
            raise ValueError(f"begin_step must be >= 0, got {self.begin_step}")
        if self.end_step != -1 and self.end_step < self.begin_step:
            raise ValueError(f"end_step must be >= begin_step ({self.begin_step}) or -1 (never ends), got {self.end_step}")

    @property
    def end(self) -> float:
        """``end_step`` as a number to compare with (``math.inf`` when the schedule never ends)."""
        return math.inf if self.end_step == -1 else self.end_step

    def masking_active(self, step: int) -> bool:
        """False after ``end_step`` when ``leave_enabled`` is off (masks released), else True.

        Example:
            >>> s = GradualSchedule(0.0, 0.5, 0, 10, 5, leave_enabled=False)
            >>> s.masking_active(10), s.masking_active(11)
            (True, False)
        """
        return bool(getattr(self, "leave_enabled", True) or int(step) <= self.end)

    def sparsity(self, step):  # pragma: no cover - abstract
        raise NotImplementedError

    def active(self, step):
        """True where the schedule masks weights (always after begin when leave_enabled)."""
        s = np.asarray(step)
        out = s >= self.begin_step
        if not getattr(self, "leave_enabled", True):
            out = out & (s <= self.end)
        return out

    def update_ready(self, step):
        """True at begin, at end and every ``update_frequency`` steps between."""
        s = np.asarray(step, dtype=np.int64)
        inside = (s >= self.begin_step) & (s <= self.end)
        if self.update_frequency <= 0:
            return inside
        on_grid = ((s - self.begin_step) % self.update_frequency) == 0
        return inside & (on_grid | (s == self.end_step))

    def last_update_step(self, step):
        """Latest update point ``<= step``; -1 where none has happened yet."""
        s = np.asarray(step, dtype=np.int64)
        capped = np.minimum(s, self.end_step) if self.end_step != -1 else s
        if self.update_frequency <= 0:
            grid = capped
        else:
            grid = self.begin_step + ((capped - self.begin_step) // self.update_frequency) * self.update_frequency
            if self.end_step != -1:
                grid = np.where(s >= self.end_step, self.end_step, grid)
        return np.where(s >= self.begin_step, grid, -1)

    def next_update_step(self, step: int) -> int:
        """First update point strictly after ``step``; -1 when none is left.

        Example:
            >>> s = GradualSchedule(0.0, 0.5, begin_step=3, end_step=12, update_frequency=4)
            >>> [s.next_update_step(t) for t in (-1, 3, 10, 11, 12)]
            [3, 7, 11, 12, -1]
        """
        s = int(step)
        if s < self.begin_step:
            return self.begin_step
        if self.end_step != -1 and s >= self.end_step:
            return -1
        if self.update_frequency <= 0:
            nxt = s + 1
        else:
            nxt = self.begin_step + ((s - self.begin_step) // self.update_frequency + 1) * self.update_frequency
        return min(nxt, self.end_step) if self.end_step != -1 else nxt

    def _ramp(self, step, fraction):
        """0 before begin, ``init`` at begin, ``init + (final-init)*fraction(p)`` between, ``final`` from end.

        Each value is computed with Python float arithmetic on one scalar, so an
        array of steps gives exactly the bits of the same steps asked one by one,
        on any CPU (NumPy's vectorised ``**``/``exp``/``cos`` may differ in the
        last bit with the SIMD level).
        """
        b, e = self.begin_step, self.end_step
        init, final = float(self.init_sparsity), float(self.final_sparsity)

        def one(t: float) -> float:
            if t < b:
                return 0.0
            if t >= e:
                return final
            return init + (final - init) * float(fraction((t - b) / (e - b)))

        s = np.asarray(step, dtype=np.float64)
        out = np.array([one(float(t)) for t in s.ravel()], dtype=np.float64).reshape(s.shape)
        return out[()] if out.ndim == 0 else out

    def update_due(self, done_step, step):
        """True if an update point lies in ``(done_step, step]``.

        ``done_step`` is the step of the last update the caller applied (-1 for none).
        """
        return np.asarray(self.last_update_step(step)) > np.asarray(done_step)


@dataclass
class GradualSchedule(Schedule):
    """Polynomial decay from ``init_sparsity`` to ``final_sparsity`` (the seed schedule).

    ``init + (final - init) * (1 - (1 - p) ** exponent)`` with
    ``p = (step - begin) / (end - begin)``; 0 before begin, ``final`` at and
    after end. ``begin_step == end_step`` is one-shot pruning.

    Example:
        >>> GradualSchedule(0.0, 0.8, 10, 20, 5).sparsity([0, 10, 15, 20, 99]).round(4).tolist()
        [0.0, 0.0, 0.7, 0.8, 0.8]
    """

    init_sparsity: float
    final_sparsity: float
    begin_step: int
    end_step: int
    update_frequency: int = 100
    exponent: float = 3.0
    leave_enabled: bool = True

    def __post_init__(self) -> None:
        self.init_sparsity = _check_ratio("init_sparsity", self.init_sparsity)
        self.final_sparsity = _check_ratio("final_sparsity", self.final_sparsity)
        self._validate_window()
        if self.end_step == -1:
            raise ValueError("end_step must be >= begin_step for GradualSchedule, got -1")
        if isinstance(self.exponent, bool) or not isinstance(self.exponent, (int, float)) or not self.exponent > 0:
            raise ValueError(f"exponent must be a positive number, got {self.exponent!r}")

    def sparsity(self, step):
        """Target sparsity at ``step`` (float or array of floats)."""
        exponent = float(self.exponent)
        return self._ramp(step, lambda p: 1.0 - (1.0 - p) ** exponent)


@dataclass
class ConstantSchedule(Schedule):
    """Constant sparsity from ``begin_step`` (until ``end_step``; -1 means forever).

    Example:
        >>> ConstantSchedule(0.5, begin_step=3).sparsity([0, 3, 1000]).tolist()
        [0.0, 0.5, 0.5]
    """

    sparsity_value: float
    begin_step: int = 0
    end_step: int = -1
    update_frequency: int = 100
    leave_enabled: bool = True

    def __post_init__(self) -> None:
        self.sparsity_value = _check_ratio("sparsity", self.sparsity_value)
        self._validate_window()

    def sparsity(self, step):
        s = np.asarray(step, dtype=np.float64)
        out = np.where(s >= self.begin_step, self.sparsity_value, 0.0)
        return out[()] if out.ndim == 0 else out


@dataclass
class DecaySchedule(Schedule):
    """Sparsity ramps with a named decay (the other seed's ``sparsity_decay_type``).

    With ``p = (step - begin) / (end - begin)`` the fraction of the way to
    ``final`` is: ``linear`` p; ``cube`` 1 - (1-p)**3; ``exp`` (1 - exp(-5p)) /
    (1 - exp(-5)); ``cos`` (1 - cos(pi p)) / 2.

    Example:
        >>> DecaySchedule("linear", 0.0, 0.8, 0, 10, 1).sparsity(5).item()
        0.4
    """

    decay_type: str
    init_sparsity: float
    final_sparsity: float
    begin_step: int
    end_step: int
    update_frequency: int = 100
    leave_enabled: bool = True

    def __post_init__(self) -> None:
        if self.decay_type not in DECAY_TYPES:
            raise ValueError(f"sparsity_decay_type must be one of {DECAY_TYPES}, got {self.decay_type!r}")
        self.init_sparsity = _check_ratio("init_sparsity", self.init_sparsity)
        self.final_sparsity = _check_ratio("final_sparsity", self.final_sparsity)
        self._validate_window()
        if self.end_step == -1:
            raise ValueError("end_step must be >= begin_step for DecaySchedule, got -1")

    def _fraction(self, p):
        if self.decay_type == "linear":
            return p
        if self.decay_type == "cube":
            return 1.0 - (1.0 - p) ** 3
        if self.decay_type == "exp":
            return (1.0 - math.exp(-5.0 * p)) / (1.0 - math.exp(-5.0))
        return (1.0 - math.cos(math.pi * p)) / 2.0

    def sparsity(self, step):
        """Target sparsity at ``step`` (float or array of floats)."""
        return self._ramp(step, self._fraction)


def get_schedule(config: Mapping[str, Any] | Any) -> Schedule:
    """Build a schedule from a dict (or a ``PruningConfig``).

    Dict keys: ``type`` (``"gradual"`` default, ``"constant"``, or a decay
    type ``"linear"/"exp"/"cos"/"cube"``), ``init_sparsity``,
    ``final_sparsity`` (or ``target_sparsity``), ``begin_step``
    (or ``start_step``), ``end_step``, ``update_frequency`` (or
    ``pruning_frequency``), ``exponent``, ``leave_enabled``.

    Example:
        >>> get_schedule({"type": "cos", "final_sparsity": 0.5, "begin_step": 0, "end_step": 4,
        ...               "update_frequency": 1}).sparsity(2).round(6).item()
        0.25
    """
    if hasattr(config, "schedule"):            # a PruningConfig
        return config.schedule()
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict or PruningConfig, got {type(config).__name__}")
    c = dict(config)
    kind = c.pop("type", c.pop("sparsity_decay_type", "gradual"))
    final = c.pop("final_sparsity", c.pop("target_sparsity", None))
    begin = c.pop("begin_step", c.pop("start_step", 0))
    end = c.pop("end_step", None)
    freq = c.pop("update_frequency", c.pop("pruning_frequency", 100))
    init = c.pop("init_sparsity", 0.0)
    leave = c.pop("leave_enabled", True)
    exponent = c.pop("exponent", 3.0)
    if c:
        raise ValueError(f"unknown schedule keys {sorted(c)}; allowed: type, init_sparsity, final_sparsity, "
                         "begin_step, end_step, update_frequency, exponent, leave_enabled")
    if final is None:
        raise ValueError("schedule needs final_sparsity (or target_sparsity)")
    if kind == "constant":
        return ConstantSchedule(final, begin, -1 if end is None else end, freq, leave)
    if end is None:
        raise ValueError(f"schedule type {kind!r} needs end_step")
    if kind == "gradual":
        return GradualSchedule(init, final, begin, end, freq, exponent, leave)
    if kind in DECAY_TYPES:
        return DecaySchedule(kind, init, final, begin, end, freq, leave)
    raise ValueError(f"schedule type must be one of ('gradual', 'constant', {', '.join(map(repr, DECAY_TYPES))}), got {kind!r}")
