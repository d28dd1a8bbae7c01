"""A plain, slow reference of the canonical mask rules (docs/design.md, canonical rules), for the parity tests.

Written from the rules alone: it imports nothing from ``sparsify`` and sorts where the library
selects in linear time, so a layout or ordering bug that every adapter shares still shows up as a
difference from this reference. Weights are handed over as their **2-D views** (rows = output
channels, columns = the reduction with the input channel fastest), in the model's weight order.

Rules encoded here (docs/design.md, canonical rules, docs/core.md):

* units: an element (``"1x1"``), a block of N rows by M columns (``"NxM"``), all rows by M columns
  (``"channelxM"``), N rows by all columns (``"Nxchannel"``), or an N:M group of M consecutive
  weights along the last axis of the 2-D view;
* a block scores the sum of its element scores (magnitudes), an N:M group the sum of its N
  smallest; ties go to the lower flat index (row-major), so units are ordered by (score, index);
* exact counts: fraction s of n units prunes ``k = min(ceil(s*n - 0.5), n - 1)`` (halves round down); ``"N:M"`` at
  ratio r <= N/M prunes the lowest fraction r/(N/M) of the groups N:M (``ceil(f*G - 0.5)`` of
  G groups, all of them at r = N/M) and leaves the others dense;
* monotone: units pruned at an earlier update score lowest (-inf) and the new mask is intersected
  with the old one;
* global scope: all layers' units in one order (score, then the model's weight order, then the
  flat index); after the first tau units of that order, layer l prunes ``clip(c_l(tau), min_l,
  max_l)`` of its own lowest units, with tau the first point where these add up to the exact total;
  the caps are the exact counts of ``max_sparsity_ratio_per_layer`` (0.98) and
  ``min_sparsity_ratio_per_layer`` (0.0) on the layer's units (an N:M layer can always take all
  its groups: it never exceeds N/M < 0.98);
* the gradual schedule: 0 before ``start_step``, ``init`` at it, ``init + (t - init)(1 - (1-p)^3)``
  strictly inside, ``t`` at and after ``end_step``; updates at the start, at the end and every
  ``pruning_frequency`` steps between; the masks at a step are those of the last update point.

Example:
    >>> import numpy as np
    >>> w = np.array([[0.1, 5.0, 0.2, 6.0, 0.3, 7.0],
    ...               [0.4, 5.0, 0.5, 6.0, 0.6, 7.0],
    ...               [0.7, 5.0, 0.8, 6.0, 0.9, 7.0],
    ...               [9.0, 9.0, 9.0, 9.0, 9.0, 9.0]])
    >>> print(picture(local_masks({"w": w}, "channelx1", 0.5)["w"]))
    . x . x . x
    . x . x . x
    . x . x . x
    . x . x . x
    >>> print(picture(local_masks({"w": w}, "1xchannel", 0.5)["w"]))
    . . . . . .
    . . . . . .
    x x x x x x
    x x x x x x
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

__all__ = ["Blocks", "NofM", "parse_pattern", "exact_count", "units", "local_masks", "global_masks",
           "gradual_sparsity", "update_ready", "mask_history", "picture"]


@dataclass(frozen=True)
class Blocks:
    """Blocks of ``rows`` x ``cols`` of the 2-D view; None = the whole axis ("channel")."""

    rows: int | None
    cols: int | None


@dataclass(frozen=True)
class NofM:
    """N pruned of every M consecutive weights along the last axis of the 2-D view."""

    n: int
    m: int


def parse_pattern(name: str) -> Blocks | NofM:
    """``"2x2"`` -> Blocks(2, 2), ``"channelx2"`` -> Blocks(None, 2), ``"2:4"`` -> NofM(2, 4).

    Example:
        >>> parse_pattern("2xchannel"), parse_pattern("1:4")
        (Blocks(rows=2, cols=None), NofM(n=1, m=4))
    """
    m = re.fullmatch(r"(\d+):(\d+)", name)
    if m:
        return NofM(int(m.group(1)), int(m.group(2)))
    m = re.fullmatch(r"(\d+|channel)x(\d+|channel)", name)
    if not m or m.group(1) == m.group(2) == "channel":
        raise ValueError(f"reference: unknown pattern {name!r}")
    return Blocks(*(None if g == "channel" else int(g) for g in m.groups()))


def _round_half_down(x: float) -> int:
    """ceil(x - 0.5), refusing values whose rounding a last-bit difference could flip."""
    v = x - 0.5
    if v != math.ceil(v) and abs(v - round(v)) < 1e-9:
        raise ValueError(f"reference: {x!r} is too close to a rounding boundary to be a fair test case")
    return math.ceil(v)


def exact_count(fraction: float, n: int) -> int:
    """Units pruned for ``fraction`` of ``n`` units: min(ceil(s*n - 0.5), n - 1).

    Example:
        >>> exact_count(0.5, 5), exact_count(0.98, 120), exact_count(0.9, 4)
        (2, 118, 3)
    """
    return min(_round_half_down(fraction * n), n - 1)


def units(shape: tuple[int, int], pattern: Blocks | NofM) -> list[np.ndarray]:
    """The units of a 2-D view as arrays of flat (row-major) indices, in unit index order.

    Example:
        >>> [u.tolist() for u in units((2, 4), Blocks(None, 2))]
        [[0, 1, 4, 5], [2, 3, 6, 7]]
        >>> [u.tolist() for u in units((2, 4), NofM(2, 4))]
        [[0, 1, 2, 3], [4, 5, 6, 7]]
    """
    rows, cols = shape
    flat = np.arange(rows * cols).reshape(rows, cols)
    if isinstance(pattern, NofM):
        if cols % pattern.m:
            raise ValueError(f"reference: {cols} columns are not groups of {pattern.m}")
        return [flat[r, g:g + pattern.m] for r in range(rows) for g in range(0, cols, pattern.m)]
    br = rows if pattern.rows is None else pattern.rows
    bc = cols if pattern.cols is None else pattern.cols
    if rows % br or cols % bc:
        raise ValueError(f"reference: a {rows}x{cols} view is not blocks of {br}x{bc}")
    return [flat[r:r + br, c:c + bc].ravel() for r in range(0, rows, br) for c in range(0, cols, bc)]


def _element_scores(view: np.ndarray, pre_mask: np.ndarray | None) -> np.ndarray:
    scores = np.abs(np.asarray(view, dtype=np.float64)).ravel()
    if pre_mask is not None:
        scores = np.where(pre_mask.ravel(), scores, -np.inf)
    return scores


def _unit_scores(scores: np.ndarray, layer_units: list[np.ndarray], pattern: Blocks | NofM) -> list[float]:
    if isinstance(pattern, NofM):
        return [math.fsum(sorted(scores[u].tolist())[:pattern.n]) for u in layer_units]
    return [math.fsum(scores[u].tolist()) for u in layer_units]


def _lowest(scores: list[float], k: int) -> list[int]:
    """Indices of the k lowest scores, ties to the lower index."""
    return sorted(range(len(scores)), key=lambda i: (scores[i], i))[:k]


def _prune(shape, scores, layer_units, chosen, pattern) -> np.ndarray:
    keep = np.ones(shape[0] * shape[1], dtype=bool)
    for u in chosen:
        idx = layer_units[u]
        if isinstance(pattern, NofM):       # the N smallest of the group, ties to the lower index
            idx = idx[sorted(range(len(idx)), key=lambda j: (scores[idx[j]], j))[:pattern.n]]
        keep[idx] = False
    return keep.reshape(shape)


def _group_fraction(sparsity: float, pattern: NofM) -> float:
    if sparsity > pattern.n / pattern.m:
        raise ValueError(f"reference: sparsity {sparsity} > N/M for {pattern}")
    return sparsity / (pattern.n / pattern.m)


def local_masks(views: Mapping[str, np.ndarray], pattern: str, sparsity: float,
                pre_masks: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every layer pruned to ``sparsity`` on its own; masks are 2-D, True = kept.

    Example:
        >>> w = np.array([[1., 3., 2., 2., 0.5, 4., 4., 1.]])
        >>> local_masks({"w": w}, "1x1", 0.25)["w"].astype(int).tolist()   # 0.5, then the first 1.0
        [[0, 1, 1, 1, 0, 1, 1, 1]]
        >>> local_masks({"w": w}, "2:4", 0.5)["w"].astype(int).tolist()
        [[0, 1, 0, 1, 0, 1, 1, 0]]
    """
    spec = parse_pattern(pattern)
    out = {}
    for name, view in views.items():
        pre = None if pre_masks is None else pre_masks[name]
        scores = _element_scores(view, pre)
        layer_units = units(view.shape, spec)
        unit_scores = _unit_scores(scores, layer_units, spec)
        n = len(layer_units)
        if isinstance(spec, NofM):
            k = min(_round_half_down(_group_fraction(sparsity, spec) * n), n)
        else:
            k = exact_count(sparsity, n)
        mask = _prune(view.shape, scores, layer_units, _lowest(unit_scores, k), spec)
        out[name] = mask if pre is None else mask & pre
    return out


