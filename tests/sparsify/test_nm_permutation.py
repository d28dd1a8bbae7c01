import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import sparsify
from sparsify import get_pattern, nm_channel_permutation, nm_kept_magnitude, to_2d


def brute_force_best(w: np.ndarray, pattern: str) -> float:
    """Largest kept magnitude over every split of 2M input channels into two groups of M."""
    n, keep = w.shape[1], n_kept(pattern)
    a = np.abs(w)
    best = 0.0
    for c in itertools.combinations(range(n), n // 2):
        if 0 in c:
            first, second = np.sort(a[:, list(c)], axis=1), np.sort(np.delete(a, list(c), axis=1), axis=1)
            best = max(best, first[:, -keep:].sum() + second[:, -keep:].sum())
    return best


def n_kept(pattern: str) -> int:
    p = get_pattern(pattern)
    return p.M - p.N


def test_exported_from_package():
    assert sparsify.nm_channel_permutation is nm_channel_permutation
    assert "nm_channel_permutation" in sparsify.__all__ and "nm_kept_magnitude" in sparsify.__all__


def test_known_optimal_permutation_on_one_row():
    w = np.array([[9.0, 8.0, 7.0, 6.0, 1.0, 1.0, 1.0, 1.0]])
    perm = nm_channel_permutation(w, "2:4")
    assert perm.dtype == np.int64
    assert perm.tolist() == [0, 1, 4, 5, 2, 3, 6, 7]
    assert nm_kept_magnitude(w, "2:4") == 19.0
    # 9 + 8 + 7 + 6 is what 50% unstructured keeps: no permutation can do better
    assert nm_kept_magnitude(w, "2:4", perm) == 30.0
    assert w[:, perm].tolist() == [[9.0, 8.0, 1.0, 1.0, 7.0, 6.0, 1.0, 1.0]]


def test_kept_magnitude_uses_the_core_mask():
    w = np.array([[4.0, -3.0, 2.0, 1.0, 4.0, 3.0, -2.0, 1.0]])
    assert nm_kept_magnitude(w, "2:4") == 14.0
    assert nm_kept_magnitude(w, "2:4", [0, 4, 1, 5, 2, 6, 3, 7]) == 12.0
    assert nm_kept_magnitude(w, "1:4") == 18.0              # "1:4" keeps 3 of 4


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force_on_eight_channels(seed):
    w = np.random.default_rng(seed).standard_normal((3, 8))
    perm = nm_channel_permutation(w, "2:4", seed=seed)
    assert nm_kept_magnitude(w, "2:4", perm) == pytest.approx(brute_force_best(w, "2:4"))


@pytest.mark.parametrize("pattern", ["1:4", "3:4", "1:2"])
def test_other_n_m_patterns_reach_the_optimum(pattern):
    m = get_pattern(pattern).M
    w = np.random.default_rng(7).standard_normal((4, 2 * m))
    perm = nm_channel_permutation(w, pattern)
    assert nm_kept_magnitude(w, pattern, perm) == pytest.approx(brute_force_best(w, pattern))


def test_m8_pattern_reaches_the_optimum_through_ranks():
    w = np.random.default_rng(11).standard_normal((6, 16))   # 4:8: 6435 splits, scored by ranks in row chunks
    perm = nm_channel_permutation(w, "4:8", rounds=0)
    assert nm_kept_magnitude(w, "4:8", perm) == pytest.approx(brute_force_best(w, "4:8"))


def test_conv_weight_permutes_input_channels_at_every_kernel_position():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 8, 3, 3))
    perm = nm_channel_permutation(w, "2:4")
    assert sorted(perm.tolist()) == list(range(8))
    permuted = w[:, perm]
    mask = get_pattern("2:4").get_mask_single(np.abs(to_2d(permuted)), 0.5)
    assert nm_kept_magnitude(w, "2:4", perm) == pytest.approx(float(np.abs(to_2d(permuted))[mask].sum()))
    assert nm_kept_magnitude(w, "2:4", perm) > nm_kept_magnitude(w, "2:4")


def test_deterministic_for_a_seed_and_improves_a_gaussian_matrix():
    w = np.random.default_rng(0).standard_normal((16, 64))
    a = nm_channel_permutation(w, "2:4", rounds=20, seed=5)
    b = nm_channel_permutation(w, "2:4", rounds=20, seed=5)
    assert a.tolist() == b.tolist()
    base = nm_kept_magnitude(w, "2:4")
    unstructured = np.sort(np.abs(w), axis=None)[w.size // 2:].sum()
    efficacy = (nm_kept_magnitude(w, "2:4", a) - base) / (unstructured - base)
    assert efficacy > 0.3


def test_many_groups_and_row_sample_paths():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((40, 272))                      # 68 groups: a random subset of pairs is searched
    perm = nm_channel_permutation(w, "2:4", rounds=2, max_rows=16)
    assert np.array_equal(np.sort(perm), np.arange(272))
    assert nm_kept_magnitude(w, "2:4", perm) > nm_kept_magnitude(w, "2:4")


def test_time_limit_stops_early_with_a_valid_permutation():
    w = np.random.default_rng(2).standard_normal((64, 128))
    perm = nm_channel_permutation(w, "2:4", rounds=10_000, time_limit=0.5)
    assert np.array_equal(np.sort(perm), np.arange(128))
    assert nm_kept_magnitude(w, "2:4", perm) >= nm_kept_magnitude(w, "2:4")


def test_nothing_to_gain_returns_the_identity():
    w = np.ones((2, 8))
    assert nm_channel_permutation(w, "2:4").tolist() == list(range(8))


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"weight": np.ones((2, 6))}, ValueError, "6 input channels"),
    ({"weight": np.ones(8)}, ValueError, "at least 2 dimensions"),
    ({"weight": np.array([[np.nan] * 4])}, ValueError, "NaN"),
    ({"weight": np.array([["a"] * 4])}, TypeError, "real numbers"),
    ({"weight": np.ones((2, 8)), "pattern": "1x2"}, ValueError, "N:M pattern"),
    ({"weight": np.ones((2, 8)), "rounds": -1}, ValueError, "rounds"),
    ({"weight": np.ones((2, 8)), "time_limit": 0}, ValueError, "time_limit"),
    ({"weight": np.ones((2, 8)), "max_rows": 0}, ValueError, "max_rows"),
])
def test_bad_arguments_are_named(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        nm_channel_permutation(**kwargs)


def test_bad_permutation_is_named():
    with pytest.raises(ValueError, match="permutation must be a permutation of range"):
        nm_kept_magnitude(np.ones((1, 4)), "2:4", [0, 0, 1, 2])


@settings(max_examples=30, deadline=None)
@given(out=st.integers(1, 5), groups=st.integers(1, 6), kernel=st.sampled_from([(), (1,), (2, 2)]),
       pattern=st.sampled_from(["2:4", "1:4", "1:2"]), seed=st.integers(0, 2**16))
def test_result_is_a_permutation_that_never_keeps_less(out, groups, kernel, pattern, seed):
    m = get_pattern(pattern).M
    w = np.random.default_rng(seed).standard_normal((out, groups * m, *kernel))
    perm = nm_channel_permutation(w, pattern, rounds=3, seed=seed)
    assert perm.dtype == np.int64
    assert np.array_equal(np.sort(perm), np.arange(groups * m))
    assert nm_kept_magnitude(w, pattern, perm) >= nm_kept_magnitude(w, pattern)
