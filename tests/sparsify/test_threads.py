"""Thread count of a mask update: its sources and checks, and masks identical for any count."""
import contextlib
import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify import PruningConfig, PruningEngine, get_pattern
from sparsify.criteria import get_criterion
from sparsify.selection.lowest_k import lowest_k_keep
from sparsify.selection.lowest_k_cut import LowestKCut
from sparsify.parallel_layers import BufferPool, layer_scores, map_layers
from sparsify.threads import (ENV_VAR, chunk_ranges, check_threads, current_threads, default_threads, parallel_map,
                              use_threads)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@contextlib.contextmanager
def tiny_work():
    """Every array takes the chunked, threaded paths: small chunks, no size threshold, no small-array shortcut."""
    with mock.patch("sparsify.selection.lowest_k._SMALL", 0), mock.patch("sparsify.selection.lowest_k._SMALL_ELIGIBLE", 0), \
            mock.patch.multiple("sparsify.selection.kernel", CHUNK=8, MIN_PARALLEL=0), \
            mock.patch.multiple("sparsify.selection.cut", _SAMPLE=8, _SAMPLE_MAX=32), \
            mock.patch("sparsify.parallel_layers.MIN_PARALLEL", 0), \
            mock.patch("sparsify.patterns.ninm.MIN_PARALLEL", 0):
        yield


# ----- where the count comes from, and its checks ------------------------------------------------------------------
def test_env_var_sets_the_default(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "3")
    assert default_threads() == 3 and current_threads() == 3
    assert PruningEngine({}).num_threads == 3
    assert PruningEngine({"num_threads": 2}).num_threads == 2          # the config wins
    with use_threads(1):
        assert current_threads() == 1
    assert current_threads() == 3


