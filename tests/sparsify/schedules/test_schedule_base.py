"""Tests for sparsify.schedules.base: update points, skipped steps, release, the ramp."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify.schedules import ConstantSchedule, GradualSchedule, Schedule, validate_int, validate_ratio


def test_update_ready_grid_and_end():
    s = GradualSchedule(0.0, 0.5, begin_step=3, end_step=12, update_frequency=4)
    ready = [int(t) for t in range(0, 20) if s.update_ready(t)]
    assert ready == [3, 7, 11, 12]
    every = GradualSchedule(0.0, 0.5, 2, 5, update_frequency=0)
    assert [int(t) for t in range(8) if every.update_ready(t)] == [2, 3, 4, 5]


def test_last_update_step_and_update_due_after_skipped_steps():
    s = GradualSchedule(0.0, 0.9, begin_step=10, end_step=100, update_frequency=25)
    assert s.last_update_step([0, 9, 10, 34, 35, 99, 100, 500]).tolist() == [-1, -1, 10, 10, 35, 85, 100, 100]
    assert bool(s.update_due(-1, 10)) and not bool(s.update_due(10, 34))
    assert bool(s.update_due(10, 37))           # a run that jumped from 33 to 37 still sees step 35
    assert bool(s.update_due(85, 123)) and not bool(s.update_due(100, 500))


def test_open_ended_window():
    c = ConstantSchedule(0.5, begin_step=2, end_step=-1, update_frequency=3)
    assert c.end == float("inf") and c.last_update_step([1, 2, 7, 100]).tolist() == [-1, 2, 5, 98]
    assert c.next_update_step(98) == 101 and c.masking_active(10 ** 9)


def test_leave_enabled_controls_activity():
    s = GradualSchedule(0.0, 0.5, 0, 10, 1, leave_enabled=False)
    assert s.active([0, 10, 11]).tolist() == [True, True, False]
    assert (s.masking_active(10), s.masking_active(11)) == (True, False)
    assert GradualSchedule(0.0, 0.5, 0, 10, 1).active([11]).tolist() == [True]


def test_ramp_pins_begin_and_end_and_keeps_shape():
    class Half(Schedule):
        begin_step, end_step, update_frequency = 4, 8, 1

        def sparsity(self, step):
            return self.ramp(step, lambda p: 0.123 + p, 0.1, 0.9)

    h = Half()
    assert h.sparsity([0, 3, 4, 6, 8, 9]).tolist() == [0.0, 0.0, 0.1, 0.623, 0.9, 0.9]
    assert h.sparsity(np.array([[6]], dtype=np.int32)).shape == (1, 1)
    assert isinstance(h.sparsity(6), float) and h.sparsity(6) == 0.623


def test_validation_helpers_name_the_parameter():
    assert validate_ratio("x", np.float32(0.5)) == 0.5 and validate_int("n", np.int64(3)) == 3
    with pytest.raises(TypeError, match="x must be a number in \\[0, 1\\), got True"):
        validate_ratio("x", True)
    with pytest.raises(ValueError, match="x must be in \\[0, 1\\), got nan"):
        validate_ratio("x", float("nan"))
    with pytest.raises(TypeError, match="n must be an integer, got '3' \\(str\\)"):
        validate_int("n", "3")


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 50), st.integers(0, 200), st.integers(-2, 30))
def test_property_update_points(begin, length, freq):
    s = GradualSchedule(0.0, 0.5, begin, begin + length, freq)
    steps = np.arange(0, begin + length + 20)
    for t in range(-1, begin + length + 3):         # next_update_step is the first update point after a step
        later = [u for u in range(t + 1, begin + length + 5) if s.update_ready(u)]
        assert s.next_update_step(t) == (later[0] if later else -1)
    last = s.last_update_step(steps)                 # never in the future, and itself an update point
    assert (last <= steps).all()
    assert all(bool(s.update_ready(t)) for t in last if t >= 0)
