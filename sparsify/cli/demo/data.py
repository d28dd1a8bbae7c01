"""The demo's data: scikit-learn's bundled 8x8 digits, split and batched deterministically.

Example:
    >>> d = load_digits_split()
    >>> d.x_train.shape[1], d.n_classes
    (64, 10)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

__all__ = ["Digits", "load_digits_split", "batch_indices"]


@dataclass(frozen=True)
class Digits:
    """Train/test split of the digits, features scaled to [0, 1] (float32), labels int64."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int = 10


def load_digits_split(seed: int = 0, test_fraction: float = 0.25) -> Digits:
    """Load scikit-learn's bundled digits (no download) and split them, stratified.

    Raises:
        ImportError: scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise ImportError("the demo needs scikit-learn's bundled digits: pip install scikit-learn") from None
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return Digits(xtr, ytr, xte, yte)


def batch_indices(n: int, batch_size: int, steps: int, seed: int = 0) -> Iterator[np.ndarray]:
    """``steps`` index batches over ``n`` samples, reshuffled every epoch, deterministic in ``seed``.

    Example:
        >>> [b.tolist() for b in batch_indices(4, 2, 3, seed=0)][0]
        [2, 0]
    """
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    pos = 0
    for _ in range(steps):
        if pos + batch_size > n:
            order, pos = rng.permutation(n), 0
        yield order[pos: pos + batch_size]
        pos += batch_size
