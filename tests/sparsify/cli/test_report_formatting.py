"""`sparsify.cli.report.formatting`: the table `sparsify report` prints."""
from __future__ import annotations

import numpy as np

from sparsify.cli.report.formatting import format_conformity, format_report
from sparsify.cli.report.statistics import SparsityReport
from sparsify.cli.report.tensor_measures import pattern_conformity, tensor_stats


def test_format_conformity_cells():
    assert format_conformity(None) == "-"
    assert format_conformity(pattern_conformity(np.ones((3, 6)), "2:4")) == "skipped: does not fit"
    assert format_conformity(pattern_conformity(np.array([[0.0, 0.0, 1.0, 1.0]]), "2:4")) == "yes"
    assert format_conformity(pattern_conformity(np.array([[0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]]), "2:4")) \
        == "no (1/2 bad)"
    assert format_conformity({"fits": True, "conforms": None, "units": 0, "violations": 0, "reason": "x"}) == "?"


def test_table_without_pattern_literal():
    rep = SparsityReport("m.pt", "torch", None, [tensor_stats("fc.weight", np.array([[0.0, 1.0], [0.0, 0.0]])),
                                                  tensor_stats("fc.bias", np.ones(2, np.float32)),
                                                  tensor_stats("step", np.array(0.0))])
    assert format_report(rep).splitlines() == [
        "m.pt (torch), 3 tensors",
        "name                        shape   dtype    sparsity  zeros / size",
        "--------------------------  ------  -------  --------  ------------",
        "fc.weight                   2x2     float64    75.00%         3 / 4",
        "fc.bias                     2       float32     0.00%         0 / 2",
        "step                        scalar  float64   100.00%         1 / 1",
        "--------------------------  ------  -------  --------  ------------",
        "total (all tensors)                            57.14%         4 / 7",
        "total (weights, rank >= 2)                     75.00%         3 / 4",
    ]


def test_table_with_pattern_says_which_weights_conform():
    good = tensor_stats("a", np.array([[0.0, 1.0, 0.0, 2.0]]), "2:4")
    bad = tensor_stats("b", np.array([[0.0, 1.0, 1.0, 1.0]]), "2:4")
    lines = format_report(SparsityReport("w.npz", "npz", "2:4", [good, bad])).splitlines()
    assert lines[1].split() == ["name", "shape", "dtype", "sparsity", "zeros", "/", "size", "2:4"]
    assert lines[3].split()[-1] == "yes" and lines[4].split()[-3:] == ["no", "(1/1", "bad)"]
    assert lines[-1] == "pattern 2:4: NOT every weight that fits it conforms"
    assert format_report(SparsityReport("w.npz", "npz", "2:4", [good])).splitlines()[-1] == \
        "pattern 2:4: every weight that fits it conforms"


def test_weights_the_pattern_does_not_fit_are_shown_as_skipped():
    good = tensor_stats("fc.weight", np.array([[0.0, 1.0, 0.0, 2.0]]), "2:4")
    head = tensor_stats("head.weight", np.ones((3, 6)), "2:4")
    lines = format_report(SparsityReport("w.npz", "npz", "2:4", [good, head])).splitlines()
    assert lines[4].startswith("head.weight") and lines[4].endswith("skipped: does not fit")
    assert lines[-2:] == ["pattern 2:4: does not fit head.weight: skipped (pruning with skip_incompatible_layers=True "
                          "leaves such weights dense)", "pattern 2:4: every weight that fits it conforms"]
