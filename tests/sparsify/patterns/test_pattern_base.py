"""Tests for sparsify.patterns.base: exact counts, local and global scope, monotone masks, bad scores."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pattern_cases import A, as_int
from sparsify.patterns import get_pattern
from sparsify.selection.lowest_k import exact_prune_count


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


# ----- every NxM family against the rules written plainly (rules_reference), with the kernels' large-input paths ------
from rules_reference import masks_global, masks_local, shrunk_kernels  # noqa: E402


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["1x1", "4x1", "1x4", "2x2", "channelx1", "1xchannel"]), st.sampled_from(["local", "global"]),
       st.sampled_from([np.float32, np.float64, np.int32]), st.sampled_from(["ties", "random", "inf", "neginf"]),
       st.floats(0, 0.97), st.sampled_from([None, "random", "earlier"]), st.floats(0.3, 0.98), st.floats(0, 0.3),
       st.sampled_from([8, 64]), st.integers(0, 2 ** 32 - 1))
def test_property_block_masks_follow_the_rules(name, scope, dtype, values, ratio, pre, cap, floor, chunk, seed):
    """Conv layers (ties in 2-D order), caps and floors, previous masks, several chunks: the masks of the rules."""
    rng = np.random.default_rng(seed)
    shapes = {"conv": (4, 3, 2, 2), "fc": (8, 12), "dw": (8, 1, 3, 4), "bias_like": (12,)}
    scores = {}
    for n, s in shapes.items():
        v = rng.integers(0, 3, size=s) if values == "ties" else rng.standard_normal(s) * rng.choice([0.1, 1, 10])
        v = v.astype(dtype)
        if values in ("inf", "neginf") and v.dtype.kind == "f":
            v[rng.random(s) < 0.2] = np.inf if values == "inf" else -np.inf
        scores[n] = v
    cfg = {"pattern": name, "pruning_scope": scope, "max_sparsity_ratio_per_layer": cap,
           "min_sparsity_ratio_per_layer": min(floor, cap), "skip_incompatible_layers": True}
    pre_masks = None
    if pre == "random":
        pre_masks = {n: rng.random(s) < 0.8 for n, s in shapes.items()}
    elif pre == "earlier":
        pre_masks = get_pattern(cfg).get_masks({n: rng.random(s) for n, s in shapes.items()}, ratio * rng.random())
    with shrunk_kernels(chunk=chunk):
        p = get_pattern(cfg)
        got = p.get_masks(scores, ratio, pre_masks)
    fitting = {n: v for n, v in scores.items() if p.fits((v.shape[0], v.size // v.shape[0]) if v.ndim > 1 else (1, v.size)) is None}
    want = (masks_global if scope == "global" else masks_local)(p, fitting, ratio, pre_masks)
    for n in fitting:
        np.testing.assert_array_equal(got[n], want[n], err_msg=n)


def test_unstructured_conv_ties_follow_the_2d_view():
    """1x1 works on the canonical layout (no copy) but equal scores go in the 2-D view's order (input channel fastest)."""
    w = np.zeros((1, 2, 1, 2))                           # (out, in, kh, kw): 2-D view order in0kw0, in1kw0, in0kw1, in1kw1
    for scope in ("local", "global"):
        m = get_pattern({"pattern": "1x1", "pruning_scope": scope}).get_masks({"c": w}, 0.5)["c"]
        assert m[0, :, 0, 0].tolist() == [False, False] and m[0, :, 0, 1].tolist() == [True, True]
    with shrunk_kernels():
        big = np.zeros((3, 4, 5, 6))
        m = get_pattern("1x1").get_mask_single(big, 0.3)
    flat2d = m.transpose(0, 2, 3, 1).reshape(-1)
    assert not flat2d[:108].any() and flat2d[108:].all()  # the first 30% in 2-D order are pruned


def test_global_nan_error_order_is_kept():
    """Elements of every layer are looked at first (a NaN score), then units holding +inf and -inf."""
    mixed = np.array([[np.inf, -np.inf, 1.0, 2.0]])
    nan = np.array([[np.nan, 1.0, 1.0, 2.0]])
    p = get_pattern({"pattern": "1x2", "pruning_scope": "global"})
    with pytest.raises(ValueError, match="layer 'b'.*NaN"):
        p.get_masks({"a": mixed, "b": nan}, 0.5)
    with pytest.raises(ValueError, match=r"layer 'a'.*holds both \+inf and -inf"):
        p.get_masks({"a": mixed, "b": np.ones((1, 4))}, 0.5)
    pre = {"a": np.array([[False, True, True, True]])}     # the unit with both infinities was pruned before: legal
    assert p.get_masks({"a": mixed, "b": np.ones((1, 4))}, 0.5, pre)["a"].tolist() == [[False, False, True, True]]


@pytest.mark.parametrize("config, match", [
    ({"max_sparsity_ratio_per_layer": 1.5}, r"max_sparsity_ratio_per_layer must be in \[0, 1\), got 1.5"),
    ({"max_sparsity_ratio_per_layer": float("nan")}, r"max_sparsity_ratio_per_layer must be in \[0, 1\), got nan"),
    ({"min_sparsity_ratio_per_layer": -0.1}, r"min_sparsity_ratio_per_layer must be in \[0, 1\), got -0.1"),
    ({"min_sparsity_ratio_per_layer": 0.9, "max_sparsity_ratio_per_layer": 0.1},
     r"min_sparsity_ratio_per_layer \(0.9\) must be <= max_sparsity_ratio_per_layer \(0.1\)"),
])
@pytest.mark.parametrize("pattern", ["1x1", "2x1", "2:4"])
def test_a_pattern_built_from_a_dict_checks_its_layer_caps(pattern, config, match):
    # PruningConfig checks these too; a pattern built directly (get_pattern(dict)) must not take them unchecked
    with pytest.raises(ValueError, match=match):
        get_pattern({"pattern": pattern, **config})


@pytest.mark.parametrize("scope", ["local", "global"])
def test_the_per_call_layer_cap_is_checked(scope):
    p = get_pattern({"pattern": "1x1", "pruning_scope": scope})
    with pytest.raises(ValueError, match=r"max_sparsity_ratio_per_layer must be in \[0, 1\), got 2"):
        p.get_masks({"w": np.arange(8.0).reshape(2, 4)}, 0.5, max_sparsity_ratio_per_layer=2)
    keep = p.get_masks({"w": np.arange(8.0).reshape(2, 4)}, 0.5, max_sparsity_ratio_per_layer=0.25)["w"]
    assert keep.tolist() == [[False, False, True, True], [True, True, True, True]]   # capped at 2 of 8
