"""`sparsify.cli.command`: the `sparsify` command's `schedule`, `report`, help and error handling
(the demo is in test_demo.py)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sparsify.cli.command import build_config, build_parser, main
from sparsify.cli.messages import MAX_MESSAGE
from sparsify.cli.demo import FRAMEWORKS
from sparsify.cli.report import FORMATS
from sparsify.config import SCHEDULE_TYPES
from sparsify.patterns import pattern_examples, pattern_summaries

SPARSIFY = str(Path(sys.executable).with_name("sparsify"))


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("SPARSIFY_DEBUG", None)
    return subprocess.run([SPARSIFY, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def _write_yaml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ----- schedule ------------------------------------------------------------------------------------
def test_schedule_table_literal(capsys):
    rc = main(["schedule", "--set", "target_sparsity=0.5", "--set", "end_step=4", "--set", "pruning_frequency=2"])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [ln.split() for ln in lines[2:]]
    # gradual, exponent 3: 0.5 * (1 - (1 - 2/4) ** 3) = 43.75% at step 2
    assert rows == [["0", "0.00%", "0.00%", "yes"], ["2", "43.75%", "43.75%", "yes"], ["4", "50.00%", "50.00%", "yes"]]
    assert lines[0] == "gradual schedule: 0% -> 50%, start_step 0, end_step 4, pruning_frequency 2, pattern 1x1"


def test_schedule_every_and_json_from_yaml(tmp_path, capsys):
    cfg = _write_yaml(tmp_path / "c.yaml", "pruning:\n  target_sparsity: 0.8\n  end_step: 10\n"
                                           "  pruning_frequency: 5\n  sparsity_decay_type: linear\n")
    assert main(["schedule", "--config", str(cfg), "--json", "--every", "5", "--steps", "12"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["steps"] == [0, 5, 10, 11]
    assert d["update"] == [True, True, True, False]
    assert d["config"]["sparsity_decay_type"] == "linear"
    assert d["sparsity"][-1] == pytest.approx(0.8)


@pytest.mark.slow
def test_schedule_plot_writes_png(tmp_path):
    png = tmp_path / "schedule.png"
    res = run_cli("schedule", "--set", "end_step=100", "--set", "pruning_frequency=10", "--plot", str(png))
    assert res.returncode == 0, res.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert f"plot written to {png}" in res.stdout


def test_build_config_precedence(tmp_path):
    cfg = _write_yaml(tmp_path / "c.yaml", "pattern: 4x1\ntarget_sparsity: 0.7\nend_step: 50\n")
    c = build_config(str(cfg), ["target_sparsity=0.8", "op_names=[fc]"], pattern=None)
    assert (c.pattern, c.target_sparsity, c.end_step, c.op_names) == ("4x1", 0.8, 50, ["fc"])
    assert build_config(str(cfg), None, pattern="2:4", target_sparsity=0.5).pattern == "2:4"


# ----- report --------------------------------------------------------------------------------------
@pytest.fixture
def torch_file(tmp_path):
    import torch

    sd = {"fc.weight": torch.tensor([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 4.0, 0.0]]), "fc.bias": torch.ones(2)}
    path = tmp_path / "model.pt"
    torch.save(sd, path)
    return path


def test_report_text_and_json(torch_file, capsys):
    assert main(["report", str(torch_file), "--pattern", "2:4"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("fc.weight"))
    assert row.split() == ["fc.weight", "2x4", "float32", "50.00%", "4", "/", "8", "yes"]
    assert "total (weights, rank >= 2)" in out and "every weight that fits it conforms" in out
    assert main(["report", str(torch_file), "--json", "--pattern", "1:4"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "torch" and d["pattern"] == "1:4" and d["pattern_conforms"] is True
    assert d["total"] == {"tensors": 2, "size": 10, "zeros": 4, "sparsity": 0.4}


@pytest.mark.slow
def test_report_via_console_script(torch_file):
    res = run_cli("report", str(torch_file), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["weights_total"]["sparsity"] == 0.5
    res = subprocess.run([sys.executable, "-m", "sparsify", "report", str(torch_file)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "fc.weight" in res.stdout


# ----- bad input: one line on stderr, non-zero exit, no traceback -----------------------------------
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


def test_unquoted_nm_pattern_in_yaml(tmp_path, capsys):
    # YAML 1.1 reads an unquoted 2:4 as the base-60 integer 124; the command keeps it a pattern
    cfg = _write_yaml(tmp_path / "c.yaml", "pattern: 2:4\ntarget_sparsity: 0.5\nend_step: 10\n")
    assert main(["schedule", "--config", str(cfg), "--set", "exponent=1e0"]) == 0
    assert "pattern 2:4" in capsys.readouterr().out
    assert build_config(None, ["pattern=1:4", "target_sparsity=0.25"]).pattern == "1:4"


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["report"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the following arguments are required: path" in err[0]
    with pytest.raises(SystemExit) as e:
        main(["demo", "--framework", "jax"])
    assert e.value.code == 2 and "invalid choice: 'jax'" in capsys.readouterr().err
    assert main([]) == 2
    with pytest.raises(SystemExit):
        main(["schedule", "--every", "0"])
    assert "--every must be a positive integer, got 0" in capsys.readouterr().err


def test_report_npz_json_matches_numpy(tmp_path, capsys):
    rng = np.random.default_rng(1)
    w = rng.normal(size=(16, 8)) * (rng.random((16, 8)) > 0.7)
    np.savez(tmp_path / "w.npz", w=w)
    assert main(["report", str(tmp_path / "w.npz"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tensors"][0]["zeros"] == int((w == 0).sum())


# ----- help and start-up -----------------------------------------------------------------------------
def test_help_lists_the_core_names(capsys):
    for args in (("demo",), ("report",), ("schedule",)):
        with pytest.raises(SystemExit) as e:
            main([*args, "--help"])
        assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())          # argparse wraps lines
    # pattern families and schedule kinds come from the core's registries, not a hand-written list
    assert text.count(f"e.g. {', '.join(pattern_examples())}.") == 2
    assert all(text.count(summary) == 2 for summary in pattern_summaries().values())
    assert f"Schedule kinds (sparsity_decay_type): {', '.join(SCHEDULE_TYPES)}." in text
    # the application's vocabulary is the config's: start_step, end_step, pruning_frequency
    assert "from start_step to end_step, a mask update every pruning_frequency steps" in text
    assert "e.g. end_step=1000 or pruning_frequency=50" in text
    assert "begin_step" not in text and "update_step_freq" not in text


def test_parser_choices_come_from_the_demo_and_the_report():
    parser = build_parser()
    assert [parser.parse_args(["report", "m", "--format", f]).format for f in FORMATS] == list(FORMATS)
    assert [parser.parse_args(["demo", "--framework", f]).framework for f in FRAMEWORKS] == list(FRAMEWORKS)
    # no --framework: the demo runs the installed one (sparsify.cli.demo.default_framework)
    assert parser.parse_args(["demo"]).framework is None
    assert [parser.parse_args(["demo", "--backend", b]).backend for b in ("tensorflow", "jax", "torch")] == \
        ["tensorflow", "jax", "torch"]


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


# ----- issue 15: bounded work, honest messages, atomic outputs ---------------------------------------
def test_schedule_steps_are_bounded(capsys):
    rc = main(["schedule", "--steps", "100000000000"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err == ["sparsify schedule: error: --steps must be in [1, 10000000] (one value per step is "
                               "computed), got 100000000000"]
    rc = main(["schedule", "--set", "end_step=100000000000"])
    err = capsys.readouterr().err
    assert rc == 1 and "end_step 100000000000 is too far to tabulate step by step" in err and "internal" not in err


def test_schedule_plot_says_the_file_it_wrote(tmp_path, capsys):
    assert main(["schedule", "--set", "end_step=10", "--plot", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"plot written to {tmp_path / 'schedule.png'}"
    assert (tmp_path / "schedule.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["schedule", "--set", "end_step=10", "--plot", str(tmp_path / "curve")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"plot written to {tmp_path / 'curve.png'}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png", "schedule.png"]
    rc = main(["schedule", "--plot", str(tmp_path / "s.xyz")])
    assert rc == 1 and "cannot write .xyz images" in capsys.readouterr().err


def test_output_files_are_written_atomically(tmp_path, capsys, torch_file):
    out = tmp_path / "report.json"
    assert main(["report", str(torch_file), "--json", "--output", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert json.loads(out.read_text())["format"] == "torch"
    assert main(["schedule", "--set", "end_step=4", "--json", "-o", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["steps"][-1] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "report.json", "s.json"]    # no temp files
    rc = main(["report", str(torch_file), "--output", str(tmp_path / "no" / "r.txt")])
    err = capsys.readouterr().err
    assert rc == 1 and f"directory {str(tmp_path / 'no')!r} does not exist" in err and "internal" not in err


def test_yaml_bombs_and_bad_files_through_the_command(tmp_path, capsys):
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)) + "op_names: *i\n"
    cases = {
        "bomb.yaml": (bomb.encode(), "aliases expand to more than 10000 nodes"),
        "dup.yaml": (b"pattern: 4x1\npattern: 2:4\n", "duplicate key 'pattern' on line 2 (first on line 1)"),
        "deep.yaml": (b"op_names: " + b"[" * 3000 + b"]" * 3000, "nesting deeper than 64 levels"),
        "bin.yaml": (b"\x89PNG\r\n\x1a\n\x00\x00", "is a binary file"),
        "latin1.yaml": ("pattern: caf\xe9".encode("latin-1"), "is not UTF-8 text"),
    }
    for name, (data, needle) in cases.items():
        (tmp_path / name).write_bytes(data)
        for cmd in (["schedule", "--config"], ["demo", "--framework", "torch", "--config"]):
            rc = main([*cmd, str(tmp_path / name)])
            err = capsys.readouterr().err.strip().splitlines()
            assert rc == 1 and len(err) == 1 and needle in err[0] and name in err[0], (name, err)
            assert len(err[0]) < 600 and "internal error" not in err[0]
    rc = main(["schedule", "--set", "op_names=" + bomb.replace("\n", "\n")])
    assert rc == 1 and "internal error" not in capsys.readouterr().err


def test_long_values_are_never_printed_whole(capsys):
    rc = main(["schedule", "--set", "pattern=" + "x" * 100000])
    err = capsys.readouterr().err
    # a message is quoted whole up to MAX_MESSAGE characters (a framework's error can be ~1,000 long)
    assert rc == 1 and MAX_MESSAGE < len(err) < MAX_MESSAGE + 100 and err.endswith("... (100235 characters)\n")


def test_bad_destinations_are_refused_before_anything_is_printed(tmp_path, capsys, torch_file):
    # a bad --plot or --output used to be found after the table was printed (or the output file written)
    cases = [
        (["schedule", "--plot", str(tmp_path / "no_dir" / "s.png")], f"directory {str(tmp_path / 'no_dir')!r} does not exist"),
        (["schedule", "--plot", str(tmp_path / "s.xyz")], "cannot write .xyz images"),
        (["schedule", "--output", str(tmp_path / "no" / "s.txt")], f"directory {str(tmp_path / 'no')!r} does not exist"),
        (["schedule", "-o", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.xyz")], "cannot write .xyz images"),
        (["report", str(torch_file), "--output", str(tmp_path)], f"cannot write {str(tmp_path)!r}: it is a directory"),
    ]
    for args, needle in cases:
        rc = main(args)
        out = capsys.readouterr()
        assert rc == 1 and out.out == "", (args, out.out)
        err = out.err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (args, err)
        assert "[Errno" not in err[0] and "internal" not in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]      # nothing written, no temp files


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
