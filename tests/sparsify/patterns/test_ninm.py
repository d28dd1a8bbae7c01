"""Tests for sparsify.patterns.ninm: N pruned of every M along the last axis, gradual N:M, infinite scores."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pattern_cases import A, SHAPES, as_int
from sparsify.layout import to_2d
from sparsify.patterns import PatternNInM, get_pattern


def test_n_in_m_literal_full_and_partial():
    p = get_pattern("2:4")
    assert (p.N, p.M) == (2, 4)
    full = p.get_masks({"a": A}, 0.5)["a"]
    # exact literal: the two smallest of every row are pruned
    assert as_int(full) == [[1, 0, 1, 0], [0, 1, 1, 0], [1, 0, 0, 1], [1, 1, 0, 0]]
    # ratio 0.25 = half of N/M: the two groups with the smallest sum of their 2 lowest go N:M
    # group scores: 0.4, 0.25, 0.4, 0.4 -> row 1, then row 0 (tie broken by lower index)
    half = p.get_masks({"a": A}, 0.25)["a"]
    assert as_int(half) == [[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    one_in_four = get_pattern("1:4").get_mask_single(A, 0.25)
    assert as_int(one_in_four) == [[1, 0, 1, 1], [1, 1, 1, 0], [1, 1, 0, 1], [1, 1, 1, 0]]


def test_n_in_m_ratio_above_n_over_m():
    with pytest.raises(ValueError, match=r"must be <= N/M = 0.5, got 0.6"):
        get_pattern("2:4").get_masks({"a": A}, 0.6)


def test_monotone_n_in_m_partial_to_full():
    p = get_pattern("2:4")
    half = p.get_masks({"a": A}, 0.25)["a"]
    rng = np.random.default_rng(0)
    new_scores = rng.random(A.shape)
    full = p.get_masks({"a": new_scores}, 0.5, {"a": half})["a"]
    assert (full <= half).all()
    assert (full.reshape(-1, 4).sum(axis=1) == 2).all()


@settings(max_examples=120, deadline=None)
@given(SHAPES, st.sampled_from(["2:4", "1:4", "1:2", "3:8"]), st.floats(0, 1), st.integers(0, 2 ** 31 - 1))
def test_property_n_in_m_groups(shape, name, frac, seed):
    p = get_pattern(name)
    v = to_2d(np.zeros(shape))
    if v.shape[1] % p.M:
        return
    rng = np.random.default_rng(seed)
    w = rng.integers(-3, 3, size=shape).astype(np.float32)
    ratio = frac * p.N / p.M
    m = to_2d(p.get_mask_single(w, ratio)).reshape(-1, p.M)
    pruned_per_group = (~m).sum(axis=1)
    assert set(np.unique(pruned_per_group)) <= {0, p.N}
    assert (pruned_per_group == p.N).sum() == p.units_for_ratio(ratio, m.shape[0])


def test_plus_inf_is_a_legal_score_issue_11():
    """issue 11 point 3: inf * 0 inside the group sum raised "scores contain NaN"."""
    p = get_pattern("2:4")
    assert as_int(p.get_mask_single(np.array([[np.inf, 1.0, 2.0, 3.0]]), 0.0)) == [[1, 1, 1, 1]]
    assert as_int(p.get_mask_single(np.array([[np.inf, 1.0, 2.0, 3.0]]), 0.5)) == [[1, 0, 0, 1]]
    s = np.array([[np.inf, 1.0, 2.0, 3.0, 0.5, np.inf, np.inf, 9.0],
                  [4.0, np.inf, 0.1, 0.2, np.inf, np.inf, np.inf, np.inf]])
    # group scores (sum of the 2 lowest): 3, 9.5, 0.3, inf -> at 0.25 the two lowest groups go 2:4
    assert as_int(p.get_mask_single(s, 0.25)) == [[1, 0, 0, 1, 1, 1, 1, 1], [1, 1, 0, 0, 1, 1, 1, 1]]
    _, sums = p.smallest_in_group(s)
    assert sums.tolist() == [[3.0, 9.5], [0.30000000000000004, np.inf]]
    big = get_pattern("2:16")                                         # the M > 8 path
    row = np.concatenate([[np.inf], np.arange(15.0)])[None, :]
    assert (~big.get_mask_single(row, 2 / 16)).sum() == 2 and big.get_mask_single(row, 2 / 16)[0, 0]


@pytest.mark.parametrize("scope", ["local", "global"])
def test_infinite_scores_in_whole_updates(scope):
    rng = np.random.default_rng(5)
    scores = {"a": rng.random((4, 8)), "b": rng.random((2, 8))}
    scores["a"][0, :3] = np.inf
    scores["b"][1, 4:] = np.inf
    p = get_pattern({"pattern": "2:4", "pruning_scope": scope})
    first = p.get_masks(scores, 0.25)
    second = p.get_masks(scores, 0.5, first)                          # pre-masks with +inf scores around
    for name, m in second.items():
        assert ((~m).reshape(-1, 4).sum(axis=1) == 2).all() and (m <= first[name]).all()
    assert second["a"][0, :3].sum() >= 2                             # inf scores are among the kept


@pytest.mark.parametrize("where", [0, 3])
def test_nan_anywhere_in_a_group_still_raises(where):
    s = np.random.default_rng(0).random((64, 64))
    s[10, 4 + where] = np.nan                                         # inside or outside the N lowest
    for name in ("2:4", "1:8", "2:16"):
        for scope in ("local", "global"):
            with pytest.raises(ValueError, match="layer 'fc'.*NaN"):
                get_pattern({"pattern": name, "pruning_scope": scope}).get_masks({"fc": s}, 0.1)


def test_plus_and_minus_inf_among_the_n_lowest_is_named():
    s = np.array([[-np.inf, np.inf, np.inf, np.inf]])
    with pytest.raises(ValueError, match=r"layer 'fc': a unit of pattern '2:4' holds both \+inf and -inf"):
        get_pattern("2:4").get_masks({"fc": s}, 0.5)
    assert as_int(get_pattern("1:4").get_mask_single(s, 0.25)) == [[0, 1, 1, 1]]


def test_conformity_counts_groups_with_fewer_than_n_zeros():
    mask = get_pattern("2:4").get_mask_single(A, 0.5)
    assert get_pattern("2:4").conformity(mask) == (4, 0)
    assert get_pattern("2:4").conformity(np.ones((2, 8), dtype=bool)) == (4, 4)    # dense groups violate
    assert get_pattern("1:4").conformity(mask) == (4, 0)
