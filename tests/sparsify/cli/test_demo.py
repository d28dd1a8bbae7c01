"""`sparsify.cli.demo`: `sparsify demo` for each framework, run the way a user runs it (the installed console
script)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparsify.cli import main
from sparsify.cli.run_directory import MANIFEST, verify_run
from sparsify.cli.demo import FRAMEWORKS, default_config, format_result, removes_rows, run_demo
from sparsify.cli.demo.common import DemoProgress

SPARSIFY = str(Path(sys.executable).with_name("sparsify"))
STEPS = "40"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("SPARSIFY_DEBUG", None)
    return subprocess.run([SPARSIFY, *args], capture_output=True, text=True, timeout=300, env=env)


def table(stdout: str) -> dict[str, list[str]]:
    """Rows of the per-layer table, keyed by layer (plus 'total')."""
    rows = {}
    for line in stdout.splitlines():
        m = re.match(r"^(fc1|fc2|out|total)\s+(.*)$", line)
        if m:
            rows[m.group(1)] = m.group(2).split()
    return rows


def check_layer(row: list[str], shape: str, target: str, kept: int, total: int) -> None:
    # shape  target  achieved  kept / total  exact
    assert row == [shape, target, target, str(kept), "/", str(total), "yes"], row


def test_frameworks():
    assert list(FRAMEWORKS) == ["tf-graph", "keras", "tf-keras", "torch"]
    assert all(callable(backend.train) for backend in FRAMEWORKS.values())


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_demo_each_framework(framework, tmp_path):
    out = tmp_path / "out"
    res = run_cli("demo", "--framework", framework, "--steps", STEPS, "--no-progress", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "oneDNN supports DT_" not in res.stderr + res.stdout    # TF logs this for bool/int transposes
    rows = table(res.stdout)
    # 90% of each layer, exact counts: round(0.9 * 8192) = 7373 pruned, round(0.9 * 640) = 576
    check_layer(rows["fc1"], "128x64", "90.00%", 819, 8192)
    check_layer(rows["fc2"], "64x128", "90.00%", 819, 8192)
    check_layer(rows["out"], "10x64", "90.00%", 64, 640)
    assert rows["total"] == ["90.00%", "1702", "/", "17024", "yes"]
    acc = re.search(r"accuracy: dense ([\d.]+)%  ->  pruned ([\d.]+)%", res.stdout)
    assert acc and float(acc.group(1)) > 50.0 and float(acc.group(2)) > 30.0, res.stdout
    # --out: config used, summary, plots and a model that `sparsify report` reads back
    wrote = re.search(r"^wrote: (.*)$", res.stdout, re.M).group(1).split(", ")
    assert wrote[-1] == str(out / MANIFEST) and (out / MANIFEST).exists(), wrote
    summary = json.loads((out / "summary.json").read_text())
    assert summary["framework"] == framework and summary["config"]["target_sparsity"] == 0.9
    assert "target_sparsity: 0.9" in (out / "config.yaml").read_text()
    for png in ("schedule.png", "layer_sparsity.png", "mask_fc1.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    # one committed run: the manifest lists every file with its content, nothing else was left behind
    manifest = verify_run(out)
    assert manifest["framework"] == framework and "summary.json" in manifest["files"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    model = {"tf-graph": out / "checkpoint" / "model.ckpt", "keras": out / "model.keras",
             "tf-keras": out / "model.keras", "torch": out / "model.pt"}[framework]
    rep = run_cli("report", str(model), "--json")
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["weights_total"] == {"tensors": 3, "size": 17024, "zeros": 15322,
                                                      "sparsity": 15322 / 17024}
    if framework in ("keras", "tf-keras"):      # the layers' names, as the demo's table has them
        assert [t["name"] for t in json.loads(rep.stdout)["tensors"]] == [
            "fc1/kernel", "fc1/bias", "fc2/kernel", "fc2/bias", "out/kernel", "out/bias"]
    if framework == "tf-graph":     # the exported inference SavedModel (masks baked into constants)
        rep = run_cli("report", str(out / "saved_model"), "--json")
        assert rep.returncode == 0, rep.stderr
        assert json.loads(rep.stdout)["weights_total"]["zeros"] == 15322


def test_demo_pattern_config_and_skipped_layer(tmp_path, capsys):
    cfg = tmp_path / "prune.yaml"
    cfg.write_text("pattern: 4x1\ntarget_sparsity: 0.75\nstart_step: 0\nend_step: 20\npruning_frequency: 5\n"
                   "skip_incompatible_layers: true\n")
    assert main(["demo", "--framework", "torch", "--steps", "30", "--config", str(cfg), "--no-progress"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    rows = table(out)
    # 4x1 blocks: 2048 blocks of fc1, 0.75 -> 1536 pruned blocks = 6144 weights
    check_layer(rows["fc1"], "128x64", "75.00%", 2048, 8192)
    check_layer(rows["fc2"], "64x128", "75.00%", 2048, 8192)
    # the 10-row output layer does not fit 4-row blocks: skipped (left dense) and said so, once
    assert rows["out"] == ["10x64", "skipped", "0.00%", "640", "/", "640", "-"]
    assert "out: skipped: 4x1 does not fit its 2-D view (10, 64), left dense" in out
    assert "UserWarning" not in captured.err
    assert rows["total"] == ["75.00%", "4096", "/", "16384", "yes"]
    assert "total: over the pruned layers (the layers left dense are not counted)" in out


def test_demo_nm_pattern_in_process():
    res = run_demo("torch", default_config(pattern="2:4", steps=20), steps=20, progress=False)
    assert res.target == 0.5 and res.total_exact
    assert [(r.name, r.achieved, r.exact) for r in res.layers] == [("fc1", 0.5, True), ("fc2", 0.5, True),
                                                                  ("out", 0.5, True)]
    assert "fc1    128x64  50.00%    50.00%  4096 / 8192   yes" in format_result(res)


@pytest.mark.slow
def test_demo_bad_input(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("target_sparsty: 0.9\n")
    for args, needle in [
        (("demo", "--config", str(bad)), "unknown config key 'target_sparsty'"),
        (("demo", "--pattern", "3x3x3"), "pattern"),
        (("demo", "--sparsity", "1.5"), "target_sparsity must be in [0, 1), got 1.5"),
        (("demo", "--steps", "0"), "--steps must be a positive integer, got 0"),
        (("demo", "--pattern", "2:4", "--sparsity", "0.9"), "must be <= N/M = 0.5"),
    ]:
        res = run_cli(*args)
        err = res.stderr.strip().splitlines()
        assert res.returncode == 1 and len(err) == 1 and needle in err[0], (args, res.stderr)
    with pytest.raises(ValueError, match="framework must be one of"):
        run_demo("jax")


def test_demo_says_when_end_step_comes_after_training():
    cfg = default_config(steps=100).replace(end_step=100, pruning_frequency=10)
    res = run_demo("torch", cfg, steps=20, progress=False)
    # the target is the schedule read at the last update point passed (step 20)
    assert res.target == cfg.schedule().sparsity(20) and res.total_exact
    assert "end_step 100 comes after the last training step (20); the target shown is the schedule's " \
           "sparsity at step 20 (--fit-schedule fits a config's schedule into --steps)" in format_result(res).splitlines()


def _run_in_process(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_yaml_and_command_line_mean_the_same(tmp_path, capsys):
    # --pattern 2:4 and a YAML `pattern: 2:4` both default the target to the pattern's maximum (50%)
    cfg = tmp_path / "nm.yaml"
    cfg.write_text("pattern: 2:4\n")
    rc, yaml_out, err = _run_in_process(capsys, "demo", "--framework", "torch", "--steps", "30", "--config", str(cfg),
                                        "--fit-schedule", "--no-progress")
    assert rc == 0, err
    rc, cli_out, err = _run_in_process(capsys, "demo", "--framework", "torch", "--steps", "30", "--pattern", "2:4",
                                       "--no-progress")
    assert rc == 0, err
    assert table(yaml_out)["fc1"] == table(cli_out)["fc1"] == ["128x64", "50.00%", "50.00%", "4096", "/", "8192", "yes"]
    # the YAML's schedule (PruningConfig's default end_step 1000) was fitted into --steps only because asked, and said so
    assert "schedule fitted into --steps 30: start_step 0 -> 0, end_step 1000 -> 20, pruning_frequency 100 -> 2" \
        in yaml_out.splitlines()
    rc, out, err = _run_in_process(capsys, "demo", "--framework", "torch", "--steps", "30", "--config", str(cfg),
                                   "--no-progress")
    assert rc == 0 and "end_step 1000 comes after the last training step (30)" in out
    assert "fitted" not in out


def _row_pattern() -> str:
    """The registered channel pattern that removes whole rows (output channels), whatever it is called."""
    names = [p for p in ("channelx1", "1xchannel") if removes_rows(p, (10, 64))]
    assert len(names) == 1, names
    return names[0]


def test_row_patterns_leave_the_classifier_alone(capsys):
    pattern = _row_pattern()
    rc, out, err = _run_in_process(capsys, "demo", "--framework", "torch", "--steps", "60", "--pattern", pattern,
                                   "--sparsity", "0.5", "--no-progress")
    assert rc == 0, err
    rows = table(out)
    assert rows["out"] == ["10x64", "-", "0.00%", "640", "/", "640", "-"]
    assert f"out: dense: {pattern} prunes whole output rows, and each of the 10 rows of the classifier is a class; " \
           "left dense (--prune-classifier prunes it too)" in out
    assert rows["fc1"][1:3] == ["50.00%", "50.00%"] and rows["fc2"][1:3] == ["50.00%", "50.00%"]
    acc = re.search(r"pruned ([\d.]+)%", out)
    assert float(acc.group(1)) > 60.0, out
    # asked for: the classifier's rows go too (half of the classes), and the demo says what it cost
    rc, out, err = _run_in_process(capsys, "demo", "--framework", "torch", "--steps", "60", "--pattern", pattern,
                                   "--sparsity", "0.5", "--prune-classifier", "--no-progress")
    assert rc == 0 and table(out)["out"][1:3] == ["50.00%", "50.00%"]


@pytest.mark.slow
def test_bad_demo_input_exits_with_one_line(tmp_path, capsys):
    for args, rc_want, needle in [
        (("demo", "--pattern", "3x1", "--framework", "torch"), 1,
         "pattern '3x1' fits none of the demo's layers (fc1 128x64, fc2 64x128, out 10x64; 2-D views out x in): "
         "nothing would be pruned"),
        (("demo", "--seed", "-1"), 2, "argument --seed: must be an integer in [0, 4294967295], got -1"),
        (("demo", "--seed", "4294967296"), 2, "must be an integer in [0, 4294967295]"),
    ]:
        res = run_cli(*args, "--no-progress")
        err = res.stderr.strip().splitlines()
        assert res.returncode == rc_want and len(err) == 1 and needle in err[0], (args, res.stderr)
        assert "internal error" not in res.stderr
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 4294967295\], got -1"):
        run_demo("torch", steps=5, seed=-1, progress=False)


@pytest.mark.slow
def test_out_never_replaces_what_sparsify_did_not_write(tmp_path, capsys):
    out = tmp_path / "D"
    (out / "saved_model").mkdir(parents=True)
    (out / "saved_model" / "mine.txt").write_text("precious")
    (out / "notes.txt").write_text("mine too")
    res = run_cli("demo", "--framework", "tf-graph", "--steps", "5", "--out", str(out), "--no-progress")
    assert res.returncode == 1 and "already holds saved_model" in res.stderr and "internal error" not in res.stderr
    assert (out / "saved_model" / "mine.txt").read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "saved_model"]
    # a torch run does not touch saved_model/: it writes beside it; the user's notes stay
    rc, _, err = _run_in_process(capsys, "demo", "--framework", "torch", "--steps", "5", "--out", str(out),
                                 "--no-progress")
    assert rc == 0, err
    assert (out / "saved_model" / "mine.txt").read_text() == "precious" and (out / "notes.txt").exists()
    first = verify_run(out)
    # a second run replaces the first run's files (listed in its manifest), and only those
    rc, _, err = _run_in_process(capsys, "demo", "--framework", "torch", "--steps", "6", "--out", str(out),
                                 "--pattern", "2:4", "--no-progress")
    assert rc == 0, err
    second = verify_run(out)
    assert second["pattern"] == "2:4" and first["pattern"] == "1x1" and set(second["files"]) == set(first["files"])
    assert (out / "notes.txt").read_text() == "mine too" and (out / MANIFEST).exists()


@pytest.mark.slow
def test_a_second_run_removes_what_was_exported_from_the_first(tmp_path, capsys):
    """`sparsify export D/model.pt` then `sparsify demo --out D` again: the old run's compressed state_dict and .npz
    go with the old model (no stale artifact beside the new one), and D verifies."""
    out = tmp_path / "D"
    args = ("demo", "--framework", "torch", "--steps", "6", "--out", str(out), "--no-progress")
    rc, _, err = _run_in_process(capsys, *args)
    assert rc == 0, err
    for target in ("torch", "npz"):
        rc, stdout, err = _run_in_process(capsys, "export", str(out / "model.pt"), "--to", target)
        assert rc == 0 and f"recorded in {out / MANIFEST}" in stdout, err
    assert set(verify_run(out)["derived"]) == {"model.sparse.pt", "model.sparse.npz"}
    rc, _, err = _run_in_process(capsys, *args, "--seed", "1")
    assert rc == 0, err
    assert not (out / "model.sparse.pt").exists() and not (out / "model.sparse.npz").exists()
    assert verify_run(out)["seed"] == 1


def test_progress_rate_leaves_out_the_first_step_of_each_phase():
    import io

    clock = iter([0.0,            # created
                  0.0, 3.0,       # dense: first step (tracing) takes 3 s
                  3.01, 3.02,     # then 10 ms a step
                  3.02, 6.0,      # pruning: its first step traces again
                  6.02]).__next__
    buf = io.StringIO()
    p = DemoProgress(6, enabled=True, file=buf, clock=clock)
    p.phase("dense")
    p.step()
    assert p.rate_text() == ""                      # nothing timed yet: no made-up rate
    p.step()
    p.step()
    assert p.rate_text() == "10.0 ms/step, ETA 0:00"
    p.phase("pruning", 0.0)
    p.step(0.5)
    p.step(0.5)
    assert p.rate_text() == "20.0 ms/step, ETA 0:00"
    p.close()


def test_the_schedule_not_reached_is_said_once_in_the_notes(capsys):
    """The adapters warn when training ends before end_step (TargetNotReachedWarning); the demo says it in its
    notes under the table instead, not twice."""
    rc, out, err = _run_in_process(capsys, "demo", "--framework", "torch", "--steps", "10", "--set", "end_step=50",
                                   "--no-progress")
    assert rc == 0 and "end_step 50 comes after the last training step (10)" in out
    assert "TargetNotReachedWarning" not in err and "before the pruning schedule reached its target" not in err
