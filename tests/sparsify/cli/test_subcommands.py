"""`sparsify.cli.subcommands`: what `sparsify schedule` and `sparsify report` print and write, the config they
read (`build_config`: the file, then `--set`, then options), and outputs refused before anything is printed
(run in-process through `main`; the demo is in test_demo.py, export in test_export_command.py)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
from pathlib import Path

import numpy as np
import pytest

from sparsify.cli import build_config, main


def _write_yaml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ----- schedule and the config it reads -----------------------------------------------------------
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


def test_build_config_precedence(tmp_path):
    cfg = _write_yaml(tmp_path / "c.yaml", "pattern: 4x1\ntarget_sparsity: 0.7\nend_step: 50\n")
    c = build_config(str(cfg), ["target_sparsity=0.8", "op_names=[fc]"], pattern=None)
    assert (c.pattern, c.target_sparsity, c.end_step, c.op_names) == ("4x1", 0.8, 50, ["fc"])
    assert build_config(str(cfg), None, pattern="2:4", target_sparsity=0.5).pattern == "2:4"


def test_unquoted_nm_pattern_in_yaml(tmp_path, capsys):
    # YAML 1.1 reads an unquoted 2:4 as the base-60 integer 124; the command keeps it a pattern
    cfg = _write_yaml(tmp_path / "c.yaml", "pattern: 2:4\ntarget_sparsity: 0.5\nend_step: 10\n")
    assert main(["schedule", "--config", str(cfg), "--set", "exponent=1e0"]) == 0
    assert "pattern 2:4" in capsys.readouterr().out
    assert build_config(None, ["pattern=1:4", "target_sparsity=0.25"]).pattern == "1:4"


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


# ----- report, and outputs refused before anything is printed -------------------------------------
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


def test_report_npz_json_matches_numpy(tmp_path, capsys):
    rng = np.random.default_rng(1)
    w = rng.normal(size=(16, 8)) * (rng.random((16, 8)) > 0.7)
    np.savez(tmp_path / "w.npz", w=w)
    assert main(["report", str(tmp_path / "w.npz"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tensors"][0]["zeros"] == int((w == 0).sum())


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
