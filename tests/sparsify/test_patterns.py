import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify.layout import to_2d
from sparsify.patterns import (Pattern, PatternNInM, PatternNxM, get_pattern, register_pattern,
                               registered_patterns)
from sparsify.selection import exact_prune_count

A = np.array([[0.9, 0.1, 0.5, 0.3],
              [0.2, 0.8, 0.7, 0.05],
              [0.6, 0.4, 0.0, 1.0],
              [0.35, 0.45, 0.25, 0.15]])


def as_int(m):
    return m.astype(int).tolist()


def test_unstructured_literal():
    m = get_pattern("1x1").get_masks({"a": A}, 0.5)["a"]
    assert as_int(m) == [[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 1], [0, 1, 0, 0]]


def test_block_4x1_literal_and_reduce():
    # column sums: 2.05, 1.75, 1.45, 1.5 -> prune the two lowest columns (2 and 3)
    m = get_pattern("4x1").get_masks({"a": A}, 0.5)["a"]
    assert as_int(m) == [[1, 1, 0, 0]] * 4
    # max-reduce: column maxima 0.9, 0.8, 0.7, 1.0 -> prune columns 1 and 2
    m = get_pattern({"pattern": "4x1", "block_score_reduce": "max"}).get_masks({"a": A}, 0.5)["a"]
    assert as_int(m) == [[1, 0, 0, 1]] * 4


def test_block_1x2_and_2x2_literal():
    m = get_pattern("1x2").get_masks({"a": A}, 0.5)["a"]
    # pair sums per row: [1.0, 0.8], [1.0, 0.75], [1.0, 1.0], [0.8, 0.4]
    # 4 lowest pairs: 0.4 (r3b1), 0.75 (r1b1), then 0.8 ties: r0b1 before r3b0
    assert as_int(m) == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    m = get_pattern("2x2").get_masks({"a": A}, 0.25)["a"]
    # 2x2 block sums: 2.0, 1.55, 1.8, 1.4 -> prune the lower-right block
    assert as_int(m) == [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]


def test_channel_patterns_are_rows_and_columns():
    rows = get_pattern("channelx1").get_masks({"a": A}, 0.5)["a"]      # row sums 1.8, 1.75, 2.0, 1.2
    assert as_int(rows) == [[1] * 4, [0] * 4, [1] * 4, [0] * 4]
    cols = get_pattern("1xchannel").get_masks({"a": A}, 0.25)["a"]     # column sums 2.05, 1.75, 1.45, 1.5
    assert as_int(cols) == [[1, 1, 0, 1]] * 4
    assert get_pattern("channelx1").get_block_size_dict({"a": A}) == {"a": [1, 4]}
    assert get_pattern("1xchannel").get_block_size_dict({"a": A}) == {"a": [4, 1]}


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


def test_explicit_keyword_constructors():
    assert PatternNInM(n_pruned=1, group_size=4).pattern == "1:4"
    assert PatternNxM(block_rows=4, block_cols=1).block_size == (4, 1)
    assert PatternNxM(block_rows=None, block_cols=1).pattern == "1xchannel"
    assert PatternNxM(block_rows=1, block_cols=None).pattern == "channelx1"
    assert PatternNxM(block_rows=1, block_cols=None).get_block_size_dict({"w": A}) == {"w": [1, 4]}
    with pytest.raises(ValueError, match="cannot both be None"):
        PatternNxM(block_rows=None, block_cols=None)
    with pytest.raises(ValueError, match="needs both"):
        PatternNInM(n_pruned=2)


def test_conv_weight_uses_2d_view():
    # (out=2, in=2, kh=1, kw=2); 2-D view columns: (kw0,in0), (kw0,in1), (kw1,in0), (kw1,in1)
    w = np.array([[[[1.0, 5.0]], [[2.0, 6.0]]],
                  [[[7.0, 3.0]], [[8.0, 0.5]]]])
    assert to_2d(w).tolist() == [[1.0, 2.0, 5.0, 6.0], [7.0, 8.0, 3.0, 0.5]]
    m = get_pattern("1x2").get_mask_single(w, 0.5)
    # pairs: row0 (1,2)=3 (5,6)=11, row1 (7,8)=15 (3,0.5)=3.5 -> prune row0 pair0 and row1 pair1
    assert m.shape == w.shape
    assert to_2d(m).astype(int).tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]]
    m24 = get_pattern("2:4").get_mask_single(w, 0.5)
    assert to_2d(m24).astype(int).tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]]


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


def test_monotone_n_in_m_partial_to_full():
    p = get_pattern("2:4")
    half = p.get_masks({"a": A}, 0.25)["a"]
    rng = np.random.default_rng(0)
    new_scores = rng.random(A.shape)
    full = p.get_masks({"a": new_scores}, 0.5, {"a": half})["a"]
    assert (full <= half).all()
    assert (full.reshape(-1, 4).sum(axis=1) == 2).all()


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


