"""The language-model benchmark's text: CPython's ``pydoc_data/topics.py``, characters, batches.

The topics' texts joined in key order (79 topics, 464,970 characters on CPython
3.11.7), characters as tokens (the vocabulary is the sorted set of characters of
the whole text), the last 10% held out for validation. Training batches, their
order and the calibration batches all come from NumPy generators seeded by the
run's seed, so every framework sees the same windows in the same order.

Example:
    >>> corpus = load_corpus()
    >>> corpus.train.size + corpus.valid.size == len(corpus.text), corpus.valid.size == len(corpus.text) // 10
    (True, True)
    >>> batch_offsets(corpus, seed=0, steps=2, batch_size=3, context=8).shape
    (2, 3)
"""
from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass

import numpy as np

__all__ = ["Corpus", "load_corpus", "batch_offsets", "windows", "calibration_windows", "validation_windows"]


@dataclass(frozen=True)
class Corpus:
    """The text, its vocabulary and the train/validation split as token arrays.

    Attributes:
        text: the joined topics.
        chars: the vocabulary, sorted; token ``i`` is ``chars[i]``.
        train: tokens of the first 90%.
        valid: tokens of the last 10%.
        sha256: of ``text`` encoded as UTF-8.
        python: the Python version whose ``pydoc_data`` it is.
    """

    text: str
    chars: str
    train: np.ndarray
    valid: np.ndarray
    sha256: str
    python: str

    @property
    def vocab_size(self) -> int:
        """Number of distinct characters."""
        return len(self.chars)


def load_corpus() -> Corpus:
    """The topics of this Python's ``pydoc_data.topics`` joined in key order, split 90/10."""
    from pydoc_data.topics import topics

    text = "".join(topics[k] for k in sorted(topics))
    chars = "".join(sorted(set(text)))
    lookup = {c: i for i, c in enumerate(chars)}
    tokens = np.fromiter((lookup[c] for c in text), dtype=np.int64, count=len(text))
    n_valid = len(text) // 10
    return Corpus(text=text, chars=chars, train=tokens[:-n_valid], valid=tokens[-n_valid:],
                  sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), python=platform.python_version())


def batch_offsets(corpus: Corpus, seed: int, steps: int, batch_size: int, context: int) -> np.ndarray:
    """``(steps, batch_size)`` start offsets of the training windows, from the seed alone."""
    rng = np.random.default_rng([seed, 1])
    return rng.integers(0, corpus.train.size - context - 1, size=(steps, batch_size))


def windows(tokens: np.ndarray, offsets: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``tokens[o:o+context]`` and targets one character later, for each offset."""
    idx = np.asarray(offsets)[..., None] + np.arange(context)
    return tokens[idx], tokens[idx + 1]


def calibration_windows(corpus: Corpus, seed: int, n_sequences: int, context: int) -> np.ndarray:
    """``(n_sequences, context)`` training-text windows for one-shot calibration (no targets)."""
    rng = np.random.default_rng([seed, 2])
    offsets = rng.integers(0, corpus.train.size - context - 1, size=n_sequences)
    return windows(corpus.train, offsets, context)[0]


def validation_windows(corpus: Corpus, context: int, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive non-overlapping validation windows (inputs, targets); ``limit`` caps their number."""
    n = (corpus.valid.size - 1) // context
    if limit is not None:
        n = min(n, limit)
    return windows(corpus.valid, np.arange(n) * context, context)
