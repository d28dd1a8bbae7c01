"""In-graph schedule tensors whose every sparsity value comes from the core schedule.

TF never evaluates a schedule formula. Sparsity values are gathered by step
from a float64 table of the core schedule's own values over
``[start_step - 1, end_step]`` (a schedule is constant before its start and
from its end on). A schedule too long for a table (more than 2**20 steps, or
one that never ends) is evaluated by the core itself, in a
``tf.numpy_function`` that runs only when the tensor is evaluated at a step
inside the schedule window. So at every step ``sess.run(t["sparsity"])`` is
``schedule.sparsity(step)`` bit for bit, for every schedule kind, including
kinds added to the core later: none is named here.

The step logic (update points at the start, every ``pruning_frequency`` steps
and at the end) is integer arithmetic on the int64 step, the grid of
``sparsify.schedules.Schedule``; a schedule class with other update points
(overriding ``update_ready``/``last_update_step``) is asked through
``tf.numpy_function`` instead.

Example:
    >>> import tensorflow as tf, sparsify
    >>> sched = sparsify.GradualSchedule(0.0, 0.8, 10, 20, 5)
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     step = tf.compat.v1.placeholder(tf.int64, [])
    ...     t = schedule_tensors(sched, step)
    >>> with tf.compat.v1.Session(graph=g) as s:
    ...     bool(s.run(t["sparsity"], {step: 15}) == sched.sparsity(15)), bool(s.run(t["update_ready"], {step: 15}))
    (True, True)
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from sparsify.schedules import Schedule

from .graph_utils import v1_cond

__all__ = ["schedule_tensors", "sparsity_tensor", "update_point_tensors", "MAX_TABLE_STEPS"]

#: Longest schedule window (in steps) whose values are stored as a table in the graph.
MAX_TABLE_STEPS = 1 << 20


def _window(schedule: Schedule) -> tuple[int, int, int]:
    """``(start, end, frequency)`` read through the schedule's public step methods (end -1: never ends).

    The start is the first update point and the frequency the distance to the next one (a frequency
    reaching past the end gives the same update points as any larger one; every step is frequency 1).
    """
    start = int(schedule.next_update_step(-1))
    end = -1 if schedule.end == float("inf") else int(schedule.end)
    nxt = int(schedule.next_update_step(start))
    return start, end, (nxt - start if nxt > start else 1)


def _core_call(fn, steps: tf.Tensor, dtype: tf.DType, name: str) -> tf.Tensor:
    np_dtype = dtype.as_numpy_dtype
    out = tf.numpy_function(lambda s: np.asarray(fn(s), dtype=np_dtype), [steps], dtype, stateful=False, name=name)
    out.set_shape(steps.shape)
    return out


def _sparsity_lookup(schedule: Schedule):
    """A function ``step tensor -> sparsity tensor`` sharing one table per schedule."""
    _check_schedule(schedule)
    b, e, _ = _window(schedule)
    first = b - 1                                     # the value before the start, as the core gives it
    if e != -1 and e - first + 1 <= MAX_TABLE_STEPS:
        table = tf.constant(np.asarray(schedule.sparsity(np.arange(first, e + 1)), np.float64),
                            name="nm_sparsity_table")
        return lambda s: tf.gather(table, tf.clip_by_value(s - first, 0, e - first))
    edges = tf.constant([float(schedule.sparsity(first)), float(schedule.sparsity(max(e, b)))], tf.float64,
                        name="nm_sparsity_edges")

    def lookup(s: tf.Tensor) -> tf.Tensor:
        inside = s >= b if e == -1 else tf.logical_and(s >= b, s < e)
        outside = tf.gather(edges, tf.cast(s >= b, tf.int32))
        return v1_cond(tf.reduce_any(inside), lambda: _core_call(schedule.sparsity, s, tf.float64, "nm_core_sparsity"),
                       lambda: tf.identity(outside), name="nm_sparsity_in_window")

    return lookup


def sparsity_tensor(schedule: Schedule, step: tf.Tensor) -> tf.Tensor:
    """float64 ``schedule.sparsity(step)`` for an integer ``step`` tensor (any shape), from the core's values.

    Example:
        >>> import tensorflow as tf, sparsify
        >>> sched = sparsify.DecaySchedule("cos", 0.0, 0.5, 0, 3_000_000, 1)     # too long for a table
        >>> steps = [0, 1_000_001, 3_000_000]
        >>> with tf.Graph().as_default():
        ...     t = sparsity_tensor(sched, tf.constant(steps, tf.int64))
        ...     bool((tf.compat.v1.Session().run(t) == sched.sparsity(steps)).all())
        True
    """
    return _sparsity_lookup(schedule)(tf.cast(step, tf.int64))


def _uses_base_grid(schedule: Schedule) -> bool:
    cls = type(schedule)
    return cls.update_ready is Schedule.update_ready and cls.last_update_step is Schedule.last_update_step


def update_point_tensors(schedule: Schedule, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``(update_ready, last_update_step)`` of ``schedule`` at an integer ``step`` tensor (no sparsity values).

    Example:
        >>> import tensorflow as tf, sparsify
        >>> with tf.Graph().as_default():
        ...     ready, last = update_point_tensors(sparsify.GradualSchedule(0.0, 0.5, 2, 9, 3), tf.constant([1, 6, 9]))
        ...     [x.tolist() for x in tf.compat.v1.Session().run([ready, last])]
        [[False, False, True], [-1, 5, 9]]
    """
    _check_schedule(schedule)
    s = tf.cast(step, tf.int64)
    if not _uses_base_grid(schedule):
        return (_core_call(schedule.update_ready, s, tf.bool, "nm_core_update_ready"),
                _core_call(schedule.last_update_step, s, tf.int64, "nm_core_last_update_step"))
    b, e, f = _window(schedule)
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
    return ready, last


def _check_schedule(schedule: Schedule) -> None:
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a sparsify Schedule (GradualSchedule, ConstantSchedule, DecaySchedule, "
                        f"...), got {type(schedule).__name__}")


def schedule_tensors(schedule: Schedule, step: tf.Tensor) -> dict[str, tf.Tensor]:
    """Tensors of a core schedule at an integer ``step`` tensor.

    Returns a dict with ``sparsity`` (float64, at ``step``), ``update_ready``
    (bool), ``last_update_step`` (int64, the latest update point ``<= step``,
    -1 before any), ``target_sparsity`` (float64, the sparsity at that update
    point, 0 before any) and ``active`` (bool, masking applied at ``step``).
    """
    _check_schedule(schedule)
    s = tf.cast(step, tf.int64)
    ready, last = update_point_tensors(schedule, s)
    lookup = _sparsity_lookup(schedule)
    target = tf.where(last >= 0, lookup(last), tf.constant(0.0, tf.float64))
    b, e, _ = _window(schedule)
    active = s >= b
    if e != -1 and not schedule.masking_active(e + 1):
        active = tf.logical_and(active, s <= e)
    return {"sparsity": lookup(s), "update_ready": ready, "last_update_step": last,
            "target_sparsity": target, "active": active}
