"""ShardedPruningProtocol: the single-process protocol's masks, rows per rank, through a whole schedule."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify import PruningProtocol
from sparsify.distributed import CountingCollective, RowShard, SingleProcess, ShardedPruningProtocol, ThreadGroup

SHAPES = {"conv": (8, 3, 3, 3), "bias": (8,), "fc1": (16, 24), "fc2": (4, 16)}


def weights_at(step, seed=0):
    rng = np.random.default_rng(seed + 1000 * step)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}


def rows(a, shard):
    return a[shard.start:shard.stop]


def run_schedule(cfg, world, steps, scores=False):
    """Sharded run on ``world`` threads; returns per step (full masks glued, figures) and the states."""

    def rank(c):
        shapes = {n: s for n, s in SHAPES.items()}
        shards = {n: RowShard.chunk(s, c.rank, world) for n, s in shapes.items()}
        proto = ShardedPruningProtocol(cfg, shapes, shards, c)
        history = []
        for step in steps:
            full = weights_at(step)
            local = {n: rows(full[n], shards[n]) for n in proto.names}
            update = proto.advance(step, scores=local) if scores else proto.advance(step, lambda: local)
            history.append((None if update is None else {n: m.copy() for n, m in update.masks.items()},
                            None if update is None else {n: m.copy() for n, m in update.keep_values.items()},
                            proto.figures(), proto.done_step, proto.released))
        return history, proto.state_dict()

    return ThreadGroup(world).run(rank)


def single(cfg, steps, scores=False):
    proto = PruningProtocol(cfg, SHAPES)
    out = []
    for step in steps:
        w = weights_at(step)
        w = {n: w[n] for n in proto.names}
        update = proto.advance(step, scores=w) if scores else proto.advance(step, w)
        out.append((update, proto.figures(), proto.done_step, proto.released))
    return out, proto


@pytest.mark.parametrize("cfg", [
    {"target_sparsity": 0.8, "start_step": 0, "end_step": 6, "pruning_frequency": 2},
    {"target_sparsity": 0.5, "pattern": "2:4", "pruning_scope": "global", "start_step": 1, "end_step": 5,
     "pruning_frequency": 2, "leave_enabled": False, "skip_incompatible_layers": True},
    {"target_sparsity": 0.75, "pattern": "1x4", "pruning_scope": "global", "start_step": 0, "end_step": 4,
     "pruning_frequency": 1, "max_sparsity_ratio_per_layer": 0.8, "op_names": ["fc"]},
    {"target_sparsity": 0.6, "pattern": "1xchannel", "start_step": 0, "end_step": 3, "pruning_frequency": 1,
     "monotone": False},
    {"target_sparsity": 0.9, "pruning_scope": "erk", "start_step": 0, "end_step": 6, "pruning_frequency": 2},
])
@pytest.mark.parametrize("world", [1, 2, 4])
def test_sharded_protocol_follows_the_single_process_protocol(cfg, world):
    steps = [0, 1, 2, 3, 5, 6, 7, 9]
    want, proto = single(cfg, steps)
    got = run_schedule(cfg, world, steps)
    for r, (history, state) in enumerate(got):
        for (masks, zero, figures, done, released), (update, w_fig, w_done, w_rel) in zip(history, want):
            assert (masks is None) == (update is None)
            assert figures == w_fig and done == w_done and released == w_rel
            if update is None:
                continue
            for n in proto.names:
                shard = RowShard.chunk(SHAPES[n], r, world)
                assert np.array_equal(masks[n], rows(update.masks[n], shard)), (n, r)
                assert np.array_equal(zero[n], rows(update.keep_values[n], shard)), (n, r)
        assert state["shards"] == {n: [RowShard.chunk(SHAPES[n], r, world).start,
                                       RowShard.chunk(SHAPES[n], r, world).stop] for n in proto.names}


def test_gradient_criterion_scores_and_missing_scores_error():
    cfg = {"target_sparsity": 0.5, "criterion": "snip", "start_step": 0, "end_step": 2, "pruning_frequency": 1}
    steps = [0, 1, 2]
    want, _ = single(cfg, steps, scores=True)
    got = run_schedule(cfg, 2, steps, scores=True)
    for r, (history, _) in enumerate(got):
        for (masks, *_), (update, *_) in zip(history, want):
            for n in masks:
                assert np.array_equal(masks[n], rows(update.masks[n], RowShard.chunk(SHAPES[n], r, 2)))
    proto = ShardedPruningProtocol(cfg, {"w": (4, 4)}, {"w": (0, 4)}, SingleProcess())
    with pytest.raises(ValueError, match="needs scores computed from gradients"):
        proto.advance(0, {"w": np.ones((4, 4))})


def test_state_round_trip_and_restore_are_collective_and_exact():
    cfg = {"target_sparsity": 0.7, "start_step": 0, "end_step": 4, "pruning_frequency": 2}

    def rank(c):
        shards = {n: RowShard.chunk(s, c.rank, 2) for n, s in SHAPES.items()}
        a = ShardedPruningProtocol(cfg, SHAPES, shards, c)
        for step in (0, 2):
            a.advance(step, {n: rows(weights_at(step)[n], shards[n]) for n in a.names})
        state = a.state_dict()
        b = ShardedPruningProtocol(cfg, SHAPES, shards, c)
        b.load_state_dict(state)
        same = all(np.array_equal(b.masks[n], a.masks[n]) for n in a.names)
        ua = a.advance(4, {n: rows(weights_at(4)[n], shards[n]) for n in a.names})
        ub = b.advance(4, {n: rows(weights_at(4)[n], shards[n]) for n in b.names})
        same &= all(np.array_equal(ua.masks[n], ub.masks[n]) for n in a.names)
        other = ShardedPruningProtocol(cfg, SHAPES, {n: RowShard.chunk(s, 1 - c.rank, 2) for n, s in SHAPES.items()}, c)
        try:
            other.load_state_dict(state)
            refused = False
        except ValueError as e:
            refused = "resharded" in str(e)
        return same, b.figures() == a.figures(), refused, b.done_step

    for same, figures, refused, done in ThreadGroup(2).run(rank):
        assert same and figures and refused and done == 4


def test_constructor_errors_name_the_weight():
    with pytest.raises(ValueError, match=r"shards lacks the selected weights \['fc1'\]"):
        ShardedPruningProtocol({}, {"fc1": (4, 4)}, {}, SingleProcess())
    with pytest.raises(ValueError, match=r"shards\['fc1'\] is for shape \(4, 5\)"):
        ShardedPruningProtocol({}, {"fc1": (4, 4)}, {"fc1": RowShard((4, 5), 0, 4)}, SingleProcess())
    with pytest.raises(TypeError, match=r"shards\['fc1'\] must be a RowShard"):
        ShardedPruningProtocol({}, {"fc1": (4, 4)}, {"fc1": 3}, SingleProcess())
    proto = ShardedPruningProtocol({}, {"fc1": (4, 4)}, {"fc1": (2, 4)}, SingleProcess())
    assert proto.local_shapes == {"fc1": (2, 4)} and proto.masks["fc1"].shape == (2, 4)
    with pytest.raises(ValueError, match=r"weights\['fc1'\] has shape \(4, 4\)"):
        proto.advance(0, {"fc1": np.ones((4, 4))})


def test_figures_are_over_all_ranks_and_updates_move_few_bytes():
    cfg = {"target_sparsity": 0.9, "start_step": 0, "end_step": 0}
    shape = (1024, 1024)
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    def rank(c):
        counting = CountingCollective(c)
        shard = RowShard.chunk(shape, c.rank, 4)
        proto = ShardedPruningProtocol(cfg, {"w": shape}, {"w": shard}, counting)
        proto.advance(0, {"w": rows(w, shard)})
        return proto.total_sparsity(), proto.any_pruned, counting.bytes_moved

    for total, any_pruned, moved in ThreadGroup(4).run(rank):
        assert total == round(0.9 * w.size) / w.size and any_pruned
        assert moved < 0.01 * w.nbytes, moved


@settings(max_examples=15, deadline=None)
@given(world=st.integers(1, 4), seed=st.integers(0, 100))
def test_restore_from_masks_recounts_over_ranks(world, seed):
    rng = np.random.default_rng(seed)
    full = rng.random((7, 4)) < 0.5

    def rank(c):
        shard = RowShard.chunk(full.shape, c.rank, world)
        proto = ShardedPruningProtocol({}, {"w": full.shape}, {"w": shard}, c)
        proto.restore(3, {"w": rows(full, shard)})
        return proto.layer_sparsity()["w"]

    single = PruningProtocol({}, {"w": full.shape})
    single.restore(3, {"w": full})
    assert set(ThreadGroup(world).run(rank)) == {single.layer_sparsity()["w"]}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("world", [1, 3])
def test_skipped_layers_read_none_on_every_rank_as_in_one_process(world):
    cfg = {"pattern": "2:4", "skip_incompatible_layers": True, "target_sparsity": 0.5}
    shapes = {"conv": (8, 3, 3, 3), "fc1": (16, 24)}                 # conv's 2-D view (8, 27): 27 is not 4k

    def rank(c):
        proto = ShardedPruningProtocol(cfg, shapes, {n: RowShard.chunk(s, c.rank, world) for n, s in shapes.items()}, c)
        return proto.skipped, proto.layer_sparsity()

    single = PruningProtocol(cfg, shapes)
    assert list(single.skipped) == ["conv"] and single.layer_sparsity() == {"conv": None, "fc1": 0.0}
    assert all(got == (single.skipped, single.layer_sparsity()) for got in ThreadGroup(world).run(rank))