def global_masks(views: Mapping[str, np.ndarray], pattern: str, sparsity: float,
                 pre_masks: Mapping[str, np.ndarray] | None = None, *, max_ratio: float = 0.98,
                 min_ratio: float = 0.0) -> dict[str, np.ndarray]:
    """One threshold over all layers (in ``views`` order), with per-layer caps; 2-D masks.

    Example (the second layer is the lowest but keeps ``n - exact_count(0.98, n)`` units):
        >>> w = {"a": np.full((1, 4), 2.0), "b": np.full((1, 4), 1.0)}
        >>> {n: m.astype(int).tolist() for n, m in global_masks(w, "1x1", 0.5).items()}
        {'a': [[0, 1, 1, 1]], 'b': [[0, 0, 0, 1]]}
    """
    spec = parse_pattern(pattern)
    names = list(views)
    per_layer = []                                    # (scores, units, unit scores)
    order = []                                        # (score, layer, unit)
    for li, name in enumerate(names):
        view = views[name]
        scores = _element_scores(view, None if pre_masks is None else pre_masks[name])
        layer_units = units(view.shape, spec)
        unit_scores = _unit_scores(scores, layer_units, spec)
        per_layer.append((scores, layer_units, unit_scores))
        order.extend((s, li, u) for u, s in enumerate(unit_scores))
    order.sort()
    sizes = [len(p[1]) for p in per_layer]
    total = sum(sizes)
    if isinstance(spec, NofM):
        target = min(_round_half_down(_group_fraction(sparsity, spec) * total), total)
        if spec.n / spec.m > max_ratio:
            raise ValueError("reference: an N:M cap below N/M is not modelled")
        hi = list(sizes)
        lo = [0] * len(sizes) if min_ratio == 0 else None
        if lo is None:
            raise ValueError("reference: an N:M floor is not modelled")
    else:
        target = exact_count(sparsity, total)
        hi = [exact_count(max_ratio, n) for n in sizes]
        lo = [exact_count(min_ratio, n) for n in sizes]
    counts = [0] * len(sizes)
    pruned = [min(max(0, lo[i]), hi[i]) for i in range(len(sizes))]
    tau = 0
    while sum(pruned) != target:                      # walk the global order
        if tau == len(order):
            raise ValueError("reference: the caps cannot reach the total")
        li = order[tau][1]
        counts[li] += 1
        pruned[li] = min(max(counts[li], lo[li]), hi[li])
        tau += 1
    out = {}
    for li, name in enumerate(names):
        scores, layer_units, unit_scores = per_layer[li]
        mask = _prune(views[name].shape, scores, layer_units, _lowest(unit_scores, pruned[li]), spec)
        out[name] = mask if pre_masks is None else mask & pre_masks[name]
    return out


