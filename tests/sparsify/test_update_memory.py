"""An update too large for memory fails before it allocates, naming the layer, the bytes needed and available."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import sparsify.update_memory as um
from sparsify import PruningEngine
from sparsify.update_memory import available_memory, check_update_memory

HUGE = (1 << 20, 1 << 20)                     # 1,048,576 x 1,048,576: 1 TiB of masks


def huge_weight() -> np.ndarray:
    """A real 1M x 1M float32 array that holds one value (zero strides): no memory behind it."""
    return np.broadcast_to(np.float32(1.0), HUGE)


def test_a_fitting_update_passes_and_a_literal_one_does_not():
    check_update_memory({"fc": ((4, 4), 4)}, available=16)                 # 16 bytes of masks, 16 free
    with pytest.raises(MemoryError, match=r"^the mask update of layer 'fc' \(shape \(17,\)\) needs at least 17 bytes "
                                          r"\(17 bytes: masks 1 byte a weight\), but 16 bytes \(16 bytes\) of memory"):
        check_update_memory({"fc": ((17,), 4)}, available=16)


def test_several_layers_name_the_largest_and_the_scores_count_when_whole():
    with pytest.raises(MemoryError) as e:
        check_update_memory({"a": ((10, 10), 4), "b": ((20, 10), 4)}, scores_whole=True, available=500)
    msg = str(e.value)
    # masks 300 bytes + the largest layer's scores 200 * 4 = 1100 bytes
    assert "2 layers, the largest 'b' (shape (20, 10))" in msg and "(1100 bytes" in msg
    assert "scores 4 bytes a weight" in msg and "(500 bytes) of memory is available" in msg
    check_update_memory({"a": ((10, 10), 4), "b": ((20, 10), 4)}, scores_whole=False, available=500)


def test_engine_refuses_a_1m_by_1m_weight_before_allocating(monkeypatch):
    monkeypatch.setattr(um, "available_memory", lambda: 64 << 30)          # 64 GiB, whatever the machine
    eng = PruningEngine({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError) as e:
            eng.compute_masks({"model.huge.weight": huge_weight()}, step=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(e.value).startswith("the mask update of layer 'model.huge.weight' (shape (1048576, 1048576)) "
                                   "needs at least 1.00 TiB (1099511627776 bytes: masks 1 byte a weight), "
                                   "but 64.00 GiB (68719476736 bytes) of memory is available")
    assert peak < 1 << 20                                                   # nothing weight-sized was allocated


@pytest.mark.parametrize("config", [{"pruning_scope": "global"}, {"pattern": "4x1"}, {"pattern": "2:4"}])
def test_every_update_path_checks_with_the_real_memory_figure(config):
    """Global (streamed), blocks and N:M (scores whole): each fails with the message, on the machine's own
    figure (no machine here has 1 TiB free)."""
    eng = PruningEngine({"target_sparsity": 0.5, "start_step": 0, "end_step": 0, **config})
    with pytest.raises(MemoryError, match=r"layer 'w' \(shape \(1048576, 1048576\)\) needs at least .* of memory "
                                          r"is available"):
        eng.masks_at_sparsity({"w": huge_weight()}, 0.5)


def test_below_the_figure_the_masks_are_unchanged(monkeypatch):
    w = np.arange(16, dtype=np.float32).reshape(4, 4) - 7.5
    eng = PruningEngine({"target_sparsity": 0.5, "start_step": 0, "end_step": 0, "pattern": "2:4"})
    want = eng.compute_masks({"w": w}, step=0)["w"]
    monkeypatch.setattr(um, "_LOOK_FROM", 0)                                # look even at 80 bytes
    monkeypatch.setattr(um, "available_memory", lambda: 16 + 16 * 4)        # masks + the layer's scores: fits
    np.testing.assert_array_equal(eng.compute_masks({"w": w}, step=0)["w"], want)
    monkeypatch.setattr(um, "available_memory", lambda: 16 + 16 * 4 - 1)    # one byte short
    with pytest.raises(MemoryError, match=r"layer 'w' \(shape \(4, 4\)\) needs at least 80 bytes \(80 bytes: masks "
                                          r"1 byte a weight, and its scores 4 bytes a weight\), but 79 bytes"):
        eng.compute_masks({"w": w}, step=0)


def test_available_memory_reads_meminfo_and_the_cgroup_room(tmp_path, monkeypatch):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:  2000 kB\nMemAvailable:   1000 kB\n")
    limit, used = tmp_path / "memory.max", tmp_path / "memory.current"
    limit.write_text("max\n")
    used.write_text("5\n")
    monkeypatch.setattr(um, "_MEMINFO", str(info))
    monkeypatch.setattr(um, "_CGROUP", (str(limit), str(used)))
    assert available_memory() == 1024000                                   # no cgroup limit: MemAvailable
    limit.write_text("400005\n")
    assert available_memory() == 400000                                    # the cgroup's room is smaller
    assert isinstance(um._size(3 << 30), str) and um._size(3 << 30) == "3.00 GiB"
