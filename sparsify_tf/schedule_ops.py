"""In-graph schedule tensors that equal the core schedules at every step.

Computed from the global step in int64 with the core's step logic; sparsity
values are looked up in a float64 table filled by the core schedule itself
(over ``[begin, end]``, up to 2**20 entries; longer schedules fall back to
the closed-form formula, equal within 1 ulp), so ``sess.run(sparsity)`` at
step ``s`` equals ``schedule.sparsity(s)`` of the core exactly.

Example:
    >>> import tensorflow as tf, sparsify
    >>> sched = sparsify.GradualSchedule(0.0, 0.8, 10, 20, 5)
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     step = tf.compat.v1.placeholder(tf.int64, [])
    ...     t = schedule_tensors(sched, step)
    >>> with tf.compat.v1.Session(graph=g) as s:
    ...     round(float(s.run(t["sparsity"], {step: 15})), 4), bool(s.run(t["update_ready"], {step: 15}))
    (0.7, True)
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from sparsify.schedules import ConstantSchedule, DecaySchedule, GradualSchedule, Schedule

__all__ = ["schedule_tensors"]


def _fraction(sched: Schedule, p: tf.Tensor) -> tf.Tensor:
    if isinstance(sched, GradualSchedule):
        return 1.0 - tf.pow(1.0 - p, tf.constant(float(sched.exponent), tf.float64))
    kind = sched.decay_type
    if kind == "linear":
        return p
    if kind == "cube":
        return 1.0 - tf.pow(1.0 - p, tf.constant(3.0, tf.float64))
    if kind == "exp":
        return (1.0 - tf.exp(-5.0 * p)) / (1.0 - math.exp(-5.0))
    return (1.0 - tf.cos(math.pi * p)) / 2.0


_MAX_TABLE = 1 << 20


def _formula(sched: Schedule, step: tf.Tensor) -> tf.Tensor:
    s = tf.cast(step, tf.float64)
    b = float(sched.begin_step)
    if isinstance(sched, ConstantSchedule):
        return tf.where(s >= b, tf.constant(sched.sparsity_value, tf.float64), tf.constant(0.0, tf.float64))
    final = tf.constant(sched.final_sparsity, tf.float64)
    zero = tf.constant(0.0, tf.float64)
    e = float(sched.end_step)
    if e == b:
        return tf.where(s >= b, final, zero)
    p = tf.clip_by_value((s - b) / (e - b), 0.0, 1.0)
    init = sched.init_sparsity
    mid = init + (sched.final_sparsity - init) * _fraction(sched, p)
    return tf.where(s < b, zero, tf.where(s >= e, final, mid))


def _sparsity(sched: Schedule, step: tf.Tensor) -> tf.Tensor:
    """Sparsity at ``step``: a lookup in the core's own values over [begin, end] (exact), else the formula."""
    if isinstance(sched, ConstantSchedule) or sched.end_step == sched.begin_step \
            or sched.end_step - sched.begin_step + 1 > _MAX_TABLE:
        return _formula(sched, step)
    b, e = sched.begin_step, sched.end_step
    table = tf.constant(np.asarray(sched.sparsity(np.arange(b, e + 1)), np.float64))
    s = tf.cast(step, tf.int64)
    val = tf.gather(table, tf.clip_by_value(s - b, 0, e - b))
    return tf.where(s < b, tf.zeros_like(val), val)


def _target(sched: Schedule, last: tf.Tensor) -> tf.Tensor:
    """Sparsity at the update point ``last`` (0 where ``last`` < 0), read from the core's values."""
    b, e, f = sched.begin_step, sched.end_step, sched.update_frequency
    zero = tf.constant(0.0, tf.float64)
    if isinstance(sched, ConstantSchedule):
        return tf.where(last >= 0, tf.constant(sched.sparsity_value, tf.float64), zero)
    n_points = (e - b + 1) if f <= 0 else (e - b) // f + 2
    if n_points > _MAX_TABLE:
        return tf.where(last >= 0, _formula(sched, tf.maximum(last, 0)), zero)
    if f <= 0:
        points = np.arange(b, e + 1)
        idx = tf.clip_by_value(last - b, 0, len(points) - 1)
    else:
        points = np.unique(np.concatenate([np.arange(b, e + 1, f), [e]]))
        idx = tf.where(last >= e, tf.constant(len(points) - 1, tf.int64),
                       tf.clip_by_value(tf.math.floordiv(last - b, f), 0, len(points) - 1))
    table = tf.constant(np.asarray(sched.sparsity(points), np.float64))
    return tf.where(last >= 0, tf.gather(table, idx), zero)


def schedule_tensors(schedule: Schedule, step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Tensors ``sparsity`` (at ``step``), ``update_ready``, ``last_update_step``,
    ``target_sparsity`` (sparsity at the last update point, 0 before any),
    ``active`` (masking applied) for a core schedule.
    """
    if not isinstance(schedule, (GradualSchedule, ConstantSchedule, DecaySchedule)):
        raise TypeError(f"schedule must be a sparsify GradualSchedule, ConstantSchedule or DecaySchedule, "
                        f"got {type(schedule).__name__}")
    s = tf.cast(step, tf.int64)
    b, e, f = schedule.begin_step, schedule.end_step, schedule.update_frequency
    inside = s >= b if e == -1 else tf.logical_and(s >= b, s <= e)
    if f <= 0:
        ready = inside
    else:
        on_grid = tf.equal(tf.math.floormod(s - b, f), 0)
        if e != -1:
            on_grid = tf.logical_or(on_grid, tf.equal(s, e))
        ready = tf.logical_and(inside, on_grid)
    capped = tf.minimum(s, e) if e != -1 else s
    grid = capped if f <= 0 else b + tf.math.floordiv(capped - b, f) * f
    if e != -1:
        grid = tf.where(s >= e, tf.constant(e, tf.int64), grid)
    last = tf.where(s >= b, grid, tf.constant(-1, tf.int64))
    target = _target(schedule, last)
    active = s >= b
    if not getattr(schedule, "leave_enabled", True) and e != -1:
        active = tf.logical_and(active, s <= e)
    return {"sparsity": _sparsity(schedule, s), "update_ready": ready, "last_update_step": last,
            "target_sparsity": target, "active": active}
