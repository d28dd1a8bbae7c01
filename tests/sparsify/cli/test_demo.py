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
from sparsify.cli.demo import FRAMEWORKS, default_config, format_result, run_demo

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
    assert list(FRAMEWORKS) == ["tf-graph", "keras", "torch"]
    assert all(callable(backend.train) for backend in FRAMEWORKS.values())


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_demo_each_framework(framework, tmp_path):
    out = tmp_path / "out"
    res = run_cli("demo", "--framework", framework, "--steps", STEPS, "--no-progress", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    rows = table(res.stdout)
    # 90% of each layer, exact counts: round(0.9 * 8192) = 7373 pruned, round(0.9 * 640) = 576
    check_layer(rows["fc1"], "128x64", "90.00%", 819, 8192)
    check_layer(rows["fc2"], "64x128", "90.00%", 819, 8192)
    check_layer(rows["out"], "10x64", "90.00%", 64, 640)
    assert rows["total"] == ["90.00%", "1702", "/", "17024", "yes"]
    acc = re.search(r"accuracy: dense ([\d.]+)%  ->  pruned ([\d.]+)%", res.stdout)
    assert acc and float(acc.group(1)) > 50.0 and float(acc.group(2)) > 30.0, res.stdout
    # --out: config used, summary, plots and a model that `sparsify report` reads back
    summary = json.loads((out / "summary.json").read_text())
    assert summary["framework"] == framework and summary["config"]["target_sparsity"] == 0.9
    assert "target_sparsity: 0.9" in (out / "config.yaml").read_text()
    for png in ("schedule.png", "layer_sparsity.png", "mask_fc1.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    model = {"tf-graph": out / "checkpoint" / "model.ckpt", "keras": out / "model.keras",
             "torch": out / "model.pt"}[framework]
    rep = run_cli("report", str(model), "--json")
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["weights_total"] == {"tensors": 3, "size": 17024, "zeros": 15322,
                                                      "sparsity": 15322 / 17024}
    if framework == "tf-graph":     # the exported inference SavedModel (masks baked into constants)
        rep = run_cli("report", str(out / "saved_model"), "--json")
        assert rep.returncode == 0, rep.stderr
        assert json.loads(rep.stdout)["weights_total"]["zeros"] == 15322


def test_demo_pattern_config_and_skipped_layer(tmp_path, capsys):
    cfg = tmp_path / "prune.yaml"
    cfg.write_text("pattern: 4x1\ntarget_sparsity: 0.75\nstart_step: 0\nend_step: 20\npruning_frequency: 5\n"
                   "skip_incompatible_layers: true\n")
    assert main(["demo", "--framework", "torch", "--steps", "30", "--config", str(cfg), "--no-progress"]) == 0
    out = capsys.readouterr().out
    rows = table(out)
    # 4x1 blocks: 2048 blocks of fc1, 0.75 -> 1536 pruned blocks = 6144 weights
    check_layer(rows["fc1"], "128x64", "75.00%", 2048, 8192)
    check_layer(rows["fc2"], "64x128", "75.00%", 2048, 8192)
    # the 10-row output layer does not fit 4-row blocks: left dense and said so
    assert rows["out"] == ["10x64", "-", "0.00%", "640", "/", "640", "-"]
    assert "out: dense: 4x1 does not fit its 2-D view (10, 64)" in out
    assert rows["total"] == ["75.00%", "4096", "/", "16384", "yes"]


def test_demo_nm_pattern_in_process():
    res = run_demo("torch", default_config(pattern="2:4", steps=20), steps=20, progress=False)
    assert res.target == 0.5 and res.total_exact
    assert [(r.name, r.achieved, r.exact) for r in res.layers] == [("fc1", 0.5, True), ("fc2", 0.5, True),
                                                                  ("out", 0.5, True)]
    assert "fc1    128x64  50.00%    50.00%  4096 / 8192   yes" in format_result(res)


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
           "sparsity at step 20" in format_result(res).splitlines()
