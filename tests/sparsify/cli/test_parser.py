"""`sparsify.cli.parser`: usage errors on one line with status 2, help and choices that come from the core, the
demo and the report."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from sparsify.cli import build_parser, main
from sparsify.cli.demo import FRAMEWORKS
from sparsify.cli.report import FORMATS
from sparsify.config import SCHEDULE_TYPES
from sparsify.patterns import pattern_examples, pattern_summaries


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
