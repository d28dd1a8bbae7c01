"""Intel Neural Compressor's ``sparsity_decay_type`` curves.

From init sparsity ``i`` to target ``t``, with ``p`` the fraction of the
pruning window done (INC counts pruning steps, we count optimizer steps; the
two agree at update points):

* ``linear``: ``i + (t-i) * p``
* ``cube``: ``i + (t-i) * p**3``
* ``cos``: ``i + (t-i) * (1 - cos(p * pi/2))``
* ``exp``: ``1 - (1-i) * ((1-t)/(1-i)) ** p``

Adding a curve is one entry in :data:`DECAY_CURVES` (and its test).

Example:
    >>> [round(float(DecaySchedule(kind, 0.0, 0.9, 0, 10, 1).sparsity(5)), 4) for kind in DECAY_TYPES]
    [0.45, 0.6838, 0.2636, 0.1125]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

from ..portable_math import cos, integer_power, power
from .base import Schedule, validate_ratio
from .registry import ScheduleSettings, register_schedule

__all__ = ["DecaySchedule", "DECAY_CURVES", "DECAY_TYPES"]

_HALF_PI = math.pi / 2.0


def _linear(i: float, t: float, p: float) -> float:
    return i + (t - i) * p


def _exp(i: float, t: float, p: float) -> float:
    return 1.0 - (1.0 - i) * power((1.0 - t) / (1.0 - i), p)


def _cos(i: float, t: float, p: float) -> float:
    return i + (t - i) * (1.0 - cos(p * _HALF_PI))


def _cube(i: float, t: float, p: float) -> float:
    return i + (t - i) * integer_power(p, 3)


#: name -> (value(i, t, p), formula for the docs); IEEE-exact operations and portable_math only.
DECAY_CURVES: dict[str, tuple[Callable[[float, float, float], float], str]] = {
    "linear": (_linear, "i + (t-i) * p"),
    "exp": (_exp, "1 - (1-i) * ((1-t)/(1-i))^p"),
    "cos": (_cos, "i + (t-i) * (1 - cos(p * pi/2))"),
    "cube": (_cube, "i + (t-i) * p^3"),
}
DECAY_TYPES = tuple(DECAY_CURVES)


@dataclass
class DecaySchedule(Schedule):
    """Sparsity ramps from ``init_sparsity`` to ``final_sparsity`` along an INC decay curve.

    0 before begin, ``init`` at begin, the curve strictly between (p =
    ``(step - begin) / (end - begin)``), ``final`` at and after end.

    Example:
        >>> DecaySchedule("linear", 0.0, 0.8, 0, 10, 1).sparsity(5).item()
        0.4
        >>> DecaySchedule("cube", 0.0, 0.9, 0, 100, 10).sparsity([0, 50, 100]).tolist()
        [0.0, 0.1125, 0.9]
    """

    decay_type: str
    init_sparsity: float
    final_sparsity: float
    begin_step: int
    end_step: int
    update_frequency: int = 100
    leave_enabled: bool = True

    def __post_init__(self) -> None:
        if self.decay_type not in DECAY_CURVES:
            raise ValueError(f"sparsity_decay_type must be one of {DECAY_TYPES}, got {self.decay_type!r}")
        self.init_sparsity = validate_ratio("init_sparsity", self.init_sparsity)
        self.final_sparsity = validate_ratio("final_sparsity", self.final_sparsity)
        self.validate_window()
        self.require_end()

    def sparsity(self, step):
        """Target sparsity at ``step`` (float or array of floats)."""
        curve = DECAY_CURVES[self.decay_type][0]
        i, t = self.init_sparsity, self.final_sparsity
        return self.ramp(step, lambda p: curve(i, t, p), i, t)

    @classmethod
    def from_settings(cls, decay_type: str, s: ScheduleSettings) -> "DecaySchedule":
        """Build the ``decay_type`` curve from the common schedule settings."""
        return cls(decay_type, s.init_sparsity, s.final_sparsity, s.begin_step, s.end_step, s.update_frequency,
                   s.leave_enabled)


for _name, (_, _formula) in DECAY_CURVES.items():
    register_schedule(_name, formula=f"{_formula} (Intel Neural Compressor)")(partial(DecaySchedule.from_settings, _name))
