"""Memory and bytes moved by one mask update of an FSDP2 model on 1, 2 and 4 ranks (gloo, CPU).

The model is a stack of square Linear layers (default 12 x 2896 x 2896, 100.6 M float32
parameters, 402 MB): too big to hold twice within a per-rank budget of 600 MB, which
the single-process path needs (the weights plus the scores and masks of the update).
Each FSDP2 rank builds its shard on the meta device and materialises only its own rows,
filled row by row from a fixed seed so the full weights do not depend on the number of
ranks. Then one gradual update is measured (50% -> 90% unstructured, monotone, so the
previous masks are used), on every rank:

* **peak RSS during the update**, sampled every 0.5 ms from ``/proc/self/statm`` (glibc told to
  return freed memory at once, ``MALLOC_MMAP_THRESHOLD_``), above the
  RSS of the bare runtime (Python, torch, the process group: measured before the model
  exists), and its increase over the RSS just before the update (what the update itself
  allocates);
* **bytes moved** by the collectives of the selection (``CountingCollective`` around the
  adapter's ``TorchCollective``: this rank's payload sent plus the other ranks' payloads
  received), against the bytes of all pruned weights;
* the wall time of the update, and the number of collective calls.

The single-process ``sparsify_torch.prune`` (mask parametrizations, full weights) on the
same model is measured the same way for reference. Every run prunes exactly the same
number of weights per layer (checked).

Usage:
    python -m bench.bench_distributed                 # writes the "bench_distributed" section of RESULTS.md
    python -m bench.bench_distributed --layers 2 --dim 1024 --no-write     # a quick run

Example:
    >>> parameters(2, 8)
    128
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["parameters", "run", "main"]

BUDGET_MB = 600


def parameters(layers: int, dim: int) -> int:
    """Weights of the benchmark model (biases left out: ``bias=False``)."""
    return layers * dim * dim


class RssSampler:
    """Peak resident set size (bytes) of this process while the ``with`` block runs."""

    def __init__(self, interval: float = 0.0005) -> None:
        self.interval = interval
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.peak = 0
        self._stop = threading.Event()

    def rss(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * self.page

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(self.interval)

    def __enter__(self) -> "RssSampler":
        self.before = self.rss()
        self.peak = self.before
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


def _fill_rows(tensor, layer: int, start: int) -> None:
    """Row ``start + i`` of layer ``layer`` comes from its own seed: the same full weights on any number of ranks."""
    import numpy as np
    import torch

    rows = tensor.shape[0]
    out = np.empty(tuple(tensor.shape), dtype=np.float32)
    for i in range(rows):
        out[i] = np.random.default_rng((layer, start + i)).standard_normal(tensor.shape[1], dtype=np.float32)
    with torch.no_grad():
        tensor.copy_(torch.from_numpy(out))


def _config() -> dict:
    return {"target_sparsity": 0.9, "init_sparsity": 0.5, "start_step": 1, "end_step": 2, "pruning_frequency": 1}


def _model(layers: int, dim: int, device: str):
    import torch
    from torch import nn
    with torch.device(device):
        return nn.Sequential(*[nn.Linear(dim, dim, bias=False) for _ in range(layers)])


def _measure(pruner, counting, base: int) -> dict:
    pruner.step()                                  # step 1: dense -> 50%
    if counting is not None:
        counting.reset()
    with RssSampler() as mem:
        t0 = time.perf_counter()
        pruner.step()                              # step 2: 50% -> 90%, the measured update
        seconds = time.perf_counter() - t0
    out = {"peak": mem.peak, "before": mem.before, "base": base, "seconds": seconds, "sparsity": pruner.sparsity()}
    if counting is not None:
        out.update(calls=counting.calls, sent=counting.bytes_sent, received=counting.bytes_received)
    return out


def _rank(rank: int, world: int, port: int, layers: int, dim: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from sparsify.distributed import CountingCollective
    from sparsify_torch import prune

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        dist.barrier()
        base = RssSampler().rss()
        model = _model(layers, dim, "meta")
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        model.to_empty(device="cpu")
        for i, layer in enumerate(model):
            local = layer.weight.to_local()
            _fill_rows(local, i, rank * -(-dim // world))
        pruner = prune(model, _config())
        counting = CountingCollective(pruner.protocol.collective)
        pruner.protocol.collective = counting
        result = _measure(pruner, counting, base)
        result["local_weight_bytes"] = sum(p.to_local().numel() * 4 for p in model.parameters())
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
            json.dump(result, fh)
        del model, pruner, counting       # they hold FSDP2's device mesh (docs/distributed.md, "Teardown")
    finally:
        dist.destroy_process_group()
        gc.collect()                      # free what still holds the group while the interpreter is alive


def _single(layers: int, dim: int, out_dir: str) -> None:
    import torch

    from sparsify_torch import prune

    torch.set_num_threads(1)
    base = RssSampler().rss()
    model = _model(layers, dim, "cpu")
    for i, layer in enumerate(model):
        _fill_rows(layer.weight, i, 0)
    result = _measure(prune(model, _config()), None, base)
    result["local_weight_bytes"] = sum(p.numel() * 4 for p in model.parameters())
    with open(os.path.join(out_dir, "rank0.json"), "w") as fh:
        json.dump(result, fh)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world: int, layers: int, dim: int) -> list[dict]:
    """Results of every rank of one run; ``world=0`` is the single-process (non-FSDP) pruner."""
    import torch.multiprocessing as mp

    # freed arrays go back to the system at once, so the resident memory shows what is live
    # (glibc otherwise keeps freed heap memory of one update for the next)
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(1 << 17)
    os.environ["MALLOC_TRIM_THRESHOLD_"] = str(1 << 17)

    with tempfile.TemporaryDirectory() as tmp:
        if world == 0:
            ctx = mp.get_context("spawn")
            p = ctx.Process(target=_single, args=(layers, dim, tmp))
            p.start()
            p.join()
            if p.exitcode:
                raise RuntimeError(f"single-process run failed with exit code {p.exitcode}")
            n = 1
        else:
            mp.spawn(_rank, args=(world, _free_port(), layers, dim, tmp), nprocs=world, join=True)
            n = world
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(n)]


def _mb(x: float) -> str:
    return f"{x / 2 ** 20:.0f}"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=2896)
    ap.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    n = parameters(args.layers, args.dim)
    weight_bytes = n * 4
    results = {"single": run(0, args.layers, args.dim)}
    for w in args.worlds:
        results[w] = run(w, args.layers, args.dim)
    want = results["single"][0]["sparsity"]
    for key, ranks in results.items():
        for r in ranks:
            if r["sparsity"] != want:
                raise RuntimeError(f"run {key}: per-layer sparsity {r['sparsity']} differs from {want}")
    rows = []
    for key, ranks in results.items():
        peak = max(r["peak"] - r["base"] for r in ranks)
        before = max(r["before"] - r["base"] for r in ranks)
        extra = max(r["peak"] - r["before"] for r in ranks)
        held = max(r["local_weight_bytes"] for r in ranks)
        secs = max(r["seconds"] for r in ranks)
        fits = "yes" if peak <= BUDGET_MB * 2 ** 20 else "no"
        head = "| single process (`Pruner`, full weights) | 1" if key == "single" else f"| FSDP2 `ShardedPruner` | {key}"
        row = f"{head} | {_mb(held)} | {_mb(before)} | {_mb(extra)} | {_mb(peak)} | {fits} | {secs:.2f} |"
        if key == "single":
            rows.append(row + " - | - | - |")
            continue
        moved = max(r["sent"] + r["received"] for r in ranks)
        total_sent = sum(r["sent"] for r in ranks)
        rows.append(row + f" {ranks[0]['calls']} | {moved / 1024:.0f} KiB ({100 * moved / weight_bytes:.3f}%) | "
                    f"{total_sent / 1024:.0f} KiB ({100 * total_sent / weight_bytes:.4f}%) |")
    fsdp = [k for k in results if k != "single"]
    extra = {k: max(r["peak"] - r["before"] for r in results[k]) for k in fsdp}
    worst = max(max(r["sent"] + r["received"] for r in results[k]) for k in fsdp if k > 1) if any(k > 1 for k in fsdp) else 0
    scale = ", ".join(f"{k} ranks: {extra[k] / extra[min(fsdp)]:.2f}x" for k in fsdp)
    import torch
    text = "\n".join([
        f"Model: {args.layers} x Linear({args.dim}, {args.dim}, bias=False), {n / 1e6:.1f} M float32 weights "
        f"({_mb(weight_bytes)} MB); one gradual update 50% -> 90% unstructured, local scope, monotone "
        f"(previous masks used); FSDP2 `fully_shard` per layer and on the root, gloo, 1 thread per rank, "
        f"torch {torch.__version__}. Per-rank figures are the largest over the ranks; memory is resident memory "
        f"above the bare runtime (Python + torch + process group, measured before the model exists). Budget: "
        f"{BUDGET_MB} MB per rank for the model and its pruning, less than twice the weights.",
        "",
        "| path | ranks | weights per rank (MB) | resident before the update (MB) | extra during the update (MB) | "
        f"peak during the update (MB) | within {BUDGET_MB} MB | update (s) | collective calls | "
        "moved per rank (sent + received) | sent by all ranks |",
        "|---|---:|---:|---:|---:|---:|:-:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Target: collectives move < 1% of the weight bytes -> largest per rank {100 * worst / weight_bytes:.3f}% "
        f"({'met' if worst < 0.01 * weight_bytes else 'NOT met'}). Extra memory of the update relative to 1 rank: "
        f"{scale} (target ~1/ranks). Masks: every run prunes exactly the same count per layer.",
        "",
        f"Command: `python -m bench.bench_distributed --layers {args.layers} --dim {args.dim}`",
    ])
    if not args.no_write:
        from bench._results import publish
        publish("bench_distributed", text)
    else:
        print(text)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
