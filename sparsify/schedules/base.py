"""The step logic every schedule shares: window, update points, ramp.

A schedule answers, vectorised over arrays of steps:

* ``sparsity(step)``: the target sparsity at ``step``;
* ``update_ready(step)``: whether masks are recomputed at ``step``;
* ``last_update_step(step)``: the latest update point ``<= step`` (or -1),
  so a caller that skips steps (Keras ``steps_per_execution``, a resumed run)
  can ask ``update_due(done_step, step)`` and never lose an update.

Sparsity values are computed one step at a time with Python floats and the
functions of :mod:`sparsify.portable_math` (:meth:`Schedule.ramp`), so an
array of steps gives exactly the bits of the same steps asked one by one, on
any CPU, with or without SIMD.

Example:
    >>> from sparsify.schedules import GradualSchedule
    >>> s = GradualSchedule(0.0, 0.9, begin_step=0, end_step=100, update_frequency=10)
    >>> float(s.sparsity(50)), bool(s.update_ready(50)), bool(s.update_ready(55))
    (0.7875, True, False)
    >>> int(s.last_update_step(57)), bool(s.update_due(50, 57)), bool(s.update_due(50, 60))
    (50, False, True)
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

__all__ = ["Schedule", "validate_ratio", "validate_int"]


def validate_ratio(name: str, value: Any) -> float:
    """``value`` as a float in [0, 1); ``TypeError``/``ValueError`` naming ``name`` otherwise.

    Example:
        >>> validate_ratio("final_sparsity", 0.5)
        0.5
        >>> validate_ratio("final_sparsity", 1.0)
        Traceback (most recent call last):
        ...
        ValueError: final_sparsity must be in [0, 1), got 1.0
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number in [0, 1), got {value!r} ({type(value).__name__})")
    v = float(value)
    if math.isnan(v) or not 0.0 <= v < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return v


def validate_int(name: str, value: Any) -> int:
    """``value`` as an int; ``TypeError`` naming ``name`` for anything else (bools included).

    Example:
        >>> validate_int("end_step", 2.5)
        Traceback (most recent call last):
        ...
        TypeError: end_step must be an integer, got 2.5 (float)
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    return int(value)


class Schedule:
    """Base class: begin/end window plus update points every ``update_frequency`` steps.

    Subclasses are dataclasses with ``begin_step``, ``end_step``,
    ``update_frequency`` (and optionally ``leave_enabled``) that implement
    :meth:`sparsity`, usually through :meth:`ramp`.
    """

    begin_step: int
    end_step: int
    update_frequency: int

    def validate_window(self) -> None:
        """Check (and normalise to int) ``begin_step``, ``end_step`` and ``update_frequency``."""
        self.begin_step = validate_int("begin_step", self.begin_step)
        self.end_step = validate_int("end_step", self.end_step)
        self.update_frequency = validate_int("update_frequency", self.update_frequency)
        if self.begin_step < 0:
            raise ValueError(f"begin_step must be >= 0, got {self.begin_step}")
        if self.end_step != -1 and self.end_step < self.begin_step:
            raise ValueError(f"end_step must be >= begin_step ({self.begin_step}) or -1 (never ends), got {self.end_step}")

    def require_end(self) -> None:
        """Raise ``ValueError`` if the schedule has no end (``end_step == -1``): ramps need one."""
        if self.end_step == -1:
            raise ValueError(f"end_step must be >= begin_step for {type(self).__name__}, got -1")

    @property
    def end(self) -> float:
        """``end_step`` as a number to compare with (``math.inf`` when the schedule never ends)."""
        return math.inf if self.end_step == -1 else self.end_step

    def masking_active(self, step: int) -> bool:
        """False after ``end_step`` when ``leave_enabled`` is off (masks released), else True.

        Example:
            >>> from sparsify.schedules import GradualSchedule
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
            >>> from sparsify.schedules import GradualSchedule
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

    def update_due(self, done_step, step):
        """True if an update point lies in ``(done_step, step]``.

        ``done_step`` is the step of the last update the caller applied (-1 for none).
        """
        return np.asarray(self.last_update_step(step)) > np.asarray(done_step)

    def ramp(self, step, value_at: Callable[[float], float], init: float, final: float):
        """Sparsity of a ramp from ``init`` to ``final`` over ``[begin_step, end_step]``.

        0 before begin, ``init`` at begin, ``value_at(p)`` strictly between with
        ``p = (step - begin) / (end - begin)``, ``final`` at and after end
        (``begin == end`` is one-shot: ``final`` from that step). Each value is
        one Python-float evaluation per step, so arrays equal scalar calls bit
        for bit; ``value_at`` must use only IEEE-exact operations and
        :mod:`sparsify.portable_math`.

        Returns a float for a scalar ``step``, else an array of the same shape.
        """
        b, e = self.begin_step, self.end_step

        def one(t: int) -> float:
            if t < b:
                return 0.0
            if t >= e:
                return final
            if t == b:
                return init
            return float(value_at((t - b) / (e - b)))

        s = np.asarray(step)
        if s.dtype.kind not in "iu":
            s = s.astype(np.float64)
        out = np.array([one(t) for t in s.ravel().tolist()], dtype=np.float64).reshape(s.shape)
        return out[()] if out.ndim == 0 else out