def test_default_is_the_cores_available(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert default_threads() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("raw", ["0", "-2", "two", "1.5"])
def test_bad_env_var_raises_naming_it(monkeypatch, raw):
    monkeypatch.setenv(ENV_VAR, raw)
    msg = ("environment variable SPARSIFY_NUM_THREADS must be an integer >= 1 (or unset: the cores available), "
           f"got '{raw}'")
    with pytest.raises(ValueError) as e:
        PruningEngine({})
    assert str(e.value) == msg


def test_config_key_is_checked():
    with pytest.raises(ValueError, match=r"num_threads must be an integer >= 1 \(or None: the cores available\), "
                                         r"got 0"):
        PruningConfig(num_threads=0)
    with pytest.raises(TypeError, match=r"num_threads must be an integer >= 1 .* got 2.0 \(float\)"):
        PruningConfig(num_threads=2.0)
    with pytest.raises(TypeError, match="got True"):
        check_threads(True)
    assert PruningConfig.from_dict({"num_threads": 4}).to_dict()["num_threads"] == 4


def test_chunk_ranges_literal():
    assert chunk_ranges(10, 3) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_ranges(100, 2, 32) == [(0, 64), (64, 100)]
    assert chunk_ranges(5, 8) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert chunk_ranges(0, 4) == [(0, 0)]


# ----- helpers: order of results and errors ------------------------------------------------------------------------
def test_map_layers_raises_for_the_first_layer_in_order():
    def fn(name):
        if name in ("b", "c"):
            raise ValueError(name)
        return name

    with mock.patch("sparsify.parallel_layers.MIN_PARALLEL", 0):
        with pytest.raises(ValueError, match="^b$"):
            map_layers(fn, {"a": 1, "b": 2, "c": 100}, threads=2)            # "c" is big and runs first
        assert map_layers(str.upper, {"x": 5, "y": 1, "z": 3}, threads=3) == {"x": "X", "y": "Y", "z": "Z"}


def test_parallel_map_runs_on_one_pool_for_the_process():
    """Many calls, no new thread per call: the caller and the process pool's threads, at most 3 per call."""
    import threading
    gate = threading.Barrier(3, timeout=10)

    def work(x):
        if x < 3:
            gate.wait()                                 # three items at once: three threads in every call
        return threading.current_thread()

    used = set()
    for _ in range(30):
        gate.reset()
        got = parallel_map(work, range(6), threads=3)
        assert len(set(got)) <= 3 and threading.current_thread() in got          # the caller works too
        used |= set(got)
    assert used <= set(threading.enumerate())          # every thread that worked lives on in the pool
    assert len(used) < 10                               # a pool per call would have started 60
    assert all(t is threading.current_thread() or t.name.startswith("sparsify") for t in used)


def test_parallel_map_inside_parallel_map_never_waits_on_a_busy_pool():
    # every pool thread busy with an outer item that itself maps: the callers drain their own items
    got = parallel_map(lambda x: parallel_map(lambda y: (x, y, current_threads()), range(4), threads=3),
                       range(6), threads=3, inner_threads=3)
    assert got == [[(x, y, 1) for y in range(4)] for x in range(6)]     # inner items: 1 thread each


def test_parallel_map_raises_the_first_failure_in_order():
    def fn(x):
        if x in (2, 5):
            raise ValueError(x)
        return x
    with pytest.raises(ValueError, match="^2$"):
        parallel_map(fn, range(8), threads=3)


def test_layer_scores_in_chunks_equal_the_whole():
    rng = np.random.default_rng(0)
    w8 = rng.integers(-128, 128, size=(37, 5), dtype=np.int8)
    w = rng.standard_normal((37, 6)).astype(np.float32)
    act = rng.random(6).astype(np.float32)
    with mock.patch("sparsify.parallel_layers.MIN_PARALLEL", 0), use_threads(3):
        mag = layer_scores(get_criterion("magnitude"), None, {"weight": w8})
        wanda = layer_scores(get_criterion("wanda"), None, {"weight": w, "activation": act[None, :]})
    assert mag.dtype == np.uint8 and mag[w8 == -128].tolist() == [128] * int((w8 == -128).sum())
    np.testing.assert_array_equal(mag, get_criterion("magnitude").scores(weight=w8))
    np.testing.assert_array_equal(wanda, np.abs(w) * act[None, :])



@pytest.mark.parametrize("threads", [1, 3])
def test_layer_scores_into_a_lent_buffer_equal_the_whole(threads):
    """Into ``out`` (row chunks on several threads): the same bits, and ``out`` itself; a dtype the criterion
    cannot write into ``out``: a new array of the criterion's dtype, ``out`` untouched."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((37, 6)).astype(np.float32)
    act = rng.random(6).astype(np.float32)
    pool = BufferPool()
    with mock.patch("sparsify.parallel_layers.MIN_PARALLEL", 0), use_threads(threads):
        out = pool.take(w.shape, np.float32)
        got = layer_scores(get_criterion("wanda"), None, {"weight": w, "activation": act[None, :]}, out)
        assert got is out
        np.testing.assert_array_equal(got, np.abs(w) * act[None, :])
        out64 = np.full(w.shape, 7.0)
        got = layer_scores(get_criterion("magnitude"), None, {"weight": w}, out64)
        assert got is not out64 and got.dtype == np.float32 and (out64 == 7.0).all()
        np.testing.assert_array_equal(got, np.abs(w))


def test_buffer_pool_lends_a_returned_buffer_again_only_when_it_fits():
    pool = BufferPool()
    a = pool.take((4, 4), np.float32)
    pool.give(a)
    b = pool.take((2, 3), np.float32)
    assert np.shares_memory(a, b) and b.shape == (2, 3) and b.flags.c_contiguous
    assert not np.shares_memory(pool.take((2, 3), np.float32), a)         # lent out: a new one
    pool.give(b)
    assert not np.shares_memory(pool.take((5, 5), np.float32), a)         # too small
    assert pool.take((2, 2), np.float64).dtype == np.float64


def test_local_update_with_lent_score_buffers_matches_the_full_path():
    """Local 2:4 and 4x1 with magnitude and Wanda (scores in lent buffers, layers on 2 threads, the largest
    first): the masks of scores passed in."""
    rng = np.random.default_rng(2)
    weights = {f"l{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate([(64, 32), (8, 16), (128, 64)])}
    acts = {n: rng.random(w.shape[1]).astype(np.float32) + 0.5 for n, w in weights.items()}
    with mock.patch("sparsify.parallel_layers.MIN_PARALLEL", 0), mock.patch("sparsify.threads.MIN_PARALLEL", 0):
        for pattern, ratio in (("2:4", 0.5), ("4x1", 0.75)):
            for crit in ("magnitude", "wanda"):
                eng = PruningEngine({"pattern": pattern, "criterion": crit, "num_threads": 2, "start_step": 0,
                                     "end_step": 0})
                want = eng.masks_at_sparsity(weights, ratio, scores=eng.criterion_scores(weights, acts),
                                             activations=acts)
                got = eng.masks_at_sparsity(weights, ratio, activations=acts)
                for n in weights:
                    np.testing.assert_array_equal(got[n], want[n])


# ----- masks bit-identical for 1, 2, 3 and 4 threads ---------------------------------------------------------------
shapes = st.lists(st.tuples(st.integers(1, 9), st.integers(1, 4).map(lambda m: 4 * m)), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(shapes=shapes, levels=st.integers(2, 50), ratio=st.sampled_from([0.1, 0.5, 0.75, 0.9]),
       seed=st.integers(0, 2**16))
def test_selection_is_the_same_for_any_thread_count(shapes, levels, ratio, seed):
    """Few distinct score values (many ties), local and global, with earlier masks and >2-D tie order."""
    rng = np.random.default_rng(seed)
    scores = {f"l{i}": rng.integers(0, levels, size=s).astype(np.float32) for i, s in enumerate(shapes)}
    pre = {n: rng.random(s.shape) < 0.8 for n, s in scores.items()}
    arrays = list(scores.values())
    total = sum(a.size for a in arrays)
    k = int(ratio * total)
    results = []
    with tiny_work():
        for threads in (1, 2, 3, 4):
            with use_threads(threads):
                a0 = arrays[0]
                out = [lowest_k_keep(a0, int(ratio * a0.size)),                 # 3-D, ties in a transposed order
                       lowest_k_keep(a0.reshape(a0.shape[0], -1, 2), int(ratio * a0.size), tie_axes=(0, 2, 1),
                                     eligible=pre["l0"].reshape(a0.shape[0], -1, 2))]
                cut = LowestKCut(arrays, list(scores), eligible=[pre[n] for n in scores])
                out.append(cut.counts(k))
                out += cut.keeps()
                for scope in ("local", "global"):
                    for pattern in ("1x1", "4x1", "2:4"):
                        p = get_pattern({"pattern": pattern, "pruning_scope": scope, "skip_incompatible_layers": True})
                        r = min(ratio, 0.5) if pattern == "2:4" else ratio
                        out += list(p.get_masks(scores, r, pre).values())
            results.append(out)
    for other in results[1:]:
        assert len(other) == len(results[0])
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@settings(max_examples=15, deadline=None)
@given(shapes=shapes, criterion=st.sampled_from(["magnitude", "wanda"]), scope=st.sampled_from(["local", "global"]),
       seed=st.integers(0, 2**16))
def test_engine_masks_are_the_same_for_any_thread_count(shapes, criterion, scope, seed):
    rng = np.random.default_rng(seed)
    weights = {f"l{i}.weight": (rng.integers(-3, 4, size=s) * 0.5).astype(np.float32) for i, s in enumerate(shapes)}
    acts = {n: rng.integers(1, 3, size=w.shape[1]).astype(np.float32) for n, w in weights.items()}
    pre = {n: rng.random(w.shape) < 0.9 for n, w in weights.items()}
    masks = []
    with tiny_work():
        for threads in (1, 2, 3, 4):
            eng = PruningEngine({"target_sparsity": 0.75, "start_step": 0, "end_step": 0, "pruning_scope": scope,
                                 "criterion": criterion, "num_threads": threads})
            masks.append(eng.masks_at_sparsity(weights, 0.75, pre, activations=acts))
    for other in masks[1:]:
        for n in weights:
            np.testing.assert_array_equal(masks[0][n], other[n])


def test_engine_literal_masks_with_ties_on_two_threads():
    """Ties go to the lower flat index whatever the threads: the first three zeros of each layer are pruned."""
    w = {"a": np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 2.0, 3.0, 0.0]], dtype=np.float32),
         "b": np.array([[5.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 4.0]], dtype=np.float32)}
    want = {"a": [[False, True, False, False], [True, True, True, True]],
            "b": [[True, False, False, False], [True, True, True, True]]}
    with tiny_work():
        for threads in (1, 2):
            eng = PruningEngine({"target_sparsity": 0.375, "start_step": 0, "end_step": 0, "num_threads": threads})
            assert {n: m.tolist() for n, m in eng.compute_masks(w, 0).items()} == want


def test_n_in_m_ranges_on_threads_agree_with_one_thread_with_infinities_and_nan():
    """2:4 ranks a large layer in ranges of whole chunks: +inf in one range and -inf in another still take
    the exact path, as one scan over the layer does; NaN still raises naming the layer."""
    rng = np.random.default_rng(3)
    s = rng.integers(0, 4, size=(4, 32)).astype(np.float64)
    s[0, 1], s[3, 30] = np.inf, -np.inf                           # first and last range
    p = get_pattern("2:4")
    with tiny_work():
        masks = []
        for threads in (1, 2, 3, 4):
            with use_threads(threads):
                masks.append([p.get_mask_single(s, r) for r in (0.25, 0.5)])
        for other in masks[1:]:
            for a, b in zip(masks[0], other):
                np.testing.assert_array_equal(a, b)
        assert masks[0][1].reshape(-1, 4).sum(axis=1).tolist() == [2] * 32      # 2 kept of every 4
        s[2, 5] = np.nan
        with use_threads(3), pytest.raises(ValueError, match="layer 'x': scores contain NaN"):
            p.get_mask_single(s, 0.5, name="x")
