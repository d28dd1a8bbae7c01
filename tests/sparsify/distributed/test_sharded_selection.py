"""sharded_masks: every rank's rows equal the single-process core's masks on the full tensors, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparsify.distributed import CountingCollective, RowShard, SingleProcess, ThreadGroup, sharded_masks
from sparsify.layout import view_shape
from sparsify.patterns import get_pattern

PATTERNS = ["1x1", "2x1", "4x1", "1x4", "2x2", "1xchannel", "channelx1", "2:4", "1:4", "4:8", "3:12"]


def block_rows(pattern, shape):
    return get_pattern(pattern).get_block_size_dict({"w": np.zeros(view_shape(shape))})["w"][0]


def run_sharded(pattern_cfg, scores, layouts, ratio, pre=None, max_ratio=None, counting=False, sample_size=None):
    """``layouts[name]`` = list of (start, stop) per rank. Returns the masks glued back in row order."""
    world = len(next(iter(layouts.values())))
    pattern = get_pattern(pattern_cfg)

    def rank(c):
        c = CountingCollective(c) if counting else c
        shards = {n: RowShard(scores[n].shape, *layouts[n][c.rank]) for n in scores}
        local = {n: scores[n][shards[n].start:shards[n].stop] for n in scores}
        local_pre = None if pre is None else {n: pre[n][shards[n].start:shards[n].stop] for n in pre}
        out = sharded_masks(pattern, local, shards, ratio, c, local_pre, max_ratio, sample_size=sample_size)
        return (out, c.bytes_moved) if counting else out

    results = ThreadGroup(world).run(rank)
    masks = [r[0] for r in results] if counting else results
    glued = {}
    for n, s in scores.items():
        full = np.empty(s.shape, dtype=bool)
        for r, (a, b) in enumerate(layouts[n]):
            assert masks[r][n].shape == (b - a, *s.shape[1:])
            full[a:b] = masks[r][n]
        glued[n] = full
    return (glued, [r[1] for r in results]) if counting else glued


def chunk_layout(shape, world):
    return [(RowShard.chunk(shape, r, world).start, RowShard.chunk(shape, r, world).stop) for r in range(world)]


# ----------------------------------------------------------------------------------------------
# literal cases
# ----------------------------------------------------------------------------------------------
W = np.array([[5.0, 1.0, 2.0, 2.0],
              [2.0, 8.0, 2.0, 0.5],
              [3.0, 4.0, 2.0, 9.0],
              [7.0, 6.0, 2.0, 1.0]])


def test_ties_across_shards_go_to_the_lower_flat_index():
    # six 2.0s; pruning 6 of 16 takes 0.5, 1.0, 1.0 and the first three 2.0s in row-major order
    masks = run_sharded("1x1", {"w": W}, {"w": [(2, 4), (0, 2)]}, 6 / 16)   # rank 0 holds the last rows
    assert masks["w"].astype(int).tolist() == [[1, 0, 0, 0], [0, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0]]
    assert np.array_equal(masks["w"], get_pattern("1x1").get_masks({"w": W}, 6 / 16)["w"])


def test_global_ties_break_by_layer_order_then_index():
    a = np.full((2, 2), 3.0)
    b = np.full((2, 2), 3.0)
    cfg = {"pattern": "1x1", "pruning_scope": "global"}
    masks = run_sharded(cfg, {"b": b, "a": a}, {"b": [(1, 2), (0, 1)], "a": [(0, 1), (1, 2)]}, 0.5)
    # "b" comes first: its units go first, up to the per-layer maximum (3 of 4 at 0.98), then "a"'s first unit
    assert masks["b"].astype(int).tolist() == [[0, 0], [0, 1]]
    assert masks["a"].astype(int).tolist() == [[0, 1], [1, 1]]
    want = get_pattern(cfg).get_masks({"b": b, "a": a}, 0.5)
    assert all(np.array_equal(masks[n], want[n]) for n in "ab")


def test_min_max_clamps_in_global_scope():
    rng = np.random.default_rng(1)
    scores = {"small": rng.random((4, 8)) * 0.01, "big": rng.random((8, 8)) + 1.0}
    cfg = {"pattern": "1x1", "pruning_scope": "global", "max_sparsity_ratio_per_layer": 0.5,
           "min_sparsity_ratio_per_layer": 0.25}
    masks = run_sharded(cfg, scores, {"small": [(0, 2), (2, 4)], "big": [(0, 3), (3, 8)]}, 0.5)
    want = get_pattern(cfg).get_masks(scores, 0.5)
    for n in scores:
        assert np.array_equal(masks[n], want[n])
    assert (~masks["small"]).sum() == 16                         # clamped at 50%
    assert (~masks["small"]).sum() + (~masks["big"]).sum() == 48   # total still exact


def test_monotone_previous_masks_and_keep_structure_of_nm():
    rng = np.random.default_rng(2)
    s = rng.random((8, 8))
    p = get_pattern("2:4")
    first = p.get_masks({"w": s}, 0.25)
    masks = run_sharded("2:4", {"w": s[::-1].copy()}, {"w": chunk_layout((8, 8), 3)}, 0.5, pre=first)
    want = p.get_masks({"w": s[::-1].copy()}, 0.5, first)
    assert np.array_equal(masks["w"], want["w"])
    assert not (masks["w"] & ~first["w"]).any()


def test_block_crossing_a_shard_boundary_is_an_error_naming_layer_and_sizes():
    s = np.ones((12, 4))
    with pytest.raises(ValueError, match=r"layer 'fc'.*blocks of 4 rows.*rows per rank \[6, 6\]"):
        run_sharded("4x1", {"fc": s}, {"fc": [(0, 6), (6, 12)]}, 0.5)
    with pytest.raises(ValueError, match=r"layer 'fc'.*blocks of 12 rows"):
        run_sharded("channelx1", {"fc": s}, {"fc": [(0, 6), (6, 12)]}, 0.5)
    # one rank holding every row is fine, also for whole-column blocks
    masks = run_sharded("channelx1", {"fc": np.arange(48.0).reshape(12, 4)}, {"fc": [(0, 0), (0, 12)]}, 0.5)
    assert masks["fc"].astype(int)[0].tolist() == [0, 0, 1, 1]


def test_shards_that_do_not_tile_the_rows_are_an_error_on_every_rank():
    with pytest.raises(ValueError, match=r"layer 'w'.*do not tile its 4 rows"):
        run_sharded("1x1", {"w": W}, {"w": [(0, 2), (1, 4)]}, 0.5)
    with pytest.raises(ValueError, match=r"layer 'w'.*do not tile"):
        run_sharded("1x1", {"w": W}, {"w": [(0, 2), (3, 4)]}, 0.5)


def test_nan_on_one_rank_is_raised_on_every_rank():
    s = W.copy()
    s[3, 1] = np.nan
    errors = []

    def rank(c):
        shard = RowShard.chunk(s.shape, c.rank, 2)
        try:
            sharded_masks(get_pattern("1x1"), {"fc": s[shard.start:shard.stop]}, {"fc": shard}, 0.5, c)
        except ValueError as e:
            errors.append((c.rank, str(e)))
            raise

    with pytest.raises(ValueError, match="layer 'fc': scores contain NaN"):
        ThreadGroup(2).run(rank)
    assert sorted(r for r, _ in errors) == [0, 1]
    assert "raised on rank 1" in dict(errors)[0]


def test_wrong_local_shape_and_missing_shard_are_clear_errors():
    with pytest.raises(ValueError, match=r"scores\['w'\] has shape \(3, 4\), but rows \[0, 2\)"):
        sharded_masks(get_pattern("1x1"), {"w": W[:3]}, {"w": RowShard(W.shape, 0, 2)}, 0.5,
                      SingleProcess())
    with pytest.raises(ValueError, match=r"shards lacks the layers \['w'\]"):
        sharded_masks(get_pattern("1x1"), {"w": W}, {}, 0.5, SingleProcess())
    with pytest.raises(ValueError, match="target_sparsity_ratio must be in"):
        sharded_masks(get_pattern("1x1"), {"w": W}, {"w": RowShard.whole(W.shape)}, 1.5, SingleProcess())


def test_ranks_disagreeing_on_the_layers_is_an_error():
    def rank(c):
        shape = (4, 4) if c.rank == 0 else (4, 5)
        s = np.ones(shape)[2 * c.rank:2 * c.rank + 2]
        return sharded_masks(get_pattern("1x1"), {"w": s}, {"w": RowShard(shape, 2 * c.rank, 2 * c.rank + 2)}, 0.5, c)

    with pytest.raises(ValueError, match="different layers, shapes"):
        ThreadGroup(2).run(rank)


def test_skipped_incompatible_layers_stay_dense():
    cfg = {"pattern": "4x1", "skip_incompatible_layers": True}
    s = {"odd": np.arange(24.0).reshape(6, 4), "ok": np.arange(32.0).reshape(8, 4)}
    masks = run_sharded(cfg, s, {"odd": [(0, 3), (3, 6)], "ok": [(0, 4), (4, 8)]}, 0.5)
    assert masks["odd"].all()
    assert np.array_equal(masks["ok"], get_pattern(cfg).get_masks(s, 0.5)["ok"])


def test_bytes_moved_are_a_small_fraction_of_the_scores():
    rng = np.random.default_rng(3)
    s = {"a": rng.random((512, 512)).astype(np.float32), "b": rng.random((256, 1024)).astype(np.float32)}
    for scope in ("local", "global"):
        cfg = {"pattern": "1x1", "pruning_scope": scope}
        masks, moved = run_sharded(cfg, s, {n: chunk_layout(v.shape, 4) for n, v in s.items()}, 0.9,
                                   counting=True)
        want = get_pattern(cfg).get_masks(s, 0.9)
        assert all(np.array_equal(masks[n], want[n]) for n in s)
        weight_bytes = sum(v.nbytes for v in s.values())
        assert max(moved) < 0.02 * weight_bytes, (scope, moved, weight_bytes)


def test_heavy_ties_and_infinities_over_many_rounds():
    rng = np.random.default_rng(4)
    s = rng.integers(0, 3, size=(300, 200)).astype(np.float32)     # 60k units, three values
    s[rng.random(s.shape) < 0.01] = np.inf
    s[rng.random(s.shape) < 0.01] = -np.inf
    for ratio in (0.2, 0.5, 0.97):
        for sample_size in (None, 3):
            masks = run_sharded("1x1", {"w": s}, {"w": chunk_layout(s.shape, 3)}, ratio, sample_size=sample_size)
            assert np.array_equal(masks["w"], get_pattern("1x1").get_masks({"w": s}, ratio)["w"]), ratio


# ----------------------------------------------------------------------------------------------
# property: any pattern, scope, clamp, dtype, previous masks and sharding
# ----------------------------------------------------------------------------------------------
@st.composite
def cases(draw):
    pattern = draw(st.sampled_from(PATTERNS))
    world = draw(st.integers(1, 5))
    n_layers = draw(st.integers(1, 3))
    glob = draw(st.booleans())
    cfg = {"pattern": pattern, "pruning_scope": "global" if glob else "local",
           "block_score_reduce": draw(st.sampled_from(["sum", "mean", "max"])),
           "max_sparsity_ratio_per_layer": draw(st.sampled_from([0.98, 0.7, 0.5])),
           "min_sparsity_ratio_per_layer": draw(st.sampled_from([0.0, 0.0, 0.1]))}
    p = get_pattern(cfg)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    scores, layouts = {}, {}
    for i in range(n_layers):
        br = {"2x1": 2, "4x1": 4, "2x2": 2}.get(pattern, 1)
        cols = {"1x4": 4, "2x2": 2, "2:4": 4, "1:4": 4, "4:8": 8, "3:12": 12}.get(pattern, 1)
        conv = draw(st.booleans())
        rows = br * draw(st.integers(1, 8))
        shape = (rows, cols * draw(st.integers(1, 3)), 1, 1) if conv else (rows, cols * draw(st.integers(1, 6)))
        kind = draw(st.sampled_from(["normal", "ties", "inf"]))
        dtype = draw(st.sampled_from([np.float32, np.float64, np.float16]))
        if kind == "ties":
            s = rng.integers(0, 3, size=shape).astype(dtype)
        else:
            s = np.abs(rng.standard_normal(shape)).astype(dtype)
            if kind == "inf":
                s[rng.random(shape) < 0.1] = np.inf
        scores[f"l{i}"] = s
        if pattern == "channelx1":               # all rows on one rank (whole-column blocks)
            owner = draw(st.integers(0, world - 1))
            layouts[f"l{i}"] = [(0, rows) if r == owner else (0, 0) for r in range(world)]
            continue
        cuts = sorted(draw(st.lists(st.integers(0, rows // br), min_size=world - 1, max_size=world - 1)))
        bounds = [0, *[c * br for c in cuts], rows]
        order = draw(st.permutations(list(range(world))))       # which rank holds which range
        layouts[f"l{i}"] = [(bounds[order[r]], bounds[order[r] + 1]) for r in range(world)]
    ratio = draw(st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.9]))
    ratio = min(ratio, p.max_ratio)
    pre = None
    if draw(st.booleans()):
        pre = p.get_masks(scores, min(ratio, 0.3) * draw(st.sampled_from([0.5, 1.0])))
        scores = {n: (s * rng.random(s.shape)).astype(s.dtype) for n, s in scores.items()}   # new scores
    sample_size = draw(st.sampled_from([None, None, 1, 2, 5]))   # tiny samples: many rounds, missed brackets
    return cfg, scores, layouts, ratio, pre, sample_size


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_sharded_equals_single_process_core(case):
    cfg, scores, layouts, ratio, pre, sample_size = case
    want = get_pattern(cfg).get_masks(scores, ratio, pre)
    got = run_sharded(cfg, scores, layouts, ratio, pre, sample_size=sample_size)
    for n in scores:
        assert np.array_equal(got[n], want[n]), n


@settings(max_examples=12, deadline=None)
@given(pattern=st.sampled_from(["1x1", "4x1", "2:4", "1xchannel"]), world=st.sampled_from([2, 4]),
       glob=st.booleans(), seed=st.integers(0, 1000), ratio=st.sampled_from([0.3, 0.5]))
def test_sharded_equals_core_on_layers_large_enough_for_sampling_rounds(pattern, world, glob, seed, ratio):
    rng = np.random.default_rng(seed)
    scores = {"a": np.abs(rng.standard_normal((256, 512))).astype(np.float32),
              "b": np.round(np.abs(rng.standard_normal((128, 256))), 1).astype(np.float32)}  # many ties
    cfg = {"pattern": pattern, "pruning_scope": "global" if glob else "local"}
    want = get_pattern(cfg).get_masks(scores, ratio)
    got = run_sharded(cfg, scores, {n: chunk_layout(s.shape, world) for n, s in scores.items()}, ratio)
    for n in scores:
        assert np.array_equal(got[n], want[n]), n


@pytest.mark.parametrize("kind", ["geometric", "lognormal", "three_values"])
def test_rounds_stay_few_on_skewed_and_tied_scores(kind):
    rng = np.random.default_rng(5)
    s = {"geometric": rng.geometric(0.3, size=(400, 250)),
         "lognormal": np.exp(10 * rng.standard_normal((400, 250))),
         "three_values": rng.integers(0, 3, size=(400, 250))}[kind].astype(np.float32)
    for ratio in (0.1, 0.5, 0.99):
        def rank(c):
            counting = CountingCollective(c)
            shard = RowShard.chunk(s.shape, c.rank, 4)
            m = sharded_masks(get_pattern("1x1"), {"w": s[shard.start:shard.stop]}, {"w": shard}, ratio, counting)
            return m["w"], counting.calls
        out = ThreadGroup(4).run(rank)
        assert np.array_equal(np.concatenate([m for m, _ in out]), get_pattern("1x1").get_masks({"w": s}, ratio)["w"])
        assert max(calls for _, calls in out) <= 20, (kind, ratio)
