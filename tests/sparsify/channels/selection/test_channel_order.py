"""Tests for sparsify.channels.selection.order (NumPy only: no torch, no tensorflow)."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.channels.selection import (cumulative_pruning_cost, least_important_indices, max_channels_to_prune, pruning_order, segment_min_channels)


def test_least_important_indices_literal_and_ties():
    assert least_important_indices(np.array([2.0, 1.0, 1.0, 0.0]), 2).tolist() == [1, 3]
    assert least_important_indices(np.array([1.0, 1.0, 1.0]), 2).tolist() == [0, 1]
    assert least_important_indices(np.array([5.0]), 0).tolist() == []


@pytest.mark.parametrize("k", [-1, 4, 1.5, True])
def test_least_important_indices_bad_k(k):
    with pytest.raises(ValueError, match="k must be an integer"):
        least_important_indices(np.zeros(3), k)


def test_least_important_indices_nan():
    with pytest.raises(ValueError, match="NaN"):
        least_important_indices(np.array([0.0, np.nan]), 1)


def test_pruning_order_and_cumulative_cost_literal():
    scores, seg = np.array([5.0, 3.0, 6.0, 2.0, 7.0, 4.0, 0.5, 0.1]), np.array([0, 0, 0, 0, 0, 0, 1, 1])
    assert pruning_order(scores, seg).tolist() == [7, 3, 1, 5, 0, 2]
    assert pruning_order(scores).tolist() == [7, 6, 3, 1, 5, 0, 2]  # one segment: all but the last channel
    assert pruning_order(scores, seg, min_channels=3).tolist() == [3, 1, 5]  # the 2-channel layer keeps both
    assert cumulative_pruning_cost(scores, seg).tolist() == [0.0, 0.1, 2.1, 5.1, 9.1, 14.1, 20.1]
    assert cumulative_pruning_cost(np.array([2.0, 1.0])).tolist() == [0.0, 1.0]
    assert pruning_order(np.zeros(0)).tolist() == [] and cumulative_pruning_cost(np.zeros(0)).tolist() == [0.0]
    assert max_channels_to_prune(seg) == 6 and max_channels_to_prune(seg, lambda n: n // 2) == 4
    sizes, keep = segment_min_channels(np.array([3, 3, 1, 3]), 2)  # ids need not be contiguous or ordered
    assert sizes.tolist() == [1, 3] and keep.tolist() == [1, 2]
    assert least_important_indices(scores, 3, seg).tolist() == [1, 3, 7]
    with pytest.raises(ValueError, match="k = 7 is too large: the segments must keep 2 of 8 channels, so at most 6"):
        least_important_indices(scores, 7, seg)


@pytest.mark.parametrize("min_channels,match", [(0, "got 0"), (1.5, "got 1.5"), (True, "got True"),
                                                (lambda n: 0, "got 0 for a segment of 2 channels")])
def test_min_channels_validation(min_channels, match):
    with pytest.raises(ValueError, match="min_channels must be an integer >= 1 or a function returning one, " + match):
        pruning_order(np.zeros(2), np.zeros(2, dtype=int), min_channels)


segmented_strategy = st.lists(st.tuples(st.floats(-10, 10, allow_nan=False), st.integers(0, 2)), min_size=1,
                              max_size=8)


@settings(max_examples=80, deadline=None)
@given(segmented_strategy, st.integers(1, 3), st.data())
def test_segmented_choice_is_the_cheapest_valid_one(channels, min_keep, data):
    """Brute force: among all k-subsets leaving min(min_keep, size) channels per segment, none is cheaper."""
    scores = np.array([c for c, _ in channels])
    seg = np.array([s for _, s in channels])
    most = max_channels_to_prune(seg, min_keep)
    k = data.draw(st.integers(0, most))
    chosen = least_important_indices(scores, k, seg, min_keep)
    assert chosen.size == k and chosen.tolist() == sorted(set(chosen.tolist()))
    ids, sizes = np.unique(seg, return_counts=True)
    for s, size in zip(ids, sizes):  # every segment keeps its minimum
        assert size - np.isin(np.flatnonzero(seg == s), chosen).sum() >= min(min_keep, size)
    best = min(scores[list(c)].sum() for c in itertools.combinations(range(scores.size), k)
               if all(size - sum(seg[i] == s for i in c) >= min(min_keep, size) for s, size in zip(ids, sizes)))
    assert np.isclose(scores[chosen].sum(), best)
    assert np.isclose(cumulative_pruning_cost(scores, seg, min_keep)[k], best)


def test_infinite_scores_are_legal_and_ordered():
    scores = np.array([np.inf, 2.0, -np.inf, np.inf, 0.0])
    assert pruning_order(scores).tolist() == [2, 4, 1, 0]               # one channel always stays: the last +inf
    assert least_important_indices(scores, 2).tolist() == [2, 4]
    assert cumulative_pruning_cost(np.array([np.inf, 1.0, 2.0])).tolist() == [0.0, 1.0, 3.0]
