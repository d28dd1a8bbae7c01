"""Tables and the accuracy-vs-sparsity plot of ``bench/bench_accuracy.py``, from its raw per-run records.

Example:
    >>> runs = [{"dataset": "digits", "framework": "torch", "arm": a, "setting": "90", "variant": "base",
    ...          "seed": s, "status": "ok", "accuracy": acc + 0.01 * s, "sparsity": 0.9, "seconds": 1.0}
    ...         for s in range(3) for a, acc in (("default", 0.9), ("torch.ao", 0.8))]
    >>> "+0.1000 +- 0.0000" in render_tables(runs)
    True
    >>> jax = [dict(r, framework="keras_jax", accuracy=r["accuracy"] + 0.002) for r in runs if r["arm"] == "default"]
    >>> print(render_frameworks(runs + jax).splitlines()[2])
    | digits | 90 | default | Keras 3 (JAX) - torch | +0.0020 +- 0.0000 (3) | 0.0000 | no | 0/3, masks n/a |
"""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Iterable

import numpy as np

from .problems import PEER_ARMS, PROBLEMS, SETTINGS, SPARSIFY_ARMS

__all__ = ["render_tables", "render_frameworks", "render_distillation", "render_timings", "plot", "headline_arms",
           "paired_difference"]


def _untaught(arm: str) -> str | None:
    """The arm whose config is ``arm``'s without its ``"distillation"`` key (``arm`` a teacher arm), else None."""
    config = SPARSIFY_ARMS.get(arm, {})
    if "distillation" not in config:
        return None
    rest = {k: v for k, v in config.items() if k != "distillation"}
    return next((a for a, c in SPARSIFY_ARMS.items() if c == rest), None)
FRAMEWORK_TITLES = {"torch": "torch", "tf_keras": "tf-keras", "keras_jax": "Keras 3 (JAX)"}


def _std(a: np.ndarray) -> float:
    return float(a.std(ddof=1)) if len(a) > 1 else 0.0


def paired_difference(arm: dict[int, float], peer: dict[int, float]) -> tuple[float, float, int]:
    """Mean and sample std of the per-seed differences ``arm - peer`` over the seeds both have, and their number."""
    seeds = sorted(set(arm) & set(peer))
    d = np.array([arm[s] - peer[s] for s in seeds])
    return (float(d.mean()), _std(d), len(seeds)) if len(d) else (float("nan"), float("nan"), 0)


def _index(runs: Iterable[dict[str, Any]]):
    """``{(dataset, framework, setting-or-variant, arm): {seed: record}}``."""
    out: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in runs:
        where = r["variant"] if r["arm"] == "dense" else r["setting"]
        out[(r["dataset"], r["framework"], where, r["arm"])][r["seed"]] = r
    return out


def _order(names: Iterable[str], ranking: list[str]) -> list[str]:
    return sorted(set(names), key=lambda n: (ranking.index(n) if n in ranking else len(ranking), n))


def render_tables(runs: list[dict[str, Any]]) -> str:
    """One markdown table per data set and framework: every arm at every setting, paired vs the best peer."""
    idx = _index(runs)
    blocks = []
    for dataset in _order({k[0] for k in idx}, list(PROBLEMS)):
        for fw in _order({k[1] for k in idx if k[0] == dataset}, list(FRAMEWORK_TITLES)):
            rows = [f"**{PROBLEMS[dataset].title}, {FRAMEWORK_TITLES.get(fw, fw)}**", "",
                    "| setting | arm | test accuracy (mean +- std) | n | final sparsity | vs best peer: paired "
                    "difference (mean +- std, pairs) | spread < difference |", "|---|---|---|---|---|---|---|"]
            settings = _order({k[2] for k in idx if k[:2] == (dataset, fw) and k[3] != "dense"}, list(SETTINGS))
            for name in settings:
                rows += _setting_rows(idx, dataset, fw, name, runs)
            blocks.append("\n".join(rows))
    return "\n\n".join(blocks)


