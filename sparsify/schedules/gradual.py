"""The seed's polynomial schedule (SparseML / TF-v1 mask pruning).

Example:
    >>> GradualSchedule(0.0, 0.8, 10, 20, 5).sparsity([0, 10, 15, 20, 99]).round(4).tolist()
    [0.0, 0.0, 0.7, 0.8, 0.8]
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..portable_math import power
from .base import Schedule, validate_ratio
from .registry import ScheduleSettings, register_schedule

__all__ = ["GradualSchedule"]


@dataclass
class GradualSchedule(Schedule):
    """Polynomial decay from ``init_sparsity`` to ``final_sparsity`` (the seed schedule).

    ``init + (final - init) * (1 - (1 - p) ** exponent)`` with
    ``p = (step - begin) / (end - begin)``; 0 before begin, ``init`` at begin,
    ``final`` at and after end. ``begin_step == end_step`` is one-shot pruning.
    The power is :func:`sparsify.portable_math.power` (an integer exponent
    multiplies), so the value has the same bits on every machine.

    Example:
        >>> float(GradualSchedule(0.0, 0.9, 0, 100, 10).sparsity(50))
        0.7875
    """

    init_sparsity: float
    final_sparsity: float
    begin_step: int
    end_step: int
    update_frequency: int = 100
    exponent: float = 3.0
    leave_enabled: bool = True

    def __post_init__(self) -> None:
        self.init_sparsity = validate_ratio("init_sparsity", self.init_sparsity)
        self.final_sparsity = validate_ratio("final_sparsity", self.final_sparsity)
        self.validate_window()
        self.require_end()
        if isinstance(self.exponent, bool) or not isinstance(self.exponent, (int, float)) \
                or not math.isfinite(self.exponent) or not self.exponent > 0:
            raise ValueError(f"exponent must be a positive number, got {self.exponent!r}")

    def sparsity(self, step):
        """Target sparsity at ``step`` (float or array of floats)."""
        init, final, exponent = self.init_sparsity, self.final_sparsity, float(self.exponent)
        return self.ramp(step, lambda p: init + (final - init) * (1.0 - power(1.0 - p, exponent)), init, final)

    @classmethod
    def from_settings(cls, s: ScheduleSettings) -> "GradualSchedule":
        """Build from the common schedule settings."""
        return cls(s.init_sparsity, s.final_sparsity, s.begin_step, s.end_step, s.update_frequency, s.exponent,
                   s.leave_enabled)


register_schedule("gradual", formula="i + (t-i) * (1 - (1-p)^exponent) (the seed's polynomial; exponent 3 by default)"
                  )(GradualSchedule.from_settings)
