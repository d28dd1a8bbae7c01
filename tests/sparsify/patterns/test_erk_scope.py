"""ERK scope: per-layer counts from the shapes (exact total, clamps, largest remainders), each layer local."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify import PruningConfig, PruningEngine
from sparsify.patterns import get_pattern
from sparsify.patterns.erk_scope import erk_layer_ratios, erk_masks, erk_prune_counts, erk_weight

MNIST1D = {"conv1": (25, 1, 5), "conv2": (25, 25, 3), "fc": (10, 125)}


def test_counts_of_a_small_cnn_worked_by_hand():
    # weights x size: 31, 53, 135 (sum 219); keep 3250 - 3087 = 163 -> 23.07, 39.45, 100.48;
    # floors 23 + 39 + 100 = 162, the missing one to fc (largest remainder .48)
    limits = {n: (0, math.prod(s) - 1) for n, s in MNIST1D.items()}
    assert erk_prune_counts(MNIST1D, limits, 3087) == {"conv1": 102, "conv2": 1836, "fc": 1149}


def test_a_layer_at_its_limit_is_clamped_and_the_others_take_the_rest():
    # conv1 alone would keep 23 of 125; min sparsity 0.9 (at least 113 pruned) caps it at 12 kept
    limits = {"conv1": (113, 124), "conv2": (0, 1874), "fc": (0, 1249)}
    got = erk_prune_counts(MNIST1D, limits, 3087)
    assert got["conv1"] == 113 and sum(got.values()) == 3087


def test_weight_of_a_shape():
    assert erk_weight((25, 1, 5)) == 31 / 125 and erk_weight((10, 125)) == 135 / 1250 and erk_weight((7,)) == 1.0


def test_masks_literal():
    scores = {"a": np.arange(4.0).reshape(2, 2), "b": np.arange(12.0).reshape(2, 6)}
    got = erk_masks(get_pattern("1x1"), scores, 0.5, None, 0.98)
    assert got["a"].astype(int).tolist() == [[0, 1], [1, 1]]
    assert got["b"].astype(int).tolist() == [[0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1]]


def test_engine_prunes_small_layers_less_and_the_total_exactly():
    rng = np.random.default_rng(0)
    w = {n: rng.standard_normal(s) for n, s in MNIST1D.items()}
    masks = PruningEngine({"pruning_scope": "erk", "target_sparsity": 0.95, "end_step": 0}).compute_masks(w, 0)
    pruned = {n: int((~m).sum()) for n, m in masks.items()}
    assert sum(pruned.values()) == 3087
    assert pruned["conv1"] / 125 < pruned["fc"] / 1250 < pruned["conv2"] / 1875
    for n, m in masks.items():                 # within a layer the lowest magnitudes go
        assert np.abs(w[n][~m]).max() <= np.abs(w[n][m]).min()


def test_erk_needs_single_weights():
    with pytest.raises(ValueError, match=r"pruning_scope='erk'.*pattern must be '1x1', got '2:4'"):
        PruningConfig(pruning_scope="erk", pattern="2:4")
    with pytest.raises(ValueError, match="pruning_scope must be one of"):
        PruningConfig(pruning_scope="erdos")


def test_monotone_schedule_only_grows_the_pruned_set():
    rng = np.random.default_rng(1)
    eng = PruningEngine({"pruning_scope": "erk", "target_sparsity": 0.9, "start_step": 0, "end_step": 40,
                         "pruning_frequency": 10})
    w = {n: rng.standard_normal(s) for n, s in MNIST1D.items()}
    pre = None
    for step in range(0, 41, 10):
        masks = eng.compute_masks(w, step, pre)
        if pre is not None:
            assert all(not (m & ~pre[n]).any() for n, m in masks.items())
        pre = masks
    assert sum(int((~m).sum()) for m in pre.values()) == 2925


@settings(max_examples=60, deadline=None)
@given(shapes=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12), st.integers(1, 4)), min_size=1, max_size=4),
       ratio=st.integers(0, 97).map(lambda k: k / 100), cap=st.sampled_from([0.98, 0.9, 0.999]))
def test_counts_are_exact_within_the_limits(shapes, ratio, cap):
    named = {f"l{i}": s for i, s in enumerate(shapes)}
    pattern = get_pattern({"pruning_scope": "erk", "max_sparsity_ratio_per_layer": cap})
    ratios = erk_layer_ratios(pattern, named, ratio, cap)
    sizes = {n: math.prod(s) for n, s in named.items()}
    limits = {n: pattern.unit_limits(sizes[n], cap) for n in named}
    counts = {n: int(round(ratios[n] * sizes[n])) for n in named}
    want = min(max(pattern.units_for_ratio(ratio, sum(sizes.values())), sum(lo for lo, _ in limits.values())),
               sum(hi for _, hi in limits.values()))
    assert sum(counts.values()) == want
    for n in named:
        lo, hi = limits[n]
        assert lo <= counts[n] <= hi
        scores = {n: np.random.default_rng(0).random(named[n])}
        assert int((~pattern.get_masks_local(scores, ratios[n], None, cap)[n]).sum()) == counts[n]