def _setting_rows(idx, dataset: str, fw: str, name: str, runs) -> list[str]:
    arms = {k[3]: v for k, v in idx.items() if k[:3] == (dataset, fw, name)}
    variant = next((r["variant"] for v in arms.values() for r in v.values()), "base")
    dense = idx.get((dataset, fw, variant, "dense"))
    ok = {a: {s: r["accuracy"] for s, r in v.items() if r["status"] == "ok"} for a, v in arms.items()}
    peers = [a for a in ok if a in PEER_ARMS and ok[a]]
    best = max(peers, key=lambda a: np.mean(list(ok[a].values())), default=None)
    out = []
    if dense:
        acc = np.array([r["accuracy"] for r in dense.values()])
        out.append(f"| {name} | dense{'' if variant == 'base' else f' ({variant})'} | {acc.mean():.4f} +- "
                   f"{_std(acc):.4f} | {len(acc)} | 0 | | |")
    for arm in _order(arms, ["default"]):
        if not ok[arm]:
            reason = next(iter(arms[arm].values())).get("reason", "no successful run")
            out.append(f"| {name} | {arm} | n/a: {reason} | 0 | | | |")
            continue
        acc = np.array(list(ok[arm].values()))
        sp = np.mean([r["sparsity"] for r in arms[arm].values() if r["status"] == "ok"])
        diff, verdict = "", ""
        if best is not None and arm != best:
            m, sd, n = paired_difference(ok[arm], ok[best])
            wins = sum(ok[arm][k] > ok[best][k] for k in set(ok[arm]) & set(ok[best]))
            diff = f"{m:+.4f} +- {sd:.4f} vs {best} ({n})"
            if n >= 20:      # enough pairs for a standard error: SE = std / sqrt(n), and the seeds won
                diff += f", SE {sd / np.sqrt(n):.4f}, better on {wins}/{n}"
            verdict = ("yes" if sd < abs(m) else "no") if n > 1 else "n < 2"
        elif arm == best:
            diff = "(best peer)"
        elif fw not in PEER_ARMS.values():
            diff = "no peer arm in this framework (across frameworks: below)"
        else:
            diff = "no peer result at this setting"
        out.append(f"| {name} | {arm} | {acc.mean():.4f} +- {_std(acc):.4f} | {len(acc)} | {sp:.4f} | {diff} | "
                   f"{verdict} |")
    return out


def render_frameworks(runs: list[dict[str, Any]]) -> str:
    """Per data set, setting and arm run in several frameworks: the paired difference of each later framework
    minus each earlier one (``FRAMEWORK_TITLES`` order), whether it is within noise (|mean| < 2 SE), and on how
    many seeds the two are identical (test accuracy to 1e-6; masks where both records have a ``mask_digest``)."""
    idx = _index(runs)
    rows = ["| data set | setting | arm | frameworks | paired difference (mean +- std, pairs) | 2 SE | within noise "
            "| identical: accuracy, masks |", "|---|---|---|---|---|---|---|---|"]
    rank = lambda names, n: names.index(n) if n in names else len(names)  # noqa: E731
    groups = sorted({(k[0], k[2], k[3]) for k in idx}, key=lambda g: (
        rank(list(PROBLEMS), g[0]), g[2] != "dense", rank(list(SETTINGS), g[1]), g[1], g[2] != "default", g[2]))
    for dataset, where, arm in groups:
        fws = _order({k[1] for k in idx if (k[0], k[2], k[3]) == (dataset, where, arm)}, list(FRAMEWORK_TITLES))
        for j, later in enumerate(fws):
            for earlier in fws[:j]:
                a, b = idx[(dataset, later, where, arm)], idx[(dataset, earlier, where, arm)]
                ok_a = {s: r for s, r in a.items() if r["status"] == "ok"}
                ok_b = {s: r for s, r in b.items() if r["status"] == "ok"}
                m, sd, n = paired_difference({s: r["accuracy"] for s, r in ok_a.items()},
                                             {s: r["accuracy"] for s, r in ok_b.items()})
                if n == 0:
                    continue
                seeds = sorted(set(ok_a) & set(ok_b))
                same_acc = sum(abs(ok_a[s]["accuracy"] - ok_b[s]["accuracy"]) < 1e-6 for s in seeds)  # float32 torch
                digests = [s for s in seeds if ok_a[s].get("mask_digest") and ok_b[s].get("mask_digest")]
                same_mask = (f"{sum(ok_a[s]['mask_digest'] == ok_b[s]['mask_digest'] for s in digests)}/"
                             f"{len(digests)}" if digests else "n/a")
                se2 = 2 * sd / np.sqrt(n) if n > 1 else float("nan")
                noise = ("yes" if abs(m) < se2 else "no") if n > 1 else "n < 2"
                where_ = f"model {where}" if arm == "dense" else where
                rows.append(f"| {dataset} | {where_} | {arm} | {FRAMEWORK_TITLES.get(later, later)} - "
                            f"{FRAMEWORK_TITLES.get(earlier, earlier)} | {m:+.4f} +- {sd:.4f} ({n}) | {se2:.4f} | "
                            f"{noise} | {same_acc}/{n}, masks {same_mask} |")
    return "\n".join(rows) if len(rows) > 2 else ""


