"""Faults while `sparsify demo --out D` works: an interrupt (SIGINT) during training, during export or during the
commit, and a full disk, leave D holding either the complete previous run or the complete new one (issue 15)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sparsify.cli.run_directory as run_directory
import sparsify.cli.demo as demo
from sparsify.cli.run_directory import MANIFEST, verify_run
from sparsify.cli.demo import run_demo

SPARSIFY = str(Path(sys.executable).with_name("sparsify"))


def snapshot(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` (relative path -> content)."""
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def assert_complete_run(d: Path, before: dict[str, bytes] | None = None, pattern: str | None = None) -> dict:
    """``d`` holds exactly one committed run and nothing half-written; optionally exactly ``before``."""
    man = verify_run(d)
    leftovers = [p.name for p in d.iterdir() if p.name.startswith(".")]
    assert leftovers == [], leftovers
    listed = set(man["files"]) | {MANIFEST}
    assert set(snapshot(d)) == listed, set(snapshot(d)) ^ listed
    if before is not None:
        assert snapshot(d) == before
    if pattern is not None:
        assert man["pattern"] == pattern
    return man


@pytest.fixture
def first_run(tmp_path):
    out = tmp_path / "D"
    run_demo("torch", demo.default_config(steps=20), steps=20, out=out, progress=False)
    assert_complete_run(out, pattern="1x1")
    return out, snapshot(out)


def second_config():
    return demo.default_config(pattern="2:4", steps=20)


