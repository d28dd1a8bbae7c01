"""Distillation while pruning in ``model.fit``: Keras 3 on JAX, PyTorch, TensorFlow, and tf-keras.

Each Keras runs :mod:`distill_scenarios` in its own process; the values are compared here with the NumPy
references of :mod:`sparsify.distillation` (the term, its weight over steps) and with a run without
distillation (the masks).
"""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pytest
from backend_runs import HERE, run_python

from sparsify.distillation import DistillationConfig, distillation_loss, kd_loss

pytestmark = pytest.mark.slow        # a process per Keras (docs/design.md, "Tests in tiers")

KERASES = ("jax", "torch", "tensorflow", "tf_keras")


def _run(backend: str, names: str | None = None, extra_env: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        args = [str(HERE / "distill_scenarios.py"), backend, out] + ([names] if names else [])
        run_python(args, "tensorflow" if backend == "tf_keras" else backend, extra_env=extra_env)
        with open(out) as f:
            return json.load(f)


@pytest.fixture(scope="module", params=KERASES)
def res(request):
    return _run(request.param)


def test_zero_when_student_is_teacher(res):
    assert res["zero_when_equal"]["term"] == 0.0


def test_term_equals_numpy_reference_at_every_step(res):
    r = res["reference"]
    cfg = DistillationConfig.from_dict(r["config"])
    expected = [distillation_loss(cfg, s, r["student"], r["teacher"], [r["student_h"]], [r["teacher_h"]])
                for s in range(8)]
    np.testing.assert_allclose(r["terms"], expected, rtol=1e-6, atol=1e-6)
    # the ramp: init_weight 0.2 until step 2, weight 0.8 from step 6
    assert [round(cfg.weight_at(s), 2) for s in range(8)] == [0.2, 0.2, 0.2, 0.35, 0.5, 0.65, 0.8, 0.8]


def test_weight_schedule_applied_at_the_right_steps_in_fit(res):
    r = res["schedule_in_fit"]
    logits, y = np.asarray(r["student"]), np.asarray(r["labels"])
    logp = logits - logits.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    task = float(-logp[np.arange(len(y)), y].mean())
    kd = kd_loss(r["student"], r["teacher"], temperature=1.0)
    weights = [0.0, 0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]        # linear from step 2 to 6 (optimizer steps)
    np.testing.assert_allclose(r["losses"], [task + w * kd for w in weights], atol=2e-5)
    assert r["evaluate"] == pytest.approx(task, abs=1e-6)      # evaluate: the task loss only


def test_dense_at_start_teacher_is_the_student_at_the_pruning_start_step(res):
    """Callback and wrapper set up at step 0 with start_step=5: the teacher equals the student after 5 steps
    exactly (not its initialisation), it stays so, and the term is exactly 0 before step 5."""
    r = res["teacher_at_start"]
    assert (r["teacher_step"], r["iterations"]) == (5, 8)
    assert r["teacher_is_student_at_5"] and r["teacher_kept_after"] and r["teacher_moved_from_init"]
    assert r["h_zeros"] == 0.5
    assert r["terms"][:2] == [0.0, 0.0] and r["terms"][2] > 0 and r["terms"][3] == r["terms"][2]


def test_default_weight_fades_over_the_first_half_of_the_pruning_window(res):
    """No weight given: 0 before the pruning start_step 4, 1 at it, linearly to 0 at 4 + (12 - 4) // 2 = 8, 0
    after; an explicit weight=1.0 stays 1."""
    for name, weights in (("default", [0.0, 0.0, 1.0, 0.5, 0.0, 0.0]), ("explicit", [0.0, 0.0, 1.0, 1.0, 1.0, 1.0])):
        r = res["default_weight_fades"][name]
        kd = kd_loss(r["student"], r["teacher"], temperature=2.0)
        assert kd > 1e-4 and r["teacher_step"] == 4
        np.testing.assert_allclose(r["terms"], [w * kd for w in weights], rtol=1e-5, atol=1e-7)
    assert res["default_weight_fades"]["default"]["config"] == ["linear", 1.0, 0.0, 4, 8]
    assert res["default_weight_fades"]["explicit"]["config"] == ["constant", 0.0, 1.0, 0, 0]


def test_pruning_sees_the_student_only_and_teacher_stays_frozen(res):
    plain, runs = res["prune_fit"]["plain"], res["prune_fit"]
    for name in ("distill", "features"):
        run = runs[name]
        assert run["paths"] == plain["paths"] == ["h/kernel", "out/kernel"]
        assert run["masks_step0"] == plain["masks_step0"]
        assert run["teacher_trainable"] == 0
        assert run["trainable"] == [4, 4]                      # the wrapper trains the student's 4 weights only
        assert run["teacher_unchanged"] is True
        assert run["teacher_pruned_zeros"] == 0


def test_stripped_student_saves_without_the_teacher(res):
    for run in res["prune_fit"].values():
        assert run["stripped_is_student"] is True
        assert run["saved_weights"] == [[6, 5], [5], [5, 3], [3]]
        assert run["saved_equal"] is True
        assert run["saved_h_zeros"] == 0.5


def test_bad_input_is_refused_clearly(res):
    e = res["bad_input"]
    keras_name = "tf_keras" if res["backend"] == "tf_keras" else "keras"
    assert e["teacher_not_model"] == f"TypeError: teacher must be a {keras_name}.Model (built), got str"
    assert e["student_not_model"] == f"TypeError: student must be a {keras_name}.Model (built), got str"
    assert e["teacher_shape"] == ("ValueError: teacher: its output shape (None, 4) differs from the student's "
                                  "(None, 3); the logits must have one shape")
    assert e["unknown_feature"].startswith("ValueError: features ['nope'] are not layers of the student 'mlp' (its "
                                           "layers: ['input")
    assert "is a subclassed model, whose intermediate outputs cannot be read" in e["subclassed_features"]
    assert e["teacher_without_user"].startswith("ValueError: teacher: a teacher model was passed but distillation "
                                                "teacher='dense_at_start'")
    assert e["user_without_teacher"] == ("ValueError: teacher: distillation teacher='user' needs the teacher model "
                                         "(teacher=a trained model)")
    assert e["bad_config"] == "ValueError: temperature must be a finite number > 0, got 0"
    assert e["fade_without_window"] == (
        "ValueError: distillation weight_schedule='fade' (the default weight of the 'dense_at_start' teacher) fades "
        "over the pruning window, which the PruningCallback gives when fit starts (DistillationModel.teach_from("
        "start_step, end_step)): fit with a PruningCallback, or give the weight (e.g. weight=1.0)")
    assert e["fade_teach_from_without_end"] == (
        "ValueError: end_step: the distillation weight fades over the pruning window (the default of the "
        "'dense_at_start' teacher): teach_from(start_step, end_step), or give the weight (e.g. weight=1.0)")


def test_jax_data_parallel_loss_equals_one_device():
    r = _run("jax", "distributed", {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})["distributed"]
    assert r["devices"] == 4
    one, four = r["runs"]["single"], r["runs"]["data_parallel_4"]
    assert len(one["means"]) == 6
    np.testing.assert_allclose(four["means"], one["means"], rtol=1e-5)
    np.testing.assert_allclose(four["kernel"], one["kernel"], rtol=1e-5, atol=1e-6)
    assert (np.asarray(one["kernel"]) == 0).mean() == 0.5
