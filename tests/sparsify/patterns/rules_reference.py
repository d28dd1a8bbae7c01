"""The canonical selection rules (docs/design.md, canonical rules) written plainly, with stable sorts, for property tests.

Nothing here is fast: every selection is a stable ``argsort`` of the unit
scores in the 2-D view's row-major order (rule 6), units touched by the
previous masks score ``-inf`` (rule 8), counts follow rule 5 and the global
walk follows rule 9. The fast kernels must give the same masks bit for bit.
:func:`shrunk_kernels` makes the kernels' chunks, samples and small-array
cut-offs tiny so that small hypothesis inputs run through every code path
(several chunks, sampled brackets, misses, reuse across allocation rounds).
"""
from __future__ import annotations

import contextlib
from unittest import mock

import numpy as np

from sparsify.layout import from_2d, to_2d
from sparsify.patterns import PatternNInM, PatternNxM


@contextlib.contextmanager
def shrunk_kernels(chunk: int = 64, sample: int = 16):
    """Tiny chunks and samples, no small-array shortcut: small inputs take the large-input paths."""
    with mock.patch("sparsify.selection.lowest_k._SMALL", 0), \
            mock.patch("sparsify.selection.kernel.CHUNK", chunk), \
            mock.patch.multiple("sparsify.selection.cut", _SAMPLE=sample, _SAMPLE_MAX=sample * 4):
        yield


def lowest(values: np.ndarray, k: int) -> np.ndarray:
    """Boolean mask of the k lowest of a flat array, ties to the lower index."""
    out = np.zeros(values.size, dtype=bool)
    out[np.argsort(values.reshape(-1), kind="stable")[:k]] = True
    return out


def n_in_m_groups(p: PatternNInM, seen2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The N lowest of every group (stable) and their float64 sum, added in group order from +0.0."""
    g = seen2d.reshape(-1, p.M)
    small = np.zeros(g.shape, dtype=bool)
    sums = np.zeros(g.shape[0], dtype=np.float64)
    for row in range(g.shape[0]):
        order = np.argsort(g[row], kind="stable")[: p.N]
        small[row, order] = True
        total = 0.0
        for i in range(p.M):
            if small[row, i]:
                total = float(np.float64(total) + np.float64(g[row, i]))
        sums[row] = total
    return small.reshape(seen2d.shape), sums


def units_of(p, s2: np.ndarray, pre2: np.ndarray | None):
    """(unit scores, pre-pruned units, element keep of a unit selection) for one 2-D view."""
    if isinstance(p, PatternNInM):
        seen = s2
        if pre2 is not None:
            s = s2 if s2.dtype.kind == "f" else s2.astype(np.float64)
            seen = np.where(pre2, s, np.finfo(s.dtype).min / (p.M + 1))
        small, sums = n_in_m_groups(p, seen)
        touched = None if pre2 is None else ~pre2.reshape(-1, p.M).all(axis=1)

        def expand(unit_keep):
            keep = ~small.reshape(-1, p.M)
            keep[unit_keep] = True
            return keep.reshape(s2.shape)
        return sums, touched, expand
    assert isinstance(p, PatternNxM) and p.block_score_reduce == "sum"
    br, bc = p.block_shape(s2.shape)
    r, c = s2.shape
    units = s2.reshape(r // br, br, c // bc, bc).sum(axis=(1, 3), dtype=np.float64).reshape(-1) \
        if (br, bc) != (1, 1) else s2.reshape(-1)
    touched = None if pre2 is None else ~pre2.reshape(r // br, br, c // bc, bc).all(axis=(1, 3)).reshape(-1)

    def expand(unit_keep):
        return np.repeat(np.repeat(unit_keep.reshape(r // br, c // bc), br, axis=0), bc, axis=1)
    return units, touched, expand


def _prepared(p, scores, pre_masks):
    out = {}
    for name, score in scores.items():
        s2 = to_2d(np.asarray(score))
        pre = None if pre_masks is None else pre_masks.get(name)
        pre2 = None if pre is None else to_2d(np.asarray(pre, dtype=bool))
        if pre2 is not None and pre2.all():
            pre2 = None
        units, touched, expand = units_of(p, s2, pre2)
        if touched is not None:
            units = np.where(touched, -np.inf, units)
        out[name] = (np.shape(score), units, pre2, expand)
    return out


def _finish(shape, pre2, expand, unit_pruned):
    keep2 = expand(~unit_pruned)
    if pre2 is not None:
        keep2 = keep2 & pre2
    return from_2d(keep2, shape)


def _limits(p, n_units, max_ratio):
    ceiling = min(p.max_ratio, 0.999999)
    lo = p.units_for_ratio(min(p.min_sparsity_ratio_per_layer, ceiling), n_units)
    hi = p.units_for_ratio(min(max_ratio, ceiling), n_units)
    return lo, max(lo, hi)


def masks_local(p, scores, ratio, pre_masks=None):
    """Rule 5 per layer, clamped to the per-layer min/max."""
    out = {}
    for name, (shape, units, pre2, expand) in _prepared(p, scores, pre_masks).items():
        lo, hi = _limits(p, units.size, p.max_sparsity_ratio_per_layer)
        k = min(max(p.units_for_ratio(ratio, units.size), lo), hi)
        out[name] = _finish(shape, pre2, expand, lowest(units, k))
    return out


def masks_global(p, scores, ratio, pre_masks=None):
    """Rule 9: walk all units in global order (score, layer order, index) until the clipped counts reach the total."""
    prep = _prepared(p, scores, pre_masks)
    names = list(prep)
    units = [prep[n][1] for n in names]
    limits = [_limits(p, u.size, p.max_sparsity_ratio_per_layer) for u in units]
    total = p.units_for_ratio(ratio, sum(u.size for u in units))
    total = min(max(total, sum(lo for lo, _ in limits)), sum(hi for _, hi in limits))
    flat = np.concatenate([u.astype(np.float64) for u in units])
    layer = np.concatenate([np.full(u.size, i) for i, u in enumerate(units)])
    order = np.argsort(flat, kind="stable")
    seen = np.zeros(len(names), dtype=int)

    def clipped():
        return [min(max(c, lo), hi) for c, (lo, hi) in zip(seen, limits)]
    t = 0
    while sum(clipped()) < total:
        seen[layer[order[t]]] += 1
        t += 1
    return {n: _finish(prep[n][0], prep[n][2], prep[n][3], lowest(prep[n][1], c)) for n, c in zip(names, clipped())}


__all__ = ["shrunk_kernels", "lowest", "n_in_m_groups", "units_of", "masks_local", "masks_global"]
