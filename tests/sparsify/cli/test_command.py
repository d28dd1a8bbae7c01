"""`sparsify.cli.command`: the `sparsify` command as a user runs it (the console script, `python -m sparsify`), bad
input as one line on stderr, and what it loads (the subcommands' output is in test_subcommands.py, the
parser in test_parser.py, the demo in test_demo.py)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparsify.cli.command import main
from sparsify.cli.messages import MAX_MESSAGE

SPARSIFY = str(Path(sys.executable).with_name("sparsify"))


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("SPARSIFY_DEBUG", None)
    return subprocess.run([SPARSIFY, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def _write_yaml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.slow
def test_schedule_plot_writes_png(tmp_path):
    png = tmp_path / "schedule.png"
    res = run_cli("schedule", "--set", "end_step=100", "--set", "pruning_frequency=10", "--plot", str(png))
    assert res.returncode == 0, res.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert f"plot written to {png}" in res.stdout


@pytest.fixture
def torch_file(tmp_path):
    import torch

    sd = {"fc.weight": torch.tensor([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 4.0, 0.0]]), "fc.bias": torch.ones(2)}
    path = tmp_path / "model.pt"
    torch.save(sd, path)
    return path


@pytest.mark.slow
def test_report_via_console_script(torch_file):
    res = run_cli("report", str(torch_file), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["weights_total"]["sparsity"] == 0.5
    res = subprocess.run([sys.executable, "-m", "sparsify", "report", str(torch_file)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "fc.weight" in res.stdout


def _assert_one_line_error(res: subprocess.CompletedProcess, needle: str, rc: int = 1) -> None:
    assert res.returncode == rc, (res.stdout, res.stderr)
    err = res.stderr.strip().splitlines()
    assert len(err) == 1, res.stderr
    assert "Traceback" not in res.stderr and needle in err[0], err


@pytest.mark.slow
def test_bad_input_is_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not weights")
    (tmp_path / "bad.pt").write_bytes(b"PK\x03\x04garbage")
    bad_key = _write_yaml(tmp_path / "bad.yaml", "target_sparsty: 0.5\n")
    bad_value = _write_yaml(tmp_path / "bad_value.yaml", "pattern: 2:4\ntarget_sparsity: 0.9\n")
    bad_yaml = _write_yaml(tmp_path / "broken.yaml", "a: [1, 2\n")
    cases = [
        (("report", str(tmp_path / "missing.pt")), "does not exist"),
        (("report", str(tmp_path / "notes.txt")), "unknown format"),
        (("report", str(tmp_path / "bad.pt")), "corrupt"),
        (("report", str(tmp_path / "notes.txt"), "--format", "torch"), "cannot be read as a torch state_dict"),
        (("schedule", "--config", str(bad_key)), "unknown config key 'target_sparsty' (did you mean 'target_sparsity'?)"),
        (("schedule", "--config", str(bad_value)), "must be <= N/M = 0.5"),
        (("schedule", "--config", str(bad_yaml)), "is not valid YAML"),
        (("schedule", "--config", str(tmp_path / "nope.yaml")), "cannot be read"),
        (("schedule", "--set", "pattern"), "--set expects KEY=VALUE"),
        (("schedule", "--plot", str(tmp_path / "no_dir" / "s.png")), "does not exist"),
    ]
    for args, needle in cases:      # in-process: main() is what catches the errors
        rc = main(list(args))
        out = capsys.readouterr()
        _assert_one_line_error(subprocess.CompletedProcess(args, rc, out.out, out.err), needle)
    # and through the installed console script
    _assert_one_line_error(run_cli("report", str(tmp_path / "notes.txt")), "unknown format")
    _assert_one_line_error(run_cli("schedule", "--config", str(bad_key)), "did you mean 'target_sparsity'?")


@pytest.mark.slow
def test_command_and_help_load_no_framework():
    # `sparsify --help` and `sparsify schedule` stay fast: no TensorFlow, Keras or torch behind them
    code = ("import sys\n"
            "from sparsify.cli import main\n"
            "import sparsify.cli.demo.tf_graph, sparsify.cli.demo.keras_backend, sparsify.cli.demo.torch_backend\n"
            "import sparsify.cli.report.readers, sparsify.cli.plots, sparsify.cli.frameworks\n"
            "assert main(['schedule', '--set', 'end_step=10']) == 0\n"
            "heavy = ('tensorflow', 'keras', 'tf_keras', 'torch', 'sparsify_tf', 'sparsify_torch', 'matplotlib')\n"
            "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3])))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "LOADED []"


@pytest.mark.slow
def test_python_dash_m_sparsify_help():
    res = subprocess.run([sys.executable, "-m", "sparsify", "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.startswith("usage: sparsify [-h] [--version] {demo,report,export,schedule,init}")


def test_long_values_are_never_printed_whole(capsys):
    rc = main(["schedule", "--set", "pattern=" + "x" * 100000])
    err = capsys.readouterr().err
    # a message is quoted whole up to MAX_MESSAGE characters (a framework's error can be ~1,000 long)
    assert rc == 1 and MAX_MESSAGE < len(err) < MAX_MESSAGE + 100 and err.endswith("... (100235 characters)\n")


def test_option_errors_name_the_subcommand(capsys):
    for opt in ("--every", "--max-rows"):
        with pytest.raises(SystemExit) as e:
            main(["schedule", opt, "-3"])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1
        assert err[0] == (f"sparsify schedule: error: {opt} must be a positive integer, got -3 "
                          "(see 'sparsify schedule --help')")


@pytest.mark.slow
def test_os_errors_print_the_message_and_the_file_not_the_errno(tmp_path, capsys):
    rc = main(["demo", "--framework", "torch", "--steps", "3", "--no-progress", "--out", str(tmp_path / "f" / "x")])
    assert rc == 0                      # parents are created
    capsys.readouterr()
    (tmp_path / "file").write_text("x")
    rc = main(["demo", "--framework", "torch", "--steps", "3", "--no-progress", "--out", str(tmp_path / "file" / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "[Errno" not in err[0], err
    assert f"out {str(tmp_path / 'file' / 'x')!r}: cannot create the directory: Not a directory" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "file"]
