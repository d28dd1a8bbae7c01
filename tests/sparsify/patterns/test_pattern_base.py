"""Tests for sparsify.patterns.base: exact counts, local and global scope, monotone masks, bad scores."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pattern_cases import A, as_int
from sparsify.patterns import get_pattern
from sparsify.selection import exact_prune_count


def test_unstructured_literal():
    m = get_pattern("1x1").get_masks({"a": A}, 0.5)["a"]
    assert as_int(m) == [[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 1], [0, 1, 0, 0]]


def test_one_dimensional_weights():
    m = get_pattern("1x1").get_mask_single(np.array([3.0, 1.0, 2.0, 0.0]), 0.5)
    assert m.tolist() == [True, False, True, False]
    m = get_pattern("2:4").get_mask_single(np.array([3.0, 1.0, 2.0, 0.0]), 0.5)
    assert m.tolist() == [True, False, True, False]


def test_incompatible_layer_named_or_skipped():
    w = np.ones((3, 6))
    with pytest.raises(ValueError, match=r"layer 'fc2' with 2-D view \(3, 6\) does not fit pattern '4x1'"):
        get_pattern("4x1").get_masks({"fc2": w}, 0.5)
    with pytest.raises(ValueError, match="not a multiple of M=4"):
        get_pattern("2:4").get_masks({"fc2": w}, 0.5)
    skipped = get_pattern({"pattern": "4x1", "skip_incompatible_layers": True}).get_masks(
        {"fc2": w, "ok": np.arange(8.0).reshape(4, 2)}, 0.5)
    assert skipped["fc2"].all() and skipped["ok"].sum() == 4


def test_nan_scores_name_layer():
    bad = A.copy()
    bad[1, 1] = np.nan
    for name in ("1x1", "4x1", "2:4"):
        with pytest.raises(ValueError, match="layer 'dense_1'.*NaN"):
            get_pattern(name).get_masks({"dense_1": bad}, 0.25)


def test_monotone_and_keep_pre_mask():
    p = get_pattern("1x1")
    pre = np.ones_like(A, dtype=bool)
    pre[2, 3] = False                                     # the largest weight was pruned before
    m = p.get_masks({"a": A}, 0.25, {"a": pre})["a"]
    assert not m[2, 3] and (m <= pre).all() and m.sum() == 12
    kept = p.get_masks({"a": A}, 0.9, {"a": pre}, keep_pre_mask=True)["a"]
    assert (kept == pre).all() and kept is not pre
    # block pre-mask: an earlier pruned block stays pruned
    blocks = get_pattern("4x1")
    first = blocks.get_masks({"a": A}, 0.25)["a"]
    second = blocks.get_masks({"a": A[:, ::-1].copy()}, 0.5, {"a": first})["a"]
    assert (second <= first).all() and (~second).sum() == 8


def test_global_one_threshold_exact_total():
    scores = {"a": np.array([[0.1, 0.2], [0.3, 0.4]]), "b": np.array([[5.0, 6.0], [0.15, 7.0]])}
    m = get_pattern({"pattern": "1x1", "pruning_scope": "global"}).get_masks(scores, 0.5)
    assert as_int(m["a"]) == [[0, 0], [0, 1]] and as_int(m["b"]) == [[1, 1], [0, 1]]


def test_global_tie_order_follows_dict_order():
    scores = {"b": np.ones((2, 2)), "a": np.ones((2, 2))}
    m = get_pattern({"pruning_scope": "global"}).get_masks(scores, 0.25)
    assert as_int(m["b"]) == [[0, 0], [1, 1]] and m["a"].all()


def test_global_cap_is_exact():
    small = np.full((2, 5), 0.01)                        # would be fully pruned without the cap
    big = np.arange(1.0, 41.0).reshape(4, 10)
    p = get_pattern({"pruning_scope": "global", "max_sparsity_ratio_per_layer": 0.5})
    m = p.get_masks({"small": small, "big": big}, 0.5)
    assert (~m["small"]).sum() == 5                       # capped at 50%
    assert (~m["small"]).sum() + (~m["big"]).sum() == 25  # total still exact
    assert as_int(m["big"])[:2] == [[0] * 10, [0] * 10] and m["big"][2:].all()


def test_global_min_ratio():
    low = np.full((2, 5), 9.0)                            # never chosen by the threshold
    high = np.arange(1.0, 11.0).reshape(2, 5)
    p = get_pattern({"pruning_scope": "global", "min_sparsity_ratio_per_layer": 0.2})
    m = p.get_masks({"low": low, "high": high}, 0.5)
    assert (~m["low"]).sum() == 2 and (~m["low"]).sum() + (~m["high"]).sum() == 10


def test_local_max_cap():
    m = get_pattern({"max_sparsity_ratio_per_layer": 0.5}).get_masks({"a": A}, 0.9)["a"]
    assert (~m).sum() == 8


def test_global_block_and_n_in_m():
    rng = np.random.default_rng(3)
    scores = {"a": rng.random((8, 8)), "b": rng.random((4, 16))}
    for name, ratio in (("4x1", 0.5), ("2:4", 0.3)):
        p = get_pattern({"pattern": name, "pruning_scope": "global"})
        m = p.get_masks(scores, ratio)
        pruned = sum((~v).sum() for v in m.values())
        units = p.units_for_ratio(ratio, 8 * 2 + 16 if name == "4x1" else 16 + 16)
        assert pruned == units * (4 if name == "4x1" else 2)


def test_pattern_lock_and_sparsity_ratio():
    p = get_pattern("1x1")
    lock = p.get_pattern_lock_masks({"w": np.array([[0.0, 1.0], [2.0, 0.0]])})
    assert as_int(lock["w"]) == [[0, 1], [1, 0]]
    total, per = p.get_sparsity_ratio({"x": np.array([True, False]), "y": np.array([False, False])}, return_dict=True)
    assert total == 0.75 and per == {"x": 0.5, "y": 1.0}


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 0.95), st.floats(0, 0.95), st.sampled_from(["1x1", "4x1", "2:4"]), st.integers(0, 1000))
def test_property_monotone_subsets(r1, r2, name, seed):
    p = get_pattern(name)
    cap = 0.5 if name == "2:4" else 0.95
    r1, r2 = sorted((min(r1, cap), min(r2, cap)))
    rng = np.random.default_rng(seed)
    first = p.get_masks({"w": rng.random((8, 8))}, r1)["w"]
    second = p.get_masks({"w": rng.random((8, 8))}, r2, {"w": first})["w"]
    assert (second <= first).all()


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 0.97), st.floats(0.3, 0.98), st.integers(0, 1000))
def test_property_global_total_exact_with_cap(ratio, cap, seed):
    rng = np.random.default_rng(seed)
    scores = {"a": rng.random((4, 6)) * 0.1, "b": rng.random((6, 6)), "c": rng.random((2, 3))}
    p = get_pattern({"pruning_scope": "global", "max_sparsity_ratio_per_layer": cap})
    m = p.get_masks(scores, ratio)
    want = exact_prune_count(ratio, 24 + 36 + 6)
    caps = {k: exact_prune_count(cap, v.size) for k, v in scores.items()}
    pruned = {k: int((~v).sum()) for k, v in m.items()}
    assert all(pruned[k] <= caps[k] for k in scores)
    assert sum(pruned.values()) == min(want, sum(caps.values()))


@pytest.mark.parametrize("name", ["1x1", "4x1", "2:4"])
@pytest.mark.parametrize("scope", ["local", "global"])
def test_nan_in_a_large_layer_names_it(name, scope):
    big = np.random.default_rng(0).random((256, 512))
    big[100, 7] = np.nan
    pre = np.ones(big.shape, dtype=bool)
    pre[0, :4] = False
    p = get_pattern({"pattern": name, "pruning_scope": scope})
    for pre_masks in (None, {"conv_big": pre}):
        with pytest.raises(ValueError, match="layer 'conv_big'.*NaN"):
            p.get_masks({"ok": np.ones((4, 8)), "conv_big": big}, 0.4, pre_masks)


@pytest.mark.parametrize("name", ["1x1", "4x1", "2:4"])
def test_nan_inside_an_already_pruned_unit_still_raises(name):
    big = np.random.default_rng(1).random((256, 512))
    pre = np.ones(big.shape, dtype=bool)
    pre[3, :8] = False
    big[3, 1] = np.nan                                  # the weight was pruned before, its score is NaN now
    with pytest.raises(ValueError, match="layer 'fc'.*NaN"):
        get_pattern(name).get_masks({"fc": big}, 0.4, {"fc": pre})
