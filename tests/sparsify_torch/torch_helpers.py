"""Small models and data shared by the sparsify_torch tests (digits from scikit-learn)."""
from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache

import numpy as np
import torch
from torch import nn


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def digits(n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """First ``n`` digits as (n, 64) float32 in [0, 1] and labels."""
    x, y = _digits()
    return torch.from_numpy(x[:n].copy()), torch.from_numpy(y[:n].copy())


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(OrderedDict(fc1=nn.Linear(64, 32), act=nn.ReLU(), fc2=nn.Linear(32, 16),
                                     act2=nn.ReLU(), head=nn.Linear(16, 10)))


class CNN(nn.Module):
    """2-D views: conv1 (8, 4), conv2 (16, 72), fc (32, 400), head (10, 32)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 2)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.fc = nn.Linear(400, 32)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(-1, 1, 8, 8)
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.head(torch.relu(self.fc(x.flatten(1))))


def cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return CNN()


def batch(x: torch.Tensor, y: torch.Tensor, step: int, size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic batch for a step (so resumed runs see the same data)."""
    i = (step * size) % (len(x) - size + 1)
    return x[i:i + size], y[i:i + size]


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return float(loss.detach())


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def expected_pruned(ratio: float, n: int, max_ratio: float = 0.98) -> int:
    """docs/design.md, rule 5:: exact count of pruned units, with the per-layer cap."""
    k = min(int(np.ceil(ratio * n - 0.5)), n - 1)
    cap = min(int(np.ceil(max_ratio * n - 0.5)), n - 1)
    return min(k, cap)
