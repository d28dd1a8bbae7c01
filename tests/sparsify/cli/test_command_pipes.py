"""`sparsify.cli.command` in pipes and logs (issue 58 item 5): a reader that closes the pipe early ends every
subcommand quietly with status 0; a demo's progress is a bar only on a terminal, plain newline-terminated lines
in a log (the last one true), nothing with --no-progress."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sparsify.cli.command import main
from sparsify.cli.demo.common import DemoProgress

SPARSIFY = str(Path(sys.executable).with_name("sparsify"))


def _env() -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("SPARSIFY_DEBUG", None)
    return env


def into_closed_pipe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`sparsify ARGS` writing its stdout into a pipe whose reader has already gone."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([SPARSIFY, *args], stdout=w, stderr=subprocess.PIPE, text=True, timeout=300,
                              cwd=cwd, env=_env())
    finally:
        os.close(w)


@pytest.fixture
def many_tensors(tmp_path):
    """An .npz of 100 tensors: a report of 100 lines."""
    path = tmp_path / "w.npz"
    np.savez(path, **{f"layer{i}/kernel": np.zeros((4, 4), np.float32) for i in range(100)})
    return path


class _GoneReader(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_in_process_is_a_quiet_exit_0(monkeypatch, capsys, many_tensors):
    monkeypatch.setattr(sys, "stdout", _GoneReader())
    assert main(["report", str(many_tensors)]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.slow
@pytest.mark.parametrize("command, first", [
    ("report w.npz", "w.npz (npz), 100 tensors"),
    # 20,001 rows, far more than a pipe holds: the command is still writing when head has gone
    ("schedule --every 1 --set end_step=20000", "gradual schedule: 0% -> 90%, start_step 0, end_step 20000, "
                                                "pruning_frequency 100, pattern 1x1"),
], ids=["report", "schedule"])
def test_piped_into_head_exits_0_without_an_error_line(command, first, many_tensors, tmp_path):
    res = subprocess.run(["bash", "-c", f'"{SPARSIFY}" {command} | head -1; echo "status ${{PIPESTATUS[0]}}"'],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env())
    assert (res.stdout, res.stderr) == (f"{first}\nstatus 0\n", "")


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ("report", "w.npz", "--json"),
    ("schedule", "--every", "1", "--set", "end_step=20000"),
    ("export", "w.npz", "--to", "npz", "--json"),
], ids=["report", "schedule", "export"])                   # demo: test_a_demo_log_has_no_carriage_returns_...
def test_every_subcommand_into_a_closed_pipe_exits_0_quietly(args, many_tensors, tmp_path):
    res = into_closed_pipe(*args, cwd=tmp_path)
    assert (res.returncode, res.stderr) == (0, "")


# ----- progress ----------------------------------------------------------------------------------------
def _clock(step: float = 0.01):
    t = [0.0]

    def now() -> float:
        t[0] += step
        return t[0]
    return now


def _run(progress: DemoProgress, phase_steps: int, final: float) -> None:
    progress.phase("dense")
    for _ in range(phase_steps):
        progress.step()
    progress.phase("pruning", 0.0)
    for i in range(phase_steps):           # as the backends do: the sparsity every 10 steps and at the last
        progress.step(final * (i + 1) / phase_steps if i % 10 == 0 or i == phase_steps - 1 else None)
    progress.close()


def test_progress_in_a_log_is_plain_lines_the_last_one_true():
    log = io.StringIO()
    _run(DemoProgress(40, file=log, clock=_clock()), 20, 0.9)
    text = log.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and text.endswith("\n")
    # one line a tenth of the run, the last at the last step with the sparsity reached
    assert [re.match(r"^(\w+): +(\d+)% (\d+)/40 \[", ln).groups() for ln in lines] == \
        [("dense", str(10 * k), str(4 * k)) for k in range(1, 6)] + \
        [("pruning", str(10 * k), str(4 * k)) for k in range(6, 11)]
    assert lines[-1].endswith(", sparsity 90.0%]") and lines[4].endswith("ETA 0:00]")


def test_progress_in_a_log_every_log_seconds_and_where_an_interrupted_run_stopped():
    log = io.StringIO()
    p = DemoProgress(1000, file=log, clock=_clock(20.0))    # 20 s a step: a line every 30 s or more
    p.phase("dense")
    for _ in range(6):
        p.step()
    p.close()                                               # stopped at step 6 of 1000: said at the end
    assert [re.match(r"^dense: +\d+% (\d+)/1000", ln).group(1) for ln in log.getvalue().splitlines()] == \
        ["1", "3", "5", "6"]


def test_progress_on_a_terminal_is_a_bar_and_no_progress_is_nothing():
    tty = io.StringIO()
    _run(DemoProgress(40, file=tty, clock=_clock(), terminal=True), 20, 0.9)
    assert "\r" in tty.getvalue() and "\n" not in tty.getvalue()          # redrawn in place, then removed
    for terminal in (True, False, None):
        quiet = io.StringIO()
        _run(DemoProgress(40, enabled=False, file=quiet, clock=_clock(), terminal=terminal), 20, 0.9)
        assert quiet.getvalue() == ""


@pytest.mark.slow
@pytest.mark.parametrize("stdout", ["log", "closed pipe"])
def test_a_demo_log_has_no_carriage_returns_and_ends_true(stdout, tmp_path):
    """`sparsify demo ... > demo.log 2>&1`: progress lines, then the table; the last progress line is the last
    step and the sparsity the table shows. With its table written into a closed pipe instead (`2> demo.log |
    head -1` after the reader went), the same log, status 0 and no error line."""
    log = tmp_path / "demo.log"
    r, w = os.pipe()
    os.close(r)
    try:
        with open(log, "w") as fh:
            res = subprocess.run([SPARSIFY, "demo", "--framework", "torch", "--steps", "30"],
                                 stdout=fh if stdout == "log" else w, stderr=fh if stdout == "closed pipe" else
                                 subprocess.STDOUT, timeout=300, env=_env())
    finally:
        os.close(w)
    text = log.read_text()
    assert res.returncode == 0, text
    assert "\r" not in text and text.endswith("\n")
    progress = [ln for ln in text.splitlines() if re.match(r"^(dense|pruning): +\d+% \d+/60 \[", ln)]
    assert len(progress) == 10 and progress[-1].startswith("pruning: 100% 60/60 [")
    assert progress[-1].endswith(", sparsity 90.0%]")
    if stdout == "log":
        assert re.search(r"^total\s+90\.00%\s+1702 / 17024\s+yes$", text, re.M)
        assert text.index(progress[-1]) < text.index("sparsify demo: torch")
    else:
        assert text.splitlines() == progress                 # nothing but progress: no error line