def render_distillation(runs: list[dict[str, Any]]) -> str:
    """Per data set, framework and setting: each teacher arm (a config with ``"distillation"``) against the arm of
    the same config without it, paired by seed; whether it is better by more than one standard error of the mean
    difference (SE = std / sqrt(n)).

    Example:
        >>> runs = [{"dataset": "digits", "framework": "torch", "arm": a, "setting": "95", "variant": "base",
        ...          "seed": s, "status": "ok", "accuracy": 0.9 + 0.01 * s * (a == "erk_wanda_kd")}
        ...         for s in range(3) for a in ("erk_wanda", "erk_wanda_kd")]
        >>> print(render_distillation(runs).splitlines()[2])
        | digits | torch | 95 | erk_wanda_kd - erk_wanda | +0.0100 +- 0.0100 (3) | 0.0058 | yes: by 0.0100 |
    """
    idx = _index(runs)
    rows = ["| data set | framework | setting | pair | paired difference (mean +- std, pairs) | SE | better by more "
            "than 1 SE |", "|---|---|---|---|---|---|---|"]

    def ok(recs: dict[int, dict]) -> dict[int, float]:
        return {s: r["accuracy"] for s, r in recs.items() if r["status"] == "ok"}

    for (dataset, fw, where, arm) in sorted(k for k in idx if _untaught(k[3])):
        untaught = _untaught(arm)
        base = idx.get((dataset, fw, where, untaught))
        if not base:
            continue
        m, sd, n = paired_difference(ok(idx[(dataset, fw, where, arm)]), ok(base))
        if n == 0:
            continue
        se = sd / np.sqrt(n) if n > 1 else float("nan")
        verdict = "n < 2" if n < 2 else (f"yes: by {m:.4f}" if m > se else
                                          f"no: {'worse' if m < 0 else 'better'} by {abs(m):.4f}")
        rows.append(f"| {dataset} | {FRAMEWORK_TITLES.get(fw, fw)} | {where} | {arm} - {untaught} | "
                    f"{m:+.4f} +- {sd:.4f} ({n}) | {se:.4f} | {verdict} |")
    return "\n".join(rows) if len(rows) > 2 else ""


def render_timings(runs: list[dict[str, Any]]) -> str:
    """Seconds per training run (single thread), median and range per data set, framework and arm."""
    groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in runs:
        if r["status"] == "ok":
            groups[(r["dataset"], r["framework"], r["arm"])].append((r["seconds"], r.get("cpu_seconds", np.nan)))
    rows = ["| data set | framework | arm | wall seconds per run (median, min-max) | CPU seconds (median) | runs |",
            "|---|---|---|---|---|---|"]
    for (ds, fw, arm), pairs in sorted(groups.items()):
        t, c = [p[0] for p in pairs], [p[1] for p in pairs]
        rows.append(f"| {ds} | {FRAMEWORK_TITLES.get(fw, fw)} | {arm} | {np.median(t):.1f} ({min(t):.1f}-"
                    f"{max(t):.1f}) | {np.median(c):.1f} | {len(t)} |")
    return "\n".join(rows)


