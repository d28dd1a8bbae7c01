"""ERK scope: per-layer sparsity from the layer's shape (Erdős–Rényi-Kernel), each layer ranked within itself.

RigL (Evci et al. 2020) keeps in layer ``l`` a density proportional to
``sum(shape) / prod(shape)`` of its weight ``(out, in, *kernel)``: the
``(in + out + kernel) / (in * out * kernel)`` of the paper, so small layers (a first
convolution, the classifier) stay denser and wide ones carry the sparsity. The
densities are scaled by one factor so the kept total is the scheduled one, each
layer clamped to ``[min, max]_sparsity_ratio_per_layer`` (and dense at most); the
whole numbers come from the largest remainders (ties: the earlier layer), so the
total number of pruned weights is exact, as in global scope. Within a layer the
lowest scores go, as in local scope. Everything is plain Python float arithmetic
on the shapes: the same counts on every machine and in every framework.

Example:
    >>> shapes = {"conv1": (25, 1, 5), "conv2": (25, 25, 3), "fc": (10, 125)}    # 95% of 3,125 weights
    >>> erk_prune_counts(shapes, {"conv1": (0, 124), "conv2": (0, 1874), "fc": (0, 1249)}, 2969)
    {'conv1': 85, 'conv2': 1807, 'fc': 1077}
    >>> import numpy as np
    >>> from sparsify.patterns import get_pattern
    >>> scores = {"a": np.arange(4.0).reshape(2, 2), "b": np.arange(12.0).reshape(2, 6)}
    >>> {n: m.astype(int).tolist() for n, m in erk_masks(get_pattern("1x1"), scores, 0.5, None, 0.98).items()}
    {'a': [[0, 1], [1, 1]], 'b': [[0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1]]}
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

__all__ = ["erk_weight", "erk_prune_counts", "erk_layer_ratios", "erk_masks"]

_BISECTIONS = 200            # the scale factor to the last bit (float halving converges far sooner)


def erk_weight(shape: tuple[int, ...]) -> float:
    """A layer's relative ERK density ``sum(shape) / prod(shape)`` (1.0 for fewer than two axes).

    Example:
        >>> erk_weight((25, 1, 5)), erk_weight((10, 125))
        (0.248, 0.108)
    """
    dims = [int(d) for d in shape]
    if len(dims) < 2:
        return 1.0
    return float(sum(dims)) / float(math.prod(dims))


def erk_prune_counts(shapes: Mapping[str, tuple[int, ...]], limits: Mapping[str, tuple[int, int]],
                     total: int) -> dict[str, int]:
    """Pruned weights per layer: ERK densities scaled to prune ``total``, each within its ``(lo, hi)``.

    Args:
        shapes: canonical weight shape per layer (their order breaks ties).
        limits: fewest and most weights each layer may prune.
        total: weights to prune over all layers (clamped to what the limits allow).
    """
    sizes = {n: int(math.prod(s)) for n, s in shapes.items()}
    total = min(max(int(total), sum(lo for lo, _ in limits.values())), sum(hi for _, hi in limits.values()))
    keep_total = sum(sizes.values()) - total
    # kept(n) = size * density, the density eps * weight clamped to the layer's limits
    lo_keep = {n: sizes[n] - limits[n][1] for n in sizes}
    hi_keep = {n: sizes[n] - limits[n][0] for n in sizes}
    weight = {n: erk_weight(shapes[n]) * sizes[n] for n in sizes}

    def kept(eps: float) -> dict[str, float]:
        return {n: min(max(eps * weight[n], float(lo_keep[n])), float(hi_keep[n])) for n in sizes}

    lo, hi = 0.0, 1.0
    while sum(kept(hi).values()) < keep_total and hi < 1e300:
        hi *= 2.0
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            break
        if sum(kept(mid).values()) < keep_total:
            lo = mid
        else:
            hi = mid
    real = kept(hi)
    whole = {n: min(max(int(math.floor(real[n])), lo_keep[n]), hi_keep[n]) for n in sizes}
    short = keep_total - sum(whole.values())
    order = sorted(sizes, key=lambda n: (-(real[n] - whole[n]), list(sizes).index(n)))
    while short:                              # largest remainders get the missing units (ties: earlier layer)
        step = 1 if short > 0 else -1
        room = [n for n in (order if step > 0 else order[::-1])
                if lo_keep[n] <= whole[n] + step <= hi_keep[n]]
        for n in room[:abs(short)]:
            whole[n] += step
            short -= step
        if not room:                          # pragma: no cover - the clamped total always fits the limits
            break
    return {n: sizes[n] - whole[n] for n in sizes}


def erk_layer_ratios(pattern: Any, shapes: Mapping[str, tuple[int, ...]], ratio: float,
                     max_ratio: float) -> dict[str, float]:
    """Each layer's sparsity under ERK at the overall ``ratio`` (layers of no weights: 0.0).

    The ratios are whole counts over layer sizes, so a layer given its ratio prunes
    exactly its count (the sharded selection of FSDP2 uses them per layer).

    Example:
        >>> from sparsify.patterns import get_pattern
        >>> erk_layer_ratios(get_pattern("1x1"), {"a": (2, 2), "b": (2, 6)}, 0.5, 0.98)
        {'a': 0.25, 'b': 0.5833333333333334}
    """
    live = {n: tuple(int(d) for d in s) for n, s in shapes.items() if math.prod(s)}
    limits = {n: pattern.unit_limits(math.prod(s), max_ratio) for n, s in live.items()}
    counts = erk_prune_counts(live, limits, pattern.units_for_ratio(ratio, sum(math.prod(s) for s in live.values())))
    return {n: counts[n] / math.prod(live[n]) if n in live else 0.0 for n in shapes}


def erk_masks(pattern: Any, scores: Mapping[str, np.ndarray], ratio: float,
              pre_masks: Mapping[str, np.ndarray] | None, max_ratio: float) -> dict[str, np.ndarray]:
    """Masks with ERK per-layer counts (``ratio`` and ``max_ratio`` already checked), each layer local.

    ``pattern`` is an element pattern (``"1x1"``); a layer of no weights stays as it is.
    """
    ratios = erk_layer_ratios(pattern, {n: np.shape(s) for n, s in scores.items()}, ratio, max_ratio)
    out = {}
    for name, score in scores.items():
        pre = None if pre_masks is None else pre_masks.get(name)
        out[name] = pattern.get_masks_local({name: score}, ratios[name], None if pre is None else {name: pre},
                                            max_ratio)[name]
    return out
