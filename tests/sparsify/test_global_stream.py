"""Masks from scores recomputed chunk by chunk (global scope, and each layer in local scope): the masks of the full
path, bit for bit, in less memory."""
import contextlib
import os
import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify import PruningEngine
from sparsify.criteria import get_criterion
from sparsify.global_stream import can_stream_global, can_stream_local, streamed_global_masks
from sparsify.patterns import get_pattern
from sparsify.selection import kernel
from sparsify.selection.streamed_cut import StreamedCut

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@contextlib.contextmanager
def tiny_work(exact: bool):
    """Small chunks and samples, no size threshold; ``exact``: every bracket overflows (the radix path)."""
    with mock.patch("sparsify.selection.lowest_k._SMALL", 0), mock.patch("sparsify.selection.lowest_k._SMALL_ELIGIBLE", 0), \
            mock.patch.multiple("sparsify.selection.kernel", CHUNK=8, SCORED_CHUNK=8, MIN_PARALLEL=0), \
            mock.patch.multiple("sparsify.selection.cut", _SAMPLE=8, _SAMPLE_MAX=32), \
            mock.patch.multiple("sparsify.selection.streamed_cut",
                                _CANDIDATE_FRACTION=0.0 if exact else 1 / 16, _CANDIDATE_SLACK=0 if exact else 64), \
            mock.patch("sparsify.parallel_layers.MIN_PARALLEL", 0):
        yield


def _engine(criterion, threads, max_ratio=0.98, min_ratio=0.0, scope="global"):
    return PruningEngine({"target_sparsity": 0.5, "start_step": 0, "end_step": 0, "pruning_scope": scope,
                          "criterion": criterion, "num_threads": threads, "max_sparsity_ratio_per_layer": max_ratio,
                          "min_sparsity_ratio_per_layer": min_ratio})


layer_shapes = st.lists(st.one_of(st.tuples(st.integers(1, 9), st.integers(1, 12)),
                                  st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 3))),
                        min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(shapes=layer_shapes, levels=st.sampled_from([1, 2, 3, 50, 0]), ratio=st.sampled_from([0.0, 0.1, 0.5, 0.9, 0.97]),
       dtype=st.sampled_from([np.float32, np.float64]), criterion=st.sampled_from(["magnitude", "wanda"]),
       limits=st.sampled_from([(0.98, 0.0), (0.5, 0.0), (0.98, 0.4), (0.6, 0.3)]), with_pre=st.booleans(),
       exact=st.booleans(), scope=st.sampled_from(["global", "local"]), seed=st.integers(0, 2**16))
def test_streamed_masks_equal_the_full_path(shapes, levels, ratio, dtype, criterion, limits, with_pre, exact, scope,
                                            seed):
    """Ties (levels 1-3: many equal scores; 0: continuous), -0.0, infinities, earlier masks, per-layer clamps,
    >2-D tie order, float32 and float64, threads 1, 2, 4, bracket or exact value: the full path's masks."""
    rng = np.random.default_rng(seed)
    weights = {}
    for i, s in enumerate(shapes):
        w = rng.standard_normal(s) if levels == 0 else rng.integers(-levels + 1, levels, size=s) * 0.5
        w = w.astype(dtype)
        w.flat[:: 7] = -0.0
        if levels == 2:
            w.flat[:: 5] = np.inf
        weights[f"l{i}.weight"] = w
    acts = {n: (rng.integers(1, 3, size=(w.shape[1],) + (1,) * (w.ndim - 2))).astype(dtype) for n, w in weights.items()}
    pre = {n: rng.random(w.shape) < 0.8 for n, w in weights.items()} if with_pre else None
    want = None
    with tiny_work(exact):
        for threads in (1, 2, 4):
            eng = _engine(criterion, threads, *limits, scope=scope)
            if want is None:
                scores = eng.criterion_scores(weights, acts)
                want = eng.masks_at_sparsity(weights, ratio, pre, scores=scores, activations=acts)
            got = eng.masks_at_sparsity(weights, ratio, pre, activations=acts)
            assert list(got) == list(want)
            for n in weights:
                np.testing.assert_array_equal(got[n], want[n])


def test_literal_masks_ties_to_the_earlier_layer_then_index():
    """Eight equal scores, prune 5: ``a`` first, held at its cap (3 of 4 at 98%), then the first two of ``b``;
    and ties in a 3-D layer's 2-D-view order."""
    w = {"a": np.ones((2, 2), np.float32), "b": np.ones((2, 2), np.float32)}
    masks = streamed_global_masks(get_pattern({"pruning_scope": "global"}), get_criterion("magnitude"), None,
                                  {n: {"weight": v} for n, v in w.items()}, None, 5 / 8)
    assert {n: m.astype(int).tolist() for n, m in masks.items()} == {"a": [[0, 0], [0, 1]], "b": [[0, 0], [1, 1]]}
    cut = StreamedCut([lambda r, out: np.zeros((2, 2, 2))[r].reshape(-1)], [(2, 2, 2)], ["c"], np.dtype(float), [(0, 2, 1)])
    assert cut.counts(3) == [3]
    assert cut.keeps()[0].astype(int).tolist() == [[[0, 0], [0, 1]], [[1, 1], [1, 1]]]   # column by column


@pytest.mark.parametrize("scope", ["global", "local"])
def test_nan_raises_the_full_paths_error_naming_the_layer(scope):
    w = {"a": np.ones((4, 4), np.float32), "b": np.ones((4, 4), np.float32)}
    w["b"][1, 2] = np.nan
    with pytest.raises(ValueError, match="layer 'b': scores contain NaN"):
        _engine("magnitude", 2, scope=scope).masks_at_sparsity(w, 0.5)


def test_only_global_element_units_with_row_separable_criteria_stream():
    mag, snip = get_criterion("magnitude"), get_criterion("snip")
    assert can_stream_global(get_pattern({"pruning_scope": "global"}), mag) is True
    assert can_stream_global(get_pattern({"pruning_scope": "local"}), mag) is False
    assert can_stream_global(get_pattern({"pattern": "2:4", "pruning_scope": "global"}), mag) is False
    assert can_stream_global(get_pattern({"pruning_scope": "global"}), snip) is False
    assert can_stream_local(get_pattern("1x1"), mag) is True
    assert can_stream_local(get_pattern({"pattern": "1x1", "pruning_scope": "row"}), mag) is False


def test_peak_extra_memory_is_well_under_the_weights():
    """Eight 512x512 float32 layers (8 MiB): the streamed update allocates the masks (2 MiB) and a chunk's scores
    and flags per thread (5 bytes per element of a chunk); the full path holds every layer's scores as well (8 MiB
    more)."""
    rng = np.random.default_rng(0)
    weights = {f"l{i}": rng.standard_normal((512, 512), dtype=np.float32) for i in range(8)}
    nbytes = sum(w.nbytes for w in weights.values())
    eng = _engine("magnitude", 2)
    eng.masks_at_sparsity({"x": weights["l0"][:64]}, 0.9)            # thread pools, first-call costs
    peaks = []
    for streamed in (True, False):
        tracemalloc.start()
        if streamed:
            masks = eng.masks_at_sparsity(weights, 0.9)
        else:
            masks = eng.masks_at_sparsity(weights, 0.9, scores=eng.criterion_scores(weights))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert sum(int(m.sum()) for m in masks.values()) == 209715      # 10% of 2,097,152 kept, rounded down
    per_thread = kernel.SCORED_CHUNK * 5
    assert peaks[0] < nbytes // 4 + 2 * per_thread + (1 << 20) and peaks[1] > nbytes   # measured: 0.62x, 1.37x
