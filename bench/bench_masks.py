"""Mask computation speed: sparsify's exact selection vs the memory floor and peers' methods.

Run: ``.venv/bin/python -m bench.bench_masks`` (writes the ``bench_masks`` section of bench/RESULTS.md).
``--scale`` runs the model-sized cases of :mod:`bench.mask_scale` instead (10M to 1B weights, 1 and 2
threads, peak memory; ``--sizes``, ``--quick``; section ``bench_masks_scale``).

Every case runs ``--repeat`` times, each run right after one ``np.abs`` pass
over the same data (the memory floor of any magnitude criterion); the table
gives the best time and the median of the paired ratios, so a busy machine
slows both sides of a ratio alike. "with previous masks" rows time a monotone update, what
every scheduled update after the first does: the previous masks come from an
update at 80% of the ratio on slightly different weights. Peers: ``torch.kthvalue`` and ``torch.topk`` (how
torch.ao / torch.nn.utils.prune find thresholds) and ``tf.math.top_k`` as
TF Model Optimization's pruning_impl uses it. Peer timings include their own
``abs`` and the final comparison that builds the mask, like ours.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from sparsify import get_pattern
from sparsify.selection.lowest_k import exact_prune_count
from sparsify.threads import current_threads

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def paired(fn, floor_fn, repeat: int) -> tuple[float, float]:
    """(best ms of ``fn``, median of ``fn``'s time over the ``floor_fn`` time just before it)."""
    fn()
    times, ratios = [], []
    for _ in range(repeat):
        f = _seconds(floor_fn)
        t = _seconds(fn)
        times.append(t)
        ratios.append(t / f)
    return min(times) * 1e3, float(np.median(ratios))


def resnet50_shapes() -> list[tuple[int, ...]]:
    """Weight shapes of torchvision's resnet50 (conv + fc), about 25.5M weights."""
    import torchvision

    model = torchvision.models.resnet50(weights=None)
    return [tuple(p.shape) for n, p in model.named_parameters() if p.ndim in (2, 4)]


def single_tensor_cases(case, w: np.ndarray, rng) -> None:
    """Unstructured, block and N:M masks of one 4096x4096 tensor."""
    scores = np.abs(w)
    earlier = np.abs(w + 0.1 * rng.standard_normal(w.shape, dtype=np.float32))   # the weights one update ago
    for name, ratio in (("1x1", 0.9), ("4x1", 0.9), ("2:4", 0.5), ("2:4", 0.25)):
        p = get_pattern(name)
        pre = p.get_mask_single(earlier, 0.8 * ratio)
        case(f"sparsify '{name}' {ratio:.0%}: mask from scores", lambda: p.get_mask_single(scores, ratio))
        case(f"sparsify '{name}' {ratio:.0%}: abs + mask", lambda: p.get_mask_single(np.abs(w), ratio))
        case(f"sparsify '{name}' {ratio:.0%}: mask from scores, with previous masks",
             lambda: p.get_mask_single(scores, ratio, pre))



def peer_cases(case, w: np.ndarray, repeat: int) -> int:
    """torch and tfmot-style selection of the same tensor; returns torch's thread count."""
    n = w.size
    k = exact_prune_count(0.9, n)
    import torch

    torch_threads = torch.get_num_threads()
    tw = torch.from_numpy(w)

    def torch_kth():
        a = tw.abs()
        v = torch.kthvalue(a.reshape(-1), k).values
        return a > v

    def torch_topk():
        a = tw.abs()
        idx = torch.topk(a.reshape(-1), k, largest=False).indices
        m = torch.ones(n, dtype=torch.bool)
        m[idx] = False
        return m.reshape(a.shape)

    case(f"torch.kthvalue 90% (abs + threshold + mask, {torch_threads} threads)", torch_kth)
    case(f"torch.topk 90% (abs + indices + mask, {torch_threads} threads)", torch_topk, max(2, repeat // 2))

    import tensorflow as tf

    tf_w = tf.constant(w)

    @tf.function(jit_compile=False)
    def tfmot_style(x):
        a = tf.abs(x)
        kk = n - k                                     # tfmot keeps the top (1 - s) fraction
        values, _ = tf.math.top_k(tf.reshape(a, [-1]), k=kk)
        threshold = values[-1]
        return tf.cast(tf.greater_equal(a, threshold), x.dtype)

    case("tf.math.top_k 90% as tfmot (abs + threshold + mask)", lambda: tfmot_style(tf_w).numpy(),
         max(2, repeat // 2))

    return torch_threads


def global_cases(case, rows: list, rng, repeat: int, torch_threads: int) -> None:
    """Global selection over a ResNet-50-sized set of layers."""
    import torch

    # global mask over a ResNet-50-sized set of layers
    shapes = resnet50_shapes()
    layers = {f"layer{i}": rng.standard_normal(s, dtype=np.float32) for i, s in enumerate(shapes)}
    total = sum(v.size for v in layers.values())
    g = get_pattern({"pattern": "1x1", "pruning_scope": "global"})
    g_scores = {kk: np.abs(v) for kk, v in layers.items()}
    g_pre = g.get_masks({kk: np.abs(v + 0.1 * rng.standard_normal(v.shape, dtype=np.float32))
                         for kk, v in layers.items()}, 0.8 * 0.9)
    # fan-in scaled layers (as initialised weights are): some layers hit the per-layer cap of 98%
    scaled = {kk: v / np.float32(np.sqrt(np.prod(v.shape[1:]))) for kk, v in g_scores.items()}
    capped = sum(1 - m.mean() > 0.979 for m in g.get_masks(scaled, 0.9).values())
    g24 = get_pattern({"pattern": "2:4", "pruning_scope": "global", "skip_incompatible_layers": True})
    flat_t = [torch.from_numpy(v).reshape(-1) for v in layers.values()]
    kg = exact_prune_count(0.9, total)

    def torch_global():
        a = torch.cat([t.abs() for t in flat_t])
        v = torch.kthvalue(a, kg).values
        return [t.abs() > v for t in flat_t]

    def g_floor():
        return [np.abs(v) for v in layers.values()]

    g_repeat = max(3, repeat // 2)
    rows.append((f"np.abs over ResNet-50 layers ({len(shapes)} tensors, {total / 1e6:.1f}M) (floor)",
                 paired(g_floor, g_floor, g_repeat)[0], 1.0))
    case("sparsify global 90%: masks from scores", lambda: g.get_masks(g_scores, 0.9), g_repeat, g_floor)
    case("sparsify global 90%: abs + masks", lambda: g.get_masks({kk: np.abs(v) for kk, v in layers.items()}, 0.9),
         g_repeat, g_floor)
    case("sparsify global 90%: masks from scores, with previous masks", lambda: g.get_masks(g_scores, 0.9, g_pre),
         g_repeat, g_floor)
    case(f"sparsify global 90%, fan-in scaled layers ({capped} capped at 98%): masks from scores",
         lambda: g.get_masks(scaled, 0.9), g_repeat, g_floor)
    case("sparsify global '2:4' 50%: masks from scores", lambda: g24.get_masks(g_scores, 0.5), g_repeat, g_floor)
    case(f"torch.cat + kthvalue global 90% ({torch_threads} threads)", torch_global, g_repeat, g_floor)



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=None, help="runs per case (default 7; with --scale 2)")
    ap.add_argument("--no-write", action="store_true", help="print only, do not update RESULTS.md")
    ap.add_argument("--scale", action="store_true",
                    help="model-sized cases instead (bench/mask_scale.py: --sizes 10M,100M,400M,1B, --quick, --repeat)")
    args, rest = ap.parse_known_args()
    if args.scale:
        from bench.mask_scale import main as scale_main

        scale_main(rest + (["--no-write"] if args.no_write else []) + ["--repeat", str(args.repeat or 2)])
        return
    args.repeat = args.repeat or 7
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4096, 4096), dtype=np.float32)
    rows: list[tuple[str, float, float]] = []

    def floor_fn():
        return np.abs(w)

    def case(label: str, fn, repeat: int = args.repeat, floor=floor_fn) -> None:
        rows.append((label, *paired(fn, floor, repeat)))

    rows.append(("np.abs pass (floor)", paired(floor_fn, floor_fn, args.repeat)[0], 1.0))

    single_tensor_cases(case, w, rng)
    torch_threads = peer_cases(case, w, args.repeat)
    global_cases(case, rows, rng, args.repeat, torch_threads)

    table = ["| case (4096x4096 float32 unless noted) | best ms | x floor (median) |", "|---|---:|---:|"]
    table += [f"| {name} | {ms:.1f} | {ratio:.2f} |" for name, ms, ratio in rows]
    body = "\n".join(table) + (
        f"\n\nSelection used {current_threads()} thread(s) (sparsify.threads: the cores available unless "
        f"SPARSIFY_NUM_THREADS says otherwise); torch used {torch_threads} threads. "
        f"Best time of {args.repeat} runs ({max(3, args.repeat // 2)} for the global rows, fewer for the slow peers); "
        "x floor: median over the runs of the case's time over an np.abs pass timed just before it. "
        "Command: `.venv/bin/python -m bench.bench_masks`.")
    from bench._results import publish

    publish("bench_masks", body, write=not args.no_write)


if __name__ == "__main__":
    main()
