"""Regrowth (RigL, SET): after the scheduled masks, swap a decaying fraction of kept weights for pruned ones.

At an update point before ``end_step`` the fraction ``f`` of :func:`regrowth_fraction`
(``regrowth_fraction`` at ``start_step``, a cosine down to 0 at ``end_step``) of each
layer's kept weights with the lowest scores is dropped, and as many of its pruned
weights (not those just dropped) are grown: the ones with the largest gradient
magnitude (``"rigl"``, Evci et al. 2020) or drawn at random (``"set"``, Mocanu et
al. 2018; seeded by the step and the layer's position, so every framework draws the
same). Counts follow the exact rule (``round(f * kept)``, halves down); ties go to
the lower index of the 2-D view, as everywhere. Grown weights start at zero with
zeroed optimizer state (the adapter writes that).

Example:
    >>> import numpy as np
    >>> masks = {"w": np.array([[True, True, False, False]])}
    >>> scores = {"w": np.array([[3.0, 1.0, 0.0, 0.0]])}
    >>> grads = {"w": np.array([[0.0, 0.0, 0.1, 5.0]])}
    >>> new, grown = regrow(masks, scores, grads, 0.5, "rigl", step=10)
    >>> new["w"].tolist(), grown["w"].tolist()
    ([[True, False, False, True]], [[False, False, False, True]])
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import portable_math
from .layout import from_2d, to_2d
from .selection.lowest_k import exact_prune_count, lowest_k_mask

__all__ = ["regrowth_fraction", "regrow"]


def regrowth_fraction(config: Any, step: int) -> float:
    """The fraction of kept weights regrown at ``step``: ``regrowth_fraction * (1 + cos(pi p)) / 2`` with
    ``p`` the fraction of ``[start_step, end_step]`` done; 0 at and after ``end_step`` or without regrowth.

    Example:
        >>> from sparsify import PruningConfig
        >>> cfg = PruningConfig(regrowth="rigl", regrowth_fraction=0.4, start_step=0, end_step=100)
        >>> regrowth_fraction(cfg, 0), regrowth_fraction(cfg, 50), regrowth_fraction(cfg, 100)
        (0.4, 0.2, 0.0)
    """
    if config.regrowth == "none" or step >= config.end_step:
        return 0.0
    span = config.end_step - config.start_step
    p = 0.0 if span <= 0 else min(1.0, max(0.0, (step - config.start_step) / span))
    return float(config.regrowth_fraction * (1.0 + portable_math.cos(np.pi * p)) / 2.0)   # the same bits on any CPU


def regrow(masks: Mapping[str, np.ndarray], scores: Mapping[str, np.ndarray],
           grads: Mapping[str, np.ndarray] | None, fraction: float, method: str,
           step: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Drop ``fraction`` of each layer's kept weights (lowest ``scores``) and grow as many pruned ones.

    Args:
        masks: the scheduled masks (True = kept), canonical layout.
        scores: the criterion's element scores (the drop ranks the kept weights by them).
        grads: gradient of each weight (``"rigl"`` grows the largest ``|grad|``); None for ``"set"``.
        fraction: the fraction of kept weights replaced (see :func:`regrowth_fraction`).
        method: ``"rigl"`` or ``"set"``.
        step: the update step (seeds ``"set"``).

    Returns:
        ``(masks, grown)``: the new masks and, per layer, the grown entries (True where grown).
    """
    if method not in ("rigl", "set"):
        raise ValueError(f"method must be 'rigl' or 'set', got {method!r}")
    if method == "rigl" and grads is None:
        raise ValueError("regrowth='rigl' grows the pruned weights with the largest gradients: pass grads")
    new, grown = {}, {}
    for index, (name, mask) in enumerate(masks.items()):
        mask = np.asarray(mask, dtype=bool)
        m2 = to_2d(mask, name)
        kept = int(np.count_nonzero(m2))
        candidates = ~m2
        d = min(exact_prune_count(fraction, kept, keep_one=False), int(np.count_nonzero(candidates)))
        if d <= 0 or mask.ndim < 2:
            new[name], grown[name] = mask.copy(), np.zeros(mask.shape, dtype=bool)
            continue
        s2 = to_2d(np.asarray(scores[name]), name)
        drop = lowest_k_mask(s2, m2.size - kept + d, name, eligible=m2) & m2     # the pruned count towards k
        if method == "rigl":
            key = -np.abs(to_2d(np.asarray(grads[name], dtype=np.float64), name))
        else:
            key = np.random.default_rng([int(step) & 0xFFFFFFFF, index]).random(m2.shape)
        grow = lowest_k_mask(np.where(candidates, key, np.inf), d, name)
        new[name] = from_2d((m2 & ~drop) | grow, mask.shape)
        grown[name] = from_2d(grow, mask.shape)
    return new, grown
