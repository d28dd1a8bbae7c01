"""Before and after: the same accuracy arms run again (after a change in the library), paired by seed.

Reads the older records from a git revision's ``bench/accuracy_runs.json`` and the current ones from the
working tree, and prints a Markdown table per (arm, setting): both means, the paired change and the
current arm against the framework's peer (all paired by seed; std over seeds, ddof=1).

Usage::

    python -m bench.accuracy.compare_runs aa4918c --framework torch --arms nonmonotone,rigl,set

Example:
    >>> old = [{"dataset": "d", "framework": "torch", "arm": a, "setting": "90", "seed": s, "accuracy": v}
    ...        for s in range(2) for a, v in (("rigl", 0.5), ("torch.ao", 0.4))]
    >>> new = [dict(r, accuracy=r["accuracy"] + 0.1 * (r["arm"] == "rigl")) for r in old]
    >>> print(compare(old, new, "d", "torch", ["rigl"]).splitlines()[2])
    | rigl | 90 | 0.5000 | 0.6000 | +0.1000 +- 0.0000 (2) | +0.2000 +- 0.0000 (2) |
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from .problems import PEER_ARMS
from .report import paired_difference

__all__ = ["compare", "main"]
RUNS = "bench/accuracy_runs.json"


def _by_seed(runs: list[dict[str, Any]], dataset: str, framework: str) -> dict[tuple[str, str], dict[int, float]]:
    out: dict[tuple[str, str], dict[int, float]] = {}
    for r in runs:
        if r["dataset"] == dataset and r["framework"] == framework and r.get("status", "ok") == "ok":
            out.setdefault((r["arm"], r["setting"]), {})[r["seed"]] = r["accuracy"]
    return out


def _cell(d: tuple[float, float, int]) -> str:
    return f"{d[0]:+.4f} +- {d[1]:.4f} ({d[2]})" if d[2] else ""


def compare(before: list[dict], after: list[dict], dataset: str, framework: str, arms: list[str]) -> str:
    """Markdown table: arm, setting, mean before, mean after, after - before and after - peer (paired)."""
    old, new = _by_seed(before, dataset, framework), _by_seed(after, dataset, framework)
    peer = next((p for p, fw in PEER_ARMS.items() if fw == framework), None)
    rows = ["| arm | setting | before | after | after - before | after - " + f"{peer} |", "|---|---|---|---|---|---|"]
    for arm, setting in sorted(k for k in new if k[0] in arms and k in old):
        a, b = new[(arm, setting)], old[(arm, setting)]
        seeds = sorted(set(a) & set(b))
        rows.append(f"| {arm} | {setting} | {np.mean([b[s] for s in seeds]):.4f} | {np.mean([a[s] for s in seeds]):.4f} | "
                    f"{_cell(paired_difference(a, b))} | {_cell(paired_difference(a, new.get((peer, setting), {})))} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("revision", help="git revision holding the older bench/accuracy_runs.json")
    p.add_argument("--framework", default="torch")
    p.add_argument("--dataset", default="mnist1d")
    p.add_argument("--arms", required=True, help="comma-separated arms")
    args = p.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    before = json.loads(subprocess.run(["git", "show", f"{args.revision}:{RUNS}"], cwd=root, check=True,
                                       capture_output=True, text=True).stdout)["runs"]
    after = json.loads((root / RUNS).read_text())["runs"]
    print(compare(before, after, args.dataset, args.framework, args.arms.split(",")))


if __name__ == "__main__":
    main()
