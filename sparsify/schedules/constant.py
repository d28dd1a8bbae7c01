"""Constant sparsity from a start step.

Example:
    >>> ConstantSchedule(0.5, begin_step=3).sparsity([0, 3, 1000]).tolist()
    [0.0, 0.5, 0.5]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Schedule, validate_ratio
from .registry import ScheduleSettings, register_schedule

__all__ = ["ConstantSchedule"]


@dataclass
class ConstantSchedule(Schedule):
    """Constant sparsity from ``begin_step`` (until ``end_step``; -1 means forever).

    Example:
        >>> s = ConstantSchedule(0.5, begin_step=2, end_step=-1, update_frequency=3)
        >>> [t for t in range(10) if s.update_ready(t)]
        [2, 5, 8]
    """

    sparsity_value: float
    begin_step: int = 0
    end_step: int = -1
    update_frequency: int = 100
    leave_enabled: bool = True

    def __post_init__(self) -> None:
        self.sparsity_value = validate_ratio("sparsity", self.sparsity_value)
        self.validate_window()

    def sparsity(self, step):
        """``sparsity_value`` from ``begin_step``, 0 before (float or array of floats)."""
        s = np.asarray(step, dtype=np.float64)
        out = np.where(s >= self.begin_step, self.sparsity_value, 0.0)
        return out[()] if out.ndim == 0 else out

    @classmethod
    def from_settings(cls, s: ScheduleSettings) -> "ConstantSchedule":
        """Build from the common schedule settings (``final_sparsity`` is the constant)."""
        return cls(s.final_sparsity, s.begin_step, s.end_step, s.update_frequency, s.leave_enabled)


register_schedule("constant", formula="t from start_step on (end_step may be -1: never ends)", open_end=True
                  )(ConstantSchedule.from_settings)
