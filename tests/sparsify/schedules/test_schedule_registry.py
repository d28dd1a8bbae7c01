"""Tests for sparsify.schedules.registry: kinds by name, get_schedule, the config reads the registry."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import sparsify.config
from sparsify import PruningConfig
from sparsify.schedules import (ConstantSchedule, DecaySchedule, GradualSchedule, ScheduleSettings, build_schedule,
                                get_schedule, register_schedule, registered_schedules, schedule_kind,
                                unregister_schedule)


def test_builtin_kinds_in_order():
    assert registered_schedules() == ("gradual", "constant", "linear", "exp", "cos", "cube")
    assert sparsify.config.SCHEDULE_TYPES == registered_schedules()
    assert [schedule_kind(k).open_end for k in registered_schedules()] == [False, True, False, False, False, False]
    assert "p^3" in schedule_kind("cube").formula and "cos(p * pi/2)" in schedule_kind("cos").formula


def test_get_schedule_from_dicts():
    assert isinstance(get_schedule({"final_sparsity": 0.5, "begin_step": 0, "end_step": 10}), GradualSchedule)
    assert isinstance(get_schedule({"type": "constant", "target_sparsity": 0.5}), ConstantSchedule)
    assert get_schedule({"type": "exp", "final_sparsity": 0.5, "end_step": 4}).decay_type == "exp"
    s = get_schedule({"sparsity_decay_type": "cube", "target_sparsity": 0.8, "start_step": 2, "end_step": 6,
                      "pruning_frequency": 2, "init_sparsity": 0.1, "leave_enabled": False})
    assert (s.begin_step, s.end_step, s.update_frequency, s.init_sparsity, s.leave_enabled) == (2, 6, 2, 0.1, False)
    assert get_schedule(PruningConfig(sparsity_decay_type="cos", end_step=10)).decay_type == "cos"
    with pytest.raises(ValueError, match="unknown schedule keys \\['bogus'\\]"):
        get_schedule({"final_sparsity": 0.5, "end_step": 4, "bogus": 1})
    with pytest.raises(ValueError, match="schedule type must be one of \\('gradual', 'constant'"):
        get_schedule({"type": "sine", "final_sparsity": 0.5, "end_step": 4})
    with pytest.raises(ValueError, match="needs final_sparsity"):
        get_schedule({"end_step": 4})
    with pytest.raises(ValueError, match="schedule type 'gradual' needs end_step"):
        get_schedule({"final_sparsity": 0.5})
    with pytest.raises(TypeError, match="dict or PruningConfig"):
        get_schedule(3)


def test_a_registered_kind_reaches_the_config_and_get_schedule():
    """Adding a schedule kind is one registration: config validation, get_schedule and the reference follow."""
    with pytest.raises(ValueError, match="sparsity_decay_type must be one of .*got 'staircase'"):
        PruningConfig(sparsity_decay_type="staircase")

    @register_schedule("staircase", formula="i, then t from the middle of the window")
    def staircase(s: ScheduleSettings):
        mid = (s.begin_step + s.end_step) // 2
        return ConstantSchedule(s.final_sparsity, mid, s.end_step, s.update_frequency, s.leave_enabled)

    try:
        cfg = PruningConfig(sparsity_decay_type="staircase", target_sparsity=0.6, start_step=0, end_step=10)
        assert cfg.schedule().sparsity([4, 5, 10]).tolist() == [0.0, 0.6, 0.6]
        assert "staircase" in sparsify.config.SCHEDULE_TYPES
        assert get_schedule({"type": "staircase", "final_sparsity": 0.5, "end_step": 4}).begin_step == 2
        with pytest.raises(ValueError, match="already registered"):
            register_schedule("staircase", formula="x")(lambda s: None)
        with pytest.raises(ValueError, match="end_step must be >= start_step"):
            PruningConfig(sparsity_decay_type="staircase", end_step=-1)      # not open-ended
    finally:
        unregister_schedule("staircase")
    assert "staircase" not in registered_schedules()


def test_build_schedule_matches_the_classes():
    settings_ = ScheduleSettings(0.1, 0.7, 3, 40, 5, 2.0, False)
    assert build_schedule("gradual", settings_) == GradualSchedule(0.1, 0.7, 3, 40, 5, 2.0, False)
    assert build_schedule("linear", settings_) == DecaySchedule("linear", 0.1, 0.7, 3, 40, 5, False)
    assert build_schedule("constant", settings_) == ConstantSchedule(0.7, 3, 40, 5, False)


KINDS = st.sampled_from(registered_schedules())


@settings(max_examples=200, deadline=None)
@given(KINDS, st.floats(0, 0.6), st.floats(0.6, 0.99), st.integers(0, 40), st.integers(0, 5000),
       st.floats(0.25, 8.0), st.booleans())
def test_property_scalar_and_array_steps_give_the_same_bits(kind, init, final, begin, length, exponent, int_exp):
    """Every kind: sparsity(array)[i] has exactly the bits of sparsity(step_i) asked alone (issue 10)."""
    s = build_schedule(kind, ScheduleSettings(init, final, begin, begin + length, 7,
                                              float(max(1, round(exponent))) if int_exp else exponent))
    steps = np.unique(np.concatenate([np.arange(0, begin + 3), np.linspace(begin, begin + length + 5, 97).astype(int)]))
    as_array = s.sparsity(steps)
    as_scalars = np.array([s.sparsity(int(t)) for t in steps])
    as_numpy_scalars = np.array([s.sparsity(np.int64(t)) for t in steps])
    as_float_steps = s.sparsity(steps.astype(np.float64))
    for other in (as_scalars, as_numpy_scalars, as_float_steps):
        assert as_array.tobytes() == other.tobytes()


@pytest.mark.parametrize("name", ["cubic", "Cubic", "CubicSL", "polynomial_decay"])
def test_peer_names_for_the_cubic_curve_lead_to_gradual_not_cube(name):
    with pytest.raises(ValueError) as info:
        PruningConfig(sparsity_decay_type=name, end_step=10)
    message = str(info.value)
    assert f"got {name!r} (did you mean 'gradual'?" in message
    assert "did you mean 'cube'" not in message
    # the curve the hint names is the one tfmot's PolynomialDecay(power=3) follows: fast at first
    tfmot_cubic_at_half = 0.8 * (1 - (1 - 0.5) ** 3)
    assert PruningConfig(sparsity_decay_type="gradual", target_sparsity=0.8, end_step=100,
                         pruning_frequency=1).schedule().sparsity(50) == pytest.approx(tfmot_cubic_at_half)


def test_other_unknown_names_keep_the_closest_spelling():
    with pytest.raises(ValueError, match=r"got 'cosine' \(did you mean 'cos'\?\)$"):
        schedule_kind("cosine")
    with pytest.raises(ValueError, match=r"got 'staircase'$"):
        schedule_kind("staircase")
