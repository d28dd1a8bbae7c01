"""The LM benchmark's headline figure: validation bits per character against sparsity.

Two panels, each with what a reader compares: our default, our best method and the peers, dense as a dotted
line (lower is better; error bars: std over seeds).

* **one-shot** on the trained dense model at 50-70% and 2:4: magnitude (our default criterion), SparseGPT
  (our best; at 2:4 after the activation-aware permutation) and llm-compressor's SparseGPT and Wanda;
* **gradual** pruning while training: our default, our best gradual arm (the lowest mean bits per character
  at the sparsest target where it ran), torch.ao's WeightNormSparsifier and tfmot (tf-keras).

Example:
    >>> runs = [{"seed": s, "arm": a, "setting": t, "bpc": b + 0.01 * s} for s in range(2)
    ...         for a, t, b in (("gradual/default", "90", 2.0), ("gradual/sr_ste", "90", 1.9),
    ...                         ("gradual/erk_wanda", "90", 2.1), ("gradual/torch.ao", "90", 2.0))]
    >>> best_gradual_arm(runs)
    'gradual/sr_ste'
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["plot", "best_gradual_arm", "FIGURE"]

FIGURE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "img",
                      "lm_bpc_vs_sparsity.png")
ONESHOT_X = {"50": 50.0, "60": 60.0, "70": 70.0, "2:4": 80.0}       # 2:4 drawn at its own tick
GRADUAL_X = {"50": 50.0, "80": 80.0, "90": 90.0, "2:4": 100.0}
GRADUAL_PEER = "gradual/torch.ao"
KERAS_PEER = "tfkeras/gradual/tfmot"


def _stats(runs: list[dict], arm: str, setting: str) -> tuple[float, float] | None:
    vals = [r["bpc"] for r in runs if r["arm"] == arm and r["setting"] == setting]
    if not vals:
        return None
    return float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0


def best_gradual_arm(runs: list[dict]) -> str | None:
    """Our gradual arm (not the default, not the peer) with the lowest mean at the sparsest unstructured
    target where any of them ran; None if there is none."""
    ours = {r["arm"] for r in runs if r["arm"].startswith("gradual/")} - {"gradual/default", GRADUAL_PEER}
    targets = sorted({r["setting"] for r in runs if r["arm"] in ours and r["setting"].isdigit()}, key=float)
    if not targets:
        return None
    at = targets[-1]
    scored = {a: s[0] for a in ours if (s := _stats(runs, a, at)) is not None}
    return min(scored, key=lambda a: (scored[a], a))


def _line(ax, runs: list[dict], label: str, points: list[tuple[float, str, str]], peer: bool, marker: str,
          offset: float = 0.0) -> None:
    """Unstructured settings joined by a line, 2:4 (another kind of sparsity) a point apart in the same colour;
    ``offset`` shifts x so that equal values stay visible side by side."""
    joined: list[list[float]] = [[], [], []]
    alone: list[list[float]] = [[], [], []]
    for x, arm, setting in points:
        s = _stats(runs, arm, setting)
        if s is not None:
            for into, v in zip(alone if setting.startswith("2:4") else joined, (x + offset, *s)):
                into.append(v)
    style = {"marker": marker, "capsize": 3, "color": "black" if peer else None}
    drawn = None
    if joined[0]:
        drawn = ax.errorbar(*joined[:2], yerr=joined[2], label=label, linestyle="--" if peer else "-", **style)
    if alone[0]:
        color = drawn.lines[0].get_color() if drawn is not None else style.pop("color")
        style["color"] = color
        ax.errorbar(*alone[:2], yerr=alone[2], linestyle="none", label=None if drawn is not None else label, **style)


def _dense(ax, runs: list[dict]) -> None:
    s = _stats(runs, "dense", "0")
    if s is not None:
        ax.axhline(s[0], color="gray", linestyle=":", label="dense")


def _axes(ax, title: str, ticks: dict[str, float], used: set[str]) -> None:
    shown = {k: v for k, v in ticks.items() if k in used}
    ax.set_xticks(list(shown.values()), [k if k == "2:4" else f"{k}%" for k in shown])
    ax.set_title(title)
    ax.set_xlabel("sparsity")
    ax.set_ylabel("validation bits per character (lower is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot(data: dict[str, Any], path: str = FIGURE) -> bool:
    """Draw the figure into ``path``; False (nothing written) when the results hold no pruned runs."""
    runs = data["runs"]
    oneshot = [s for s in ONESHOT_X if any(r["setting"] == s and r["arm"] == "magnitude" for r in runs)]
    gradual = [s for s in GRADUAL_X if any(r["setting"] == s and r["arm"].startswith("gradual/") for r in runs)]
    if not oneshot and not gradual:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    _line(left, runs, "magnitude (our default)", [(ONESHOT_X[s], "magnitude", s) for s in oneshot], False, "o")
    _line(left, runs, "SparseGPT (ours; 2:4 after permutation)",
          [(ONESHOT_X[s], "sparsegpt", s if s != "2:4" else "2:4+aperm") for s in oneshot], False, "^")
    for arm, label, marker in (("llmc_sparsegpt", "llm-compressor SparseGPT", "s"),
                               ("llmc_wanda", "llm-compressor Wanda", "D")):
        _line(left, runs, label, [(ONESHOT_X[s], arm, s) for s in oneshot], True, marker)
    _dense(left, runs)
    _axes(left, "one-shot on the trained LM", ONESHOT_X, set(oneshot))
    best = best_gradual_arm(runs)
    _line(right, runs, "our default", [(GRADUAL_X[s], "gradual/default", s) for s in gradual], False, "o", -0.8)
    if best is not None:
        _line(right, runs, f"{best.split('/', 1)[1]} (our best)", [(GRADUAL_X[s], best, s) for s in gradual],
              False, "^")
    _line(right, runs, "torch.ao", [(GRADUAL_X[s], GRADUAL_PEER, s) for s in gradual], True, "s", 0.8)
    _line(right, runs, "tfmot (tf-keras)", [(GRADUAL_X[s], KERAS_PEER, s) for s in gradual], True, "D", 1.6)
    _dense(right, runs)
    _axes(right, "gradual, while training", GRADUAL_X, set(gradual))
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
