import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify.schedules import ConstantSchedule, DecaySchedule, GradualSchedule, get_schedule


def test_gradual_values_at_and_around_begin_end():
    s = GradualSchedule(0.1, 0.9, begin_step=10, end_step=20, update_frequency=5)
    steps = [0, 9, 10, 11, 15, 19, 20, 21, 1000]
    expected = [0.0, 0.0, 0.1, 0.1 + 0.8 * (1 - 0.9 ** 3), 0.1 + 0.8 * 0.875, 0.1 + 0.8 * (1 - 0.1 ** 3), 0.9, 0.9, 0.9]
    np.testing.assert_allclose(s.sparsity(steps), expected, rtol=0, atol=1e-12)
    assert isinstance(s.sparsity(15), float)


def test_update_ready_grid_and_end():
    s = GradualSchedule(0.0, 0.5, begin_step=3, end_step=12, update_frequency=4)
    ready = [int(t) for t in range(0, 20) if s.update_ready(t)]
    assert ready == [3, 7, 11, 12]
    every = GradualSchedule(0.0, 0.5, 2, 5, update_frequency=0)
    assert [int(t) for t in range(8) if every.update_ready(t)] == [2, 3, 4, 5]


def test_one_shot():
    s = GradualSchedule(0.0, 0.7, begin_step=5, end_step=5, update_frequency=100)
    assert s.sparsity([4, 5, 6]).tolist() == [0.0, 0.7, 0.7]
    assert [t for t in range(10) if s.update_ready(t)] == [5]


def test_last_update_step_and_update_due_after_skipped_steps():
    s = GradualSchedule(0.0, 0.9, begin_step=10, end_step=100, update_frequency=25)
    assert s.last_update_step([0, 9, 10, 34, 35, 99, 100, 500]).tolist() == [-1, -1, 10, 10, 35, 85, 100, 100]
    assert bool(s.update_due(-1, 10)) and not bool(s.update_due(10, 34))
    assert bool(s.update_due(10, 37))           # a run that jumped from 33 to 37 still sees step 35
    assert bool(s.update_due(85, 123)) and not bool(s.update_due(100, 500))


def test_resume_at_odd_step_reproduces_values():
    s = GradualSchedule(0.05, 0.8, 0, 90, 7)
    full = s.sparsity(np.arange(120))
    resumed = np.array([s.sparsity(t) for t in range(37, 120)])
    np.testing.assert_array_equal(full[37:], resumed)
    ready_full = s.update_ready(np.arange(120))
    assert [bool(s.update_ready(t)) for t in range(37, 120)] == ready_full[37:].tolist()


def test_leave_enabled_controls_activity():
    s = GradualSchedule(0.0, 0.5, 0, 10, 1, leave_enabled=False)
    assert s.active([0, 10, 11]).tolist() == [True, True, False]
    assert GradualSchedule(0.0, 0.5, 0, 10, 1).active([11]).tolist() == [True]


def test_constant_and_decays():
    c = ConstantSchedule(0.5, begin_step=2, end_step=-1, update_frequency=3)
    assert c.sparsity([0, 2, 99]).tolist() == [0.0, 0.5, 0.5]
    assert [t for t in range(10) if c.update_ready(t)] == [2, 5, 8]
    steps = np.array([0, 5, 10])
    assert np.allclose(DecaySchedule("linear", 0, 0.8, 0, 10, 1).sparsity(steps), [0, 0.4, 0.8])
    assert np.allclose(DecaySchedule("cos", 0, 0.8, 0, 10, 1).sparsity(steps), [0, 0.4, 0.8])
    assert np.allclose(DecaySchedule("cube", 0, 0.8, 0, 10, 1).sparsity(steps), [0, 0.7, 0.8])
    assert np.allclose(DecaySchedule("exp", 0, 0.8, 0, 10, 1).sparsity(steps),
                       [0, 0.8 * (1 - np.exp(-2.5)) / (1 - np.exp(-5)), 0.8])


def test_get_schedule_from_dicts():
    assert isinstance(get_schedule({"final_sparsity": 0.5, "begin_step": 0, "end_step": 10}), GradualSchedule)
    assert isinstance(get_schedule({"type": "constant", "target_sparsity": 0.5}), ConstantSchedule)
    assert get_schedule({"type": "exp", "final_sparsity": 0.5, "end_step": 4}).decay_type == "exp"
    with pytest.raises(ValueError, match="unknown schedule keys \\['bogus'\\]"):
        get_schedule({"final_sparsity": 0.5, "end_step": 4, "bogus": 1})
    with pytest.raises(ValueError, match="schedule type must be one of"):
        get_schedule({"type": "sine", "final_sparsity": 0.5, "end_step": 4})
    with pytest.raises(ValueError, match="needs final_sparsity"):
        get_schedule({"end_step": 4})
    with pytest.raises(TypeError, match="dict or PruningConfig"):
        get_schedule(3)


@pytest.mark.parametrize("kwargs,match", [
    (dict(init_sparsity=0.0, final_sparsity=1.0, begin_step=0, end_step=10), r"final_sparsity must be in \[0, 1\), got 1.0"),
    (dict(init_sparsity=-0.1, final_sparsity=0.5, begin_step=0, end_step=10), "init_sparsity must be in"),
    (dict(init_sparsity=0.0, final_sparsity=float("nan"), begin_step=0, end_step=10), "final_sparsity"),
    (dict(init_sparsity=0.0, final_sparsity=0.5, begin_step=10, end_step=5), "end_step must be >= begin_step"),
    (dict(init_sparsity=0.0, final_sparsity=0.5, begin_step=-1, end_step=5), "begin_step must be >= 0"),
    (dict(init_sparsity=0.0, final_sparsity=0.5, begin_step=0, end_step=5, exponent=0), "exponent"),
])
def test_gradual_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GradualSchedule(**kwargs)


def test_gradual_type_errors():
    with pytest.raises(TypeError, match="update_frequency must be an integer, got 2.5"):
        GradualSchedule(0.0, 0.5, 0, 10, 2.5)
    with pytest.raises(TypeError, match="final_sparsity must be a number"):
        GradualSchedule(0.0, "0.5", 0, 10, 2)


@settings(max_examples=80, deadline=None)
@given(st.floats(0, 0.5), st.floats(0.5, 0.99), st.integers(0, 50), st.integers(0, 200), st.integers(-2, 30),
       st.floats(0.5, 5))
def test_property_monotone_and_bounded(init, final, begin, length, freq, exponent):
    s = GradualSchedule(init, final, begin, begin + length, freq, exponent)
    steps = np.arange(0, begin + length + 20)
    v = s.sparsity(steps)
    assert (np.diff(v) >= -1e-12).all()
    assert v.min() >= 0 and v.max() <= final + 1e-12
    assert v[-1] == final
    # next_update_step is the first update point after a step
    for t in range(-1, begin + length + 3):
        later = [u for u in range(t + 1, begin + length + 5) if s.update_ready(u)]
        assert s.next_update_step(t) == (later[0] if later else -1)
    # the last update point never lies in the future and is itself an update point
    last = s.last_update_step(steps)
    assert (last <= steps).all()
    assert all(bool(s.update_ready(t)) for t in last if t >= 0)
