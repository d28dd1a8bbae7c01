"""sparsify.pattern_fit: a pattern that does not fit some (or all) selected layers (issue 28)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify import PruningProtocol
from sparsify.pattern_fit import check_pattern_fit, incompatible_layers
from sparsify.patterns import get_pattern

SHAPES = {"conv": (8, 3, 3, 3), "fc": (16, 32), "head": (10, 16), "out": (6, 16)}


def test_the_error_names_every_layer_that_does_not_fit():
    with pytest.raises(ValueError) as info:
        PruningProtocol({"pattern": "4x1"}, SHAPES)
    assert str(info.value) == (
        "pattern '4x1' does not fit 2 of 4 selected layers: 'head' (2-D view (10, 16): block 4x1 does not divide it); "
        "'out' (2-D view (6, 16): block 4x1 does not divide it); set skip_incompatible_layers=True to leave them "
        "dense, or exclude them with excluded_op_names")


def test_a_pattern_that_fits_no_layer_does_not_suggest_skipping_them_all():
    with pytest.raises(ValueError) as info:
        PruningProtocol({"pattern": "3x1"}, {"fc": (16, 32), "head": (10, 16)})
    message = str(info.value)
    assert message.startswith("pattern '3x1' fits none of the 2 selected layers: 'fc' (2-D view (16, 32): ")
    assert "'head' (2-D view (10, 16): " in message
    assert message.endswith("choose a pattern that fits them (skip_incompatible_layers=True would leave every layer "
                            "dense and prune nothing)")


def test_one_layer_keeps_the_one_layer_message():
    with pytest.raises(ValueError, match=r"^layer 'head' with 2-D view \(10, 16\) does not fit pattern '4x1': block "
                                         r"4x1 does not divide it \(set skip_incompatible_layers=True"):
        PruningProtocol({"pattern": "4x1"}, {"fc": (16, 32), "head": (10, 16)})


def test_skipped_layers_are_warned_about_exposed_and_shown_as_none():
    cfg = {"pattern": "4x1", "skip_incompatible_layers": True, "target_sparsity": 0.5, "start_step": 0,
           "end_step": 0}
    with pytest.warns(UserWarning, match=r"^pattern '4x1' does not fit 2 of 4 selected layers, left dense "
                                         r"\(skip_incompatible_layers=True\): 'head' .*'out' .*the others are pruned$"):
        proto = PruningProtocol(cfg, SHAPES)
    assert proto.skipped == {"head": "2-D view (10, 16): block 4x1 does not divide it",
                             "out": "2-D view (6, 16): block 4x1 does not divide it"}
    rng = np.random.default_rng(0)
    proto.advance(0, {n: rng.normal(size=s) for n, s in SHAPES.items()})
    assert proto.layer_sparsity() == {"conv": 0.5, "fc": 0.5, "head": None, "out": None}
    assert proto.masks["head"].all() and proto.masks["out"].all()
    with pytest.warns(UserWarning, match=r"does not fit 2 of 2 selected layers.*; nothing will be pruned$"):
        nothing = PruningProtocol(cfg, {"head": (10, 16), "out": (6, 16)})
    assert nothing.layer_sparsity() == {"head": None, "out": None}


def test_layers_that_fit_are_not_skipped_and_empty_weights_always_fit():
    assert PruningProtocol({"pattern": "4x1"}, {"fc": (16, 32), "empty": (0, 3)}).skipped == {}
    assert incompatible_layers(get_pattern("2:4"), {"a": (4, 8), "b": (4, 6), "c": (0, 6)}) == \
        {"b": ((4, 6), "its last axis (6) is not a multiple of M=4")}


def test_long_lists_are_shortened():
    shapes = {f"l{i}": (3, 8) for i in range(12)}
    with pytest.raises(ValueError, match=r"'l7' \(2-D view \(3, 8\): block 4x1 does not divide it\); \.\.\. and 4 more;"):
        check_pattern_fit(get_pattern("4x1"), shapes, "4x1")


@settings(max_examples=50, deadline=None)
@given(rows=st.lists(st.integers(1, 12), min_size=1, max_size=6), pattern=st.sampled_from(["4x1", "2x2", "2:4", "1x1"]))
def test_skipped_are_exactly_the_layers_the_pattern_does_not_fit(rows, pattern):
    shapes = {f"w{i}": (r, 8 if i % 2 else 6) for i, r in enumerate(rows)}
    pat = get_pattern(pattern)
    unfit = {n for n, s in shapes.items() if pat.fits(s) is not None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        skipped = check_pattern_fit(pat, shapes, pattern, skip=True)
    assert set(skipped) == unfit
    if unfit:
        with pytest.raises(ValueError) as info:
            check_pattern_fit(pat, shapes, pattern)
        assert all(repr(n) in str(info.value) for n in unfit)
    else:
        assert check_pattern_fit(pat, shapes, pattern) == {}