def headline_arms(runs: list[dict[str, Any]], dataset: str, framework: str, min_seeds: int = 5) -> list[str]:
    """What a reader compares in one panel: our default, our best arm and the peers. The best arm has the highest
    mean accuracy at the sparsest unstructured setting where at least two of our arms ran ``min_seeds`` seeds.

    Example:
        >>> runs = [{"dataset": "d", "framework": "torch", "arm": a, "setting": "90", "variant": "base", "seed": s,
        ...          "status": "ok", "accuracy": acc} for s in range(5)
        ...         for a, acc in (("default", 0.7), ("erk", 0.75), ("wanda", 0.72), ("torch.ao", 0.7))]
        >>> headline_arms(runs, "d", "torch")
        ['default', 'erk', 'torch.ao']
    """
    idx = _index(runs)
    here = {k[2:]: v for k, v in idx.items() if k[:2] == (dataset, framework)}
    ours = {a for (_, a) in here if a not in PEER_ARMS and a not in ("dense", "default")}
    peers = sorted({a for (_, a) in here if a in PEER_ARMS})
    best = None
    for name in sorted((n for n, s in SETTINGS.items() if not s.structured), key=lambda n: -SETTINGS[n].target):
        means = {a: np.mean([r["accuracy"] for r in here[(name, a)].values() if r["status"] == "ok"])
                 for a in ours | {"default"} if len(here.get((name, a), {})) >= min_seeds}
        if len(means) >= 2:
            best = max((a for a in means if a != "default"), key=lambda a: (means[a], a), default=None)
            break
    return ["default"] * any(a == "default" for (_, a) in here) + [best] * (best is not None) + peers


def plot(runs: list[dict[str, Any]], path: str, datasets: Iterable[str] = ("mnist1d",)) -> bool:
    """Accuracy vs unstructured sparsity of our default, our best arm and the peers (:func:`headline_arms`;
    error bars: std over seeds), one panel per framework of each of ``datasets`` (by default MNIST-1D only:
    digits is saturated; every data set when none of them ran); dense as a dotted line. Returns False when there is nothing to plot."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    unstructured = [n for n, s in SETTINGS.items() if not s.structured]
    idx = _index(runs)
    chosen = {k[0] for k in idx if k[0] in set(datasets)} or {k[0] for k in idx}   # none of them: every data set
    panels = [(d, f) for d in _order(chosen, list(PROBLEMS))
              for f in _order({k[1] for k in idx if k[0] == d}, list(FRAMEWORK_TITLES))
              if any(k[:2] == (d, f) and k[2] in unstructured and k[3] != "dense" for k in idx)]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    colors = plt.get_cmap("tab10").colors
    for ax, (dataset, fw) in zip(axes[0], panels):
        arms = headline_arms(runs, dataset, fw)
        for i, arm in enumerate(arms):
            xs, ms, ss = [], [], []
            for name in unstructured:
                acc = [r["accuracy"] for r in idx.get((dataset, fw, name, arm), {}).values() if r["status"] == "ok"]
                if acc:
                    xs.append(100 * SETTINGS[name].target + 0.25 * (i - len(arms) / 2))
                    ms.append(np.mean(acc))
                    ss.append(_std(np.array(acc)))
            if xs:                          # peers black and dashed; our arms one colour and marker each
                peer = arm in PEER_ARMS
                label = arm if peer or arm == "default" else f"{arm} (our best)"
                ax.errorbar(xs, ms, yerr=ss, marker="s" if peer else "o^vD<>ph"[i % 8], capsize=3, label=label,
                            linestyle="--" if peer else "-", color="black" if peer else colors[i % len(colors)])
        dense = [r["accuracy"] for r in idx.get((dataset, fw, "base", "dense"), {}).values()]
        if dense:
            ax.axhline(np.mean(dense), color="gray", linestyle=":", label="dense")
        ticks = [100 * SETTINGS[n].target for n in unstructured]
        ax.set_xticks(ticks)
        ax.set_xlim(min(ticks) - 2.5, max(ticks) + 2.5)
        ax.set_title(f"{dataset}, {FRAMEWORK_TITLES.get(fw, fw)}")
        ax.set_xlabel("target sparsity (%)")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