def test_registry_and_errors():
    assert {"NxM", "N:M"} <= set(registered_patterns())
    with pytest.raises(ValueError, match=r"registered families \('NxM', 'N:M'"):
        get_pattern("diagonal")
    with pytest.raises(ValueError, match="block dimensions must be positive"):
        get_pattern("0x4")
    with pytest.raises(ValueError, match="0 < N < M"):
        get_pattern("4:4")
    with pytest.raises(ValueError, match="pruning_scope must be"):
        get_pattern({"pattern": "1x1", "pruning_scope": "everywhere"})
    with pytest.raises(ValueError, match="must be in"):
        get_pattern("1x1").get_masks({"a": A}, 1.0)
    with pytest.raises(ValueError, match="pre_mask shape"):
        get_pattern("1x1").get_masks({"a": A}, 0.5, {"a": np.ones((2, 2), bool)})


def test_register_custom_pattern_touches_one_place():
    @register_pattern("diag-test")
    class Diagonal(PatternNxM):
        @classmethod
        def parse(cls, name):
            return {"rows": 1, "cols": 1} if name == "diag-test" else None

        def unit_scores(self, score2d):
            return score2d + np.eye(*score2d.shape) * 100, None  # the diagonal is protected

    m = get_pattern("diag-test").get_mask_single(np.ones((3, 3)), 0.6)
    assert m.diagonal().all() and (~m).sum() == 5


SHAPES = st.sampled_from([(8,), (4, 8), (8, 4), (16, 8), (4, 4, 3, 3), (8, 2, 1, 2), (4, 2, 2, 2, 2)])


@settings(max_examples=120, deadline=None)
@given(SHAPES, st.sampled_from(["1x1", "2x2", "4x1", "1x4", "channelx1", "1xchannel"]), st.floats(0, 0.99),
       st.integers(0, 2 ** 31 - 1))
def test_property_block_exact_counts_and_uniformity(shape, name, ratio, seed):
    if len(shape) == 1 and name in ("2x2", "4x1"):
        return
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 4, size=shape).astype(np.float32)   # many ties
    p = get_pattern(name)
    m = p.get_mask_single(w, ratio)
    v2 = to_2d(m)
    br, bc = p._block(v2.shape)
    blocks = v2.reshape(v2.shape[0] // br, br, v2.shape[1] // bc, bc)
    assert (blocks.all(axis=(1, 3)) | ~blocks.any(axis=(1, 3))).all()     # each block all kept or all pruned
    n_blocks = blocks.shape[0] * blocks.shape[2]
    assert (~blocks.any(axis=(1, 3))).sum() == exact_prune_count(ratio, n_blocks)


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


def walk_reference_counts(scores, ratio, min_ratio, max_ratio):
    """Rule 9 by definition: walk units in global order until the clipped counts reach the total."""
    names = list(scores)
    flat = np.concatenate([scores[n].ravel() for n in names])
    layer = np.concatenate([np.full(scores[n].size, i) for i, n in enumerate(names)])
    order = np.argsort(flat, kind="stable")
    lo = [exact_prune_count(min_ratio, scores[n].size) for n in names]
    hi = [max(lo[i], exact_prune_count(max_ratio, scores[n].size)) for i, n in enumerate(names)]
    total = min(max(exact_prune_count(ratio, flat.size), sum(lo)), sum(hi))
    seen = np.zeros(len(names), dtype=int)

    def clipped():
        return [min(max(c, lo[i]), hi[i]) for i, c in enumerate(seen)]

    t = 0
    while sum(clipped()) < total:
        seen[layer[order[t]]] += 1
        t += 1
    return dict(zip(names, clipped()))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(2, 12), min_size=1, max_size=4), st.floats(0, 0.97), st.floats(0, 0.5),
       st.floats(0, 1), st.integers(0, 10_000))
def test_property_global_min_and_max_follow_the_definition(sizes, ratio, min_ratio, span, seed):
    rng = np.random.default_rng(seed)
    max_ratio = min_ratio + span * (0.98 - min_ratio)
    scores = {f"l{i}": rng.random(n) * rng.choice([0.1, 1.0, 10.0]) for i, n in enumerate(sizes)}
    p = get_pattern({"pruning_scope": "global", "min_sparsity_ratio_per_layer": min_ratio,
                     "max_sparsity_ratio_per_layer": max_ratio})
    masks = p.get_masks(scores, ratio)
    assert {n: int((~m).sum()) for n, m in masks.items()} == walk_reference_counts(scores, ratio, min_ratio, max_ratio)
    for n, m in masks.items():                      # each layer prunes its own lowest units
        assert (m == ~lowest(scores[n], int((~m).sum()))).all()


def lowest(v, k):
    out = np.zeros(v.size, dtype=bool)
    out[np.argsort(v, kind="stable")[:k]] = True
    return out


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
