"""Sparsity schedules: pure functions of the training step, registered by name.

* :mod:`~sparsify.schedules.base`: the step logic every schedule shares
  (window, update points, ``update_due``, the ramp);
* :mod:`~sparsify.schedules.registry`: kinds by name (``register_schedule``,
  ``get_schedule``); ``PruningConfig.sparsity_decay_type`` accepts exactly
  the registered names;
* one module per family: :mod:`~sparsify.schedules.gradual` (the seed's
  polynomial), :mod:`~sparsify.schedules.constant`,
  :mod:`~sparsify.schedules.decay` (Intel Neural Compressor's curves).

Every sparsity value is computed with Python floats and
:mod:`sparsify.portable_math`: the same bits for a scalar or an array of
steps, on any CPU, with or without SIMD.

Example:
    >>> s = GradualSchedule(0.0, 0.9, begin_step=0, end_step=100, update_frequency=10)
    >>> float(s.sparsity(50)), bool(s.update_ready(50)), int(s.last_update_step(57))
    (0.7875, True, 50)
    >>> registered_schedules()
    ('gradual', 'constant', 'linear', 'exp', 'cos', 'cube')
"""
from .base import Schedule, validate_int, validate_ratio
from .registry import (ScheduleKind, ScheduleSettings, build_schedule, get_schedule, register_schedule,
                       registered_schedules, schedule_kind, unregister_schedule)
from .gradual import GradualSchedule          # registration order: gradual, constant, then the decays
from .constant import ConstantSchedule
from .decay import DECAY_CURVES, DECAY_TYPES, DecaySchedule

__all__ = [
    "Schedule", "GradualSchedule", "ConstantSchedule", "DecaySchedule", "DECAY_TYPES", "DECAY_CURVES",
    "get_schedule", "build_schedule", "register_schedule", "unregister_schedule", "registered_schedules",
    "schedule_kind", "ScheduleSettings", "ScheduleKind", "validate_ratio", "validate_int",
]