def gradual_sparsity(step: int, cfg: Mapping) -> float:
    """The seed's gradual schedule (exponent 3) at ``step``.

    Example:
        >>> cfg = {"init_sparsity": 0.0, "target_sparsity": 0.5, "start_step": 1, "end_step": 5}
        >>> [gradual_sparsity(s, cfg) for s in (0, 1, 3, 5, 9)]
        [0.0, 0.0, 0.4375, 0.5, 0.5]
    """
    start, end = cfg["start_step"], cfg["end_step"]
    init, final = cfg.get("init_sparsity", 0.0), cfg["target_sparsity"]
    if step < start:
        return 0.0
    if step >= end:
        return final
    if step == start:
        return init
    p = (step - start) / (end - start)
    return init + (final - init) * (1.0 - (1.0 - p) ** 3)


def update_ready(step: int, cfg: Mapping) -> bool:
    """An update point: the start, the end, and every ``pruning_frequency`` steps between.

    Example:
        >>> cfg = {"start_step": 1, "end_step": 6, "pruning_frequency": 2}
        >>> [s for s in range(9) if update_ready(s, cfg)]
        [1, 3, 5, 6]
    """
    start, end, freq = cfg["start_step"], cfg["end_step"], cfg["pruning_frequency"]
    if step in (start, end):
        return True
    return start < step < end and (freq <= 0 or (step - start) % freq == 0)


def mask_history(views: Mapping[str, np.ndarray], cfg: Mapping, steps: int) -> list[dict[str, np.ndarray]]:
    """2-D masks in use at steps 0 .. steps-1 of a run whose weights stay fixed (learning rate 0).

    ``cfg`` holds ``target_sparsity``, ``init_sparsity``, ``pattern``, ``pruning_scope``,
    ``start_step``, ``end_step``, ``pruning_frequency`` (gradual schedule, leave_enabled).
    """
    select = global_masks if cfg.get("pruning_scope", "local") == "global" else local_masks
    masks = {n: np.ones(v.shape, dtype=bool) for n, v in views.items()}
    history = []
    for step in range(steps):
        if update_ready(step, cfg):
            masks = select(views, cfg["pattern"], gradual_sparsity(step, cfg), masks)
        history.append(dict(masks))
    return history


def picture(mask: np.ndarray) -> str:
    """A 2-D mask drawn with ``x`` (kept) and ``.`` (pruned)."""
    return "\n".join(" ".join("x" if v else "." for v in row) for row in np.asarray(mask))
