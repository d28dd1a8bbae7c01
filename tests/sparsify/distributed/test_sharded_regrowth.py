"""sharded_regrow: each rank's rows of the core's regrow (RigL, SET), bit for bit, and the protocol with regrowth."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify import PruningProtocol
from sparsify.distributed import RowShard, ShardedPruningProtocol, ThreadGroup, sharded_regrow
from sparsify.regrowth import regrow

SHAPES = {"conv": (6, 2, 3, 3), "fc": (9, 8), "empty": (0, 4), "head": (3, 5)}


def _case(seed: int, ties: bool):
    rng = np.random.default_rng(seed)
    masks, scores, grads = {}, {}, {}
    for n, s in SHAPES.items():
        masks[n] = rng.random(s) < rng.uniform(0.2, 0.9)
        w = rng.standard_normal(s)
        g = rng.standard_normal(s)
        if ties:
            w, g = np.round(w * 2) / 2, np.round(g * 2) / 2
        scores[n], grads[n] = np.abs(w).astype(np.float32), g.astype(np.float32)
    return masks, scores, grads


def _sharded(masks, scores, grads, fraction, method, step, world, sample_size=None):
    def rank(c):
        shards = {n: RowShard.chunk(s, c.rank, world) for n, s in SHAPES.items()}
        part = {n: shards[n] for n in SHAPES}
        rows = lambda d: {n: d[n][part[n].start:part[n].stop] for n in SHAPES}   # noqa: E731
        return sharded_regrow(rows(masks), rows(scores), None if grads is None else rows(grads), fraction, method,
                              step, shards, c, sample_size=sample_size)
    out = ThreadGroup(world).run(rank)
    return ({n: np.concatenate([o[0][n] for o in out]) for n in SHAPES},
            {n: np.concatenate([o[1][n] for o in out]) for n in SHAPES})


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), world=st.integers(1, 4), method=st.sampled_from(["rigl", "set"]),
       fraction=st.floats(0.0, 1.0), ties=st.booleans(), step=st.integers(0, 2 ** 40))
def test_sharded_regrow_is_the_core_regrow_on_the_full_weights(seed, world, method, fraction, ties, step):
    masks, scores, grads = _case(seed, ties)
    want = regrow(masks, scores, grads if method == "rigl" else None, fraction, method, step)
    got = _sharded(masks, scores, grads if method == "rigl" else None, fraction, method, step, world, sample_size=4)
    for n in SHAPES:
        assert np.array_equal(got[0][n], want[0][n]), n
        assert np.array_equal(got[1][n], want[1][n]), n


def test_sharded_regrow_small_literal_case():
    masks = {"w": np.array([[True, True, False], [False, True, False]]), "v": np.ones((2, 2), dtype=bool)}
    scores = {"w": np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 0.0]]), "v": np.ones((2, 2))}
    grads = {"w": np.array([[0.0, 0.0, -3.0], [3.0, 0.0, 1.0]]), "v": np.zeros((2, 2))}

    def rank(c):
        shards = {n: RowShard((2, *m.shape[1:]), c.rank, c.rank + 1) for n, m in masks.items()}
        return sharded_regrow({n: m[c.rank:c.rank + 1] for n, m in masks.items()},
                              {n: s[c.rank:c.rank + 1] for n, s in scores.items()},
                              {n: g[c.rank:c.rank + 1] for n, g in grads.items()}, 0.5, "rigl", 3, shards, c)
    out = ThreadGroup(2).run(rank)
    # 3 kept, round(1.5) = 1 swapped (a half rounds down... 0.5 * 3 = 1.5 -> 1): the lower-index 1.0 goes,
    # the pruned entry with the largest |grad| and the lower index (row 0, col 2) grows
    assert np.concatenate([o[0]["w"] for o in out]).tolist() == [[True, False, True], [False, True, False]]
    assert np.concatenate([o[1]["w"] for o in out]).tolist() == [[False, False, True], [False, False, False]]
    assert np.concatenate([o[0]["v"] for o in out]).all()          # nothing pruned: nothing to grow


def test_sharded_regrow_nan_gradient_raises_the_core_error_on_every_rank():
    masks, scores, grads = _case(1, False)
    grads = {**grads, "fc": np.where(masks["fc"], grads["fc"], np.nan)}     # NaN where the pruned candidates are
    with pytest.raises(ValueError, match="layer 'fc': scores contain NaN") as core:
        regrow(masks, scores, grads, 0.5, "rigl", 0)
    with pytest.raises(ValueError) as sharded:
        _sharded(masks, scores, grads, 0.5, "rigl", 0, 3)
    assert str(core.value) in str(sharded.value)


@pytest.mark.parametrize("method", ["rigl", "set"])
@pytest.mark.parametrize("world", [2, 3])
def test_sharded_protocol_with_regrowth_follows_the_single_process_protocol(method, world):
    cfg = {"target_sparsity": 0.7, "pruning_scope": "global", "start_step": 0, "end_step": 6, "pruning_frequency": 2,
           "regrowth": method, "regrowth_fraction": 0.4, "monotone": False}
    steps = range(0, 8)
    data = {s: _case(100 + s, s % 2 == 1) for s in steps}
    single = PruningProtocol(cfg, SHAPES)
    want = {}
    for s in steps:
        _, w, g = data[s]
        update = single.advance(s, w, grads=g)
        want[s] = None if update is None else ({n: m.copy() for n, m in update.masks.items()},
                                               {n: m.copy() for n, m in update.grown.items()})

    def rank(c):
        shards = {n: RowShard.chunk(sh, c.rank, world) for n, sh in SHAPES.items()}
        proto = ShardedPruningProtocol(cfg, SHAPES, shards, c)
        rows = lambda d: {n: d[n][shards[n].start:shards[n].stop] for n in proto.names}   # noqa: E731
        out = {}
        for s in steps:
            _, w, g = data[s]
            update = proto.advance(s, rows(w), grads=rows(g))
            out[s] = None if update is None else (update.masks, update.grown)
        return out
    got = ThreadGroup(world).run(rank)
    grew = False
    for s in steps:
        assert (want[s] is None) == (got[0][s] is None), s
        if want[s] is None:
            continue
        for n in single.names:
            assert np.array_equal(np.concatenate([g[s][0][n] for g in got]), want[s][0][n]), (s, n)
            if want[s][1]:
                grown = np.concatenate([g[s][1][n] for g in got])
                assert np.array_equal(grown, want[s][1][n]), (s, n)
                grew |= bool(grown.any())
    assert grew
