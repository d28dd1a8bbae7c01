"""The LM runs' results file: one record per (seed, arm, setting), written atomically after each run; and the
command line the Keras runners (:mod:`bench.lm.keras_runs`, :mod:`bench.lm.tfkeras_runs`) share.

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

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from .._results import cpu_model

__all__ = ["record_run", "save_results", "run_arguments", "open_results"]


def run_arguments(argv: list[str] | None, description: str, arms: Sequence[str],
                  default_arms: Sequence[str]) -> argparse.Namespace:
    """The runners' command line: seeds, gradual targets (each checked), arms among ``arms``, the model and
    training sizes, and ``--out-json``."""
    from .gradual import setting_target

    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--targets", nargs="+", default=["90"], help="gradual targets: percent, or 2:4")
    p.add_argument("--arms", nargs="+", default=list(default_arms), choices=list(arms))
    p.add_argument("--steps", type=int, default=1800)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--val-limit", type=int, default=None, help="cap on validation windows (smoke tests)")
    p.add_argument("--out-json", required=True, help="results file: runs are appended, written after each")
    args = p.parse_args(argv)
    for target in args.targets:
        setting_target(target)
    return args


def open_results(path: str, cfg: Any, train: dict, corpus: Any, module: str, argv: list[str] | None) -> dict:
    """The results file at ``path`` (a new one if there is none) for runs of model ``cfg`` trained as ``train``,
    with this command (``python -m module argv``) recorded and the corpus described.

    Raises:
        SystemExit: the file holds runs of another model or training.
    """
    data: dict[str, Any] = {"runs": []}
    if Path(path).exists():
        data = json.loads(Path(path).read_text())
        if (data.get("model"), data.get("train")) != (cfg.to_dict(), train):
            raise SystemExit(f"{path} holds runs of model {data.get('model')} trained {data.get('train')}, "
                             f"not {cfg.to_dict()} {train}: use another --out-json")
    command = f"python -m {module} " + shlex.join(sys.argv[1:] if argv is None else argv)
    data["commands"] = [c for c in data.get("commands", []) if c != command] + [command]
    data.update(model=cfg.to_dict(), train=train,
                corpus={"source": "pydoc_data/topics.py", "python": corpus.python, "sha256": corpus.sha256})
    return data


def record_run(data: dict, seed: int, arm: str, setting: str, bpc: float, info: dict) -> None:
    """Add (or replace) the run of ``(seed, arm, setting)`` in ``data["runs"]``, with the processor it ran on
    (``cpu``: floating-point paths differ between processors, so runs of one seed on two machines are not
    paired exactly), and print it."""
    data["runs"] = [r for r in data["runs"] if (r["seed"], r["arm"], r["setting"]) != (seed, arm, setting)]
    data["runs"].append({"seed": seed, "arm": arm, "setting": setting, "bpc": bpc, **info, "cpu": cpu_model()})
    print(f"seed {seed} {arm:>22} {setting:>5}: {bpc:.4f} bits/char, {info['seconds']:.0f} s", flush=True)


def save_results(path: str, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` (through a temporary file, so an interrupted write loses nothing)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)
