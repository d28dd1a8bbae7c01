"""Plots of what pruning did: schedule curve, per-layer sparsity, mask heat-map.

Matplotlib is an optional extra (``pip install "sparsify-train[plot]"``) imported
only when a function here is called. The functions use matplotlib's
object-oriented API (no global ``pyplot`` state): each takes an optional
``ax`` to draw into and an optional ``path`` to save an image to (atomically:
a temporary file beside it, then renamed), and returns the figure. The
figure shows itself in Jupyter (it has a ``_repr_png_``), with or without
``pyplot`` or ``%matplotlib inline``.

Example:
    >>> from sparsify import PruningConfig
    >>> fig = plot_schedule(PruningConfig(end_step=100, pruning_frequency=10))
    >>> fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()
    ('step', 'sparsity (%)')
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from sparsify.config import PruningConfig
from sparsify.extras import install_command
from sparsify.layout import to_2d

__all__ = ["plot_schedule", "plot_layer_sparsity", "plot_mask", "schedule_points", "plot_path", "check_plot_path",
           "figure_class"]

_FIGURE_CLASS: Any = None
#: Most steps :func:`schedule_points` evaluates (one value per step, ~25 bytes each).
MAX_POINTS = 10_000_000


def figure_class() -> type:
    """A :class:`matplotlib.figure.Figure` that Jupyter displays as a PNG (``_repr_png_``), without pyplot.

    Example:
        >>> fig = figure_class()(figsize=(2, 1))
        >>> _ = fig.add_subplot().plot([0, 1])
        >>> fig._repr_png_()[:4]
        b'\x89PNG'
    """
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        try:
            from matplotlib.figure import Figure
        except ImportError:
            raise ImportError(f"plots need matplotlib: {install_command('plot')}") from None
        import io

        class SparsifyFigure(Figure):
            """A Figure that renders itself for IPython / Jupyter."""

            def _repr_png_(self) -> bytes:
                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=100)
                return buf.getvalue()

        _FIGURE_CLASS = SparsifyFigure
    return _FIGURE_CLASS


def _figure(ax: Any, figsize: tuple[float, float]):
    cls = figure_class()
    if ax is not None:
        return ax.figure, ax
    fig = cls(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def plot_path(path: str | os.PathLike, default_name: str = "plot.png") -> str:
    """The file a plot given ``path`` is written to: ``path/default_name`` for a directory, ``.png`` added
    when there is no suffix (matplotlib's own rule, made visible).

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> plot_path(d, "schedule.png") == os.path.join(d, "schedule.png"), plot_path("curve")
        (True, 'curve.png')
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        return os.path.join(p, default_name)
    return p if os.path.splitext(p)[1] else p + ".png"


def check_plot_path(path: str | os.PathLike) -> str:
    """Check that an image can be written to ``path`` (its directory exists, matplotlib knows its suffix).

    Returns the file written (``.png`` added when there is no suffix). Called
    before any work, so a bad ``--plot`` is refused before anything is printed.

    Raises:
        ValueError: ``path`` is a directory, its directory is missing, or its
            suffix is not an image format matplotlib writes.

    Example:
        >>> check_plot_path("curve"), check_plot_path("curve.svg")
        ('curve.png', 'curve.svg')
    """
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise ImportError(f"plots need matplotlib: {install_command('plot')}") from None
    p = os.fspath(path)
    if os.path.isdir(p):
        raise ValueError(f"path {p!r} is a directory; pass a file name (e.g. {os.path.join(p, 'plot.png')!r})")
    parent = os.path.dirname(p)
    if parent and not os.path.isdir(parent):
        raise ValueError(f"path {p!r}: directory {parent!r} does not exist")
    fmt = (os.path.splitext(p)[1][1:] or "png").lower()
    supported = FigureCanvasBase.get_supported_filetypes()
    if fmt not in supported:
        raise ValueError(f"path {p!r}: cannot write .{fmt} images; use one of {', '.join(sorted(supported))}")
    return p if os.path.splitext(p)[1] else p + ".png"


def _save(fig: Any, path: str | os.PathLike | None) -> None:
    if path is not None:
        from .atomic import atomic_path

        target = check_plot_path(path)
        with atomic_path(target) as tmp:
            fig.savefig(tmp, dpi=100, format=os.path.splitext(target)[1][1:].lower())


def schedule_points(config: PruningConfig | Mapping[str, Any] | str, steps: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, sparsity applied at each step, update-point flags)`` of a config.

    The applied sparsity is the schedule read at the last update point, i.e.
    the staircase the masks follow. ``steps`` defaults to 10% past ``end_step``.

    Example:
        >>> s, y, upd = schedule_points({"end_step": 4, "pruning_frequency": 2, "target_sparsity": 0.5})
        >>> s.tolist(), upd.tolist()
        ([0, 1, 2, 3, 4, 5], [True, False, True, False, True, False])
    """
    cfg = PruningConfig.coerce(config)
    sched = cfg.schedule()
    if steps is None:
        end = cfg.end_step if cfg.end_step >= 0 else cfg.start_step + 1000
        steps = max(end + max(1, (end - cfg.start_step) // 10), 1) + 1
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps <= 0:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if steps > MAX_POINTS:
        raise ValueError(f"steps {steps} is more than the {MAX_POINTS} steps a schedule is tabulated for "
                         "(one value per step); pass a smaller steps")
    s = np.arange(int(steps), dtype=np.int64)
    last = np.asarray(sched.last_update_step(s))
    applied = np.where(last >= 0, np.asarray(sched.sparsity(np.maximum(last, 0)), dtype=float), 0.0)
    if not cfg.leave_enabled and cfg.end_step >= 0:
        applied = np.where(s > cfg.end_step, 0.0, applied)
    return s, applied, np.asarray(sched.update_ready(s), dtype=bool)


def plot_schedule(config: PruningConfig | Mapping[str, Any] | str, steps: int | None = None, ax: Any = None,
                  path: str | os.PathLike | None = None):
    """Sparsity-vs-step curve of a config: the smooth schedule and the applied staircase.

    Example:
        >>> ax = plot_schedule({"end_step": 1000, "pruning_frequency": 100}).axes[0]
        >>> ax.get_title(), ax.lines[2].get_xdata().tolist()[:3]
        ('gradual schedule to 90% (1x1)', [0, 100, 200])
    """
    cfg = PruningConfig.coerce(config)
    s, applied, upd = schedule_points(cfg, steps)
    smooth = np.asarray(cfg.schedule().sparsity(s), dtype=float)
    fig, ax = _figure(ax, (6.0, 3.5))
    ax.plot(s, 100 * smooth, color="0.6", lw=1, label="schedule")
    ax.step(s, 100 * applied, where="post", lw=2, label="applied (mask updates)")
    ax.plot(s[upd], 100 * applied[upd], "o", ms=3, label="update points")
    ax.set_xlabel("step")
    ax.set_ylabel("sparsity (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"{cfg.sparsity_decay_type} schedule to {100 * cfg.target_sparsity:g}% ({cfg.pattern})")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    _save(fig, path)
    return fig


def plot_layer_sparsity(sparsity: Mapping[str, float], target: Mapping[str, float] | float | None = None,
                        ax: Any = None, path: str | os.PathLike | None = None, title: str = "sparsity per layer"):
    """Horizontal bar chart of each layer's achieved sparsity (and its target).

    Args:
        sparsity: layer name -> achieved sparsity in [0, 1].
        target: one target for every layer, or per-layer targets (drawn as ticks).

    Example:
        >>> ax = plot_layer_sparsity({"fc1": 0.9, "fc2": 0.5}, target=0.9).axes[0]
        >>> [round(float(bar.get_width()), 6) for bar in ax.patches]
        [90.0, 50.0]
    """
    if not sparsity:
        raise ValueError("sparsity must map at least one layer name to its sparsity, got an empty mapping")
    names = list(sparsity)
    vals = np.array([float(sparsity[n]) for n in names])
    fig, ax = _figure(ax, (6.0, 0.45 * len(names) + 1.2))
    y = np.arange(len(names))
    ax.barh(y, 100 * vals, color="tab:blue", label="achieved")
    for yi, v in zip(y, vals):
        ax.text(min(100 * v + 1, 88), yi, f"{100 * v:.1f}%", va="center", fontsize="small")
    if target is not None:
        tv = [float(target) if not isinstance(target, Mapping) else float(target.get(n, np.nan)) for n in names]
        ax.plot(100 * np.array(tv), y, "|", color="tab:red", ms=16, mew=2, label="target")
    ax.set_yticks(y, labels=names)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("sparsity (%)")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize="small")
    _save(fig, path)
    return fig


def plot_mask(mask: np.ndarray, name: str = "", ax: Any = None, path: str | os.PathLike | None = None,
              max_cells: int = 256):
    """Heat-map of the 2-D view of one canonical-layout mask (or weight: zero = pruned).

    Large views are shown as the fraction kept per cell of a coarse grid of at
    most ``max_cells`` x ``max_cells``.

    Example:
        >>> import numpy as np
        >>> plot_mask(np.eye(8, dtype=bool), name="fc1").axes[0].get_title()
        'fc1: mask 8x8 (2-D view), 87.5% pruned'
    """
    m = np.asarray(mask)
    if m.ndim == 0 or m.size == 0:
        raise ValueError(f"mask must be a non-empty array of rank >= 1, got shape {m.shape}")
    kept = to_2d(m != 0).astype(float)
    rows, cols = kept.shape
    fr, fc = -(-rows // max_cells), -(-cols // max_cells)
    if fr > 1 or fc > 1:
        pr, pc = (-rows) % fr, (-cols) % fc
        padded = np.pad(kept, ((0, pr), (0, pc)), constant_values=np.nan)
        kept = np.nanmean(padded.reshape(padded.shape[0] // fr, fr, padded.shape[1] // fc, fc), axis=(1, 3))
    fig, ax = _figure(ax, (6.0, max(2.0, min(6.0, 6.0 * kept.shape[0] / max(kept.shape[1], 1)) + 1.0)))
    im = ax.imshow(kept, cmap="gray_r", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    sparsity = 1.0 - float(np.count_nonzero(m)) / m.size
    ax.set_title(f"{name + ': ' if name else ''}mask {rows}x{cols} (2-D view), {100 * sparsity:.1f}% pruned")
    ax.set_xlabel("column of the 2-D view (kernel position x input channel)")
    ax.set_ylabel("output channel")
    fig.colorbar(im, ax=ax, label="kept")
    _save(fig, path)
    return fig

