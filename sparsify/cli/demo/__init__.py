"""``sparsify demo``: train a small MLP on scikit-learn's digits, dense and with gradual pruning.

Three backends share one model (``64 -> 128 -> 64 -> 10``), data split and
schedule: ``"tf-graph"`` (``tf.compat.v1`` graph mode through
``sparsify_tf``), ``"keras"`` (``sparsify_tf.keras.PruningCallback``) and
``"torch"`` (``sparsify_torch.prune``). A backend imports its framework when
it runs, so ``sparsify demo --framework torch`` never loads TensorFlow.
``print(format_result(run_demo("torch", cfg, steps=100)))`` is what
``sparsify demo --framework torch --steps 100`` prints.

Example:
    >>> from sparsify.cli.demo import default_config
    >>> cfg = default_config(pattern="2:4", steps=100)
    >>> (cfg.target_sparsity, cfg.start_step, cfg.end_step, cfg.pruning_frequency)
    (0.5, 0, 66, 6)
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from sparsify.config import PruningConfig
from sparsify.engine import PruningEngine
from sparsify.layout import to_2d
from sparsify.patterns import PatternNInM, get_pattern

from ..plots import plot_layer_sparsity, plot_mask, plot_schedule
from . import keras_backend, tf_graph, torch_backend
from .common import LAYERS, BackendRun
from .data import load_digits_split

__all__ = ["FRAMEWORKS", "DEFAULT_STEPS", "default_config", "run_demo", "format_result", "DemoResult", "LayerResult"]

#: ``--framework`` name -> backend module (its ``train`` imports the framework when called).
FRAMEWORKS: dict[str, ModuleType] = {"tf-graph": tf_graph, "keras": keras_backend, "torch": torch_backend}
DEFAULT_STEPS = 300


def default_config(pattern: str = "1x1", sparsity: float | None = None, steps: int | None = None) -> PruningConfig:
    """The demo's schedule: gradual from step 0 to 2/3 of ``steps``, ten mask updates.

    ``sparsity`` defaults to 0.9, or to N/M for an ``"N:M"`` pattern (every
    group N:M). Layers the pattern does not fit (e.g. ``"4x1"`` on the
    10-class output layer) are left dense (``skip_incompatible_layers``).

    Example:
        >>> default_config(steps=300).to_dict()["end_step"], default_config("1:4").target_sparsity
        (200, 0.25)
    """
    steps = DEFAULT_STEPS if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if sparsity is None:
        pat = get_pattern(pattern)
        sparsity = min(0.9, pat.max_ratio) if isinstance(pat, PatternNInM) else 0.9
    end = max(1, (2 * steps) // 3)
    return PruningConfig(target_sparsity=sparsity, pattern=pattern, start_step=0, end_step=end,
                         pruning_frequency=max(1, end // 10), skip_incompatible_layers=True)


@dataclass
class LayerResult:
    """One row of the demo's table."""

    name: str
    shape: tuple[int, ...]
    target: float | None          # None: left dense (pattern does not fit) or global scope
    achieved: float
    kept: int
    total: int
    exact: bool | None            # pruned count == the core's exact count for the target (None: not checkable)
    note: str = ""


@dataclass
class DemoResult:
    """Everything the demo measured."""

    framework: str
    config: PruningConfig
    steps: int
    target: float
    layers: list[LayerResult]
    dense_accuracy: float
    pruned_accuracy: float
    seconds: float
    total_exact: bool
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> tuple[int, int]:
        """(kept, total) over the pruned layers."""
        ls = [r for r in self.layers if r.target is not None or self.config.pruning_scope == "global"]
        return sum(r.kept for r in ls), sum(r.total for r in ls)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary."""
        kept, total = self.total
        return {"framework": self.framework, "config": self.config.to_dict(), "steps": self.steps,
                "target": self.target, "layers": [dict(asdict(r), shape=list(r.shape)) for r in self.layers],
                "total_kept": kept, "total_weights": total, "total_exact": self.total_exact,
                "dense_accuracy": self.dense_accuracy, "pruned_accuracy": self.pruned_accuracy,
                "seconds": self.seconds, "files": self.files}


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="step", dynamic_ncols=True, leave=False, mininterval=0.5)


def _layer_results(cfg: PruningConfig, target: float, weights: dict[str, np.ndarray]) -> tuple[list[LayerResult], bool]:
    pat = cfg.pattern_obj()
    fits = {n: pat.fits(to_2d(w).shape) is None for n, w in weights.items()}
    # the exact counts the core prescribes for these shapes at this target (scores all equal)
    dummy = {n: np.ones(w.shape, np.float32) for n, w in weights.items() if fits[n]}
    expected = {n: int((~m).sum()) for n, m in pat.get_masks(dummy, target).items()} if dummy else {}
    rows = []
    for n in LAYERS:
        if n not in weights:
            continue
        w = weights[n]
        kept = int(np.count_nonzero(w))
        pruned = w.size - kept
        if not fits[n]:
            rows.append(LayerResult(n, w.shape, None, pruned / w.size, kept, w.size, None,
                                    f"dense: {cfg.pattern} does not fit its 2-D view {to_2d(w).shape}"))
        elif cfg.pruning_scope == "global":
            rows.append(LayerResult(n, w.shape, None, pruned / w.size, kept, w.size, None, "global scope"))
        else:
            rows.append(LayerResult(n, w.shape, expected[n] / w.size, pruned / w.size, kept, w.size,
                                    pruned == expected[n]))
    total_pruned = sum(r.total - r.kept for r in rows if r.name in expected)
    total_exact = total_pruned == sum(expected.values())
    return rows, total_exact


def run_demo(framework: str = "tf-graph", config: PruningConfig | dict | str | None = None, steps: int | None = None,
             out: str | os.PathLike | None = None, progress: bool = True, seed: int = 0) -> DemoResult:
    """Train dense, then prune, on the digits; optionally write model, config and plots to ``out``.

    Args:
        framework: ``"tf-graph"``, ``"keras"`` or ``"torch"``.
        config: pruning config (default :func:`default_config` for ``steps``).
        steps: training steps per phase (dense, then pruning); default 300.
        out: directory for ``config.yaml``, ``summary.json``, the pruned model and PNG plots.
        progress: show a tqdm progress bar (on stderr).
        seed: seed of the data split, batches and initialisation.

    Raises:
        ValueError: unknown framework, bad config or steps, a config whose layers do not fit.
        ImportError: the framework (or scikit-learn) is not installed.
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {tuple(FRAMEWORKS)}, got {framework!r}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    steps = DEFAULT_STEPS if steps is None else steps
    cfg = default_config(steps=steps) if config is None else PruningConfig.coerce(config)
    out_dir = None
    if out is not None:
        out_dir = Path(out)
        if out_dir.exists() and not out_dir.is_dir():
            raise ValueError(f"out {os.fspath(out)!r} exists and is not a directory")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    backend = FRAMEWORKS[framework]
    data = load_digits_split(seed)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with _progress(2 * steps, progress) as bar:
        run: BackendRun = backend.train(cfg, data, steps, seed, bar, out_dir)
    seconds = time.perf_counter() - t0
    target = PruningEngine(cfg).target_sparsity(run.final_step)
    rows, total_exact = _layer_results(cfg, target, run.weights)
    notes = list(run.extra)
    if cfg.end_step > run.final_step:
        notes.append(f"end_step {cfg.end_step} comes after the last training step ({run.final_step}); "
                     f"the target shown is the schedule's sparsity at step {run.final_step}")
    res = DemoResult(framework, cfg, steps, target, rows, run.dense_accuracy, run.pruned_accuracy, seconds,
                     total_exact, notes=notes)
    if out_dir is not None:
        res.files = _write_out(out_dir, res, run)
    return res


