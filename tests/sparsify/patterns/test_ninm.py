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


# ----- the fast kernel against the rules written plainly (rules_reference) ---------------------------------------
from hypothesis.extra import numpy as hnp  # noqa: E402

from rules_reference import masks_global, masks_local, n_in_m_groups, shrunk_kernels  # noqa: E402

NAMES = ["2:4", "1:4", "3:4", "1:2", "4:8", "2:8", "7:8", "1:3", "2:6", "5:7", "3:5", "2:16", "3:12"]


def scores_for(rng, shape, dtype, values):
    if values == "ties":
        v = rng.integers(-2, 3, size=shape)
    else:
        v = rng.standard_normal(shape) * 4
    v = v.astype(dtype)
    if values in ("inf", "neginf") and v.dtype.kind == "f":
        v.reshape(-1)[rng.random(v.size) < 0.15] = np.inf if values == "inf" else -np.inf
    return v


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(NAMES), st.integers(1, 5), st.integers(1, 30), st.sampled_from(["local", "global"]),
       st.sampled_from([np.float32, np.float64, np.float16, np.int32]), st.sampled_from(["ties", "random", "inf", "neginf"]),
       st.floats(0, 1), st.sampled_from([None, "random", "earlier"]), st.sampled_from([8, 24, 64]), st.integers(0, 2 ** 32 - 1))
def test_property_n_in_m_masks_follow_the_rules(name, rows, groups, scope, dtype, values, frac, pre, chunk, seed):
    """Every M, ties, infinities, previous masks, several chunks and sampled brackets: the masks of the rules."""
    rng = np.random.default_rng(seed)
    p0 = get_pattern(name)
    if p0.M > 8 and p0.N > 2 and values == "random":
        values = "ties"                                   # M > 8 adds pairwise: only exact sums compare to the rule
    shapes = {"fc": (rows, groups * p0.M), "conv": (2, p0.M, 2, 1), "flat": (groups * p0.M,)}
    scores = {n: scores_for(rng, s, dtype, values) for n, s in shapes.items()}
    ratio = frac * p0.max_ratio
    pre_masks = None
    if pre == "random":
        pre_masks = {n: rng.random(s) < 0.7 for n, s in shapes.items()}
    elif pre == "earlier":
        pre_masks = get_pattern(name).get_masks({n: rng.random(s) for n, s in shapes.items()}, ratio * rng.random())
    with shrunk_kernels(chunk=chunk):
        p = get_pattern({"pattern": name, "pruning_scope": scope, "max_sparsity_ratio_per_layer": 0.9})
        got = p.get_masks(scores, ratio, pre_masks)
    want = (masks_global if scope == "global" else masks_local)(p, scores, ratio, pre_masks)
    for n in shapes:
        np.testing.assert_array_equal(got[n], want[n], err_msg=n)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([n for n in NAMES if int(n.split(":")[1]) <= 8]), st.integers(1, 4), st.integers(1, 40),
       st.sampled_from([np.float32, np.float64, np.float16, np.int64, np.uint8]), st.sampled_from(["ties", "random", "inf", "neginf"]),
       st.sampled_from([8, 40, 4096]), st.integers(0, 2 ** 32 - 1))
def test_property_smallest_in_group_bits(name, rows, groups, dtype, values, chunk, seed):
    """The N lowest and the float64 group sums are those of the definition, bit for bit (-0.0 included)."""
    rng = np.random.default_rng(seed)
    p = PatternNInM(name)
    s = scores_for(rng, (rows, groups * p.M), dtype, values if dtype != np.uint8 else "ties")
    if s.dtype.kind == "f":
        s[rng.random(s.shape) < 0.1] = -0.0
    with shrunk_kernels(chunk=chunk):
        small, sums = PatternNInM(name).smallest_in_group(s)
    want_small, want_sums = n_in_m_groups(p, s)
    np.testing.assert_array_equal(small, want_small)
    assert sums.dtype == np.float64 and sums.shape == (rows, groups)
    assert sums.reshape(-1).view(np.uint64).tolist() == want_sums.view(np.uint64).tolist()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["2:4", "1:3", "4:8", "2:16"]), st.integers(0, 2 ** 32 - 1), st.booleans(), st.sampled_from([8, 64]))
def test_property_nan_raises_and_infinities_of_both_signs(name, seed, with_pre, chunk):
    """NaN anywhere raises naming the layer; +inf and -inf among a group's N lowest raise, elsewhere they are legal."""
    rng = np.random.default_rng(seed)
    p0 = get_pattern(name)
    s = rng.random((6, 4 * p0.M))
    pre = {"fc": rng.random(s.shape) < 0.8} if with_pre else None
    bad = s.copy()
    bad[rng.integers(0, 6), rng.integers(0, 4 * p0.M)] = np.nan
    mixed = s.copy()
    mixed.reshape(-1)[rng.random(s.size) < 0.1] = np.inf
    mixed.reshape(-1)[rng.random(s.size) < 0.1] = -np.inf
    with shrunk_kernels(chunk=chunk):
        for scope in ("local", "global"):
            p = get_pattern({"pattern": name, "pruning_scope": scope})
            for ratio in (0.0, p.max_ratio / 2, p.max_ratio):
                with pytest.raises(ValueError, match="layer 'fc'.*NaN"):
                    p.get_masks({"fc": bad}, ratio, pre)
            if not with_pre:
                _, sums = n_in_m_groups(p0, mixed)
                ratio = p.max_ratio / 2
                if np.isnan(sums).any():
                    with pytest.raises(ValueError, match=r"layer 'fc': a unit of pattern .* holds both \+inf and -inf"):
                        p.get_masks({"fc": mixed}, ratio)
                else:
                    np.testing.assert_array_equal(p.get_masks({"fc": mixed}, ratio)["fc"],
                                                  masks_local(p, {"fc": mixed}, ratio)["fc"])


def test_group_words_match_the_generic_path():
    """unit_pre_pruned and expand_keep on word views (M = 2, 4, 8) agree with the per-group reductions."""
    rng = np.random.default_rng(3)
    for name in ("1:2", "2:4", "3:8"):
        p = PatternNInM(name)
        pre = rng.random((5, 8 * p.M)) < 0.9
        assert (p.unit_pre_pruned(pre) == ~pre.reshape(5, 8, p.M).all(axis=-1)).all()
        assert (p.unit_pre_pruned(np.asfortranarray(pre)) == ~pre.reshape(5, 8, p.M).all(axis=-1)).all()
        small, _ = p.smallest_in_group(rng.random(pre.shape))
        unit_keep = rng.random(40) < 0.5
        want = ~small.reshape(40, p.M)
        want[unit_keep] = True
        assert (p.expand_keep(unit_keep, pre, small) == want.reshape(pre.shape)).all()


def test_full_ratio_skips_the_group_sums():
    """At r = N/M every group is pruned N:M: the masks need no group scores (layer_units returns None)."""
    p = get_pattern("2:4")
    s = np.random.default_rng(0).random((8, 16))
    sums, small = p.layer_units("fc", s, need_scores=False, check_nan=False)
    assert sums is None and (small.reshape(-1, 4).sum(axis=1) == 2).all()
    np.testing.assert_array_equal(p.get_mask_single(s, 0.5), ~small)
