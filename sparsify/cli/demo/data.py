"""The demo's data: the 8x8 digits shipped with the package, split and batched deterministically, NumPy only.

``digits.npz`` beside this module holds the 1,797 8x8 "Optical Recognition of Handwritten Digits" images
(Alpaydin & Kaynak, UCI, CC BY 4.0) that scikit-learn bundles as ``load_digits``; it was written once by
``scripts/make_demo_digits.py`` (source and licence: ``DATA.md`` beside it). Reading it needs NumPy only, so
``sparsify demo`` runs with nothing but its framework's extra.

Example:
    >>> d = load_digits_split()
    >>> d.x_train.shape, d.x_test.shape, d.n_classes
    ((1347, 64), (450, 64), 10)
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Iterator

import numpy as np

__all__ = ["Digits", "DATA_FILE", "load_digits", "load_digits_split", "batch_indices"]

#: The shipped data set (package data of ``sparsify.cli.demo``).
DATA_FILE = "digits.npz"


@dataclass(frozen=True)
class Digits:
    """Train/test split of the digits, features scaled to [0, 1] (float32), labels int64."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int = 10


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 images (``x``: 1797 x 64 uint8 pixel counts 0..16) and labels (``y``: uint8 0..9).

    Example:
        >>> x, y = load_digits()
        >>> x.shape, int(x.max()), np.bincount(y).tolist()[:3]
        ((1797, 64), 16, [178, 182, 177])
    """
    with resources.files(__package__).joinpath(DATA_FILE).open("rb") as fh, np.load(fh) as z:
        return z["x"], z["y"]


def load_digits_split(seed: int = 0, test_fraction: float = 0.25) -> Digits:
    """The shipped digits split into train and test, stratified (each class in the same proportion).

    Per class, ``round(test_fraction * count)`` images go to the test set, chosen by a permutation seeded
    with ``seed``; each part is then shuffled.

    Raises:
        ValueError: ``test_fraction`` outside (0, 1).
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    x, y = load_digits()
    rng = np.random.default_rng(seed)
    test, train = [], []
    for c in range(int(y.max()) + 1):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(test_fraction * idx.size))
        test.append(idx[:k])
        train.append(idx[k:])
    tr, te = rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))
    xs = (x / 16.0).astype(np.float32)
    ys = y.astype(np.int64)
    return Digits(xs[tr], ys[tr], xs[te], ys[te])


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
