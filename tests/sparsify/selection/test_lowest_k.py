import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from sparsify.selection.lowest_k import _SMALL, exact_prune_count, lowest_k_keep, lowest_k_mask


def reference(scores, k):
    """Stable sort: the k lowest, ties to the lower index."""
    flat = np.asarray(scores).reshape(-1)
    out = np.zeros(flat.size, dtype=bool)
    out[np.argsort(flat, kind="stable")[:k]] = True
    return out.reshape(np.shape(scores))


def test_exact_prune_count_rounds_half_up_and_keeps_one():
    assert exact_prune_count(0.5, 3) == 1          # 1.5: halves round down (the extra unit is kept)
    assert exact_prune_count(0.25, 2) == 0         # 0.5 -> 0
    assert exact_prune_count(0.9, 125) == 112      # 112.5 -> 112, as tfmot and torch.ao prune
    assert exact_prune_count(0.9, 1875) == 1687    # 1687.5 -> 1687
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


# ----- tie order, eligible masks, several arrays (LowestKCut), the sampled bracket and its misses -------------------
import contextlib  # noqa: E402
from unittest import mock  # noqa: E402

import sparsify.selection.cut as cut_routine  # noqa: E402
import sparsify.selection.lowest_k_cut as sel  # noqa: E402
from sparsify.selection.lowest_k_cut import LowestKCut  # noqa: E402
from sparsify.selection.score_checks import NaNScoreError  # noqa: E402


def shrunk(chunk=32, sample=8):
    """Tiny chunks and samples and no small-array shortcut: small inputs take the large-input paths."""
    return _both(mock.patch("sparsify.selection.lowest_k._SMALL", 0),
                 mock.patch("sparsify.selection.kernel.CHUNK", chunk),
                 mock.patch.multiple("sparsify.selection.cut", _SAMPLE=sample, _SAMPLE_MAX=4 * sample))


@contextlib.contextmanager
def _both(*patches):
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        yield


def reference_across(arrays, k, tie_axes=None, eligible=None):
    """Stable sort over the arrays in order; tie order by transpose(tie_axes); not eligible scores -inf."""
    flats = []
    for i, a in enumerate(arrays):
        e = None if eligible is None else eligible[i]
        v = np.where(e, a, -np.inf) if e is not None else a
        ax = None if tie_axes is None else tie_axes[i]
        flats.append((v.transpose(ax) if ax is not None else v).reshape(-1).astype(np.float64))
    picked = reference(np.concatenate(flats), k)
    out, off = [], 0
    for i, a in enumerate(arrays):
        ax = None if tie_axes is None else tie_axes[i]
        part = picked[off:off + a.size]
        off += a.size
        if ax is not None:
            shape_t = tuple(a.shape[j] for j in ax)
            part = part.reshape(shape_t).transpose(np.argsort(ax))
        out.append(part.reshape(a.shape))
    return out


ARRAYS = st.lists(st.tuples(st.sampled_from([(7,), (3, 5), (2, 3, 4), (4, 2, 3, 1)]), st.integers(0, 2 ** 32 - 1),
                            st.sampled_from(["ties", "random", "neg_inf", "pos_inf"])), min_size=1, max_size=4)


def build(spec, dtype):
    arrays = []
    for shape, seed, kind in spec:
        rng = np.random.default_rng(seed)
        a = rng.integers(0, 4, size=shape).astype(dtype) if kind == "ties" else rng.standard_normal(shape).astype(dtype)
        if kind in ("neg_inf", "pos_inf"):
            a[rng.random(shape) < 0.3] = -np.inf if kind == "neg_inf" else np.inf
        arrays.append(a)
    return arrays


@settings(max_examples=150, deadline=None)
@given(ARRAYS, st.sampled_from([np.float32, np.float64]), st.lists(st.floats(0, 1), min_size=1, max_size=4),
       st.booleans(), st.booleans(), st.sampled_from([4, 16, 64]), st.integers(0, 2 ** 32 - 1))
def test_property_cut_across_arrays_matches_stable_sort(spec, dtype, fracs, with_axes, with_eligible, chunk, seed):
    """Repeated cuts (other k, subsets of the arrays) reuse the classification and still follow the stable sort."""
    rng = np.random.default_rng(seed)
    arrays = build(spec, dtype)
    axes = [tuple(rng.permutation(a.ndim)) if with_axes else None for a in arrays]
    eligible = [rng.random(a.shape) < 0.7 if with_eligible else None for a in arrays]
    with shrunk(chunk=chunk):
        cut = LowestKCut(arrays, [f"a{i}" for i in range(len(arrays))], axes, eligible)
        for frac in fracs:
            members = sorted(set(rng.integers(0, len(arrays), size=len(arrays)).tolist()))
            sub = [arrays[i] for i in members]
            k = int(frac * sum(a.size for a in sub))
            counts = cut.counts(k, members)
            want = reference_across(sub, k, [axes[i] for i in members], [eligible[i] for i in members])
            assert counts == [int(w.sum()) for w in want]
        keeps = cut.keeps()
    for keep, w in zip(keeps, want):
        np.testing.assert_array_equal(keep, ~w)


@settings(max_examples=100, deadline=None)
@given(ARRAYS, st.floats(0, 1), st.integers(0, 2 ** 32 - 1))
def test_property_lowest_k_keep_with_tie_axes_and_eligible(spec, frac, seed):
    rng = np.random.default_rng(seed)
    a = build(spec[:1], np.float32)[0]
    axes = tuple(rng.permutation(a.ndim))
    eligible = rng.random(a.shape) < 0.6
    k = int(frac * a.size)
    want = reference_across([a], k, [axes], [eligible])[0]
    np.testing.assert_array_equal(lowest_k_mask(a, k, tie_axes=axes, eligible=eligible), want)   # small: partition
    with shrunk():
        np.testing.assert_array_equal(lowest_k_mask(a, k, tie_axes=axes, eligible=eligible), want)


