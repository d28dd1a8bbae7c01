"""Mask computation speed: sparsify's exact selection vs the memory floor and peers' methods.

Run: ``.venv/bin/python -m bench.bench_masks`` (writes the ``bench_masks`` section of bench/RESULTS.md).

Every figure is the best of ``--repeat`` runs in this one process; ratios are
against one ``np.abs`` pass over the same data (the memory floor of any
magnitude criterion). "with previous masks" rows time a monotone update, what
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
from sparsify.selection import exact_prune_count

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def best_ms(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def resnet50_shapes() -> list[tuple[int, ...]]:
    """Weight shapes of torchvision's resnet50 (conv + fc), about 25.5M weights."""
    import torchvision

    model = torchvision.models.resnet50(weights=None)
    return [tuple(p.shape) for n, p in model.named_parameters() if p.ndim in (2, 4)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-write", action="store_true", help="print only, do not update RESULTS.md")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4096, 4096), dtype=np.float32)
    n = w.size
    rows: list[tuple[str, float, float]] = []
    floor = best_ms(lambda: np.abs(w), args.repeat)
    rows.append(("np.abs pass (floor)", floor, 1.0))

    scores = np.abs(w)
    earlier = np.abs(w + 0.1 * rng.standard_normal(w.shape, dtype=np.float32))   # the weights one update ago
    for name, ratio in (("1x1", 0.9), ("4x1", 0.9), ("2:4", 0.5), ("2:4", 0.25)):
        p = get_pattern(name)
        pre = p.get_mask_single(earlier, 0.8 * ratio)
        t_sel = best_ms(lambda: p.get_mask_single(scores, ratio), args.repeat)
        t_all = best_ms(lambda: p.get_mask_single(np.abs(w), ratio), args.repeat)
        t_pre = best_ms(lambda: p.get_mask_single(scores, ratio, pre), args.repeat)
        rows.append((f"sparsify '{name}' {ratio:.0%}: mask from scores", t_sel, t_sel / floor))
        rows.append((f"sparsify '{name}' {ratio:.0%}: abs + mask", t_all, t_all / floor))
        rows.append((f"sparsify '{name}' {ratio:.0%}: mask from scores, with previous masks", t_pre, t_pre / floor))

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

    t_kth = best_ms(torch_kth, args.repeat)
    t_topk = best_ms(torch_topk, max(2, args.repeat // 2))
    rows.append((f"torch.kthvalue 90% (abs + threshold + mask, {torch_threads} threads)", t_kth, t_kth / floor))
    rows.append((f"torch.topk 90% (abs + indices + mask, {torch_threads} threads)", t_topk, t_topk / floor))

    import tensorflow as tf

    tf_w = tf.constant(w)

    @tf.function(jit_compile=False)
    def tfmot_style(x):
        a = tf.abs(x)
        kk = n - k                                     # tfmot keeps the top (1 - s) fraction
        values, _ = tf.math.top_k(tf.reshape(a, [-1]), k=kk)
        threshold = values[-1]
        return tf.cast(tf.greater_equal(a, threshold), x.dtype)

    t_tf = best_ms(lambda: tfmot_style(tf_w).numpy(), max(2, args.repeat // 2))
    rows.append(("tf.math.top_k 90% as tfmot (abs + threshold + mask)", t_tf, t_tf / floor))

    # global mask over a ResNet-50-sized set of layers
    shapes = resnet50_shapes()
    layers = {f"layer{i}": rng.standard_normal(s, dtype=np.float32) for i, s in enumerate(shapes)}
    total = sum(v.size for v in layers.values())
    g = get_pattern({"pattern": "1x1", "pruning_scope": "global"})
    g_floor = best_ms(lambda: [np.abs(v) for v in layers.values()], 3)
    g_scores = {kk: np.abs(v) for kk, v in layers.items()}
    t_g = best_ms(lambda: g.get_masks(g_scores, 0.9), 3)
    t_g_all = best_ms(lambda: g.get_masks({kk: np.abs(v) for kk, v in layers.items()}, 0.9), 3)
    g_pre = g.get_masks({kk: np.abs(v + 0.1 * rng.standard_normal(v.shape, dtype=np.float32))
                         for kk, v in layers.items()}, 0.8 * 0.9)
    t_g_pre = best_ms(lambda: g.get_masks(g_scores, 0.9, g_pre), 3)
    # fan-in scaled layers (as initialised weights are): some layers hit the per-layer cap of 98%
    scaled = {kk: v / np.float32(np.sqrt(np.prod(v.shape[1:]))) for kk, v in g_scores.items()}
    t_g_cap = best_ms(lambda: g.get_masks(scaled, 0.9), 3)
    capped = sum(1 - m.mean() > 0.979 for m in g.get_masks(scaled, 0.9).values())
    g24 = get_pattern({"pattern": "2:4", "pruning_scope": "global", "skip_incompatible_layers": True})
    t_g24 = best_ms(lambda: g24.get_masks(g_scores, 0.5), 3)
    flat_t = [torch.from_numpy(v).reshape(-1) for v in layers.values()]
    kg = exact_prune_count(0.9, total)

    def torch_global():
        a = torch.cat([t.abs() for t in flat_t])
        v = torch.kthvalue(a, kg).values
        return [t.abs() > v for t in flat_t]

    t_tg = best_ms(torch_global, 3)
    rows.append((f"np.abs over ResNet-50 layers ({len(shapes)} tensors, {total / 1e6:.1f}M) (floor)", g_floor, 1.0))
    rows.append(("sparsify global 90%: masks from scores", t_g, t_g / g_floor))
    rows.append(("sparsify global 90%: abs + masks", t_g_all, t_g_all / g_floor))
    rows.append(("sparsify global 90%: masks from scores, with previous masks", t_g_pre, t_g_pre / g_floor))
    rows.append((f"sparsify global 90%, fan-in scaled layers ({capped} capped at 98%): masks from scores",
                 t_g_cap, t_g_cap / g_floor))
    rows.append(("sparsify global '2:4' 50%: masks from scores", t_g24, t_g24 / g_floor))
    rows.append((f"torch.cat + kthvalue global 90% ({torch_threads} threads)", t_tg, t_tg / g_floor))

    table = ["| case (4096x4096 float32 unless noted) | best ms | x floor |", "|---|---:|---:|"]
    table += [f"| {name} | {ms:.1f} | {ratio:.2f} |" for name, ms, ratio in rows]
    body = "\n".join(table) + (
        f"\n\nSelection is single-threaded NumPy; torch used {torch_threads} threads. "
        f"Best of {args.repeat} runs (3 for the global rows). Command: `.venv/bin/python -m bench.bench_masks`.")
    from bench._results import publish

    publish("bench_masks", body, write=not args.no_write)


if __name__ == "__main__":
    main()
