"""The LM benchmark's tables: bits per character per arm and setting, mean ± std over seeds.

Example:
    >>> runs = [{"seed": s, "arm": a, "setting": "50", "bpc": b} for s, a, b in
    ...         [(0, "sparsegpt", 2.0), (1, "sparsegpt", 2.1), (0, "llmc_sparsegpt", 2.1), (1, "llmc_sparsegpt", 2.3)]]
    >>> print(paired_line(runs, "sparsegpt", "llmc_sparsegpt", "50"))
    | sparsegpt - llmc_sparsegpt | 50 | -0.1500 ± 0.0707 | 2/2 |
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["render", "paired_line", "ARM_ORDER"]

ARM_ORDER = ("dense", "magnitude", "wanda", "sparsegpt", "llmc_wanda", "llmc_sparsegpt")
SETTING_ORDER = ("0", "50", "60", "70", "2:4", "2:4+perm")


def _values(runs: list[dict], arm: str, setting: str) -> dict[int, float]:
    return {r["seed"]: r["bpc"] for r in runs if r["arm"] == arm and r["setting"] == setting}


def _cell(values: list[float]) -> str:
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}"


def _main_table(runs: list[dict]) -> str:
    settings = [s for s in SETTING_ORDER if any(r["setting"] == s for r in runs)]
    arms = [a for a in ARM_ORDER if any(r["arm"] == a for r in runs)]
    lines = ["| arm | " + " | ".join("dense" if s == "0" else (s + "%" if s.isdigit() else s) for s in settings) + " |",
             "|---" * (len(settings) + 1) + "|"]
    for arm in arms:
        cells = [_cell(list(_values(runs, arm, s).values())) for s in settings]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_line(runs: list[dict], a: str, b: str, setting: str) -> str | None:
    """``| a - b | setting | mean ± std of the per-seed difference | seeds where a is better/seeds |``."""
    va, vb = _values(runs, a, setting), _values(runs, b, setting)
    seeds = sorted(set(va) & set(vb))
    if not seeds:
        return None
    d = np.array([va[s] - vb[s] for s in seeds])
    std = float(np.std(d, ddof=1)) if len(d) > 1 else float("nan")
    return f"| {a} - {b} | {setting} | {d.mean():+.4f} ± {std:.4f} | {int((d < 0).sum())}/{len(d)} |"


def _ppl_table(runs: list[dict]) -> str:
    """Our SparseGPT against llm-compressor's, as per-character perplexity ``2 ** bpc`` (mean over seeds)."""
    lines = ["| setting | ours: sparsegpt | llm-compressor: sparsegpt | ratio | ours best | llm-compressor best |",
             "|---|---|---|---|---|---|"]
    for setting, ours_best in (("50", ("sparsegpt", "wanda", "magnitude")),
                               ("2:4", ("sparsegpt", "wanda", "magnitude"))):
        peer = _values(runs, "llmc_sparsegpt", setting)
        if not peer:
            continue
        ours = _values(runs, "sparsegpt", setting)
        seeds = sorted(set(ours) & set(peer))
        p_ours = float(np.mean([2 ** ours[s] for s in seeds]))
        p_peer = float(np.mean([2 ** peer[s] for s in seeds]))
        cand = [(float(np.mean([2 ** v for v in _values(runs, a, st).values()])), f"{a} {st}")
                for a in ours_best for st in ((setting, setting + "+perm") if setting == "2:4" else (setting,))
                if _values(runs, a, st)]
        peers = [(float(np.mean([2 ** v for v in _values(runs, a, setting).values()])), a)
                 for a in ("llmc_sparsegpt", "llmc_wanda") if _values(runs, a, setting)]
        best, pbest = min(cand), min(peers)
        lines.append(f"| {setting} | {p_ours:.4f} | {p_peer:.4f} | {p_ours / p_peer:.4f} | "
                     f"{best[0]:.4f} ({best[1]}) | {pbest[0]:.4f} ({pbest[1]}) |")
    return "\n".join(lines)


def render(data: dict[str, Any]) -> str:
    """Markdown for the ``bench_lm`` section of bench/RESULTS.md."""
    runs = data["runs"]
    seeds = sorted({r["seed"] for r in runs})
    corpus, model, train = data["corpus"], data["model"], data["train"]
    secs = [d["seconds"] for d in data["dense"].values()]
    parts = [
        f"Character-level GPT-2-shaped transformer ({model['n_layers']} layers, d_model {model['d_model']}, "
        f"{model['n_heads']} heads, context {model['context']}, vocab {corpus['vocab']}) on CPython "
        f"{corpus['python']}'s `pydoc_data/topics.py` ({corpus['characters']:,} characters, sha256 "
        f"`{corpus['sha256'][:16]}…`), last 10% held out. Dense training: {train['steps']} steps of "
        f"{train['batch_size']} x {model['context']} characters, 1 CPU thread, "
        f"{np.mean(secs):.0f} s per run (torch {data['torch']}). One-shot on the trained model with "
        f"{data['calibration_windows']} calibration windows of the training text; the blocks' linear weights "
        f"are pruned (not embeddings or the tied head). Validation bits per character, mean ± std over "
        f"seeds {seeds} (lower is better).",
        _main_table(runs),
    ]
    pairs = [paired_line(runs, a, b, s) for a, b, s in
             (("sparsegpt", "wanda", "50"), ("sparsegpt", "wanda", "2:4"), ("sparsegpt", "llmc_sparsegpt", "50"),
              ("sparsegpt", "llmc_sparsegpt", "2:4"), ("wanda", "llmc_wanda", "50"), ("wanda", "llmc_wanda", "2:4"),
              ("sparsegpt", "sparsegpt", "2:4+perm"))]
    pairs = [p for p in pairs if p and "sparsegpt - sparsegpt" not in p]
    perm = paired_line([{**r, "arm": r["arm"] + ("+perm" if r["setting"] == "2:4+perm" else ""),
                         "setting": "2:4" if r["setting"].startswith("2:4") else r["setting"]} for r in runs],
                       "sparsegpt+perm", "sparsegpt", "2:4")
    if perm:
        pairs.append(perm)
    if pairs:
        parts.append("Paired differences (bits/char, per seed; negative: the first is better):\n\n"
                     "| pair | setting | mean ± std | first better |\n|---|---|---|---|\n" + "\n".join(pairs))
    if any(r["arm"].startswith("llmc_") for r in runs):
        parts.append(f"Against llm-compressor ({data.get('peer_versions', '')}), per-character perplexity "
                     f"`2 ** bpc`, mean over seeds:\n\n" + _ppl_table(runs))
    if data.get("peer_error"):
        err = data["peer_error"]
        parts.append("llm-compressor could not run:\n\n```text\n" + err["command"] + "\n" + "\n".join(err["error"])
                     + "\n```")
    return "\n\n".join(parts)
