"""In-graph schedule tensors equal the core schedule at every step, bit for bit, for every kind."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import sparsify
from sparsify.schedules import DECAY_TYPES, GradualSchedule, Schedule, get_schedule
from sparsify_tf.common.schedule_ops import MAX_TABLE_STEPS, schedule_tensors, sparsity_tensor, update_point_tensors

tf1 = tf.compat.v1

KINDS = ("gradual", "constant", *DECAY_TYPES)


def _run(sched, steps, scalar=False):
    """schedule_tensors at ``steps``, fed as one vector or one scalar at a time."""
    g = tf.Graph()
    with g.as_default():
        s = tf1.placeholder(tf.int64, [] if scalar else [None])
        t = schedule_tensors(sched, s)
    with tf1.Session(graph=g) as sess:
        if not scalar:
            return sess.run(t, {s: np.asarray(steps, np.int64)}), g
        rows = [sess.run(t, {s: int(step)}) for step in steps]
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}, g


def _assert_equal_core(sched, steps, out):
    steps = np.asarray(steps, np.int64)
    np.testing.assert_array_equal(out["sparsity"], sched.sparsity(steps))
    np.testing.assert_array_equal(out["update_ready"], sched.update_ready(steps))
    np.testing.assert_array_equal(out["last_update_step"], sched.last_update_step(steps))
    last = sched.last_update_step(steps)
    np.testing.assert_array_equal(out["target_sparsity"],
                                  [0.0 if lu < 0 else sched.sparsity(int(lu)) for lu in last])
    np.testing.assert_array_equal(out["active"], sched.active(steps))


def _schedule(kind, start=3, end=97, freq=7, leave=True):
    return get_schedule({"type": kind, "init_sparsity": 0.05, "final_sparsity": 0.85, "start_step": start,
                         "end_step": end, "pruning_frequency": freq, "leave_enabled": leave})


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_equals_core_at_every_step(kind):
    for sched in (_schedule(kind), _schedule(kind, start=0, end=50, freq=0, leave=False),
                  _schedule(kind, start=20, end=20, freq=5)):
        steps = np.arange(0, 160)
        out, _ = _run(sched, steps)
        _assert_equal_core(sched, steps, out)


@pytest.mark.parametrize("kind", KINDS)
def test_long_schedule_is_evaluated_by_the_core(kind):
    """Over 2**20 steps: no table, no formula in TF; the core's values at spot-checked steps, bit for bit."""
    end = (1 << 21) + 5
    sched = _schedule(kind, start=10, end=end, freq=1000)
    assert end - 10 > MAX_TABLE_STEPS
    steps = [0, 9, 10, 11, 12_345, 1 << 20, (1 << 20) + 1, 1 << 21, end - 1, end, end + 1, 10 ** 9]
    out, g = _run(sched, steps)
    _assert_equal_core(sched, steps, out)
    scalar_out, _ = _run(sched, steps[:4] + steps[-3:], scalar=True)
    _assert_equal_core(sched, steps[:4] + steps[-3:], scalar_out)
    assert any(op.type in ("PyFunc", "PyFuncStateless") for op in g.get_operations())
    assert max(op.outputs[0].shape.num_elements() or 0 for op in g.get_operations() if op.type == "Const") < 16


def test_never_ending_constant_schedule():
    sched = sparsify.ConstantSchedule(0.6, 5, -1, 10)
    steps = [0, 4, 5, 6, 15, 10 ** 6, 10 ** 12]
    out, _ = _run(sched, steps)
    _assert_equal_core(sched, steps, out)


def test_a_new_schedule_kind_needs_no_tf_change():
    """A schedule kind unknown to sparsify_tf (values and update points of its own) is followed exactly."""

    class Staircase(Schedule):
        def __init__(self):
            self.begin_step, self.end_step, self.update_frequency, self.leave_enabled = 4, 40, 1, True

        def sparsity(self, step):
            s = np.asarray(step, np.float64)
            out = np.where(s < 4, 0.0, np.minimum(np.floor((s - 4) / 9.0) * 0.2 + 0.1, 0.7))
            return out[()] if out.ndim == 0 else out

        def update_ready(self, step):              # only at 4, 13, 22, ... (not every step)
            s = np.asarray(step, np.int64)
            return (s >= 4) & (s <= 40) & ((s - 4) % 9 == 0)

        def last_update_step(self, step):
            s = np.asarray(step, np.int64)
            return np.where(s >= 4, 4 + ((np.minimum(s, 40) - 4) // 9) * 9, -1)

    sched = Staircase()
    steps = np.arange(0, 60)
    out, _ = _run(sched, steps)
    _assert_equal_core(sched, steps, out)


def test_sparsity_tensor_and_update_points_alone():
    sched = GradualSchedule(0.0, 0.9, 10, 110, 10, exponent=2.5)
    g = tf.Graph()
    with g.as_default():
        steps = tf.constant([0, 10, 55, 110, 500], tf.int64)
        sp = sparsity_tensor(sched, steps)
        ready, last = update_point_tensors(sched, steps)
    with tf1.Session(graph=g) as sess:
        got_sp, got_ready, got_last = sess.run([sp, ready, last])
    np.testing.assert_array_equal(got_sp, sched.sparsity([0, 10, 55, 110, 500]))
    assert got_ready.tolist() == [False, True, False, True, False]
    assert got_last.tolist() == [-1, 10, 50, 110, 110]
    with pytest.raises(TypeError, match="schedule must be a sparsify Schedule"):
        schedule_tensors({"type": "gradual"}, steps)
