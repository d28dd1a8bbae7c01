"""Structured channel pruning benchmark: ours vs Torch-Pruning, resnet50 at ratio 0.5, and uniform vs
optimal (default settings) on digits CNNs at <= 50% MACs over several seeds.

Run: ``python -m bench.bench_structured [--seeds 5]``; writes the ``bench_structured`` section of bench/RESULTS.md.
``--models resnet50,vit_b_16`` limits the comparison table; ``--no-write`` only prints.
"""
from __future__ import annotations

import argparse
import copy
import os
import time
import warnings

import numpy as np
import torch
import torchvision
from torch import nn

from bench._results import publish
from sparsify_torch.channels import calibrate_and_prune_model_equal, calibrate_and_prune_model_optimal
from sparsify_torch.channels.metrics import count_macs, count_params

FLUSH_DENORMAL = torch.set_flush_denormal(True)


def digits_data():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(y)
    return train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)


def small_cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def trained_cnn(seed, xtr, ytr):
    """The digits CNN trained with Adam for 15 epochs from ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    model = small_cnn()
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(15):
        model.train()
        for i in torch.randperm(len(xtr)).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xtr[i]), ytr[i]).backward()
            opt.step()
    return model.eval()


def uniform_at_budget(model, calib, loss, macs, budget):
    """calibrate_and_prune_model_equal at the smallest ratio (0.01 grid) whose MACs meet ``budget``
    (MACs fall as the ratio grows, so a bisection finds it)."""
    def prune(ratio):
        return calibrate_and_prune_model_equal(copy.deepcopy(model), calib, loss, pruning_ratio=ratio / 100,
                                               finetune_bn=True, show_tqdm=False)

    lo, hi = 0, 95  # percent: 0 prunes nothing (over budget), 95 is far below it
    best = prune(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        cand = prune(mid)
        if macs(cand) <= budget:
            hi, best = mid, cand
        else:
            lo = mid
    return hi / 100, best


def compare_on_seed(seed, data, calib, loss, macs):
    """One trained CNN: (baseline acc, uniform ratio, uniform MACs/base, uniform acc, optimal MACs/base,
    optimal conv widths, optimal acc, optimal seconds)."""
    xtr, xte, ytr, yte = data
    model = trained_cnn(seed, xtr, ytr)
    base_macs, base_acc = macs(model), accuracy(model, xte, yte)
    ratio, uniform = uniform_at_budget(model, calib, loss, macs, 0.5 * base_macs)
    t = time.perf_counter()
    optimal = calibrate_and_prune_model_optimal(copy.deepcopy(model), calib, loss, macs, 0.5 * base_macs,
                                                finetune_bn=True, show_tqdm=False)
    seconds = time.perf_counter() - t
    widths = "/".join(str(m.out_channels) for m in optimal if isinstance(m, nn.Conv2d))
    return (base_acc, ratio, macs(uniform) / base_macs, accuracy(uniform, xte, yte), macs(optimal) / base_macs,
            widths, accuracy(optimal, xte, yte), seconds)


def digits_experiment(seeds):
    """Uniform vs optimal (its defaults) at <= 50% of the MACs, one trained CNN per seed."""
    data = digits_data()
    xtr, xte, ytr, _ = data
    calib = [(xtr[i], ytr[i]) for i in torch.arange(len(xtr)).split(64)]
    loss = lambda out, s: nn.functional.cross_entropy(out, s[1])
    macs = lambda m: float(count_macs(m, xte[:1]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small gains nothing from more threads, and loses on a busy machine
    try:
        results = []
        for seed in seeds:
            results.append(compare_on_seed(seed, data, calib, loss, macs))
            print(seed, results[-1], flush=True)
    finally:
        torch.set_num_threads(threads)
    rows = [f"| {seed} | {b:.4f} | {r:.2f} | {um:.3f} | {ua:.4f} | {om:.3f} | {w} | {oa:.4f} | {t:.1f} |"
            for seed, (b, r, um, ua, om, w, oa, t) in zip(seeds, results)]
    u, o, t = (np.array([row[i] for row in results]) for i in (3, 6, 7))
    table = ["| seed | baseline acc | uniform ratio | uniform MACs | uniform acc | optimal MACs | optimal widths "
             "(of 32/64/64) | optimal acc | optimal time (s) |", "|---|---|---|---|---|---|---|---|---|"] + rows
    return "\n".join(table) + (
        f"\n\nDigits CNN pruned to <= 50% of its MACs, test accuracy over {len(u)} seeds (mean +- std): "
        f"uniform {u.mean():.4f} +- {u.std():.4f}, optimal {o.mean():.4f} +- {o.std():.4f} (better on "
        f"{int((o > u).sum())} of {len(u)} seeds). The optimal search uses its defaults: "
        f"`calibrate_and_prune_model_optimal(model, data, loss, macs, 0.5 * macs(model), finetune_bn=True)` "
        f"(200 latency calls, default_architecture_optimization_strategy, candidates scored by output discrepancy "
        f"on the first calibration batch); calibration + search + pruning took {t.mean():.1f} +- {t.std():.1f} s "
        f"per model (1 thread, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores). Uniform: the "
        f"smallest ratio (0.01 grid) meeting the budget. Both with finetune_bn=True.")


def resnet50_benchmark():
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    calib = [torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    loss = lambda out, s: out.logsumexp(1).mean()
    macs0, params0 = count_macs(model, x), count_params(model)
    original = copy.deepcopy(model)
    t = time.perf_counter()
    pruned = calibrate_and_prune_model_equal(model, calib, loss, pruning_ratio=0.5, show_tqdm=False)
    t_prune = time.perf_counter() - t
    macs1, params1 = count_macs(pruned, x), count_params(pruned)
    lat0, lat1 = latencies_ms([original, pruned], x)
    return "\n".join([
        "| resnet50, ratio 0.5 (224x224, batch 1) | before | after | after / before |", "|---|---|---|---|",
        f"| MACs | {macs0 / 1e9:.3f} G | {macs1 / 1e9:.3f} G | {macs1 / macs0:.3f} |",
        f"| parameters | {params0 / 1e6:.2f} M | {params1 / 1e6:.2f} M | {params1 / params0:.3f} |",
        f"| CPU latency (best of 20, round robin, {torch.get_num_threads()} threads) | {lat0:.1f} ms | {lat1:.1f} ms | "
        f"{lat1 / lat0:.3f} |",
        "", f"Calibration (2 batches of 2) + pruning time: {t_prune:.1f} s. "
        f"torch.set_flush_denormal(True) used: {FLUSH_DENORMAL}."])


PEER_MODELS = ["resnet50", "resnext50_32x4d", "regnet_y_400mf", "convnext_tiny", "shufflenet_v2_x1_0", "vit_b_16"]


def torch_pruning_direct(model: nn.Module, x: torch.Tensor, ratio: float) -> nn.Module:
    """Torch-Pruning run directly: MagnitudeImportance (L2), one step to ``ratio``, the classifier ignored."""
    import torch_pruning as tp
    ignored = [m for m in model.modules() if isinstance(m, nn.Linear) and m.out_features == 1000]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pruner = tp.pruner.MetaPruner(model, x, importance=tp.importance.MagnitudeImportance(p=2),
                                      pruning_ratio=ratio, ignored_layers=ignored)
        pruner.step()
    return model


def latencies_ms(models, x, repeats: int = 20):
    """Best forward time of each model over ``repeats``, measured round robin so load changes hit all alike.

    The minimum, not the median: on a shared machine the median follows the other processes' load."""
    times = [[] for _ in models]
    with torch.no_grad():
        for m in models:
            m.eval()
            for _ in range(2):
                m(x)
        for _ in range(repeats):
            for i, m in enumerate(models):
                t = time.perf_counter()
                m(x)
                times[i].append(time.perf_counter() - t)
    return [1000 * float(np.min(t)) for t in times]


