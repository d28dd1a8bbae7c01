"""Structured channel pruning benchmark: digits accuracy (uniform vs optimal) and resnet50 at ratio 0.5.

Run: ``python -m bench.bench_structured``; writes the ``bench_structured`` section of bench/RESULTS.md.
"""
from __future__ import annotations

import copy
import time

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


def digits_experiment():
    torch.manual_seed(0)
    xtr, xte, ytr, yte = digits_data()
    model = small_cnn()
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(15):
        model.train()
        for i in torch.randperm(len(xtr)).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xtr[i]), ytr[i]).backward()
            opt.step()
    model.eval()
    calib = [(xtr[i], ytr[i]) for i in torch.arange(len(xtr)).split(64)]
    loss = lambda out, s: nn.functional.cross_entropy(out, s[1])
    macs = lambda m: float(count_macs(m, xte[:1]))
    base_macs, base_acc = macs(model), accuracy(model, xte, yte)
    uniform = None
    for ratio in np.arange(0.05, 0.96, 0.01):  # the uniform ratio that first reaches half the MACs
        cand = calibrate_and_prune_model_equal(copy.deepcopy(model), calib, loss, pruning_ratio=float(ratio),
                                               finetune_bn=True)
        if macs(cand) <= 0.5 * base_macs:
            uniform = (float(ratio), cand)
            break
    t = time.perf_counter()
    optimal = calibrate_and_prune_model_optimal(copy.deepcopy(model), calib, loss, macs, 0.5 * base_macs,
                                                finetune_bn=True, n_search_steps=200,
                                                architecture_optimization_strategy=lambda n: (max(1, n // 8), 1))
    t_opt = time.perf_counter() - t
    rows = [("baseline", base_macs, base_acc), (f"uniform (ratio {uniform[0]:.2f})", macs(uniform[1]),
                                                accuracy(uniform[1], xte, yte)),
            ("optimal (optuna TPE, 200 trials)", macs(optimal), accuracy(optimal, xte, yte))]
    table = ["| digits CNN | MACs | MACs / baseline | test accuracy |", "|---|---|---|---|"]
    table += [f"| {n} | {int(m)} | {m / base_macs:.3f} | {a:.4f} |" for n, m, a in rows]
    return "\n".join(table) + f"\n\nOptimal search time: {t_opt:.1f} s. Both pruned to <= 50% MACs with finetune_bn=True."


def latency_ms(model, x, repeats=10):
    model.eval()
    with torch.no_grad():
        for _ in range(2):
            model(x)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


def resnet50_benchmark():
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    calib = [torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    loss = lambda out, s: out.logsumexp(1).mean()
    macs0, params0 = count_macs(model, x), count_params(model)
    original = copy.deepcopy(model)
    t = time.perf_counter()
    pruned = calibrate_and_prune_model_equal(model, calib, loss, pruning_ratio=0.5)
    t_prune = time.perf_counter() - t
    macs1, params1 = count_macs(pruned, x), count_params(pruned)
    lat0, lat1 = latency_ms(original, x), latency_ms(pruned, x)
    return "\n".join([
        "| resnet50, ratio 0.5 (224x224, batch 1) | before | after | after / before |", "|---|---|---|---|",
        f"| MACs | {macs0 / 1e9:.3f} G | {macs1 / 1e9:.3f} G | {macs1 / macs0:.3f} |",
        f"| parameters | {params0 / 1e6:.2f} M | {params1 / 1e6:.2f} M | {params1 / params0:.3f} |",
        f"| CPU latency (median of 10, {torch.get_num_threads()} threads) | {lat0:.1f} ms | {lat1:.1f} ms | "
        f"{lat1 / lat0:.3f} |",
        "", f"Calibration (2 batches of 2) + pruning time: {t_prune:.1f} s. "
        f"torch.set_flush_denormal(True) used: {FLUSH_DENORMAL}."])


def main() -> None:
    torch.set_num_threads(2)
    body = resnet50_benchmark() + "\n\n" + digits_experiment()
    publish("bench_structured", body)


if __name__ == "__main__":
    main()
