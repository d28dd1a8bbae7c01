import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from sparsify.selection import _SMALL, exact_prune_count, lowest_k_keep, lowest_k_mask


def reference(scores, k):
    """Stable sort: the k lowest, ties to the lower index."""
    flat = np.asarray(scores).reshape(-1)
    out = np.zeros(flat.size, dtype=bool)
    out[np.argsort(flat, kind="stable")[:k]] = True
    return out.reshape(np.shape(scores))


def test_exact_prune_count_rounds_half_up_and_keeps_one():
    assert exact_prune_count(0.5, 3) == 2          # floor(1.5 + 0.5)
    assert exact_prune_count(0.25, 2) == 1         # floor(0.5 + 0.5)
    assert exact_prune_count(0.9, 10) == 9
    assert exact_prune_count(0.99, 10) == 9        # at least one unit survives
    assert exact_prune_count(0.99, 10, keep_one=False) == 10
    assert exact_prune_count(0.0, 10) == 0
    assert exact_prune_count(0.5, 0) == 0


def test_literal_masks_with_ties_to_lower_index():
    s = np.array([[2.0, 1.0, 1.0], [0.5, 1.0, 3.0]])
    assert lowest_k_mask(s, 2).tolist() == [[False, True, False], [True, False, False]]
    assert lowest_k_mask(s, 3).tolist() == [[False, True, True], [True, False, False]]
    assert lowest_k_keep(s, 4).tolist() == [[True, False, False], [False, False, True]]


def test_neg_inf_goes_first():
    s = np.array([5.0, -np.inf, 0.0, -np.inf])
    assert lowest_k_mask(s, 1).tolist() == [False, True, False, False]
    assert lowest_k_mask(s, 3).tolist() == [False, True, True, True]


def test_edge_counts():
    s = np.arange(5.0)
    assert not lowest_k_mask(s, 0).any()
    assert lowest_k_mask(s, 5).all()
    with pytest.raises(ValueError, match=r"k must be in \[0, 5\]"):
        lowest_k_mask(s, 6)


@pytest.mark.parametrize("n", [10, _SMALL + 7, 300_001])
def test_nan_raises_naming_layer(n):
    s = np.random.default_rng(0).random(n)
    s[n // 3] = np.nan
    with pytest.raises(ValueError, match="layer 'conv1'.*NaN"):
        lowest_k_mask(s, n // 2, name="conv1")


@pytest.mark.parametrize("dist", ["normal", "ties", "sorted", "reverse", "zeros_heavy", "neg_inf_heavy"])
@pytest.mark.parametrize("frac", [0.001, 0.5, 0.9, 0.999])
def test_large_inputs_match_stable_sort(dist, frac):
    rng = np.random.default_rng(1)
    n = 200_003
    if dist == "normal":
        s = rng.standard_normal(n).astype(np.float32)
    elif dist == "ties":
        s = rng.integers(0, 7, n).astype(np.float32)
    elif dist == "sorted":
        s = np.sort(rng.random(n))
    elif dist == "reverse":
        s = np.sort(rng.random(n))[::-1].copy()
    elif dist == "zeros_heavy":
        s = np.where(rng.random(n) < 0.8, 0.0, rng.random(n))
    else:
        s = np.where(rng.random(n) < 0.6, -np.inf, rng.random(n))
    k = int(frac * n)
    np.testing.assert_array_equal(lowest_k_mask(s, k), reference(s, k))


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 300), elements=st.floats(-4, 4, width=32)), st.floats(0, 1))
def test_property_exact_count_and_order(scores, frac):
    k = int(frac * scores.size)
    m = lowest_k_mask(scores, k)
    assert m.sum() == k
    np.testing.assert_array_equal(m, reference(scores, k))
    if 0 < k < scores.size:
        assert scores[m].max() <= scores[~m].min()
