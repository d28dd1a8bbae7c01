"""What ``import sparsify_torch`` costs on top of ``import torch`` (issue 47: at most 0.2 s).

Run: ``.venv/bin/python -m bench.bench_import`` (writes the ``bench_import`` section of bench/RESULTS.md;
``--runs N``, default 5; ``--no-write`` prints only; ``--baseline DIR`` also times the import from another
checkout, e.g. one before a change, in the same run).

Two measures, each the median of ``--runs`` fresh processes, the two commands interleaved so that the load
of a shared machine falls on both alike:

* wall: the seconds ``python -c "import torch"`` and ``python -c "import torch, sparsify_torch"`` take,
  start to exit; the overhead is the difference of the medians;
* importtime: ``python -X importtime -c "import torch, sparsify_torch"``, the cumulative time of the
  ``sparsify_torch`` line (what that import adds once torch is loaded, the core ``sparsify`` included).

Both run against compiled bytecode, as after ``pip install`` (which compiles every module): the bench first
writes ``__pycache__`` for the ``sparsify`` and ``sparsify_torch`` sources it times (``compileall``; git ignores
them). Without bytecode, e.g. an editable install under ``PYTHONDONTWRITEBYTECODE=1``, every import compiles
its source first, which costs about 0.13 s more on 2 cores.

It also lists which heavy modules the import loads (none of ``torch.distributed.tensor``,
``torch.distributed.fsdp``, ``sparsify_torch.channels``: FSDP2 and the channel tracer load on use).
"""
from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch.distributed.tensor", "torch.distributed.fsdp", "sparsify_torch.channels", "sparsify_torch.distributed.fsdp")
BUDGET_S = 0.2


def _env(root: Path = ROOT) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(root), TF_CPP_MIN_LOG_LEVEL="2")


def wall_seconds(code: str) -> float:
    """Seconds a fresh ``python -c code`` takes, start to exit."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(), capture_output=True, cwd=ROOT)
    return time.perf_counter() - start


def cumulative_us(importtime: str, module: str) -> int:
    """The cumulative microseconds of ``module``'s top-level line in ``-X importtime`` output.

    Example:
        >>> cumulative_us("import time:       120 |       3456 | sparsify_torch\\n", "sparsify_torch")
        3456
    """
    for line in importtime.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].rstrip() == f" {module}":      # one space: imported at top level
            return int(parts[1])
    raise ValueError(f"no import line for {module!r}")


def importtime_seconds(root: Path = ROOT) -> tuple[float, list[str]]:
    """``sparsify_torch``'s (from ``root``) cumulative import time after torch, and the heavy modules it loaded."""
    code = "import sys, torch, sparsify_torch; print(' '.join(m for m in %r if m in sys.modules))" % (HEAVY,)
    res = subprocess.run([sys.executable, "-X", "importtime", "-c", code], check=True, env=_env(root),
                         capture_output=True, text=True, cwd=root)
    return cumulative_us(res.stderr, "sparsify_torch") / 1e6, res.stdout.split()


def compile_bytecode(root: Path = ROOT) -> None:
    """Write ``__pycache__`` for the packages the import loads, as ``pip install`` does."""
    for package in ("sparsify", "sparsify_torch"):
        if not compileall.compile_dir(str(root / package), quiet=1):
            raise RuntimeError(f"compiling {root / package} failed")


def measure(runs: int, baseline: Path | None = None) -> dict[str, object]:
    torch_s, both_s, cumulative, base, heavy = [], [], [], [], set()
    compile_bytecode()
    if baseline is not None:
        compile_bytecode(baseline)
    wall_seconds("import torch, sparsify_torch")             # warm the file cache once, unmeasured
    for _ in range(runs):
        torch_s.append(wall_seconds("import torch"))
        both_s.append(wall_seconds("import torch, sparsify_torch"))
        seconds, loaded = importtime_seconds()
        cumulative.append(seconds)
        heavy.update(loaded)
        if baseline is not None:
            base.append(importtime_seconds(baseline)[0])
    paired = [b - t for t, b in zip(torch_s, both_s)]
    return {"torch": statistics.median(torch_s), "both": statistics.median(both_s), "paired": statistics.median(paired),
            "importtime": statistics.median(cumulative), "heavy": sorted(heavy), "runs": runs,
            "baseline": (str(baseline), statistics.median(base)) if base else None}


def report(m: dict[str, object]) -> str:
    overhead = m["both"] - m["torch"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return "\n".join([
        f"Command: `.venv/bin/python -m bench.bench_import"
        f"{' --baseline ' + m['baseline'][0] if m['baseline'] else ''}` (median of {m['runs']} fresh processes each, "
        f"interleaved, bytecode compiled as by `pip install`; load average {load:.1f} when it finished).",
        "",
        "| measure | seconds |",
        "|---|---|",
        f"| `python -c \"import torch\"` (wall) | {m['torch']:.3f} |",
        f"| `python -c \"import torch, sparsify_torch\"` (wall) | {m['both']:.3f} |",
        f"| overhead of `sparsify_torch` (wall, difference of the medians) | {overhead:.3f} |",
        f"| overhead of `sparsify_torch` (wall, median of the paired differences) | {m['paired']:.3f} |",
        f"| `sparsify_torch` cumulative in `-X importtime` (after torch) | {m['importtime']:.3f} |",
        *([f"| the same, from the checkout `{m['baseline'][0]}` | {m['baseline'][1]:.3f} |"] if m["baseline"] else []),
        "",
        f"Budget: {BUDGET_S} s over torch. Heavy modules loaded by the import: "
        f"{', '.join(m['heavy']) if m['heavy'] else 'none'} (of {', '.join(HEAVY)}); FSDP2's "
        "`torch.distributed.tensor` and the channel tracer load when first used. On a busy machine every figure "
        "grows with the load: compare rows of one run. The wall rows carry the spread of `import torch` itself "
        "(several tenths of a second on a shared machine); the `-X importtime` row is the precise one.",
    ])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print only, do not update RESULTS.md")
    ap.add_argument("--baseline", type=Path, help="another checkout whose import is timed in the same run")
    args = ap.parse_args(argv)
    from bench._results import publish
    publish("bench_import", report(measure(args.runs, args.baseline)), write=not args.no_write)


if __name__ == "__main__":
    main()
