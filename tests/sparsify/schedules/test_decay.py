"""Tests for sparsify.schedules.decay: Intel Neural Compressor's decay curves (issue 11 point 1)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify.schedules import DECAY_CURVES, DECAY_TYPES, DecaySchedule


def inc_reference(kind, i, t, p):
    """The curves exactly as issue 11 states them, with math's functions."""
    return {"linear": i + (t - i) * p,
            "cube": i + (t - i) * p ** 3,
            "cos": i + (t - i) * (1 - math.cos(p * math.pi / 2)),
            "exp": 1 - (1 - i) * ((1 - t) / (1 - i)) ** p}[kind]


def test_the_four_inc_curves_at_half_way():
    """0 -> 0.9 at p = 0.5: cube was 0.7875 (our gradual) before the fix, INC's is 0.1125."""
    at_half = {kind: float(DecaySchedule(kind, 0.0, 0.9, 0, 100, 10).sparsity(50)) for kind in DECAY_TYPES}
    assert at_half["linear"] == 0.45
    assert at_half["cube"] == 0.1125
    assert at_half["cos"] == 0.9 * (1 - math.sqrt(0.5)) == 0.2636038969321072
    assert at_half["exp"] == 1 - math.sqrt(1 - 0.9) == 0.6837722339831621       # 1 - 0.9 is 0.09999999999999998


def test_literal_values_with_an_init_sparsity():
    s = {kind: DecaySchedule(kind, 0.2, 0.8, 10, 20, 1) for kind in DECAY_TYPES}
    assert s["linear"].sparsity([10, 15, 20]).tolist() == [0.2, 0.5, 0.8]
    assert s["cube"].sparsity([10, 15, 20]).tolist() == [0.2, 0.275, 0.8]
    assert s["exp"].sparsity(15) == 0.6000000000000001          # 1 - 0.8 * sqrt(0.2 / 0.8), 0.2 = fl(1 - 0.8)
    assert s["cos"].sparsity(12) == 0.2 + 0.6 * (1 - 0.9510565162951535) == 0.22936609022290788


@pytest.mark.parametrize("kind", DECAY_TYPES)
def test_curves_follow_the_inc_definition_within_an_ulp_or_two(kind):
    for i, t in ((0.0, 0.9), (0.1, 0.95), (0.3, 0.5), (0.5, 0.5)):
        s = DecaySchedule(kind, i, t, 0, 997, 1)
        got = s.sparsity(np.arange(1, 997))
        want = np.array([inc_reference(kind, i, t, k / 997) for k in range(1, 997)])
        np.testing.assert_allclose(got, want, rtol=4e-16, atol=2.3e-16)   # exp: 1 - x loses to ulp(1)
        assert s.sparsity(0) == i and s.sparsity(997) == t and s.sparsity(5000) == t


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(DECAY_TYPES), st.floats(0, 0.5), st.floats(0.5, 0.99), st.integers(1, 300))
def test_property_monotone_from_init_to_final(kind, init, final, length):
    v = DecaySchedule(kind, init, final, 3, 3 + length, 1).sparsity(np.arange(3, 4 + length))
    assert v[0] == init and v[-1] == final
    assert (np.diff(v) >= -1e-15).all() and v.min() >= init - 1e-15 and v.max() <= final


def test_curve_table_and_validation():
    assert DECAY_TYPES == tuple(DECAY_CURVES) == ("linear", "exp", "cos", "cube")
    with pytest.raises(ValueError, match="sparsity_decay_type must be one of \\('linear', 'exp', 'cos', 'cube'\\)"):
        DecaySchedule("sine", 0.0, 0.5, 0, 10)
    with pytest.raises(ValueError, match="end_step must be >= begin_step for DecaySchedule, got -1"):
        DecaySchedule("cos", 0.0, 0.5, 0, -1)