@pytest.mark.slow
def test_interrupt_during_training_keeps_the_old_run(first_run, monkeypatch):
    import sparsify_torch

    out, before = first_run
    calls = {"n": 0}
    step = sparsify_torch.Pruner.step

    def interrupted(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return step(self, *a, **k)

    monkeypatch.setattr(sparsify_torch.Pruner, "step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_demo("torch", second_config(), steps=20, out=out, progress=False)
    assert calls["n"] == 5
    assert_complete_run(out, before, "1x1")


@pytest.mark.slow
def test_interrupt_while_saving_the_model_keeps_the_old_run(first_run, monkeypatch):
    import torch

    out, before = first_run
    save = torch.save

    def half_written(obj, f, *a, **k):
        save(obj, f, *a, **k)
        f.flush()                              # the demo hands torch.save an open file
        f.truncate(100)                        # as if cut off mid-write
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", half_written)
    with pytest.raises(KeyboardInterrupt):
        run_demo("torch", second_config(), steps=20, out=out, progress=False)
    assert_complete_run(out, before, "1x1")


@pytest.mark.slow
def test_interrupt_while_writing_plots_keeps_the_old_run(first_run, monkeypatch):
    out, before = first_run
    calls = {"n": 0}
    plot = demo.plot_mask

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return plot(*a, **k)

    monkeypatch.setattr(demo, "plot_mask", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_demo("torch", second_config(), steps=20, out=out, progress=False)
    assert_complete_run(out, before, "1x1")


@pytest.mark.slow
def test_sigint_during_the_commit_is_held_until_the_new_run_is_complete(first_run, monkeypatch, sigint_raises):
    out, before = first_run
    calls = {"n": 0}
    replace = os.replace

    def replace_and_signal(src, dst):
        if Path(dst).parent == out and Path(src).parent.name.startswith(".sparsify-staging-"):
            calls["n"] += 1                     # a staged output moved into D: the commit
            if calls["n"] == 3:                 # mid-commit: some files moved, others not yet
                os.kill(os.getpid(), signal.SIGINT)
        return replace(src, dst)

    monkeypatch.setattr(run_directory.os, "replace", replace_and_signal)
    with pytest.raises(KeyboardInterrupt):      # delivered once the commit is done
        run_demo("torch", second_config(), steps=20, out=out, progress=False)
    assert calls["n"] > 3
    monkeypatch.undo()
    man = assert_complete_run(out, pattern="2:4")
    assert snapshot(out) != before and man["files"]["model.pt"]["size"] > 0


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("SPARSIFY_DEBUG", None)
    extra = ["--no-progress"] if args[0] == "demo" else []
    return subprocess.Popen([SPARSIFY, *args, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, **kw)


def _wait_for(cond, proc: subprocess.Popen, timeout: float = 120.0) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    return False


def _stage(out: Path) -> list[Path]:
    return [p for p in out.glob(".sparsify-staging-*") if p.is_dir()]


@pytest.mark.slow
@pytest.mark.parametrize("point", ["training", "export"])
def test_sigint_to_the_command(first_run, point):
    """The real thing: the `sparsify` command (TF graph mode), SIGINT from outside, during the training or
    while the outputs are written. The run stops at the next safe point (130, the previous run kept), or the
    signal came during or after the commit (the new run, complete); never a framework error (issue 48)."""
    out, before = first_run
    proc = _cli("demo", "--framework", "tf-graph", "--steps", "300", "--pattern", "2:4", "--out", str(out))
    if point == "training":        # the staging directory exists from the first step; nothing written into it yet
        seen = _wait_for(lambda: any(len(list(s.iterdir())) == 1 for s in _stage(out)), proc)
        time.sleep(0.5)
    else:                          # the checkpoint is written; the SavedModel export and the plots follow
        seen = _wait_for(lambda: any((s / "checkpoint").exists() for s in _stage(out)), proc)
    assert seen, proc.communicate()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    if proc.returncode == 0:       # the signal came after the command was done: the new run, complete
        assert_complete_run(out, pattern="2:4")
    else:
        assert proc.returncode == 130 and stderr.strip().splitlines()[-1] == "sparsify: interrupted", stderr
        man = assert_complete_run(out)                  # one complete run: the previous one, or the new one
        assert snapshot(out) == before if man["pattern"] == "1x1" else man["pattern"] == "2:4"


_BUSY = """
import sys, time
from sparsify.cli import main
from sparsify.cli.demo.common import DemoProgress
step, n = DemoProgress.step, [0]
def busy(self, *a, **k):           # at the 15th step, a long call that reaches no safe point (a stuck framework)
    n[0] += 1
    if n[0] == 15:
        print("busy", flush=True)
        t = time.monotonic()
        while time.monotonic() - t < 120:
            time.sleep(0.01)
    return step(self, *a, **k)
DemoProgress.step = busy
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("previous", [True, False])
def test_a_second_sigint_aborts_at_once_and_leaves_nothing_half_written(tmp_path, previous):
    out = tmp_path / "D"
    if previous:
        run_demo("torch", demo.default_config(steps=10), steps=10, out=out, progress=False)
    before = snapshot(out) if previous else None
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("SPARSIFY_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-c", _BUSY, "demo", "--framework", "torch", "--steps", "20",
                             "--pattern", "2:4", "--no-progress", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline() == "busy\n", proc.communicate()
        assert _stage(out), "the run's staging directory exists while it trains"
        proc.send_signal(signal.SIGINT)              # the first: a flag, the run never reaches a safe point
        time.sleep(0.5)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)              # the second: at once
        t0 = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        waited = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and stderr.strip().splitlines()[-1] == "sparsify: interrupted", stderr
    assert waited < 10 and "Traceback" not in stderr
    if previous:
        assert_complete_run(out, before, "1x1")       # no staging directory, no temporary file left
    else:
        assert not out.exists()                       # the directory this run made, removed with its stage


def _limited(max_bytes: int):
    def setup() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return setup


@pytest.mark.slow
def test_disk_full_while_saving_leaves_the_old_run_and_no_partial_file(first_run):
    out, before = first_run
    proc = _cli("demo", "--framework", "torch", "--steps", "20", "--pattern", "2:4", "--out", str(out),
                preexec_fn=_limited(30_000))          # model.pt is ~70 KB
    _, stderr = proc.communicate(timeout=300)
    err = stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1 and "internal error" not in stderr, stderr
    assert "could not write" in err[0] and "model.pt" in err[0] and str(out) in err[0], err
    assert_complete_run(out, before, "1x1")


@pytest.mark.slow
def test_disk_full_on_export_and_report_output(tmp_path, first_run):
    out, _ = first_run
    target = tmp_path / "m.sparse.pt"
    proc = _cli("export", str(out / "model.pt"), "--out", str(target), preexec_fn=_limited(4_000))
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "internal error" not in stderr
    assert f"could not write {str(target)!r}: File too large (nothing was written)" in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D"]           # no temporary file left behind
    report = tmp_path / "r.json"
    report.write_text("old")
    proc = _cli("report", str(out / "model.pt"), "--json", "--output", str(report), preexec_fn=_limited(200))
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "the existing file is unchanged" in stderr, stderr
    assert report.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["D", "r.json"]
    ok = _cli("report", str(out / "model.pt"), "--json", "--output", str(report))
    assert ok.wait(120) == 0 and json.loads(report.read_text())["format"] == "torch"


def test_an_interrupted_first_run_leaves_no_directory(tmp_path, monkeypatch):
    out = tmp_path / "new"
    monkeypatch.setattr(demo, "plot_mask", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        run_demo("torch", second_config(), steps=5, out=out, progress=False)
    assert not out.exists()


def test_a_missing_framework_is_refused_before_the_staging_directory_exists(tmp_path, monkeypatch):
    """The framework is imported before staging: a missing one leaves D untouched, and an interrupt during
    a slow import (TensorFlow's takes seconds) is an interrupt of a run that has not started."""
    out = tmp_path / "D"
    monkeypatch.setitem(sys.modules, "torch", None)            # `import torch` raises ImportError

    def staging(self):
        raise AssertionError("the staging directory was made before the framework was imported")

    monkeypatch.setattr(run_directory.RunDirectory, "__enter__", staging)
    with pytest.raises(ImportError, match=r'torch is not installed .*pip install "sparsify-train\[torch\]"'):
        run_demo("torch", second_config(), steps=20, out=out, progress=False)
    assert not out.exists() or list(out.iterdir()) == []
