"""DistillationConfig (validation, dict/YAML round trip, weight over steps) and the NumPy references."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify import DistillationConfig
from sparsify.distillation import distillation_loss, feature_loss, kd_loss


def _kl(s, t, temp):
    """KL by hand with math (independent of the module's NumPy)."""
    p = [math.exp(x / temp) for x in t]
    q = [math.exp(x / temp) for x in s]
    p, q = [x / sum(p) for x in p], [x / sum(q) for x in q]
    return temp * temp * sum(a * math.log(a / b) for a, b in zip(p, q))


def test_defaults_and_round_trip(tmp_path):
    cfg = DistillationConfig()
    assert (cfg.temperature, cfg.weight, cfg.weight_schedule, cfg.teacher) == (2.0, 1.0, "fade", "dense_at_start")
    assert DistillationConfig.from_dict(cfg.to_dict()) == cfg
    cfg = DistillationConfig(temperature=3, weight=0.5, weight_schedule="linear", init_weight=0.1, start_step=5,
                             end_step=15, features=["blocks.0"], feature_weight=0.25, teacher="user")
    assert DistillationConfig.from_dict(cfg.to_dict()) == cfg
    path = tmp_path / "d.yaml"
    path.write_text("distillation:\n  temperature: 3\n  features: [blocks.0]\n")
    loaded = DistillationConfig.coerce(str(path))
    assert (loaded.temperature, loaded.features) == (3.0, ["blocks.0"])
    assert isinstance(loaded.temperature, float)


@pytest.mark.parametrize("changes, error, message", [
    ({"temperature": 0}, ValueError, "temperature must be a finite number > 0, got 0"),
    ({"temperature": float("inf")}, ValueError, "temperature must be a finite number > 0, got inf"),
    ({"temperature": "2"}, TypeError, "temperature must be a number, got '2' (str)"),
    ({"weight": -1.0}, ValueError, "weight must be a finite number >= 0, got -1.0"),
    ({"init_weight": float("nan")}, ValueError, "init_weight must be a finite number >= 0, got nan"),
    ({"feature_weight": True}, TypeError, "feature_weight must be a number, got True (bool)"),
    ({"weight_schedule": "lineer"}, ValueError, "weight_schedule must be one of ('constant', 'linear', 'cos', 'fade'), "
                                                "got 'lineer' (did you mean 'linear'?)"),
    ({"teacher": "usr"}, ValueError, "teacher must be one of ('dense_at_start', 'user'), got 'usr' "
                                     "(did you mean 'user'?)"),
    ({"start_step": -1}, ValueError, "start_step must be >= 0, got -1"),
    ({"start_step": 10, "end_step": 5}, ValueError, "end_step must be >= start_step (10), got 5"),
    ({"end_step": 2.0}, TypeError, "end_step must be an integer, got 2.0 (float)"),
    ({"features": [""]}, TypeError, "features must be a list of non-empty names (strings), got ['']"),
    ({"features": ["a", "a"]}, ValueError, "features names an output twice: ['a', 'a']"),
])
def test_validation_names_key_and_value(changes, error, message):
    with pytest.raises(error) as info:
        DistillationConfig(**changes)
    assert str(info.value) == message


def test_unknown_key_and_wrong_type():
    with pytest.raises(ValueError, match=r"unknown distillation key 'wieght' \(did you mean 'weight'\?\)"):
        DistillationConfig.from_dict({"wieght": 1})
    with pytest.raises(TypeError, match="distillation must be a DistillationConfig, a dict or a YAML file path, "
                                        "got int"):
        DistillationConfig.coerce(3)


def test_weight_over_steps_literal():
    const = DistillationConfig(weight=0.7)
    assert [const.weight_at(s) for s in (0, 10, 10 ** 9)] == [0.7, 0.7, 0.7]
    lin = DistillationConfig(weight=1.0, init_weight=0.2, weight_schedule="linear", start_step=10, end_step=20)
    assert [lin.weight_at(s) for s in (0, 10, 15, 20, 30)] == [0.2, 0.2, pytest.approx(0.6), 1.0, 1.0]
    cos = DistillationConfig(weight=1.0, weight_schedule="cos", start_step=0, end_step=4)
    assert [round(cos.weight_at(s), 6) for s in range(5)] == [0.0, 0.07612, 0.292893, 0.617317, 1.0]
    with pytest.raises(TypeError, match="step must be an integer, got 1.5"):
        lin.weight_at(1.5)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 200),
       st.floats(0, 5), st.floats(0, 5), st.sampled_from(["linear", "cos"]))