def ours_vs_torch_pruning(names, ratio: float = 0.5) -> str:
    """MACs, parameters and CPU latency after pruning at ``ratio``: ours and Torch-Pruning, same model, same run."""
    import torch_pruning as tp
    rows = []
    for name in names:
        torch.manual_seed(0)
        base = torchvision.models.__dict__[name](weights=None).eval()
        head = getattr(getattr(base, "heads", None), "head", None)
        if head is not None:      # vit: torchvision zero-initialises the head, so no loss would see any channel
            with torch.no_grad():
                head.weight.normal_(std=0.02, generator=torch.Generator().manual_seed(0))
        x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
        calib = [torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))]
        macs0, params0 = count_macs(base, x), count_params(base)
        results = []
        for who in ("ours", "tp"):
            model = copy.deepcopy(base)
            t = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if who == "ours":
                        pruned = calibrate_and_prune_model_equal(model, calib, lambda out, s: out.logsumexp(1).mean(),
                                                                 pruning_ratio=ratio)
                    else:
                        pruned = torch_pruning_direct(model, x, ratio)
                    seconds = time.perf_counter() - t
                    macs = count_macs(pruned, x)  # fails here when the peer's pruned model cannot run
                results.append((pruned, macs, count_params(pruned), seconds))
            except Exception as err:  # the peer fails on some models; say how
                message = f"{type(err).__name__}: {err}".replace("|", "/").replace("\n", " ")[:70]
                results.append(message)
        ok = [r for r in results if not isinstance(r, str)]
        lat = latencies_ms([base] + [r[0] for r in ok], x)
        lat0, lat_ok = lat[0], iter(lat[1:])
        cells = []
        for r in results:
            if isinstance(r, str):
                cells.append(f"fails ({r}) | - | - | -")
            else:
                cells.append(f"{r[1] / macs0:.3f} | {r[2] / 1e6:.2f} M | {next(lat_ok):.1f} ms | {r[3]:.1f} s")
        rows.append(f"| {name} | {macs0 / 1e9:.3f} G, {params0 / 1e6:.2f} M, {lat0:.1f} ms | {cells[0]} | {cells[1]} |")
    header = ["| model (224x224, batch 1) | before: MACs, params, latency | ours: MACs after / before | params | "
              "latency | prune time | Torch-Pruning: MACs after / before | params | latency | prune time |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    note = (f"\n\nRatio {ratio} for both. Ours: `calibrate_and_prune_model_equal` (one calibration batch of 2; the "
            "time includes calibration and the check of the pruned model against the original with the pruned "
            f"channels zeroed). Torch-Pruning {tp.__version__} run directly: `MetaPruner`, `MagnitudeImportance(p=2)`, "
            "the 1000-class classifier ignored. CPU latency: best of 20 forward passes, the original and both "
            f"pruned models measured round robin, {torch.get_num_threads()} threads; "
            f"torch.set_flush_denormal(True) used: {FLUSH_DENORMAL}. Random weights (`weights=None`).")
    return "\n".join(header + rows) + note


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5, help="digits models trained from seeds 0..N-1 (default 5)")
    parser.add_argument("--models", default=",".join(PEER_MODELS), help="models of the Torch-Pruning table")
    parser.add_argument("--no-write", action="store_true", help="print the tables without updating RESULTS.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    peers = ours_vs_torch_pruning([m for m in args.models.split(",") if m])
    body = peers + "\n\n" + resnet50_benchmark() + "\n\n" + digits_experiment(range(args.seeds))
    body += f"\n\nCommand: `python -m bench.bench_structured --seeds {args.seeds}`"
    publish("bench_structured", body, write=not args.no_write)


if __name__ == "__main__":
    main()
