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
    assert (cfg.temperature, cfg.weight, cfg.weight_schedule, cfg.teacher) == (2.0, 1.0, "constant", "dense_at_start")
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
    ({"weight_schedule": "lineer"}, ValueError, "weight_schedule must be one of ('constant', 'linear', 'cos'), "
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
