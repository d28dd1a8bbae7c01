"""bench/bench_accuracy.py end to end on very short configurations: digits, torch, 30 steps; one Keras 3 (JAX) run."""
from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from bench import bench_accuracy  # noqa: E402
from bench.accuracy.problems import batch_order, init_weights, problem, setting  # noqa: E402
from bench.accuracy.torch_runs import Net  # noqa: E402

SHORT = ["--seeds", "2", "--frameworks", "torch", "--datasets", "digits", "--settings", "90,2:4", "--steps", "30",
         "--no-write"]


@pytest.mark.slow
def test_short_run_records_reaches_sparsity_and_reports(tmp_path):
    out, png = tmp_path / "acc.json", tmp_path / "acc.png"
    args = SHORT + ["--arms", "dense,default,torch.ao", "--out-json", str(out), "--plot", str(png)]
    data = bench_accuracy.main(args)
    runs = json.loads(out.read_text())["runs"]
    assert runs == data["runs"]
    # dense once per seed (one model variant), default and torch.ao per seed and setting
    assert sorted((r["arm"], r["setting"], r["seed"]) for r in runs) == sorted(
        [("dense", "90", s) for s in (0, 1)] + [(a, st, s) for a in ("default", "torch.ao") for st in ("90", "2:4")
                                                for s in (0, 1)])
    for r in runs:
        assert r["status"] == "ok" and 0.0 <= r["accuracy"] <= 1.0 and r["seconds"] > 0
        want = {"dense": 0.0, "90": 0.9, "2:4": 0.5}["dense" if r["arm"] == "dense" else r["setting"]]
        assert r["sparsity"] == pytest.approx(want, abs=1e-3)
    # 2:4 fits the 16->32 conv (144 columns) and the linear (512), not the first conv (9 columns)
    assert {tuple(r["pruned_layers"]) for r in runs if r["setting"] == "2:4"} == {("l1", "l2")}
    body = bench_accuracy.render(json.loads(out.read_text()), str(png), write=False)
    assert "| 90 | default |" in body and "vs torch.ao (2)" in body and "| 2:4 | torch.ao |" in body
    assert png.stat().st_size > 0
    # a rerun with the same keys trains nothing
    again = bench_accuracy.main(args + ["--plot", ""])
    assert len(again["runs"]) == len(runs)
    # the runs flushed subnormals only while they trained: this process keeps IEEE arithmetic
    assert (torch.tensor(1e-39) * 1.0).item() != 0 and float(np.float32(1e-39) * np.float32(1.0)) != 0


def test_an_arm_the_installed_sparsify_does_not_know_fails_loudly(tmp_path):
    with pytest.raises(ValueError, match="no_such_key"):
        bench_accuracy.main(SHORT + ["--arms", "bogus", "--arm-config", 'bogus={"no_such_key": 1}',
                                     "--out-json", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


def test_teacher_arm_trains_in_torch_and_is_refused_elsewhere(tmp_path):
    out = tmp_path / "kd.json"
    data = bench_accuracy.main(["--seeds", "1", "--frameworks", "torch", "--datasets", "digits", "--settings", "90",
                                "--steps", "20", "--no-write", "--plot", "", "--arms", "erk_wanda_kd",
                                "--out-json", str(out)])
    (run,) = data["runs"]
    assert run["status"] == "ok" and run["sparsity"] == pytest.approx(0.9, abs=1e-3)
    assert run["overrides"]["distillation"] == {"temperature": 2.0, "weight": 1.0}
    with pytest.raises(ValueError, match="--arms erk_wanda_kd: distillation runs in the torch framework only, "
                                         "not tf_keras"):
        bench_accuracy.main(["--seeds", "1", "--frameworks", "tf_keras", "--datasets", "digits", "--settings", "90",
                             "--steps", "20", "--no-write", "--arms", "erk_wanda_kd", "--out-json",
                             str(tmp_path / "no.json")])
    assert not (tmp_path / "no.json").exists()


def test_torch_ao_view_model_equals_the_plain_model_and_batches_are_shared():
    spec, s = problem("mnist1d"), setting("90")
    w = init_weights(spec, s, seed=3)
    x = torch.randn(5, 40)
    plain, flat = Net(spec.layers(s), w), Net(spec.layers(s), w, flat=True)
    assert flat.l1.weight.shape == (25, 75)
    torch.testing.assert_close(plain(x), flat(x), rtol=1e-6, atol=1e-6)
    order = batch_order(spec, 4000, seed=3)
    assert order.shape == (6000, 100) and np.array_equal(np.sort(order[:40].ravel()), np.arange(4000))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None or importlib.util.find_spec("keras") is None,
                    reason="Keras 3 and jax not installed")
def test_keras_jax_runs_in_a_jax_process_and_skips_the_peer_arms(tmp_path, capsys):
    out = tmp_path / "acc.json"
    data = bench_accuracy.main(["--seeds", "1", "--frameworks", "keras_jax", "--datasets", "digits", "--settings",
                                "90", "--steps", "20", "--arms", "default,tfmot", "--out-json", str(out), "--plot", "",
                                "--no-write"])
    assert "tfmot runs in tf_keras only: not run for keras_jax" in capsys.readouterr().out
    [r] = data["runs"]
    assert (r["framework"], r["arm"], r["status"], r["backend"]) == ("keras_jax", "default", "ok", "jax")
    assert r["sparsity"] == pytest.approx(0.9, abs=1e-3) and len(r["mask_digest"]) == 16
    assert "| digits | 90 | default | Keras 3 (JAX) - torch |" in bench_accuracy.render(
        {"runs": data["runs"] + [dict(r, framework="torch")]}, "", write=False)


def test_the_distillation_table_pairs_each_teacher_arm_with_its_arm_and_says_when_it_is_worse():
    from bench.accuracy.report import render_distillation
    runs = [{"dataset": "mnist1d", "framework": "torch", "arm": arm, "setting": "95", "variant": "base", "seed": s,
             "status": "ok", "accuracy": acc} for arm, accs in (("erk_wanda", (0.60, 0.50, 0.55)),
                                                              ("erk_wanda_kd", (0.55, 0.47, 0.49)))
            for s, acc in enumerate(accs)]
    rows = render_distillation(runs).splitlines()
    assert rows[2] == "| mnist1d | torch | 95 | erk_wanda_kd - erk_wanda | -0.0467 +- 0.0153 (3) | 0.0088 | " \
                      "no: worse by 0.0467 |"
    assert render_distillation([r for r in runs if r["arm"] == "erk_wanda_kd"]) == ""    # no arm to pair with


def test_report_docstring_examples():
    import doctest
    from bench.accuracy import report
    result = doctest.testmod(report)
    assert result.attempted >= 4 and result.failed == 0


def test_no_write_leaves_the_docs_figure_alone_but_draws_a_path_given(tmp_path, monkeypatch):
    from bench.accuracy import report
    drawn = []
    monkeypatch.setattr(report, "plot", lambda runs, path: drawn.append(path) or True)
    monkeypatch.setattr("bench._results.publish", lambda *a, **k: None)
    bench_accuracy.render({"runs": []}, bench_accuracy.PLOT, write=False)
    assert drawn == []
    bench_accuracy.render({"runs": []}, str(tmp_path / "mine.png"), write=False)
    assert drawn == [str(tmp_path / "mine.png")]
