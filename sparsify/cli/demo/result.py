"""What ``sparsify demo`` measured and prints: per layer the target, the sparsity reached, kept / total weights and
whether the layer holds exactly the number of pruned units the core prescribes; totals and accuracy.

Example:
    >>> r = LayerResult("fc1", (2, 2), 0.5, 0.5, 2, 4, True)
    >>> DemoResult("torch", PruningConfig(), 10, 0.5, [r], 0.9, 0.8, 1.0, True).total
    (2, 4)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sparsify.config import PruningConfig
from sparsify.engine import PruningEngine
from sparsify.layout import to_2d

from .common import LAYERS, BackendRun
from .plan import CLASSIFIER

__all__ = ["SKIPPED", "LayerResult", "DemoResult", "demo_result", "format_result"]

#: The demo table's word for a layer the pattern does not fit (``skip_incompatible_layers``).
SKIPPED = "skipped"


@dataclass
class LayerResult:
    """One row of the demo's table."""

    name: str
    shape: tuple[int, ...]
    target: float | None          # None: left dense (pattern does not fit, excluded) or global scope
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
        ls = [r for r in self.layers if r.target is not None or r.note == "global scope"]
        return sum(r.kept for r in ls), sum(r.total for r in ls)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary."""
        kept, total = self.total
        return {"framework": self.framework, "config": self.config.to_dict(), "steps": self.steps,
                "target": self.target, "layers": [dict(asdict(r), shape=list(r.shape)) for r in self.layers],
                "total_kept": kept, "total_weights": total, "total_exact": self.total_exact,
                "dense_accuracy": self.dense_accuracy, "pruned_accuracy": self.pruned_accuracy,
                "seconds": self.seconds, "files": self.files, "notes": self.notes}


def _layer_results(cfg: PruningConfig, target: float, weights: dict[str, np.ndarray], pruned: list[str],
                   excluded_note: str) -> tuple[list[LayerResult], bool]:
    pat = cfg.pattern_obj()
    # the exact counts the core prescribes for these shapes at this target (scores all equal)
    pruned = [n for n in pruned if pat.fits(to_2d(weights[n]).shape) is None]    # skip_incompatible_layers
    dummy = {n: np.ones(weights[n].shape, np.float32) for n in pruned}
    expected = {n: int((~m).sum()) for n, m in pat.get_masks(dummy, target).items()} if dummy else {}
    rows = []
    for n in LAYERS:
        w = weights[n]
        kept = int(np.count_nonzero(w))
        pruned_count = w.size - kept
        if n not in pruned:
            reason = pat.fits(to_2d(w).shape)
            note = f"{SKIPPED}: {cfg.pattern} does not fit its 2-D view {to_2d(w).shape}, left dense" \
                if reason is not None \
                else (excluded_note if n == CLASSIFIER and excluded_note else "dense: not selected by op_names")
            rows.append(LayerResult(n, w.shape, None, pruned_count / w.size, kept, w.size, None, note))
        elif cfg.pruning_scope == "global":
            rows.append(LayerResult(n, w.shape, None, pruned_count / w.size, kept, w.size, None, "global scope"))
        else:
            rows.append(LayerResult(n, w.shape, expected[n] / w.size, pruned_count / w.size, kept, w.size,
                                    pruned_count == expected[n]))
    total_exact = sum(r.total - r.kept for r in rows if r.name in expected) == sum(expected.values())
    return rows, total_exact


def demo_result(framework: str, cfg: PruningConfig, steps: int, run: BackendRun, seconds: float,
                excluded_note: str, fit_note: str = "") -> DemoResult:
    """The result of a backend's run: per layer the target the core prescribes at the last step and what the
    run reached, and the notes under the table (a schedule ending after the last step, a large accuracy drop).

    Example:
        >>> cfg = PruningConfig(target_sparsity=0.5, start_step=0, end_step=10)
        >>> weights = {n: np.repeat([[0.0, 1.0]], size, axis=0) for n, size in (("fc1", 128), ("fc2", 64), ("out", 10))}
        >>> run = BackendRun(0.9, 0.85, weights, ["fc1", "fc2", "out"], final_step=10)
        >>> res = demo_result("torch", cfg, 10, run, 1.0, excluded_note="")
        >>> res.target, res.total, res.total_exact, res.notes
        (0.5, (202, 404), True, [])
    """
    target = PruningEngine(cfg).target_sparsity(run.final_step)
    rows, total_exact = _layer_results(cfg, target, run.weights, run.pruned, excluded_note)
    notes = ([fit_note] if fit_note else []) + list(run.extra)
    if cfg.end_step > run.final_step:
        notes.append(f"end_step {cfg.end_step} comes after the last training step ({run.final_step}); "
                     f"the target shown is the schedule's sparsity at step {run.final_step} "
                     "(--fit-schedule fits a config's schedule into --steps)")
    drop = run.dense_accuracy - run.pruned_accuracy
    if drop > 0.2:
        notes.append(f"pruning cost {100 * drop:.1f} points of accuracy: try a lower --sparsity, another pattern "
                     "or more --steps")
    return DemoResult(framework, cfg, steps, target, rows, run.dense_accuracy, run.pruned_accuracy, seconds,
                      total_exact, notes=notes)


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
        target = SKIPPED if r.note.startswith(SKIPPED) else _pct(r.target)
        rows.append((r.name, "x".join(map(str, r.shape)), target, _pct(r.achieved), f"{r.kept} / {r.total}",
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
    if any(r.target is None for r in res.layers):
        lines.append("total: over the pruned layers (the layers left dense are not counted)")
    lines.append(f"accuracy: dense {100 * res.dense_accuracy:.2f}%  ->  pruned {100 * res.pruned_accuracy:.2f}% "
                 f"(test set, {res.seconds:.1f} s of training)")
    lines += res.notes
    if res.files:
        lines.append("wrote: " + ", ".join(res.files))
    return "\n".join(lines)
