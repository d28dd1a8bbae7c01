"""Tests for sparsify.schedules.gradual: the seed's polynomial schedule."""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify.schedules import GradualSchedule


def test_gradual_values_at_and_around_begin_end():
    s = GradualSchedule(0.1, 0.9, begin_step=10, end_step=20, update_frequency=5)
    steps = [0, 9, 10, 11, 15, 19, 20, 21, 1000]
    expected = [0.0, 0.0, 0.1, 0.1 + 0.8 * (1 - 0.9 ** 3), 0.1 + 0.8 * 0.875, 0.1 + 0.8 * (1 - 0.1 ** 3), 0.9, 0.9, 0.9]
    np.testing.assert_allclose(s.sparsity(steps), expected, rtol=0, atol=1e-12)
    assert isinstance(s.sparsity(15), float)


def test_literal_values_bit_for_bit():
    s = GradualSchedule(0.0, 0.9, 0, 100, 10)
    assert s.sparsity([25, 50, 75]).tolist() == [0.9 * 0.578125, 0.7875, 0.8859375] == [0.5203125000000001, 0.7875,
                                                                                       0.8859375]
    assert GradualSchedule(0.05, 0.9, 5, 85, 8).sparsity(19) == 0.42271171875       # issue 10's example step
    assert GradualSchedule(0.0, 0.8, 0, 4, 1, exponent=0.5).sparsity(1) == 0.8 * (1 - 0.8660254037844386)


def test_integer_exponent_is_the_correctly_rounded_polynomial():
    """(1-p)**3 is multiplied in double-double: the value is the exactly rounded formula."""
    s = GradualSchedule(0.05, 0.9, 5, 85, 8, exponent=3)
    for t in range(6, 85):
        q = 1.0 - (t - 5) / 80                         # as the schedule computes 1 - p
        cube = float(Fraction(q) ** 3)                 # the exact cube, rounded once
        assert s.sparsity(t) == 0.05 + (0.9 - 0.05) * (1.0 - cube)


def test_one_shot():
    s = GradualSchedule(0.0, 0.7, begin_step=5, end_step=5, update_frequency=100)
    assert s.sparsity([4, 5, 6]).tolist() == [0.0, 0.7, 0.7]
    assert [t for t in range(10) if s.update_ready(t)] == [5]


def test_resume_at_odd_step_reproduces_values():
    s = GradualSchedule(0.05, 0.8, 0, 90, 7)
    full = s.sparsity(np.arange(120))
    resumed = np.array([s.sparsity(t) for t in range(37, 120)])
    np.testing.assert_array_equal(full[37:], resumed)
    ready_full = s.update_ready(np.arange(120))
    assert [bool(s.update_ready(t)) for t in range(37, 120)] == ready_full[37:].tolist()


@pytest.mark.parametrize("kwargs,match", [
    (dict(init_sparsity=0.0, final_sparsity=1.0, begin_step=0, end_step=10), r"final_sparsity must be in \[0, 1\), got 1.0"),
    (dict(init_sparsity=-0.1, final_sparsity=0.5, begin_step=0, end_step=10), "init_sparsity must be in"),
    (dict(init_sparsity=0.0, final_sparsity=float("nan"), begin_step=0, end_step=10), "final_sparsity"),
    (dict(init_sparsity=0.0, final_sparsity=0.5, begin_step=10, end_step=5), "end_step must be >= begin_step"),
    (dict(init_sparsity=0.0, final_sparsity=0.5, begin_step=-1, end_step=5), "begin_step must be >= 0"),
    (dict(init_sparsity=0.0, final_sparsity=0.5, begin_step=0, end_step=5, exponent=0), "exponent"),
    (dict(init_sparsity=0.0, final_sparsity=0.5, begin_step=0, end_step=5, exponent=float("inf")), "exponent"),
    (dict(init_sparsity=0.0, final_sparsity=0.5, begin_step=0, end_step=-1), "end_step must be >= begin_step for "
                                                                            "GradualSchedule, got -1"),
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
    v = s.sparsity(np.arange(0, begin + length + 20))
    assert (np.diff(v) >= -1e-12).all()
    assert v.min() >= 0 and v.max() <= final + 1e-12
    assert v[-1] == final
    if length:
        assert s.sparsity(begin) == init
