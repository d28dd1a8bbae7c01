"""Channel permutations for N:M sparsity: reorder input channels so an N:M mask keeps more magnitude.

An N:M mask prunes N of every M consecutive weights along the last axis of
the 2-D view (input channel fastest, see :mod:`sparsify.layout`). Which
channels share a group of M is an accident of the layer's channel order;
permuting the input channels of a layer (and the output channels of the layer
that feeds it, so the network computes the same function) lets the mask keep
larger weights (Pool & Yu, "Channel Permutations for N:M Sparsity", 2021).

With M-divisible input channels, every group of M in the 2-D view is M
channels at one kernel position, so a permutation is an assignment of the
channels to ``in / M`` unordered groups, and a group keeps, in every row
(output channel and kernel position), the sum of its ``M - N`` largest
magnitudes. The search is an iterated local search over that assignment:

* a move takes two groups and splits their ``2M`` channels into two groups of
  M in the best of all ``C(2M, M) / 2`` ways (35 for M = 4), evaluated for
  many pairs of groups at once;
* improving moves on disjoint pairs are applied together until no pair
  improves (a local optimum);
* a *kick* shuffles the channels of a few random groups, the descent runs
  again, and the better of the two optima is kept.

It is seeded (the same input, seed and ``rounds`` give the same permutation);
``time_limit`` stops it early (then the result depends on the machine). The
result is checked with the core pattern itself: it never keeps less than the
identity.

Example:
    >>> import numpy as np
    >>> w = np.array([[9.0, 8.0, 7.0, 6.0, 1.0, 1.0, 1.0, 1.0]])
    >>> float(nm_kept_magnitude(w, "2:4")), float(nm_kept_magnitude(w, "2:4", nm_channel_permutation(w)))
    (19.0, 30.0)
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Optional

import numpy as np

from .patterns import PatternNInM, get_pattern

__all__ = ["nm_channel_permutation", "nm_kept_magnitude"]

_CHUNK_ELEMENTS = 1 << 21     # working-array elements per batch of pair evaluations
_FULL_PAIRS_MAX_GROUPS = 64   # up to this many groups every pair is a candidate; above, a fixed random subset
_PARTNERS = 24                # candidate partners per group when not every pair is one
_MAX_SPLIT_TERMS = 20_000     # C(2M, M) * C(M, M - N): above this a pair is scored by ranks, not subset sums


def _nm_pattern(pattern) -> PatternNInM:
    p = get_pattern(pattern) if isinstance(pattern, str) else pattern
    if not isinstance(p, PatternNInM):
        raise ValueError(f"pattern must be an N:M pattern such as '2:4', got {pattern!r}")
    return p


def _checked_weight(weight, pattern: PatternNInM) -> np.ndarray:
    w = np.asarray(weight)
    if w.ndim < 2:
        raise ValueError(f"weight must be a canonical (out, in, *kernel) array with at least 2 dimensions, "
                         f"got shape {w.shape}")
    if w.dtype.kind not in "fiu":
        raise TypeError(f"weight must hold real numbers, got dtype {w.dtype}")
    if w.shape[1] % pattern.M:
        raise ValueError(f"weight has {w.shape[1]} input channels (shape {w.shape}): a channel permutation for "
                         f"pattern {pattern.pattern!r} needs a multiple of M={pattern.M}")
    if w.dtype.kind == "f" and not np.isfinite(w).all():
        raise ValueError(f"weight of shape {w.shape} holds NaN or infinite values")
    return w


def _permutation_arg(permutation, n: int) -> np.ndarray:
    perm = np.asarray(permutation)
    if perm.shape != (n,) or perm.dtype.kind not in "iu" or not np.array_equal(np.sort(perm), np.arange(n)):
        raise ValueError(f"permutation must be a permutation of range({n}) (one entry per input channel), "
                         f"got {permutation!r}")
    return perm.astype(np.int64)


def nm_kept_magnitude(weight, pattern="2:4", permutation=None) -> float:
    """Sum of ``|weight|`` that the core's N:M mask keeps, after permuting the input channels.

    ``permutation[j]`` is the old input channel that becomes channel ``j`` (``weight[:, permutation]``).

    Example:
        >>> w = np.array([[4.0, 3.0, 2.0, 1.0, 4.0, 3.0, 2.0, 1.0]])
        >>> float(nm_kept_magnitude(w, "2:4")), float(nm_kept_magnitude(w, "2:4", [0, 4, 1, 5, 2, 6, 3, 7]))
        (14.0, 12.0)
    """
    p = _nm_pattern(pattern)
    w = np.abs(_checked_weight(weight, p)).astype(np.float64)
    if permutation is not None:
        w = w[:, _permutation_arg(permutation, w.shape[1])]
    mask = p.get_mask_single(w, p.max_ratio)
    return float(np.sum(w, where=mask))


class _SplitScorer:
    """Best split of the 2M channels of two groups into two groups of M, for many pairs of groups at once.

    A split is a subset of size M holding channel 0 of the pair (the rest is the
    other group); split 0 is the current assignment. A group keeps, per row, the
    sum of its K = M - N largest values: the largest sum over its K-subsets.
    """

    def __init__(self, m: int, keep: int) -> None:
        self.m, self.keep = m, keep
        first = [c for c in itertools.combinations(range(2 * m), m) if 0 in c]
        second = [tuple(i for i in range(2 * m) if i not in c) for c in first]
        self.first, self.second = np.array(first), np.array(second)
        self.by_sums = len(first) * 2 * math.comb(m, keep) <= _MAX_SPLIT_TERMS
        if self.by_sums:
            ksub = list(itertools.combinations(range(2 * m), keep))
            index = {k: i for i, k in enumerate(ksub)}
            self.ksub = np.array(ksub)
            self.members = np.array([[index[k] for k in itertools.combinations(c, keep)] for c in first + second])
        else:
            self.indicator = np.zeros((2 * m, 2 * len(first)), dtype=np.float32)
            for s, c in enumerate(first + second):
                self.indicator[list(c), s] = 1.0
            self.later = np.tril(np.ones((2 * m, 2 * m), dtype=bool), -1)   # ties: the lower index ranks first

    def per_pair(self, x: np.ndarray) -> np.ndarray:
        """``(pairs, splits)`` kept sums of both groups, from ``x`` of shape ``(rows, pairs, 2M)``."""
        n = len(self.first)
        if self.by_sums:
            ksums = x[..., self.ksub].sum(axis=-1)
            kept = ksums[..., self.members].max(axis=-1).sum(axis=0)
        else:
            kept = np.zeros((x.shape[1], 2 * n))
            step = max(1, _CHUNK_ELEMENTS // (x.shape[1] * self.indicator.size))
            for r in range(0, x.shape[0], step):          # rows in chunks: the rank array is rows x 2M x 2n
                xt = x[r:r + step].transpose(1, 0, 2)
                beats = (xt[..., None, :] > xt[..., :, None]) | ((xt[..., None, :] == xt[..., :, None]) & self.later)
                rank = beats.astype(np.float32) @ self.indicator
                kept += np.einsum("prik,pri->pk", (rank < self.keep) * self.indicator, xt)
        return kept[:, :n] + kept[:, n:]

    def pairs_per_batch(self, rows: int) -> int:
        if not self.by_sums:
            return 1 if self.indicator.size > 64 else max(1, _CHUNK_ELEMENTS // (rows * self.indicator.size))
        return max(1, _CHUNK_ELEMENTS // (rows * (self.ksub.shape[0] + self.members.size)))


class _OutOfTime(Exception):
    pass


class _Search:
    """Iterated local search over the assignment of columns of ``a`` (rows, columns) to groups of M."""

    def __init__(self, a: np.ndarray, m: int, keep: int, rng: np.random.Generator, deadline: Optional[float]):
        self.a, self.m, self.keep, self.rng, self.deadline = a, m, keep, rng, deadline
        self.n_groups = a.shape[1] // m
        self.scorer = _SplitScorer(m, keep)
        g = self.n_groups
        if g <= _FULL_PAIRS_MAX_GROUPS:
            first, second = np.triu_indices(g, 1)
        else:
            order = rng.permutation(g)
            shifts = np.arange(1, min(_PARTNERS // 2, g // 2) + 1)
            first = np.repeat(order, shifts.size)
            second = order[(np.repeat(np.arange(g), shifts.size) + np.tile(shifts, g)) % g]
            first, second = np.minimum(first, second), np.maximum(first, second)
            unique = np.unique(first * g + second)
            first, second = unique // g, unique % g
        self.pairs = np.stack([first, second], axis=1)
        self.gain = np.zeros(len(self.pairs))
        self.best = np.zeros(len(self.pairs), dtype=np.int64)
        self.tol = 1e-6 * float(a.sum()) / max(1, a.shape[1])

    def check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _OutOfTime

    def value(self, groups: np.ndarray) -> float:
        x = self.a[:, groups]
        return float(np.sort(x, axis=-1)[..., self.m - self.keep:].sum(dtype=np.float64))

    def score_pairs(self, groups: np.ndarray, which: np.ndarray) -> None:
        step = self.scorer.pairs_per_batch(self.a.shape[0])
        for s in range(0, which.size, step):
            self.check_time()
            idx = which[s:s + step]
            cols = np.concatenate([groups[self.pairs[idx, 0]], groups[self.pairs[idx, 1]]], axis=1)
            kept = self.scorer.per_pair(self.a[:, cols])
            best = kept.argmax(axis=1)
            self.gain[idx] = kept[np.arange(idx.size), best] - kept[:, 0]
            self.best[idx] = best

    def touching(self, changed: np.ndarray) -> np.ndarray:
        return np.flatnonzero(np.isin(self.pairs[:, 0], changed) | np.isin(self.pairs[:, 1], changed))

    def descend(self, groups: np.ndarray, which: np.ndarray) -> np.ndarray:
        """Apply improving splits on disjoint pairs until none improves; ``groups`` is changed in place."""
        while which.size:
            self.score_pairs(groups, which)
            cand = np.flatnonzero(self.gain > self.tol)
            cand = cand[np.argsort(-self.gain[cand], kind="stable")]
            used = np.zeros(self.n_groups, dtype=bool)
            changed = []
            for k in cand.tolist():
                ga, gb = self.pairs[k]
                if used[ga] or used[gb]:
                    continue
                used[ga] = used[gb] = True
                cols = np.concatenate([groups[ga], groups[gb]])
                groups[ga], groups[gb] = cols[self.scorer.first[self.best[k]]], cols[self.scorer.second[self.best[k]]]
                self.gain[k] = 0.0
                changed += [ga, gb]
            which = self.touching(np.array(changed, dtype=np.int64))
        return groups

    def run(self, rounds: int) -> np.ndarray:
        g, m = self.n_groups, self.m
        best = np.arange(g * m).reshape(g, m)
        best_value = self.value(best)
        current = best.copy()
        try:
            self.descend(current, np.arange(len(self.pairs)))
        except _OutOfTime:
            pass
        value = self.value(current)
        if value > best_value:
            best, best_value = current.copy(), value
        kick_max = min(g, 4)
        for _ in range(rounds if g > 1 else 0):
            current = best.copy()
            n = int(self.rng.integers(min(3, kick_max), kick_max + 1))
            chosen = np.sort(self.rng.choice(g, n, replace=False))
            current[chosen] = self.rng.permutation(current[chosen].reshape(-1)).reshape(n, m)
            try:
                self.descend(current, self.touching(chosen))
            except _OutOfTime:
                break
            value = self.value(current)
            if value > best_value:
                best, best_value = current.copy(), value
        return best


def nm_channel_permutation(weight, pattern="2:4", *, rounds: int = 200, time_limit: Optional[float] = None,
                           seed: int = 0, max_rows: int = 2048) -> np.ndarray:
    """A permutation of the input channels of ``weight`` under which an N:M mask keeps more magnitude.

    Args:
        weight: canonical weight ``(out, in, *kernel)`` (Linear ``(out, in)``); ``in`` must be a multiple of M.
        pattern: an N:M pattern name (``"2:4"`` prunes 2 of every 4) or a :class:`~sparsify.PatternNInM`.
        rounds: kicks of the iterated local search after the first descent (0: descent only).
        time_limit: seconds after which the search stops with the best assignment so far (None: no limit;
            a limit makes the result depend on the machine's speed).
        seed: seed of the kicks (and of the row sample and candidate pairs of large weights).
        max_rows: the search scores at most this many rows of the ``(out * kernel, in)`` matrix (a seeded
            sample); the result is always checked on the whole weight.

    Returns:
        int64 array ``perm`` of length ``in``: ``weight[:, perm]`` is the permuted weight (new channel ``j``
        is old channel ``perm[j]``). Channels of one group of M come in ascending order and groups are
        ordered by their first channel, so the identity is returned when nothing better is found.

    Raises:
        ValueError: pattern is not N:M, ``in`` is not a multiple of M, the weight holds NaN/inf, bad budget.
        TypeError: the weight is not real-valued.

    Example:
        >>> nm_channel_permutation(np.array([[1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]]), "2:4").tolist()
        [0, 1, 4, 5, 2, 3, 6, 7]
    """
    p = _nm_pattern(pattern)
    w = _checked_weight(weight, p)
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 0:
        raise ValueError(f"rounds must be an integer >= 0, got {rounds!r}")
    if time_limit is not None and (isinstance(time_limit, bool) or not isinstance(time_limit, (int, float))
                                   or not time_limit > 0):
        raise ValueError(f"time_limit must be None or a number of seconds > 0, got {time_limit!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer)) or max_rows < 1:
        raise ValueError(f"max_rows must be an integer >= 1, got {max_rows!r}")
    deadline = None if time_limit is None else time.monotonic() + float(time_limit)
    n_in = w.shape[1]
    a = np.abs(np.moveaxis(w, 1, -1).reshape(-1, n_in)).astype(np.float32)
    rng = np.random.default_rng(seed)
    if a.shape[0] > max_rows:
        a = a[np.sort(rng.choice(a.shape[0], max_rows, replace=False))]
    groups = _Search(np.ascontiguousarray(a), p.M, p.M - p.N, rng, deadline).run(int(rounds))
    groups = np.sort(groups, axis=1)
    perm = groups[np.argsort(groups[:, 0], kind="stable")].reshape(-1).astype(np.int64)
    identity = np.arange(n_in, dtype=np.int64)
    if nm_kept_magnitude(w, p, perm) <= nm_kept_magnitude(w, p, identity):
        return identity
    return perm
