"""The selection kernel: the k-th value, chunks, the bracket, the chunk classification, the task and tie splits."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.selection import kernel
from sparsify.selection.kernel import (bracket_ranks, chunk_bounds, classify_chunk, kth_smallest, sample_bracket,
                                       split_tasks, split_ties)
from sparsify.selection.score_checks import NaNScoreError, check_finite, nan_error
from sparsify.threads import use_threads


def test_kth_smallest_and_chunks_literal():
    assert float(kth_smallest(np.array([5.0, 1.0, 4.0, 1.0]), 1)) == 1.0
    assert float(kth_smallest(np.array([5.0, 1.0, 4.0, 1.0]), 3)) == 5.0
    assert list(chunk_bounds(3, 11, 4)) == [(3, 7), (7, 11)]
    assert list(chunk_bounds(0, 0)) == []


def test_bracket_ranks_literal_and_open_ends():
    assert bracket_ranks(0.5, 10000) == (4798, 5202, False, False)
    assert bracket_ranks(0.001, 1000)[2] is True                 # reaches below the smallest: open
    assert bracket_ranks(0.999, 1000)[3] is True
    assert sample_bracket(np.arange(10.0), 0.001) == (None, 7.0)                 # 10 samples: a wide margin
    assert sample_bracket(np.arange(10.0), 0.001, open_ends=False) == (0.0, 7.0)


def test_classify_chunk_with_eligible_and_open_bounds():
    keep, tmp = np.empty(5, bool), np.empty(5, bool)
    x = np.array([1.0, 5.0, 3.0, np.nan, 2.0])
    cand = classify_chunk(x, 2.0, 4.0, keep, tmp, np.array([True, True, True, True, False]))
    assert keep.tolist() == [False, True, True, True, False]      # below 2 or not eligible: pruned
    assert cand.tolist() == [False, False, True, True, False]     # in [2, 4], or NaN
    cand = classify_chunk(x, None, None, keep, tmp)
    assert keep.all() and cand is keep


def test_split_tasks_follows_the_threads_and_the_size_threshold():
    assert split_tasks([10, 6], [4, 4]) == ([(0, 0, 10), (1, 0, 6)], 1)       # below MIN_PARALLEL: one thread
    with use_threads(2), mock.patch.object(kernel, "MIN_PARALLEL", 0):
        tasks, threads = split_tasks([16, 0], [4, 1])
    assert threads == 2 and tasks == [(0, 0, 4), (0, 4, 8), (0, 8, 12), (0, 12, 16), (1, 0, 0)]


def test_split_ties_literal():
    assert split_ties([2, 3, 1], 4) == [2, 2, 0]
    assert split_ties([0, 3], 3) == [0, 3]
    assert split_ties([], 0) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=8), st.data())
def test_split_ties_prunes_the_earliest(counts, data):
    need = data.draw(st.integers(0, sum(counts)))
    got = split_ties(counts, need)
    assert sum(got) == need and all(0 <= g <= c for g, c in zip(got, counts))
    # a piece prunes some only when every earlier piece prunes all of its ties
    for i, g in enumerate(got):
        if g:
            assert all(got[j] == counts[j] for j in range(i))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(20, 3000), st.floats(0.0, 1.0))
def test_classification_against_a_sample_bracket_holds_the_kth_value_or_says_it_missed(seed, n, q):
    """The candidates and the count below reproduce the k-th value whenever it falls in the bracket."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, n).astype(np.float64)
    k = min(n, max(1, int(q * n)))
    lo, hi = sample_bracket(x[:: max(1, n // 64)].copy(), k / n)
    keep, tmp = np.empty(n, bool), np.empty(n, bool)
    cand = classify_chunk(x, lo, hi, keep, tmp).copy()
    below = n - int(keep.sum())
    need = k - below
    if 0 < need <= int(cand.sum()):
        assert kth_smallest(x[cand], need - 1) == kth_smallest(x, k - 1)


def test_the_one_nan_message():
    with pytest.raises(NaNScoreError) as e:
        check_finite(np.array([1.0, np.nan], dtype=np.float32), "fc1")
    assert str(e.value) == str(nan_error("fc1")) == \
        "layer 'fc1': scores contain NaN; fix the weights or gradients before pruning"
