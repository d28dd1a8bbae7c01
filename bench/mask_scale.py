"""Mask updates at the size of real models: time per update, ns per weight and peak memory, 1 and 2 threads.

Run: ``.venv/bin/python -m bench.bench_masks --scale [--sizes 10M,100M,400M,1B] [--quick]`` (writes the
``bench_masks_scale`` section of bench/RESULTS.md and the raw results to bench/mask_scale_results.json). ``--quick``: local and global unstructured magnitude
only (sizes 10M and 100M unless ``--sizes`` says otherwise). The 1B global cases with block or N:M units
hold about 9 GB at their peak (every layer's scores; 1x1 cases score chunk by chunk): a case that would not
fit the memory available is skipped and named.

Models (float32): 10M = 10 layers of 1024x1024; 100M = 6 of 4096x4096; 400M = 24 of 4096x4096;
1B = a 50,000x4096 embedding and 48 layers of 4096x4096. Every case is one
:meth:`sparsify.PruningEngine.compute_masks` at the target (90% unstructured or in 4x1 blocks, 50% for
2:4) from dense weights, magnitude or Wanda scores (random positive per-input-channel norms). Each case
runs in a fresh process: the weights are allocated, a warm-up update of two 256-row slices runs with each
thread count (code and thread pools), the resident memory is read (``/proc/self/statm``), then the update
runs in rounds of one update with 1 thread and one with 2 (``num_threads``, alternating, so a slow spell
of the machine falls on both): at least ``--repeat`` rounds (default 2: the first update of a process pays
for memory the next ones reuse), and more, up to 15, until the case has run 4 s (a 10M update takes
milliseconds, and one run of it says little). The time is the best run; the peak extra memory is
``ru_maxrss`` at the end minus that resident memory (the higher of the two thread counts: the masks, the
scores and the selection's buffers). The CPU time (all threads of the process) shows the work per weight
when other processes share the cores and the wall times cannot.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SIZES = {
    "10M": [("layer", (1024, 1024), 10)],
    "100M": [("layer", (4096, 4096), 6)],
    "400M": [("layer", (4096, 4096), 24)],
    "1B": [("embed", (50000, 4096), 1), ("layer", (4096, 4096), 48)],
}
CASES = [(scope, pattern, criterion) for criterion in ("magnitude", "wanda") for scope in ("local", "global")
         for pattern in ("1x1", "4x1", "2:4")]
QUICK_CASES = [("local", "1x1", "magnitude"), ("global", "1x1", "magnitude")]
THREADS = (1, 2)
RAW = Path(__file__).with_name("mask_scale_results.json")    # the last written run's raw results
MIN_SECONDS = 4.0      # a case runs rounds (one update per thread count) until this much time is spent ...
MAX_ROUNDS = 15        # ... or this many rounds (at least --repeat)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def model_bytes(size: str) -> int:
    """Bytes of the float32 weights of model ``size``."""
    return sum(4 * shape[0] * shape[1] * count for _, shape, count in SIZES[size])


def available_bytes(meminfo: str = "/proc/meminfo") -> int:
    """Memory available to a new process (Linux's MemAvailable; elsewhere: unbounded)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def run_case(size: str, scope: str, pattern: str, criterion: str, repeat: int) -> dict:
    """One case in this process (the caller is a fresh process): times per thread count and peak memory."""
    from sparsify import PruningEngine

    rng = np.random.default_rng(0)
    weights, acts = {}, {}
    for kind, shape, count in SIZES[size]:
        for i in range(count):
            w = np.empty(shape, dtype=np.float32)
            rng.standard_normal(out=w, dtype=np.float32)       # in place: no temporary raises the peak
            weights[f"{kind}{i}.weight"] = w
            if criterion == "wanda":
                acts[f"{kind}{i}.weight"] = rng.random(shape[1], dtype=np.float32) + np.float32(0.5)
    n = sum(w.size for w in weights.values())
    warm = {k: w[:256] for k, w in list(weights.items())[:2]}           # first-call costs, not the data's
    warm_acts = {k: acts[k] for k in warm} if acts else None
    for threads in THREADS:                                             # code, thread pools: before the baseline
        PruningEngine({"pattern": pattern, "pruning_scope": scope, "criterion": criterion,
                       "num_threads": threads}).masks_at_sparsity(warm, 0.5, activations=warm_acts)
    base = _rss_bytes()
    out = {"size": size, "scope": scope, "pattern": pattern, "criterion": criterion, "weights": n,
           "weight_bytes": n * 4, "seconds": {}, "cpu_seconds": {}}
    engines = {t: PruningEngine({"target_sparsity": 0.5 if pattern == "2:4" else 0.9, "pattern": pattern,
                                 "pruning_scope": scope, "criterion": criterion, "start_step": 0, "end_step": 0,
                                 "num_threads": t}) for t in THREADS}
    best = {t: float("inf") for t in THREADS}
    cpu = dict(best)
    spent = 0.0
    rounds = 0
    # thread counts alternate, so a slow spell of the machine falls on both; short cases run more rounds
    while rounds < repeat or (spent < MIN_SECONDS and rounds < MAX_ROUNDS):
        for threads, eng in engines.items():
            t0, c0 = time.perf_counter(), time.process_time()
            masks = eng.masks_at_sparsity(weights, eng.config.target_sparsity, activations=acts or None)
            wall = time.perf_counter() - t0
            best[threads], cpu[threads] = min(best[threads], wall), min(cpu[threads], time.process_time() - c0)
            spent += wall
            del masks
        rounds += 1
    out["seconds"], out["cpu_seconds"], out["rounds"] = best, cpu, rounds
    # ru_maxrss and the resident-memory baseline are read by two counters that can differ by a few pages
    out["peak_extra_bytes"] = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base)
    out["live_peak_bytes"] = max(live_peak(lambda: eng.masks_at_sparsity(
        weights, eng.config.target_sparsity, activations=acts or None)) for eng in engines.values())
    return out