def test_ramp_stays_between_its_ends(start, length, step, init, final, kind):
    cfg = DistillationConfig(weight=final, init_weight=init, weight_schedule=kind, start_step=start,
                             end_step=start + length)
    w = cfg.weight_at(step)
    assert min(init, final) - 1e-12 <= w <= max(init, final) + 1e-12
    if step >= start + length:
        assert w == final


def test_default_weight_of_the_dense_at_start_teacher_fades_over_the_first_half_of_the_pruning_window():
    fade = DistillationConfig(temperature=1.0).for_pruning(60, 420)         # the middle of 60..420: 240
    assert (fade.weight_schedule, fade.init_weight, fade.weight, fade.start_step, fade.end_step) == \
        ("linear", 1.0, 0.0, 60, 240)
    assert [fade.weight_at(s) for s in (60, 105, 150, 240, 241, 420, 10 ** 6)] == \
        [1.0, 0.75, 0.5, 0.0, 0.0, 0.0, 0.0]
    odd = DistillationConfig().for_pruning(0, 5)                            # (5 - 0) // 2 = 2
    assert [odd.weight_at(s) for s in range(4)] == [1.0, 0.5, 0.0, 0.0]
    scaled = DistillationConfig(weight_schedule="fade", weight=0.5).for_pruning(10, 30)    # from weight on
    assert [scaled.weight_at(s) for s in (10, 15, 20)] == [0.5, 0.25, 0.0]
    with pytest.raises(ValueError, match=r"weight_schedule='fade' .* fades over the pruning window, which is not "
                                         r"known here"):
        DistillationConfig().weight_at(0)


@pytest.mark.parametrize("given", [{"weight": 1.0}, {"weight": 0.3}, {"weight_schedule": "constant"},
                                   {"weight_schedule": "linear", "start_step": 3, "end_step": 9},
                                   {"teacher": "user"}])
def test_an_explicit_weight_or_schedule_or_a_user_teacher_is_kept_as_given(given):
    cfg = DistillationConfig(**given)
    assert cfg.weight_schedule == given.get("weight_schedule", "constant")
    assert cfg.for_pruning(60, 420) is cfg
    assert cfg.weight_at(100) == DistillationConfig.from_dict(cfg.to_dict()).weight_at(100)
    assert DistillationConfig(**given).weight == given.get("weight", 1.0)


@pytest.mark.parametrize("config, window, message", [
    ({"teacher": "user", "weight_schedule": "fade"}, None,
     "weight_schedule='fade' is the 'dense_at_start' teacher's (0 before the pruning start_step), got "
     "teacher='user'; use 'constant', 'linear' or 'cos'"),
    ({"init_weight": 0.5}, None,
     "weight_schedule='fade' (the default weight of the 'dense_at_start' teacher) takes its window from the "
     "pruning schedule, so init_weight, start_step and end_step stay 0, got {'init_weight': 0.5}; for a window of "
     "your own set weight_schedule='linear' or 'cos' (and weight)"),
    ({}, (0, 0), "distillation weight_schedule='fade' (the default weight of the 'dense_at_start' teacher) falls "
                 "to 0 halfway through the pruning window, which needs an end_step at least 2 steps after "
                 "start_step, got start_step=0, end_step=0; give the weight (e.g. weight=1.0, a constant weight) "
                 "or a weight_schedule of your own"),
    ({}, (10, -1), "distillation weight_schedule='fade' (the default weight of the 'dense_at_start' teacher) falls "
                   "to 0 halfway through the pruning window, which needs an end_step at least 2 steps after "
                   "start_step, got start_step=10, end_step=-1; give the weight (e.g. weight=1.0, a constant "
                   "weight) or a weight_schedule of your own"),
    ({"weight": 1.0}, (10, 5), "pruning window: 0 <= start_step <= end_step (or end_step=-1), got start_step=10, "
                               "end_step=5"),
])
def test_a_fade_that_cannot_be_raises_a_clear_value_error(config, window, message):
    with pytest.raises(ValueError) as info:
        DistillationConfig(**config).for_pruning(*window) if window else DistillationConfig(**config)
    assert str(info.value) == message


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 200), st.floats(0, 5), st.floats(0, 5),
       st.sampled_from(["linear", "cos"]))
