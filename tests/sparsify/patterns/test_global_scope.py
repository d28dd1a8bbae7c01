"""Global scope scored layer by layer (blocks, N:M): the masks of the full path, bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify import PruningEngine
from sparsify.criteria import get_criterion
from sparsify.patterns import get_pattern
from sparsify.patterns.base import can_score_layer_by_layer
from sparsify.patterns.global_scope import global_masks_by_layer

SHAPES = st.sampled_from([(4, 8), (8, 4), (16, 8), (8, 16), (4, 4, 3, 3), (8, 2, 1, 2), (6, 8), (3, 5)])


@settings(max_examples=80, deadline=None)
@given(shapes=st.lists(SHAPES, min_size=1, max_size=4), pattern=st.sampled_from(["4x1", "1x2", "2x2", "2:4", "1:4", "4x4", "2x2x1", "channelx1"]),
       levels=st.sampled_from([0, 1, 2, 3]), ratio=st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.9]),
       criterion=st.sampled_from(["magnitude", "wanda"]), limits=st.sampled_from([(0.98, 0.0), (0.5, 0.0), (0.9, 0.3)]),
       with_pre=st.booleans(), threads=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_layer_by_layer_masks_equal_the_full_path(shapes, pattern, levels, ratio, criterion, limits, with_pre, threads,
                                                  seed):
    """Ties (levels 1-3), -0.0, layers that do not fit (left dense), earlier masks, per-layer clamps, conv
    shapes, 1/2/4 threads: the same masks as the selection on every layer's scores at once."""
    rng = np.random.default_rng(seed)
    weights = {}
    for i, s in enumerate(shapes):
        w = rng.standard_normal(s) if levels == 0 else rng.integers(-levels + 1, levels, size=s) * 0.5
        w = w.astype(np.float32)
        w.flat[::7] = -0.0
        weights[f"l{i}.weight"] = w
    acts = {n: rng.integers(1, 3, size=(w.shape[1],) + (1,) * (w.ndim - 2)).astype(np.float32)
            for n, w in weights.items()}
    pre = {n: rng.random(w.shape) < 0.8 for n, w in weights.items()} if with_pre else None
    eng = PruningEngine({"pattern": pattern, "pruning_scope": "global", "criterion": criterion, "num_threads": threads,
                         "max_sparsity_ratio_per_layer": limits[0], "min_sparsity_ratio_per_layer": limits[1],
                         "skip_incompatible_layers": True, "start_step": 0, "end_step": 0})
    ratio = min(ratio, eng.pattern.max_ratio)
    want = eng.masks_at_sparsity(weights, ratio, pre, scores=eng.criterion_scores(weights, acts), activations=acts)
    got = eng.masks_at_sparsity(weights, ratio, pre, activations=acts)
    assert list(got) == list(want)
    for n in weights:
        np.testing.assert_array_equal(got[n], want[n])


def test_literal_masks_and_the_element_scores_are_not_kept():
    """Two 1x4 layers in 4x1 blocks (units are columns of 4 rows... here 2 units each): the lowest half of all
    units, ties to the earlier layer; each layer's scores are asked for once and not held past its units."""
    a = np.array([[1.0, 9.0], [1.0, 9.0], [1.0, 9.0], [1.0, 9.0]])          # units (column blocks): 4, 36
    b = np.array([[2.0, 1.0], [2.0, 1.0], [2.0, 1.0], [2.0, 1.0]])          # units: 8, 4
    asked = []

    def score_of(name):
        asked.append(name)
        return {"a": a, "b": b}[name]

    masks = global_masks_by_layer(get_pattern({"pattern": "4x1", "pruning_scope": "global"}), score_of,
                                  {"a": a.shape, "b": b.shape}, 0.5, None, 0.98)
    assert sorted(asked) == ["a", "b"]
    assert masks["a"].astype(int).tolist() == [[0, 1]] * 4
    assert masks["b"].astype(int).tolist() == [[1, 0]] * 4


def test_which_patterns_go_layer_by_layer():
    mag, snip = get_criterion("magnitude"), get_criterion("snip")
    glob = lambda p: get_pattern({"pattern": p, "pruning_scope": "global"})     # noqa: E731
    assert can_score_layer_by_layer(glob("4x1"), mag) and can_score_layer_by_layer(glob("2:4"), mag)
    assert not can_score_layer_by_layer(glob("2x2x1"), mag)                    # its own global selection
    assert not can_score_layer_by_layer(glob("4x1"), snip)                      # scored at every step
    assert not can_score_layer_by_layer(get_pattern({"pattern": "4x1", "pruning_scope": "local"}), mag)
    assert not can_score_layer_by_layer(get_pattern({"pattern": "4x1", "pruning_scope": "erk"}), mag)


def test_a_pattern_whose_expand_keep_reads_the_scores_is_not_scored_layer_by_layer():
    from sparsify.patterns.nxm import PatternNxM

    class ReadsScores(PatternNxM):
        def expand_keep(self, unit_keep, score2d, aux):
            return super().expand_keep(unit_keep, score2d, aux) | (np.asarray(score2d) > 100)

    p = ReadsScores({"pattern": "4x1", "pruning_scope": "global"})
    assert not can_score_layer_by_layer(p, get_criterion("magnitude"))


@pytest.mark.parametrize("pattern", ["4x1", "2:4"])
def test_nan_takes_the_full_path_and_its_error(pattern):
    w = np.arange(1, 33, dtype=np.float32).reshape(4, 8)
    w[1, 3] = np.nan
    eng = PruningEngine({"pattern": pattern, "pruning_scope": "global", "start_step": 0, "end_step": 0})
    with pytest.raises(ValueError, match="NaN"):
        eng.masks_at_sparsity({"fc": w, "fc2": np.ones((4, 8), np.float32)}, 0.5)
