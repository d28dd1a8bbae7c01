"""`sparsify init` (sparsify.cli.starter_config): the starter config the README's quickstart writes and then uses."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from sparsify import PruningConfig
from sparsify.cli.command import main
from sparsify.cli.starter_config import STARTER_CONFIG, starter_config, write_starter_config

ROOT = Path(__file__).resolve().parents[3]


def test_init_writes_a_config_that_schedule_then_reads(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert capsys.readouterr().out == "wrote prune.yaml: try 'sparsify schedule --config prune.yaml'\n"
    text = (tmp_path / "prune.yaml").read_text()
    assert text == starter_config("prune.yaml")
    cfg = PruningConfig.coerce("prune.yaml")
    assert (cfg.pattern, cfg.target_sparsity, cfg.pruning_scope, cfg.start_step, cfg.end_step,
            cfg.pruning_frequency, cfg.sparsity_decay_type, cfg.skip_incompatible_layers) == \
        ("4x1", 0.8, "local", 0, 1000, 100, "gradual", True)
    assert main(["schedule", "--config", "prune.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gradual schedule: 0% -> 80%, start_step 0, end_step 1000, pruning_frequency 100, pattern 4x1"
    assert out[-1].split() == ["1000", "80.00%", "80.00%", "yes"]


def test_every_key_of_the_starter_is_a_config_field():
    keys = yaml.safe_load(STARTER_CONFIG.format(path="x.yaml"))["pruning"]
    assert set(keys) <= {f.name for f in dataclasses.fields(PruningConfig)}
    assert len(keys) == 8


def test_init_names_its_file_in_the_usage_comments(tmp_path, capsys):
    target = tmp_path / "my.yaml"
    assert main(["init", str(target)]) == 0
    text = target.read_text()
    assert "sparsify schedule --config my.yaml --plot schedule.png" in text
    assert 'PruningConfig.coerce("my.yaml")' in text and "prune.yaml" not in text


def test_an_existing_file_is_left_alone_without_overwrite(tmp_path, capsys):
    target = tmp_path / "prune.yaml"
    target.write_text("pruning:\n  pattern: 2:4\n")
    assert main(["init", str(target)]) == 1
    err = capsys.readouterr().err
    assert err == f"sparsify init: error: {str(target)!r} exists; pass --overwrite to replace it\n"
    assert target.read_text() == "pruning:\n  pattern: 2:4\n"
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        write_starter_config(target)
    assert main(["init", str(target), "--overwrite"]) == 0
    assert PruningConfig.coerce(str(target)).pattern == "4x1"


def test_a_missing_directory_or_a_directory_is_an_error(tmp_path, capsys):
    assert main(["init", str(tmp_path / "no" / "prune.yaml")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["init", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"sparsify init: error: cannot write {str(tmp_path)!r}: it is a directory\n"


def test_dash_prints_the_config(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "-"]) == 0
    assert capsys.readouterr().out == starter_config("prune.yaml")
    assert list(tmp_path.iterdir()) == []


def test_the_shipped_prune_yaml_is_what_init_writes():
    """The repository's prune.yaml (used by the tests and docs) is the starter, so the two cannot drift."""
    assert (ROOT / "prune.yaml").read_text() == starter_config("prune.yaml")