def live_peak(update) -> int:
    """Peak bytes of the arrays alive during ``update()`` (NumPy reports its allocations to :mod:`tracemalloc`):
    what the update holds, without what the allocator keeps of freed memory; one untimed run."""
    import tracemalloc

    tracemalloc.start()
    try:
        result = update()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del result
    return int(peak)


def _table(results: list[dict]) -> str:
    rows = ["| weights | scope | pattern | scores | 1 thread: s (ns/weight) | 2 threads: s (ns/weight) | "
            "speed-up | CPU ns/weight, 1 / 2 threads | peak extra GB (x weights): resident / live arrays |",
            "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        s1, s2 = r["seconds"]["1"], r["seconds"]["2"]
        ns = lambda s: s / r["weights"] * 1e9          # noqa: E731
        target = "90%" if r["pattern"] != "2:4" else "50%"
        rows.append(f"| {r['weights'] / 1e6:,.0f}M | {r['scope']} | {r['pattern']} {target} | {r['criterion']} | "
                    f"{s1:.2f} ({ns(s1):.2f}) | {s2:.2f} ({ns(s2):.2f}) | {s1 / s2:.2f}x | "
                    f"{ns(r['cpu_seconds']['1']):.2f} / {ns(r['cpu_seconds']['2']):.2f} | "
                    f"{r['peak_extra_bytes'] / 1e9:.2f} ({r['peak_extra_bytes'] / r['weight_bytes']:.2f}) / "
                    f"{r['live_peak_bytes'] / 1e9:.2f} ({r['live_peak_bytes'] / r['weight_bytes']:.2f}) |")
    return "\n".join(rows)


def _targets(results: list[dict]) -> str:
    head = [r for r in results if (r["scope"], r["pattern"], r["criterion"]) == ("local", "1x1", "magnitude")]
    if not head:
        return ""
    per = {r["size"]: r["seconds"]["2"] / r["weights"] * 1e9 for r in head}
    lines = [f"Local 1x1 90% (magnitude), 2 threads, ns/weight by size: "
             + ", ".join(f"{k} {v:.2f}" for k, v in per.items())
             + f"; largest over smallest {max(per.values()) / min(per.values()):.2f} (target <= 1.3)"]
    big = {k: v for k, v in per.items() if k != "10M"}
    if "10M" in per and len(big) > 1:
        lines[0] += f", from 100M on {max(big.values()) / min(big.values()):.2f}"
    lines[0] += "."
    for r in head:
        if r["size"] == "400M":
            s1, s2 = r["seconds"]["1"], r["seconds"]["2"]
            lines.append(f"At 400M: {s2 / r['weights'] * 1e9:.2f} ns/weight with 2 threads (target <= 8), "
                         f"{s1 / s2:.2f}x faster than 1 thread (target >= 1.7).")
    worst = max(results, key=lambda r: r["peak_extra_bytes"] / r["weight_bytes"])
    lines.append(f"Largest peak extra memory over all cases: {worst['peak_extra_bytes'] / worst['weight_bytes']:.2f}x "
                 f"the weights (target <= 1; {worst['size']} {worst['scope']} {worst['pattern']} {worst['criterion']}, "
                 f"{worst['peak_extra_bytes'] / 1e6:.0f} MB)")
    large = [r["peak_extra_bytes"] / r["weight_bytes"] for r in results if r["size"] != "10M"]
    if large and len(large) < len(results):
        lines[-1] += f", from 100M on {max(large):.2f}x"
    live = max(results, key=lambda r: r["live_peak_bytes"] / r["weight_bytes"])
    lines[-1] += (f". Largest peak of the arrays the update holds (tracemalloc): "
                  f"{live['live_peak_bytes'] / live['weight_bytes']:.2f}x ({live['size']} {live['scope']} "
                  f"{live['pattern']} {live['criterion']}).")
    return " ".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", help=f"comma-separated among {', '.join(SIZES)} (default: all; --quick: 10M,100M)")
    ap.add_argument("--quick", action="store_true", help="unstructured magnitude only (local and global)")
    ap.add_argument("--scopes", default="local,global", help="comma-separated: local, global")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="print only, do not update RESULTS.md")
    ap.add_argument("--case", help=argparse.SUPPRESS)   # internal: run one case in this process, print JSON
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(**json.loads(args.case), repeat=args.repeat)))
        return
    if args.sizes is None:
        args.sizes = "10M,100M" if args.quick else ",".join(SIZES)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in SIZES]
    if bad:
        raise SystemExit(f"--sizes: unknown {bad}; choose among {list(SIZES)}")
    scopes = {x.strip() for x in args.scopes.split(",")}
    if not scopes <= {"local", "global"}:
        raise SystemExit(f"--scopes: unknown {sorted(scopes - {'local', 'global'})}; choose among local, global")
    repeat = args.repeat
    results = []
    skipped = []
    for size in sizes:
        for scope, pattern, criterion in [c for c in (QUICK_CASES if args.quick else CASES) if c[0] in scopes]:
            # weights + the update's peak, and room: a global cut on blocks or N:M holds every layer's scores
            need = model_bytes(size) * (2.5 if scope == "global" and pattern != "1x1" else 1.6)
            if need > available_bytes():
                skipped.append(f"{size} {scope} {pattern} {criterion} (needs ~{need / 1e9:.1f} GB, "
                               f"{available_bytes() / 1e9:.1f} GB available)")
                print("skipped:", skipped[-1], flush=True)
                continue
            spec = json.dumps({"size": size, "scope": scope, "pattern": pattern, "criterion": criterion})
            proc = subprocess.run([sys.executable, "-m", "bench.mask_scale", "--case", spec, "--repeat", str(repeat)],
                                  capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(size, scope, pattern, criterion, r["seconds"], f"{r['peak_extra_bytes'] / 1e9:.2f} GB",
                  f"live {r['live_peak_bytes'] / 1e9:.2f} GB", flush=True)
            results.append(r)
    body = _table(results) + "\n\n" + _targets(results) + (
        f"\n\nSkipped for want of memory on this shared machine: {'; '.join(skipped)}." if skipped else "") + (
        f"\n\nBest of at least {repeat} run(s) per thread count (more for short cases: until 4 s or 15 rounds, 1 and "
        "2 threads alternating), each case in a fresh process; peak extra, resident: ru_maxrss minus "
        "the resident memory after allocating the weights and a warm-up update (masks, scores, buffers, and what the "
        "allocator keeps of freed ones, over both thread counts' runs); live arrays: the peak of the NumPy arrays "
        "alive during one more update per thread count, under tracemalloc (the higher). Load average at the end: "
        f"{os.getloadavg()[0]:.1f} (other work on the machine slows both thread counts). Command: "
        f"`.venv/bin/python -m bench.bench_masks --scale {'--quick ' if args.quick else ''}--sizes {','.join(sizes)}"
        f"{'' if args.scopes == 'local,global' else ' --scopes ' + args.scopes}`.")
    from bench._results import publish

    if not args.no_write:
        RAW.write_text(json.dumps({"command_sizes": sizes, "quick": args.quick, "results": results}, indent=1) + "\n")
    publish("bench_masks_scale", body, write=not args.no_write)


if __name__ == "__main__":
    main()
