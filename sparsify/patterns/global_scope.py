"""Global scope: one threshold over every layer's units, with an exact total and per-layer clamps.

:func:`global_masks` is what :meth:`sparsify.Pattern.get_masks_global` computes
after checking its arguments: every layer's view and unit scores
(:mod:`sparsify.patterns.layer_view`), the exact number of units to prune over
all layers within each layer's min/max, then the cut
(:func:`~sparsify.patterns.allocation.allocate_pruned_units`; ties broken by
layer order, then by index).

Example:
    >>> import numpy as np
    >>> from sparsify.patterns import get_pattern
    >>> scores = {"a": np.array([[4.0, 1.0]]), "b": np.array([[2.0, 3.0]])}
    >>> masks = global_masks(get_pattern("1x1"), scores, 0.5, None, 0.98, check_nan=True)
    >>> {n: m.astype(int).tolist() for n, m in masks.items()}
    {'a': [[1, 0]], 'b': [[0, 1]]}
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from ..layout import view_shape
from ..parallel_layers import map_layers
from ..selection.score_checks import NaNScoreError
from .allocation import allocate_pruned_units
from .layer_view import LayerView, fill_units, finish_mask, layer_view, select_units, unit_nan_error

__all__ = ["global_masks", "global_masks_by_layer"]


def global_masks(pattern: Any, scores: Mapping[str, np.ndarray], ratio: float,
                 pre_masks: Mapping[str, np.ndarray] | None, max_ratio: float, *,
                 check_nan: bool) -> dict[str, np.ndarray]:
    """Masks of every layer with one cut over all their units (``ratio`` and ``max_ratio`` already checked).

    ``check_nan=False`` lets NaN reach the units (the selection raises
    :class:`~sparsify.selection.score_checks.NaNScoreError` naming a layer);
    ``check_nan=True`` checks every layer's elements first (the documented order of errors).
    """
    masks: dict[str, np.ndarray] = {}
    layers: dict[str, LayerView] = {}
    for name, score in scores.items():
        pre = None if pre_masks is None else pre_masks.get(name)
        layer = layer_view(pattern, name, score, pre)
        if layer is None:
            masks[name] = np.ones(np.shape(score), dtype=bool) if pre is None else np.asarray(pre, bool).copy()
        else:
            layers[name] = layer
            if layer.n_units is None or check_nan:
                fill_units(pattern, layer, True, check_nan)
    if not layers:
        return masks
    total, n_all = _total(pattern, {n: ly.n_units for n, ly in layers.items()}, ratio, max_ratio)
    pending = {n: ly.score2d.size for n, ly in layers.items() if not ly.computed}
    # layers side by side (their unit scores are independent); the first failing layer in order raises
    map_layers(lambda n: fill_units(pattern, layers[n], 0 < total < n_all, check_nan), pending)
    masks.update(_cut(pattern, layers, {n: np.shape(scores[n]) for n in layers}, ratio, max_ratio, check_nan))
    return {n: masks[n] for n in scores}


def _total(pattern: Any, n_units: Mapping[str, int], ratio: float, max_ratio: float) -> tuple[int, int]:
    """(units to prune over all layers within each layer's min/max, units of all layers)."""
    limits = [pattern.unit_limits(n, max_ratio) for n in n_units.values()]
    n_all = sum(n_units.values())
    total = pattern.units_for_ratio(ratio, n_all)
    return min(max(total, sum(lo for lo, _ in limits)), sum(hi for _, hi in limits)), n_all


def _cut(pattern: Any, layers: dict[str, LayerView], shapes: Mapping[str, tuple[int, ...]], ratio: float,
         max_ratio: float, check_nan: bool) -> dict[str, np.ndarray]:
    """The masks of ``layers`` (unit scores filled in) from one cut over all their units."""
    limits = {n: pattern.unit_limits(ly.n_units, max_ratio) for n, ly in layers.items()}
    total, n_all = _total(pattern, {n: ly.n_units for n, ly in layers.items()}, ratio, max_ratio)
    if any(ly.units is None for ly in layers.values()):     # every unit or none: no cut to make
        counts = {n: (ly.n_units if total else 0) for n, ly in layers.items()}
    else:
        units = {n: ly.units for n, ly in layers.items()}
        try:
            counts = allocate_pruned_units(units, limits, total, {n: ly.tie_axes for n, ly in layers.items()},
                                           {n: ly.eligible for n, ly in layers.items()})
        except NaNScoreError as e:
            if not check_nan:
                raise
            # elements were checked: +inf and -inf in one unit (not one pruned before)
            bad = next(n for n, u in units.items() if u.dtype.kind in "fc" and np.isnan(
                u if layers[n].eligible is None else np.where(layers[n].eligible, u, 0)).any())
            raise unit_nan_error(pattern, bad, layers[bad].score2d, e) from None

    def finish(name: str) -> np.ndarray:
        c, layer = counts[name], layers[name]
        shape_only = np.broadcast_to(np.zeros((), dtype=bool), shapes[name])    # finish_mask reads its shape
        return finish_mask(pattern, shape_only, layer, c if isinstance(c, np.ndarray) else select_units(layer, c))

    return map_layers(finish, {n: ly.score2d.size for n, ly in layers.items()})


def global_masks_by_layer(pattern: Any, score_of: Callable[[str], np.ndarray], shapes: Mapping[str, tuple[int, ...]],
                          ratio: float, pre_masks: Mapping[str, np.ndarray] | None,
                          max_ratio: float) -> dict[str, np.ndarray]:
    """:func:`global_masks` (``check_nan=False``) of layers whose scores ``score_of(name)`` makes one layer at a
    time: each layer's element scores are dropped once its unit scores are known, so an update holds the unit
    scores of every layer (a quarter of the element scores for 4x1 blocks) instead of every layer's scores.
    Only for patterns of :func:`can_score_layer_by_layer`. Raises :class:`~sparsify.selection.score_checks.NaNScoreError`
    like ``global_masks(check_nan=False)``: the caller then runs the full path for the documented error.

    Example:
        >>> from sparsify.patterns import get_pattern
        >>> scores = {"a": np.array([[4.0], [1.0]]), "b": np.array([[2.0], [3.0]])}
        >>> masks = global_masks_by_layer(get_pattern({"pattern": "1x1", "pruning_scope": "global"}), scores.get,
        ...                               {n: s.shape for n, s in scores.items()}, 0.5, None, 0.98)
        >>> {n: m.ravel().astype(int).tolist() for n, m in masks.items()}
        {'a': [1, 0], 'b': [0, 1]}
    """
    n_units: dict[str, int | None] = {}
    for name, shape in shapes.items():
        shape2d = view_shape(shape, name)
        if pattern.fits(shape2d) is not None and pattern.skip_incompatible_layers:
            continue                                # left dense (a misfit otherwise raises in layer_view)
        n_units[name] = pattern.unit_count(shape2d)
    need = True
    if n_units and None not in n_units.values():    # every unit or none: the unit scores are not needed
        total, n_all = _total(pattern, n_units, ratio, max_ratio)
        need = 0 < total < n_all

    def units_of(name: str) -> LayerView | None:
        pre = None if pre_masks is None else pre_masks.get(name)
        layer = layer_view(pattern, name, score_of(name), pre)
        if layer is not None:
            fill_units(pattern, layer, need, False)
            layer.score2d = np.broadcast_to(np.zeros((), layer.score2d.dtype), layer.score2d.shape)  # shape only
        return layer

    viewed = map_layers(units_of, {n: int(np.prod(s, dtype=np.int64)) for n, s in shapes.items()})
    masks = {}
    for name, layer in viewed.items():
        if layer is None:
            pre = None if pre_masks is None else pre_masks.get(name)
            masks[name] = np.ones(shapes[name], dtype=bool) if pre is None else np.asarray(pre, bool).copy()
    layers = {n: ly for n, ly in viewed.items() if ly is not None}
    if layers:
        masks.update(_cut(pattern, layers, shapes, ratio, max_ratio, False))
    return {n: masks[n] for n in shapes}