def test_eligible_shortcut_agrees_with_minus_inf_scores_at_its_edges():
    """Small float arrays with ``eligible`` skip the -inf copy; where that could differ it must not."""
    a = np.array([[3.0, -np.inf, 1.0], [2.0, 5.0, 1.0]])
    el = np.array([[False, True, True], [False, True, True]])
    # an eligible -inf ties with the two units that are not eligible: tie order decides (column by column here)
    assert lowest_k_mask(a, 2, eligible=el).tolist() == [[True, True, False], [False, False, False]]
    assert lowest_k_mask(a, 2, tie_axes=(1, 0), eligible=el).tolist() == [[True, False, False], [True, False, False]]
    # fewer pruned than there are units not eligible: the first ones in tie order
    b = np.array([4.0, 3.0, 2.0, 1.0])
    assert lowest_k_mask(b, 1, eligible=np.array([True, False, True, False])).tolist() == [False, True, False, False]
    # all the units not eligible, then the lowest eligible, ties at the cut in tie order
    c = np.array([[1.0, 0.5, 1.0], [1.0, 9.0, 1.0]])
    el = np.array([[True, False, True], [True, True, True]])
    assert lowest_k_mask(c, 3, eligible=el).tolist() == [[True, True, True], [False, False, False]]
    assert lowest_k_mask(c, 3, tie_axes=(1, 0), eligible=el).tolist() == [[True, True, False], [True, False, False]]
    with pytest.raises(NaNScoreError):
        lowest_k_mask(np.array([1.0, np.nan, 2.0]), 1, eligible=np.array([True, True, False]))
    assert lowest_k_mask(np.array([1.0, np.nan, 2.0]), 1, eligible=np.array([True, False, True])).tolist() == \
        [False, True, False]                                   # a NaN already pruned is not scored


def test_cut_names_the_first_array_holding_nan_and_ignores_units_not_eligible():
    a, b, c = np.arange(40.0), np.arange(40.0), np.arange(40.0)
    b[7], c[3] = np.nan, np.nan
    with shrunk():
        with pytest.raises(NaNScoreError, match="layer 'b'"):
            LowestKCut([a, b, c], ["a", "b", "c"]).counts(30)
        ok = LowestKCut([a, b], ["a", "b"], eligible=[None, np.arange(40) != 7])   # the NaN was pruned before
        assert ok.counts(30) == [15, 15]
        for k in (0, 80):
            with pytest.raises(NaNScoreError, match="layer 'b'"):
                LowestKCut([a, b], ["a", "b"]).counts(k)


def test_the_sample_is_not_aligned_with_the_rows():
    """Runs taken every 16 rows of 1024 would all start at column 0: per-column scales (Wanda's) would bias the
    bracket. The drawn offsets reach most columns, the same ones every time."""
    cols = np.tile(np.arange(1024, dtype=np.float32), 1024)          # the score is the column
    sample = LowestKCut([cols], ["c"]).parts[0].take_sample(16 * 1024)
    assert len(np.unique(sample)) > 40                                  # 64 runs of 16: 1024 draws
    np.testing.assert_array_equal(sample, LowestKCut([cols], ["c"]).parts[0].take_sample(16 * 1024))


def test_a_missed_bracket_falls_back_to_the_exact_value():
    """Adversarial data: the sampled runs see only the largest value, the cut is still exact."""
    n = 4096
    s = np.linspace(0, 10, n)
    s[np.arange(n) % 64 < 8] = 100.0                       # the sample reads runs of 8 every 64 elements ...
    brackets = []
    classify = cut_routine.classify
    with shrunk(chunk=256, sample=512), mock.patch.object(
            cut_routine, "classify", lambda parts, lo, hi, b: (brackets.append((lo, hi)), classify(parts, lo, hi, b))), \
            mock.patch.object(sel, "sample_offsets", lambda count, high, seed: np.zeros(count, np.intp)):   # ... at 0
        for k in (100, 2000, 4000):
            np.testing.assert_array_equal(lowest_k_mask(s, k), reference(s, k))
    assert (100.0, 100.0) in brackets and len(brackets) > 3        # missed, then classified at the exact value


def test_mixed_dtypes_use_the_promoted_type():
    a = np.array([0.1, 0.3], dtype=np.float32)
    b = np.array([0.1, 0.2])                                       # float64 0.1 < float32 0.1
    with shrunk():
        cut = LowestKCut([a, b], ["a", "b"])
        assert cut.counts(1) == [0, 1]
        assert [k.tolist() for k in cut.keeps()] == [[True, True], [False, True]]


def test_sample_offsets_are_fixed_in_range_and_read_only():
    """The offsets are kept for the next update: the same (count, high, seed) gives the same array, which no
    caller can change; another seed gives other offsets."""
    a = cut_routine.sample_offsets(1000, 7, 1 << 20)
    assert a is cut_routine.sample_offsets(1000, 7, 1 << 20)
    assert a.dtype == np.intp and a.shape == (1000,) and 0 <= a.min() and a.max() < 7
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1
    assert not np.array_equal(a, cut_routine.sample_offsets(1000, 7, (1 << 20) + 1))
    assert cut_routine.sample_offsets(3, 0, 5).tolist() == [0, 0, 0]                      # high < 1: offset 0
