"""The LM runs' results file: one record per (seed, arm, setting), written atomically after each run.

Example:
    >>> data = {"runs": []}
    >>> record_run(data, 0, "keras/dense", "0", 1.8, {"seconds": 2.0})
    seed 0            keras/dense     0: 1.8000 bits/char, 2 s
    >>> record_run(data, 0, "keras/dense", "0", 1.7, {"seconds": 2.0})
    seed 0            keras/dense     0: 1.7000 bits/char, 2 s
    >>> [r["bpc"] for r in data["runs"]]
    [1.7]
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["record_run", "save_results"]


def record_run(data: dict, seed: int, arm: str, setting: str, bpc: float, info: dict) -> None:
    """Add (or replace) the run of ``(seed, arm, setting)`` in ``data["runs"]`` and print it."""
    data["runs"] = [r for r in data["runs"] if (r["seed"], r["arm"], r["setting"]) != (seed, arm, setting)]
    data["runs"].append({"seed": seed, "arm": arm, "setting": setting, "bpc": bpc, **info})
    print(f"seed {seed} {arm:>22} {setting:>5}: {bpc:.4f} bits/char, {info['seconds']:.0f} s", flush=True)


def save_results(path: str, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` (through a temporary file, so an interrupted write loses nothing)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)
