"""find_cuts: the k lowest units over several ranks' pieces, ties to the earlier member then the lower index."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.distributed import ThreadGroup
from sparsify.distributed.row_shard import RowShard
from sparsify.distributed.sharded_cut import CutProblem, find_cuts
from sparsify.distributed.sharded_layer import ShardedLayer


def cut_over_ranks(layers, k, world, sample_size=None):
    """Keep masks of every layer, rows chunked over ``world`` ranks (one unit per element)."""
    def rank(c):
        members = []
        for pos, (name, units) in enumerate(layers.items()):
            rows, cols = units.shape
            shards = [RowShard.chunk(units.shape, r, world) for r in range(world)]
            mine = shards[c.rank]
            layer = ShardedLayer(name, pos, mine, units[mine.start:mine.stop], None, units_per_row_block=cols,
                                 starts=[s.start for s in shards], stops=[s.stop for s in shards],
                                 n_total=rows * cols)
            layer.units = layer.score.reshape(-1)
            members.append(layer)
        problem = CutProblem(members, k, world, sample_size)
        find_cuts(c, [problem])
        return [problem.keep(j, c.rank) for j in range(len(members))]
    per_rank = ThreadGroup(world).run(rank)
    return {name: np.concatenate([keeps[j] for keeps in per_rank]) for j, name in enumerate(layers)}


def reference(layers, k):
    flat = np.concatenate([u.reshape(-1) for u in layers.values()])
    keep = np.ones(flat.size, dtype=bool)
    keep[np.argsort(flat, kind="stable")[:k]] = False
    out, at = {}, 0
    for name, u in layers.items():
        out[name] = keep[at:at + u.size]
        at += u.size
    return out


def test_literal_cut_with_ties_across_members_and_ranks():
    layers = {"a": np.array([[1.0, 3.0], [1.0, 0.0]]), "b": np.array([[1.0, 2.0], [0.0, 5.0]])}
    got = cut_over_ranks(layers, 4, world=2)
    # 0.0 (a), 0.0 (b), then the first two 1.0s: both in a; b's 1.0 is kept
    assert {n: m.astype(int).tolist() for n, m in got.items()} == {"a": [0, 1, 0, 0], "b": [1, 1, 0, 1]}


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.lists(st.tuples(st.integers(1, 9), st.integers(1, 5)), min_size=1, max_size=3),
       st.integers(0, 3), st.floats(0, 1), st.integers(0, 2 ** 32 - 1))
def test_cut_equals_a_stable_sort_of_all_units(world, shapes, levels, frac, seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 3, size=100) if levels else rng.normal(size=100)     # heavy ties, or none
    layers = {f"l{i}": rng.choice(values, size=shape).astype(np.float64) for i, shape in enumerate(shapes)}
    n = sum(u.size for u in layers.values())
    k = int(round(frac * n))
    got = cut_over_ranks(layers, k, world, sample_size=2)       # tiny samples: several bracketing rounds
    want = reference(layers, k)
    for name in layers:
        assert np.array_equal(got[name], want[name]), name