def _write_out(out: Path, res: DemoResult, run: BackendRun) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    files = []
    res.config.to_yaml(out / "config.yaml")
    files.append(str(out / "config.yaml"))
    files += run.files
    try:                                   # matplotlib is an optional extra
        plot_schedule(res.config, max(res.steps, res.config.end_step) + 1, path=out / "schedule.png")
        files.append(str(out / "schedule.png"))
        targets = {r.name: r.target for r in res.layers if r.target is not None}
        plot_layer_sparsity({r.name: r.achieved for r in res.layers}, targets or None,
                            path=out / "layer_sparsity.png",
                            title=f"{res.framework}: sparsity per layer ({res.config.pattern})")
        files.append(str(out / "layer_sparsity.png"))
        for name, w in run.weights.items():
            plot_mask(w != 0, name=name, path=out / f"mask_{name}.png")
            files.append(str(out / f"mask_{name}.png"))
    except ImportError as e:
        res.notes.append(f"plots skipped: {e}")
    with open(out / "summary.json", "w", encoding="utf-8") as fh:
        json.dump(res.to_dict() | {"files": files + [str(out / "summary.json")]}, fh, indent=2)
    files.append(str(out / "summary.json"))
    return files


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def format_result(res: DemoResult) -> str:
    """The demo's printed report: per-layer table, totals, accuracy, files.

    Example:
        >>> r = DemoResult("torch", PruningConfig(), 10, 0.5, [LayerResult("fc1", (2, 2), 0.5, 0.5, 2, 4, True)],
        ...                0.9, 0.8, 1.0, True)
        >>> print(format_result(r).splitlines()[4])
        fc1    2x2    50.00%    50.00%  2 / 4         yes
    """
    cfg = res.config
    head = (f"sparsify demo: {res.framework}, digits MLP 64-128-64-10, pattern {cfg.pattern}, "
            f"{cfg.pruning_scope} scope, {cfg.sparsity_decay_type} schedule to {100 * cfg.target_sparsity:g}% "
            f"(start_step {cfg.start_step}, end_step {cfg.end_step}, pruning_frequency {cfg.pruning_frequency}), "
            f"{res.steps} steps per phase")
    rows = [("layer", "shape", "target", "achieved", "kept / total", "exact")]
    for r in res.layers:
        rows.append((r.name, "x".join(map(str, r.shape)), _pct(r.target), _pct(r.achieved), f"{r.kept} / {r.total}",
                     "-" if r.exact is None else ("yes" if r.exact else "NO")))
    kept, total = res.total
    rows.append(("total", "", _pct(res.target) if cfg.pruning_scope == "global" else "",
                 _pct(1 - kept / total if total else 0.0), f"{kept} / {total}", "yes" if res.total_exact else "NO"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head, ""]
    for i, r in enumerate(rows):
        cells = [c.rjust(w) if j in (2, 3) else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
        if i == 0 or i == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    notes = [r for r in res.layers if r.note and r.target is None and r.note != "global scope"]
    for r in notes:
        lines.append(f"{r.name}: {r.note}")
    lines.append(f"accuracy: dense {100 * res.dense_accuracy:.2f}%  ->  pruned {100 * res.pruned_accuracy:.2f}% "
                 f"(test set, {res.seconds:.1f} s of training)")
    lines += res.notes
    if res.files:
        lines.append("wrote: " + ", ".join(res.files))
    return "\n".join(lines)
