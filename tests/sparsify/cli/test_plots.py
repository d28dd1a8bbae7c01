"""`sparsify.cli.plots`: the data each plot draws, and the PNGs it writes."""
from __future__ import annotations

import numpy as np
import pytest

from sparsify import PruningConfig
from sparsify.cli.plots import plot_layer_sparsity, plot_mask, plot_schedule, schedule_points

PNG = b"\x89PNG\r\n\x1a\n"


def test_schedule_points_staircase():
    s, applied, upd = schedule_points({"target_sparsity": 0.5, "end_step": 4, "pruning_frequency": 2}, steps=7)
    assert s.tolist() == list(range(7))
    # held at the last update point: 0 until step 2, 43.75% until step 4, then 50%
    assert applied.tolist() == [0.0, 0.0, 0.4375, 0.4375, 0.5, 0.5, 0.5]
    assert upd.tolist() == [True, False, True, False, True, False, False]
    # leave_enabled=False: no masking after end_step
    _, off, _ = schedule_points({"target_sparsity": 0.5, "end_step": 4, "pruning_frequency": 2,
                                 "leave_enabled": False}, steps=6)
    assert off.tolist() == [0.0, 0.0, 0.4375, 0.4375, 0.5, 0.0]
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        schedule_points({}, steps=0)


def test_plot_schedule(tmp_path):
    cfg = PruningConfig(target_sparsity=0.8, start_step=10, end_step=50, pruning_frequency=10)
    fig = plot_schedule(cfg, path=tmp_path / "s.png")
    ax = fig.axes[0]
    smooth, applied, points = ax.lines
    assert applied.get_label() == "applied (mask updates)"
    assert points.get_xdata().tolist() == [10, 20, 30, 40, 50]
    assert points.get_ydata()[-1] == pytest.approx(80.0)
    assert "80%" in ax.get_title()
    assert (tmp_path / "s.png").read_bytes()[:8] == PNG


def test_plot_layer_sparsity(tmp_path):
    fig = plot_layer_sparsity({"fc1": 0.9, "fc2": 0.5}, target={"fc1": 0.9, "fc2": 0.5}, path=tmp_path / "b.png")
    ax = fig.axes[0]
    assert [p.get_width() for p in ax.patches] == pytest.approx([90.0, 50.0])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["fc1", "fc2"]
    assert ax.lines[0].get_xdata().tolist() == pytest.approx([90.0, 50.0])
    assert (tmp_path / "b.png").read_bytes()[:8] == PNG
    with pytest.raises(ValueError, match="at least one layer"):
        plot_layer_sparsity({})


def test_plot_mask_shows_the_2d_view(tmp_path):
    mask = np.zeros((2, 3, 1, 2), dtype=bool)        # canonical conv (out, in, kh, kw)
    mask[0, 1, 0, 1] = True                          # 2-D view column = kw * in + in_idx = 1 * 3 + 1 = 4
    fig = plot_mask(mask, name="conv", path=tmp_path / "m.png")
    img = fig.axes[0].images[0].get_array()
    expected = np.zeros((2, 6)); expected[0, 4] = 1.0
    assert np.array_equal(np.asarray(img), expected)
    assert "conv: mask 2x6" in fig.axes[0].get_title() and "91.7% pruned" in fig.axes[0].get_title()
    assert (tmp_path / "m.png").read_bytes()[:8] == PNG


def test_plot_mask_coarse_grid_for_large_views():
    w = np.ones((8, 8)); w[:4, :4] = 0.0; w[4:, 4:5] = 0.0   # weights: zero = pruned
    img = np.asarray(plot_mask(w, max_cells=2).axes[0].images[0].get_array())
    assert img.tolist() == [[0.0, 1.0], [1.0, 0.75]]
    with pytest.raises(ValueError, match="non-empty array"):
        plot_mask(np.zeros(()))


def test_plot_into_given_axes(tmp_path):
    from matplotlib.figure import Figure

    fig = Figure()
    a, b = fig.subplots(1, 2)
    assert plot_schedule({"end_step": 10}, ax=a) is fig
    assert plot_mask(np.eye(4), ax=b) is fig
    with pytest.raises(ValueError, match="does not exist"):
        plot_schedule({"end_step": 10}, path=tmp_path / "missing" / "s.png")
