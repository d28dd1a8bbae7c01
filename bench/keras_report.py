"""The report of ``bench/bench_keras.py``: one table per model and the issue's speed targets.

Example:
    >>> verdicts({}, [])
    'Targets (medians over seeds): .'
"""
from __future__ import annotations

import numpy as np

FREQS = (1, 10, 100)                # pruning frequencies each benchmark case runs at
MODELS = {
    "dense": {"title": "Dense 64-128-10", "batch": 64, "target": 0.8, "epochs": 12},
    "cnn": {"title": "CNN conv(32)-conv(64)-pool-fc(128)-fc(10)", "batch": 32, "target": 0.9, "epochs": 7},
}

__all__ = ["table", "verdicts"]


def table(arch: str, results: dict, cases, seeds: int) -> str:
    spec = MODELS[arch]
    rows = [f"**{spec['title']}** (batch {spec['batch']}, target {spec['target']:.0%})", "",
            "| Keras | method | pruning_frequency | step (ms) | vs dense (spread) | CPU vs dense | test accuracy "
            "| final sparsity | kernels == tfmot | step traces / steps per run |", "|---|---|---|---|---|---|---|---|---|---|"]
    names = {"dense": "dense", "ours": "sparsify PruningCallback", "tfmot": "tfmot prune_low_magnitude"}
    for key in cases:
        kind, freq, label, _ = key
        rs = results.get(key)
        if not rs:
            rows.append(f"| {label} | {names[kind]} | {freq or '-'} | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        dense = results[("dense", None, label, key[3])]
        rw = np.array([r["wall"] for r in rs]) / np.array([d["wall"] for d in dense])
        rc = np.array([r["cpu"] for r in rs]) / np.array([d["cpu"] for d in dense])
        acc = np.array([r["acc"] for r in rs])
        same = [r["same_as_tfmot"] for r in rs if "same_as_tfmot" in r]
        same_txt = (f"{sum(same)}/{len(same)} seeds" if same else "-")
        traces = [r.get("traces") for r in rs if r.get("traces") is not None]
        trace_txt = f"{max(traces)} / {rs[0]['steps']}" if traces else "-"
        rows.append(f"| {label} | {names[kind]} | {freq or '-'} | {1e3 * np.median([r['wall'] for r in rs]):.3f} | "
                    f"{np.median(rw):.3f}x ({rw.min():.2f}-{rw.max():.2f}) | {np.median(rc):.3f}x | "
                    f"{acc.mean():.4f} +- {acc.std():.4f} | {np.mean([r['sparsity'] for r in rs]):.4f} | {same_txt} | "
                    f"{trace_txt} |")
    rows += ["", verdicts(results, cases)]
    return "\n".join(rows)


def verdicts(results: dict, cases) -> str:
    """The issue's targets, from the medians: <= 1.05x dense at frequency >= 10, never slower than tfmot."""
    def ratio(key):
        rs, dense = results.get(key), results.get(("dense", None, key[2], key[3]))
        if not rs or not dense:
            return None
        return float(np.median(np.array([r["wall"] for r in rs]) / np.array([d["wall"] for d in dense])))

    out = []
    for label, K in dict.fromkeys((c[2], c[3]) for c in cases):
        worst = [ratio(("ours", f, label, K)) for f in FREQS if f >= 10]
        worst = [w for w in worst if w is not None]
        if worst:
            out.append(f"{label}: <= 1.05x dense at pruning_frequency >= 10: worst {max(worst):.3f}x "
                       f"({'met' if max(worst) <= 1.05 else 'not met'})")
        versus = [(f, ratio(("ours", f, label, K)), ratio(("tfmot", f, label, K))) for f in FREQS]
        versus = [(f, a, b) for f, a, b in versus if a is not None and b is not None]
        if versus:
            out.append(f"{label}: not slower than tfmot: " + ", ".join(
                f"frequency {f} {a:.3f}x vs {b:.3f}x ({'met' if a <= b else 'not met'})" for f, a, b in versus))
    return "Targets (medians over seeds): " + "; ".join(out) + "."
