"""Global allocation: how many units each layer prunes under one threshold (DESIGN rule 9).

Example:
    >>> import numpy as np
    >>> units = {"a": np.array([0.1, 0.2, 0.3]), "b": np.array([0.05, 5.0, 6.0])}
    >>> out = allocate_pruned_units(units, {"a": (0, 1), "b": (0, 2)}, 3)
    >>> {n: (v if isinstance(v, int) else v.tolist()) for n, v in out.items()}
    {'a': 1, 'b': [False, False, True]}
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..selection import lowest_k_keep

__all__ = ["allocate_pruned_units"]


def allocate_pruned_units(units: Mapping[str, np.ndarray], limits: Mapping[str, tuple[int, int]],
                          total: int) -> dict[str, int | np.ndarray]:
    """Pruned-unit count per layer, or the kept-unit array where the global cut is used as is.

    ``units`` are the unit scores of each layer (dict order breaks ties
    between layers, then the flat index), ``limits[name] = (lo, hi)`` the
    fewest and most units the layer may prune, ``total`` the number to prune
    over all layers (already within the sums of the limits).

    The answer is defined by walking all units in global order (score, then
    layer order, then index): after the first tau units, layer l prunes
    ``clip(c_l(tau), lo_l, hi_l)``, where ``c_l(tau)`` counts its units among
    them; tau is the first point where the counts add up to ``total``. Each
    round cuts the free layers at the remaining budget; if clipping would add
    units some layer is surely held at its minimum, if it would remove units
    some layer is surely held at its maximum. Fix those, repeat.

    A layer's entry is an int (prune that many of its own lowest units) or a
    boolean keep array of its units (shape of ``units[name]``).
    """
    sizes = {n: int(u.size) for n, u in units.items()}
    fixed: dict[str, int] = {}
    for _ in range(len(units) + 1):
        free = [n for n in units if n not in fixed]
        budget = total - sum(fixed.values())
        if not free:
            return fixed
        flat = np.concatenate([units[n].reshape(-1) for n in free]) if len(free) > 1 \
            else units[free[0]].reshape(-1)
        kept = lowest_k_keep(flat, min(max(budget, 0), flat.size), "global scores")
        parts, off = {}, 0
        for n in free:
            parts[n] = kept[off:off + sizes[n]].reshape(units[n].shape)
            off += sizes[n]
        counts = {n: sizes[n] - int(np.count_nonzero(parts[n])) for n in free}
        clipped = {n: min(max(c, limits[n][0]), limits[n][1]) for n, c in counts.items()}
        excess = sum(clipped.values()) - budget
        if excess == 0:
            return {**fixed, **{n: parts[n] if clipped[n] == counts[n] else clipped[n] for n in free}}
        for n in free:
            if excess > 0 and counts[n] < limits[n][0]:
                fixed[n] = limits[n][0]
            elif excess < 0 and counts[n] > limits[n][1]:
                fixed[n] = limits[n][1]
    raise RuntimeError("global allocation did not converge")  # pragma: no cover
