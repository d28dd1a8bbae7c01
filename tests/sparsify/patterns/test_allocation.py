"""Tests for sparsify.patterns.allocation: the global per-layer allocation follows rule 9 by definition."""
import numpy as np
from hypothesis import given, settings, strategies as st

from sparsify.patterns import allocate_pruned_units, get_pattern
from sparsify.selection.lowest_k import exact_prune_count


def test_allocation_literal_counts_and_cuts():
    units = {"a": np.array([0.1, 0.2, 0.3]), "b": np.array([0.05, 5.0, 6.0])}
    free = allocate_pruned_units(units, {"a": (0, 2), "b": (0, 2)}, 3)    # the global cut is used as is
    assert {n: v.tolist() for n, v in free.items()} == {"a": [False, False, True], "b": [False, True, True]}
    capped = allocate_pruned_units(units, {"a": (0, 1), "b": (0, 2)}, 3)  # "a" held at its max, "b" re-cut
    assert capped["a"] == 1 and capped["b"].tolist() == [False, False, True]
    floor = allocate_pruned_units(units, {"a": (0, 3), "b": (2, 2)}, 3)   # "b" held at its min
    assert floor["b"] == 2 and floor["a"].tolist() == [False, True, True]


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
