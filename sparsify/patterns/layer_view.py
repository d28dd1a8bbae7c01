"""One layer on its way to a mask: its view, earlier mask, unit scores, and the steps between them.

A :class:`~sparsify.patterns.Pattern` selects units on a *view* of each layer:
the 2-D view of :mod:`sparsify.layout`, or the canonical layout itself for an
element-wise pattern (ties still broken in the 2-D view's row-major order).
:func:`layer_view` makes the view and checks the layer fits, :func:`fill_units`
computes the unit scores, :func:`select_units` picks the units kept and
:func:`finish_mask` turns them back into an element mask of the layer's shape.

Example:
    >>> import numpy as np
    >>> from sparsify.patterns import get_pattern
    >>> pattern = get_pattern("1x2")
    >>> score = np.array([[1.0, 2.0, 5.0, 0.5]])
    >>> view = fill_units(pattern, layer_view(pattern, "fc", score, None), True, True)
    >>> view.units.tolist(), view.n_units
    ([[3.0, 5.5]], 2)
    >>> finish_mask(pattern, score, view, select_units(view, 1)).astype(int).tolist()
    [[0, 0, 1, 1]]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..layout import from_2d, to_2d
from ..selection.lowest_k import lowest_k_keep
from ..selection.score_checks import NaNScoreError

__all__ = ["LayerView", "layer_view", "fill_units", "select_units", "finish_mask", "unit_nan_error", "view_axes"]


def view_axes(ndim: int) -> tuple[int, ...]:
    """Axes that put a canonical weight of rank ``ndim`` in the order of its 2-D view (see :func:`to_2d`).

    Example:
        >>> view_axes(4)
        (0, 2, 3, 1)
    """
    return (0, *range(2, ndim), 1)


class LayerView:
    """One layer on its way to a mask: its view, earlier mask, unit scores and aux.

    Attributes:
        name: the layer name (for error messages).
        score2d: the scores on the view (2-D, or canonical for element-wise patterns).
        pre2d: the earlier mask on the view, None when everything was kept.
        tie_axes: axes that order ties as in the 2-D view (element-wise patterns on >= 3-D weights).
        n_units: number of units (None until the unit scores say it, for some patterns).
        units, aux: unit scores and what ``Pattern.expand_keep`` needs (set by :func:`fill_units`).
        eligible: units not touched by the earlier mask (None: all).
        computed: whether :func:`fill_units` ran.
    """

    __slots__ = ("name", "score2d", "pre2d", "tie_axes", "n_units", "units", "aux", "eligible", "computed")

    def __init__(self, name: str, score2d: np.ndarray, pre2d: np.ndarray | None, tie_axes, n_units: int | None):
        self.name, self.score2d, self.pre2d, self.tie_axes, self.n_units = name, score2d, pre2d, tie_axes, n_units
        self.units = self.aux = self.eligible = None
        self.computed = False


def unit_nan_error(pattern: Any, name: str, score2d: np.ndarray, error: NaNScoreError) -> ValueError:
    """The error for NaN unit scores: NaN element scores, or +inf and -inf in one unit."""
    if score2d.dtype.kind in "fc" and np.isnan(score2d).any():
        return error
    return ValueError(f"layer {name!r}: a unit of pattern {pattern.pattern!r} holds both +inf and -inf scores, "
                      "so its score is undefined; use one sign of infinity per unit")


def layer_view(pattern: Any, name: str, score: np.ndarray, pre_mask: np.ndarray | None,
               two_d: bool = False) -> LayerView | None:
    """The layer's view (2-D, or the canonical layout for element-wise patterns unless ``two_d``) and
    earlier mask; None if the layer does not fit and ``skip_incompatible_layers`` leaves it dense."""
    score = np.asarray(score)
    if score.ndim == 0:
        raise ValueError(f"layer {name!r}: scores must have at least 1 dimension, got a scalar")
    tie_axes = None
    if pattern.elementwise and not two_d:           # units are elements: no 2-D copy, ties still in 2-D order
        s2 = score
        shape2d = (1, score.size) if score.ndim == 1 else (score.shape[0], score.size // max(score.shape[0], 1))
        if score.ndim >= 3:
            tie_axes = view_axes(score.ndim)
    else:
        s2 = to_2d(score)
        shape2d = s2.shape
    reason = pattern.fits(shape2d)
    if reason is not None:
        if pattern.skip_incompatible_layers:
            return None
        raise ValueError(f"layer {name!r} with 2-D view {shape2d} does not fit pattern {pattern.pattern!r}: "
                         f"{reason} (set skip_incompatible_layers=True to leave such layers dense)")
    pre2 = None
    if pre_mask is not None:
        pre_mask = np.asarray(pre_mask)
        if pre_mask.shape != score.shape:
            raise ValueError(f"layer {name!r}: pre_mask shape {pre_mask.shape} differs from scores shape {score.shape}")
        pre2 = pre_mask.astype(bool, copy=False)
        if not pattern.elementwise or two_d:
            pre2 = to_2d(pre2)
        if pre2.all():
            pre2 = None
    return LayerView(name, s2, pre2, tie_axes, pattern.unit_count(shape2d))


def fill_units(pattern: Any, layer: LayerView, need_scores: bool, check_nan: bool) -> LayerView:
    """Fill in the layer's unit scores (None when not needed and skipped) and aux (raises NaNScoreError)."""
    layer.units, layer.aux = pattern.layer_units(layer.name, layer.score2d, layer.pre2d, need_scores, check_nan)
    layer.computed = True
    if layer.units is not None:
        layer.n_units = int(layer.units.size)
        if layer.pre2d is not None:                 # units touched before score -inf in the selection
            eligible = layer.pre2d if pattern.elementwise else ~pattern.unit_pre_pruned(layer.pre2d)
            layer.eligible = np.broadcast_to(eligible, layer.units.shape)
    return layer


def select_units(layer: LayerView, k: int) -> np.ndarray:
    """Flat keep mask of the layer's units with the ``k`` lowest pruned (ties: lower index first)."""
    if layer.units is None:                         # every unit or none: the pattern skipped the scores
        return np.full(layer.n_units, k == 0, dtype=bool)
    return lowest_k_keep(layer.units, k, layer.name, tie_axes=layer.tie_axes, eligible=layer.eligible)


def finish_mask(pattern: Any, score: np.ndarray, layer: LayerView, unit_keep: np.ndarray) -> np.ndarray:
    """The element mask (shape of ``score``) from the kept units, within the earlier mask."""
    keep2 = pattern.expand_keep(unit_keep, layer.score2d, layer.aux)
    if layer.pre2d is not None:
        keep2 = keep2 & layer.pre2d
    return keep2.reshape(np.shape(score)) if pattern.elementwise else from_2d(keep2, np.shape(score))
