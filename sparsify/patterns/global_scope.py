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

from typing import Any, Mapping

import numpy as np

from ..parallel_layers import map_layers
from ..score_checks import NaNScoreError
from .allocation import allocate_pruned_units
from .layer_view import LayerView, fill_units, finish_mask, layer_view, select_units, unit_nan_error

__all__ = ["global_masks"]


def global_masks(pattern: Any, scores: Mapping[str, np.ndarray], ratio: float,
                 pre_masks: Mapping[str, np.ndarray] | None, max_ratio: float, *,
                 check_nan: bool) -> dict[str, np.ndarray]:
    """Masks of every layer with one cut over all their units (``ratio`` and ``max_ratio`` already checked).

    ``check_nan=False`` lets NaN reach the units (the selection raises
    :class:`~sparsify.score_checks.NaNScoreError` naming a layer);
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
    limits = {n: pattern.unit_limits(ly.n_units, max_ratio) for n, ly in layers.items()}
    n_all = sum(ly.n_units for ly in layers.values())
    total = pattern.units_for_ratio(ratio, n_all)
    total = min(max(total, sum(lo for lo, _ in limits.values())), sum(hi for _, hi in limits.values()))
    pending = {n: ly.score2d.size for n, ly in layers.items() if not ly.computed}
    # layers side by side (their unit scores are independent); the first failing layer in order raises
    map_layers(lambda n: fill_units(pattern, layers[n], 0 < total < n_all, check_nan), pending)
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
        return finish_mask(pattern, scores[name], layer, c if isinstance(c, np.ndarray) else select_units(layer, c))

    masks.update(map_layers(finish, {n: ly.score2d.size for n, ly in layers.items()}))
    return {n: masks[n] for n in scores}

