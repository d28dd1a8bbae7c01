"""N:M channel permutation: how much of the gap to unstructured sparsity a permutation closes, and how fast.

Run: ``.venv/bin/python -m bench.bench_permutation`` (writes the ``bench_permutation`` section of
bench/RESULTS.md; ``--no-resnet`` skips the torchvision resnet18 row).

Efficacy = (kept with permutation - kept by plain 2:4) / (kept by 50% unstructured - kept by plain 2:4),
kept = sum of |w| the mask keeps (the core's ``"2:4"`` mask, :func:`sparsify.nm_kept_magnitude`).
Matrices: Gaussian 64x128, seeds 0..9, one search each (single-threaded NumPy). Wall time depends on
how busy the machine is; CPU time is the process's own. The resnet18 row (``weights=None``, torch's
default init) runs :func:`sparsify_torch.permute_for_nm` on the whole model; its efficacy is over the
layers the report scores.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from sparsify import nm_channel_permutation, nm_kept_magnitude, to_2d

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def unstructured_kept(w: np.ndarray) -> float:
    """|w| kept by the best 50% unstructured mask of the same weight."""
    a = np.sort(np.abs(to_2d(w)), axis=None)
    return float(a[a.size - a.size // 2:].sum())


def gaussian_row(rounds: int, seeds: range) -> tuple[str, float]:
    effs, walls, cpus = [], [], []
    for seed in seeds:
        w = np.random.default_rng(seed).standard_normal((64, 128))
        base = nm_kept_magnitude(w, "2:4")
        wall, cpu = time.perf_counter(), time.process_time()
        perm = nm_channel_permutation(w, "2:4", rounds=rounds, seed=0)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        effs.append((nm_kept_magnitude(w, "2:4", perm) - base) / (unstructured_kept(w) - base))
    mean = float(np.mean(effs))
    row = (f"| Gaussian 64x128, `rounds={rounds}` | {mean:.3f} | {min(effs):.3f} .. {max(effs):.3f} | "
           f"{np.mean(walls):.2f} (max {max(walls):.2f}) | {np.mean(cpus):.2f} (max {max(cpus):.2f}) |")
    return row, mean


def resnet18_row() -> str:
    import torch
    import torchvision

    import sparsify_torch

    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None).eval()
    weights = {n: p.detach().numpy().astype(np.float64) for n, p in net.named_parameters()}
    wall, cpu = time.perf_counter(), time.process_time()
    report = sparsify_torch.permute_for_nm(net, (torch.randn(2, 3, 64, 64),), "2:4", rounds=20, time_limit=5.0,
                                           max_rows=512)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    unstructured = sum(unstructured_kept(weights[name]) for name in report.layers)
    eff = (report.total_after - report.total_before) / (unstructured - report.total_before)
    return (f"| resnet18 (`permute_for_nm`, rounds=20, time_limit=5 s/group, {len(report.permuted)} groups, "
            f"{len(report.layers)} layers, output rel. diff {report.max_rel_diff:.1e}) | {eff:.3f} | "
            f"kept {report.total_before:.0f} -> {report.total_after:.0f} | {wall:.1f} | {cpu:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--no-resnet", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print only, do not update RESULTS.md")
    args = ap.parse_args()
    seeds = range(args.seeds)
    rows = [gaussian_row(rounds, seeds)[0] for rounds in (0, 100, 200, 400)]
    if not args.no_resnet:
        rows.append(resnet18_row())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    body = "\n".join([
        f"Command: `.venv/bin/python -m bench.bench_permutation` (load average {load:.1f} when it finished; "
        f"`rounds=200` is the default).",
        "",
        "| case | mean efficacy | range | wall s | CPU s |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Efficacy: share of the gap between plain 2:4 and 50% unstructured closed by the permutation. "
        "For comparison (quoted, not measured here): a plain greedy channel swap plateaus near 0.45, "
        "NVIDIA ASP's CPU search reports about 0.35 after about 60 s on the same kind of matrix. "
        "The resnet18 figure is low because its weights are random (no structure to exploit) and a group's "
        "consumers stack into thousands of rows (out x kernel positions x consumers) that share one permutation; "
        "the more rows, the closer every grouping comes to the average.",
    ])
    from bench._results import publish
    publish("bench_permutation", body, write=not args.no_write)


if __name__ == "__main__":
    main()
