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
    >>> merge_runs(data, {"runs": [{"seed": 1, "arm": "gradual/sr_ste_distill", "setting": "80", "bpc": 1.84}],
    ...                   "commands": ["python -m bench.bench_lm --gradual"]})
    1
    >>> [r["arm"] for r in data["runs"]], data["commands"]
    (['keras/dense', 'gradual/sr_ste_distill'], ['python -m bench.bench_lm --gradual'])

Runs written to another file (parallel processes, each with its own ``--out-json``) join the results file with
``python -m bench.lm.records --merge /tmp/a.json /tmp/b.json --into bench/lm_results.json``: their runs other
than ``dense`` (whose figures the results file holds already) replace those of the same (seed, arm, setting).
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

__all__ = ["record_run", "save_results", "run_arguments", "open_results", "merge_runs", "main"]


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
    p.add_argument("--cache", default="/tmp/sparsify_lm", help="folder of trained dense models (teachers)")
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


def merge_runs(data: dict, other: dict, skip_arms: Sequence[str] = ("dense",)) -> int:
    """Copy the runs of ``other`` (but those of ``skip_arms``) into ``data``, replacing those of the same
    (seed, arm, setting), and append its commands; returns how many runs were copied."""
    runs = [r for r in other.get("runs", []) if r["arm"] not in skip_arms]
    keys = {(r["seed"], r["arm"], r["setting"]) for r in runs}
    data["runs"] = [r for r in data["runs"] if (r["seed"], r["arm"], r["setting"]) not in keys] + runs
    data["commands"] = [c for c in data.get("commands", []) if c not in other.get("commands", [])] \
        + list(other.get("commands", []))
    return len(runs)


def main(argv: list[str] | None = None) -> None:
    """``--merge SRC... --into DST``: :func:`merge_runs` of each SRC into DST (same model and training only)."""
    p = argparse.ArgumentParser(description="merge LM results files")
    p.add_argument("--merge", nargs="+", required=True)
    p.add_argument("--into", required=True)
    args = p.parse_args(argv)
    data = json.loads(Path(args.into).read_text())
    for src in args.merge:
        other = json.loads(Path(src).read_text())
        if (other.get("model"), other.get("train")) != (data.get("model"), data.get("train")):
            raise SystemExit(f"{src} holds runs of another model or training than {args.into}")
        print(f"{src}: {merge_runs(data, other)} runs")
    save_results(args.into, data)


if __name__ == "__main__":
    main()
