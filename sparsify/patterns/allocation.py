"""Global allocation: how many units each layer prunes under one threshold (docs/design.md, rule 9).

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

from ..selection.lowest_k_cut import LowestKCut

__all__ = ["allocate_pruned_units", "allocate_on_cut"]


def allocate_pruned_units(units: Mapping[str, np.ndarray], limits: Mapping[str, tuple[int, int]],
                          total: int, tie_axes: Mapping[str, tuple[int, ...] | None] | None = None,
                          eligible: Mapping[str, np.ndarray | None] | None = None) -> dict[str, int | np.ndarray]:
    """Pruned-unit count per layer, or the kept-unit array where the global cut is used as is.

    ``units`` are the unit scores of each layer (dict order breaks ties
    between layers, then the flat index, or the flat index of
    ``units[name].transpose(tie_axes[name])`` where given), ``limits[name] = (lo, hi)``
    the fewest and most units the layer may prune, ``total`` the number to
    prune over all layers (already within the sums of the limits). Where
    ``eligible[name]`` is False a unit scores ``-inf`` (pruned before).

    The answer is defined by walking all units in global order (score, then
    layer order, then index): after the first tau units, layer l prunes
    ``clip(c_l(tau), lo_l, hi_l)``, where ``c_l(tau)`` counts its units among
    them; tau is the first point where the counts add up to ``total``. Each
    round cuts the free layers at the remaining budget; if clipping would add
    units some layer is surely held at its minimum, if it would remove units
    some layer is surely held at its maximum. Fix those, repeat. The rounds
    share one :class:`~sparsify.selection.lowest_k_cut.LowestKCut`, so a round whose cut
    falls inside the previous bracket costs no pass over the scores.

    A layer's entry is an int (prune that many of its own lowest units) or a
    boolean keep array of its units (shape of ``units[name]``).
    """
    names = list(units)
    cut = LowestKCut([units[n] for n in names], names, [None if tie_axes is None else tie_axes.get(n) for n in names],
                     [None if eligible is None else eligible.get(n) for n in names])
    return allocate_on_cut(cut, {n: int(np.size(units[n])) for n in names}, limits, total)


def allocate_on_cut(cut: LowestKCut, sizes: Mapping[str, int], limits: Mapping[str, tuple[int, int]],
                    total: int) -> dict[str, int | np.ndarray]:
    """:func:`allocate_pruned_units` on a cut made already (its arrays: the layers of ``sizes``, in order),
    e.g. a :class:`~sparsify.selection.streamed_cut.StreamedCut`. A clipped layer's count is an int, as there."""
    names = list(sizes)
    fixed: dict[str, int] = {}
    for _ in range(len(names) + 1):
        free = [i for i, n in enumerate(names) if n not in fixed]
        budget = total - sum(fixed.values())
        if not free:
            return fixed
        k = min(max(budget, 0), sum(sizes[names[i]] for i in free))
        counts = dict(zip((names[i] for i in free), cut.counts(k, free)))
        clipped = {n: min(max(c, limits[n][0]), limits[n][1]) for n, c in counts.items()}
        excess = sum(clipped.values()) - budget
        if excess == 0:
            keeps = dict(zip(counts, cut.keeps()))
            return {**fixed, **{n: keeps[n] if clipped[n] == counts[n] else clipped[n] for n in counts}}
        for n, c in counts.items():
            if excess > 0 and c < limits[n][0]:
                fixed[n] = limits[n][0]
            elif excess < 0 and c > limits[n][1]:
                fixed[n] = limits[n][1]
    raise RuntimeError("global allocation did not converge")  # pragma: no cover