def test_ramp_weight_on_numpy_arrays_equals_weight_at_on_floats(start, length, step, init, final, kind):
    from sparsify.distillation import ramp_weight
    cfg = DistillationConfig(weight=final, init_weight=init, weight_schedule=kind, start_step=start,
                             end_step=start + length)
    steps = np.array([step, start, start + length], dtype=np.float64)
    got = ramp_weight(cfg, steps, np)
    assert np.allclose(got, [cfg.weight_at(int(s)) for s in steps], rtol=1e-12, atol=1e-12)


def test_kd_loss_literal_and_by_hand():
    assert kd_loss([[1.0, 2.0, 3.0]], [[3.0, 2.0, 1.0]], 1.0) == pytest.approx(1.150420765208883, rel=1e-12)
    assert kd_loss([[0.0, 0.0]], [[0.0, 2.0]], 2.0) == pytest.approx(0.4437762866869094, rel=1e-12)
    rows_s, rows_t = [[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]], [[1.0, 1.0, -1.0], [3.0, 0.0, 1.0]]
    want = (_kl(rows_s[0], rows_t[0], 1.5) + _kl(rows_s[1], rows_t[1], 1.5)) / 2
    assert kd_loss(rows_s, rows_t, 1.5) == pytest.approx(want, rel=1e-12)
    # leading axes are rows alike: (2, 1, 3) is the mean over the same 2 rows
    assert kd_loss(np.array(rows_s)[:, None], np.array(rows_t)[:, None], 1.5) == pytest.approx(want, rel=1e-12)
    assert kd_loss([[1.0, 5.0]], [[1.0, 5.0]], 4.0) == 0.0
    with pytest.raises(ValueError, match=r"student_logits \(1, 2\) and teacher_logits \(1, 3\) must have one shape"):
        kd_loss([[1.0, 2.0]], [[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="student_logits must be finite logits"):
        kd_loss([[np.nan, 1.0]], [[0.0, 1.0]])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-20, 20), min_size=2, max_size=6), st.floats(0.1, 10))
def test_kd_is_nonnegative_and_invariant_to_shifts(logits, temp):
    teacher = list(reversed(logits))
    base = kd_loss([logits], [teacher], temp)
    assert base >= -1e-12
    assert kd_loss([[x + 3.0 for x in logits]], [teacher], temp) == pytest.approx(base, abs=1e-9)


def test_whole_term_literal():
    cfg = DistillationConfig(temperature=1.0, weight=0.5, logit_weight=2.0, features=["a", "b"], feature_weight=0.1)
    # 0.5 * (2 * 1.150420765 + 0.1 * mean(2.0, 0.0))
    got = distillation_loss(cfg, 0, [[1.0, 2.0, 3.0]], [[3.0, 2.0, 1.0]], [[[1.0, 2.0]], [[0.0]]],
                            [[[1.0, 4.0]], [[0.0]]])
    assert got == pytest.approx(0.5 * (2 * 1.150420765208883 + 0.1 * 1.0), rel=1e-12)
    assert feature_loss([[1.0, 2.0]], [[1.0, 4.0]]) == 2.0
    with pytest.raises(ValueError, match=r"features: 2 named \(\['a', 'b'\]\), got 1 of the student's and 2"):
        distillation_loss(cfg, 0, [[1.0]], [[1.0]], [[1.0]], [[1.0], [2.0]])
