"""Ctrl-C only at safe points (sparsify.cli.interrupts): the first SIGINT sets a flag that the run checks at
step boundaries, between outputs and around the commit; the command then exits with 130 and
"sparsify: interrupted", nothing half-written. (The second Ctrl-C, which ends the process: test_demo_faults.py.)"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import signal
from pathlib import Path

import pytest

import sparsify.cli.run_directory as run_directory
import sparsify.cli.demo as demo
from sparsify.cli import interrupts, main
from sparsify.cli.demo.common import DemoProgress

from test_demo_faults import assert_complete_run, snapshot


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_the_first_sigint_only_sets_the_flag_and_check_raises_at_the_safe_point(sigint_raises):
    with interrupts.handled():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        interrupts.check()                              # nothing yet
        ctrl_c()
        reached = "after the signal"                    # no exception where the signal landed
        assert interrupts.requested()
        with pytest.raises(interrupts.Interrupted) as info:
            interrupts.check()
        assert isinstance(info.value, KeyboardInterrupt)
    assert reached and not interrupts.requested()        # reset when the block ends
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler      # the previous handler is back
    interrupts.check()                                  # outside: a library's Ctrl-C is Python's own


def test_a_second_block_inside_the_first_changes_nothing(sigint_raises):
    with interrupts.handled():
        interrupts.request()
        with interrupts.handled():
            assert interrupts.requested()
        assert interrupts.requested()


@pytest.fixture
def old_run(tmp_path):
    out = tmp_path / "D"
    assert main(["demo", "--framework", "torch", "--steps", "10", "--no-progress", "--out", str(out)]) == 0
    assert_complete_run(out, pattern="1x1")
    return out, snapshot(out)


def _count_steps(monkeypatch, at: int, action) -> list[int]:
    """``action()`` during the ``at``-th progress step (1-based); returns the list of steps done (its length)."""
    steps: list[int] = []
    step = DemoProgress.step

    def counted(self, *a, **k):
        steps.append(len(steps) + 1)
        if len(steps) == at:
            action()
        return step(self, *a, **k)

    monkeypatch.setattr(DemoProgress, "step", counted)
    return steps


@pytest.mark.parametrize("framework", ["torch", "keras"])
def test_sigint_during_training_ends_at_the_next_step_with_130(old_run, monkeypatch, capsys, sigint_raises,
                                                               framework):
    out, before = old_run
    steps = _count_steps(monkeypatch, 25, ctrl_c)       # the 5th step of the pruning phase (20 dense steps)
    rc = main(["demo", "--framework", framework, "--steps", "20", "--pattern", "2:4", "--no-progress",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 130 and err.strip().splitlines()[-1] == "sparsify: interrupted", err
    assert len(steps) == 25                             # no step after the one the signal came in
    assert "Traceback" not in err and "internal error" not in err
    assert_complete_run(out, before, "1x1")             # the previous run, as it was
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigint_while_writing_the_outputs_stops_before_the_commit(old_run, monkeypatch, capsys, sigint_raises):
    out, before = old_run
    plots = []
    plot = demo.plot_mask

    def plot_and_signal(*a, **k):
        plots.append(k.get("name"))
        if len(plots) == 1:
            ctrl_c()
        return plot(*a, **k)

    monkeypatch.setattr(demo, "plot_mask", plot_and_signal)
    rc = main(["demo", "--framework", "torch", "--steps", "10", "--pattern", "2:4", "--no-progress", "--out", str(out)])
    assert rc == 130 and capsys.readouterr().err.strip().splitlines()[-1] == "sparsify: interrupted"
    assert plots == ["fc1"]                             # the next plot was not started
    assert_complete_run(out, before, "1x1")


def test_sigint_twice_during_the_commit_waits_for_its_end(old_run, monkeypatch, capsys, sigint_raises):
    """Both Ctrl-Cs wait for the end of the commit: the new run is complete, the status 130."""
    out, before = old_run
    moved = []
    replace = os.replace

    def replace_and_signal(src, dst):
        if Path(dst).parent == out and Path(src).parent.name.startswith(".sparsify-staging-"):
            moved.append(Path(dst).name)
            if len(moved) == 2:                         # mid-commit: some files moved, others not yet
                ctrl_c()
                ctrl_c()
        return replace(src, dst)

    monkeypatch.setattr(run_directory.os, "replace", replace_and_signal)
    rc = main(["demo", "--framework", "torch", "--steps", "10", "--pattern", "2:4", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    monkeypatch.undo()
    assert rc == 130 and err.strip().splitlines()[-1] == "sparsify: interrupted", err
    assert len(moved) > 2
    man = assert_complete_run(out, pattern="2:4")       # the new run, every file of it
    assert snapshot(out) != before and man["files"]["model.pt"]["size"] > 0


def test_sigint_during_export_writes_nothing(tmp_path, old_run, monkeypatch, capsys, sigint_raises):
    out, _ = old_run
    import sparsify_torch.export as torch_export

    compressed = torch_export.compressed_document

    def compress_and_signal(*a, **k):
        ctrl_c()
        return compressed(*a, **k)

    monkeypatch.setattr(torch_export, "compressed_document", compress_and_signal)
    target = tmp_path / "m.sparse.pt"
    rc = main(["export", str(out / "model.pt"), "--out", str(target)])
    captured = capsys.readouterr()
    assert rc == 130 and captured.err.strip() == "sparsify: interrupted" and captured.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D"]
