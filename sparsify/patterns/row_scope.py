"""Row scope: every output row of every layer pruned to the same ratio.

Wanda (Sun et al. 2023) compares a weight only with the weights of its own
output row: each row of the 2-D view ``(out, kernel * in)`` is one comparison
group, pruned with the exact count rule, ties to the lower column.

Example:
    >>> import numpy as np
    >>> from sparsify.patterns import get_pattern
    >>> w = np.array([[1.0, 9.0, 8.0, 7.0], [6.0, 5.0, 0.5, 4.0]])
    >>> row_masks(get_pattern("1x1"), {"w": w}, 0.5)["w"].astype(int).tolist()
    [[0, 1, 1, 0], [1, 1, 0, 0]]
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..layout import from_2d, to_2d

__all__ = ["row_masks"]


def row_masks(pattern: Any, scores: Mapping[str, np.ndarray], target_sparsity_ratio: float,
              pre_masks: Mapping[str, np.ndarray] | None = None,
              max_sparsity_ratio_per_layer: float | None = None) -> dict[str, np.ndarray]:
    """Masks with every output row of every layer pruned to ``target_sparsity_ratio`` (clamped like a layer).

    Args:
        pattern: the :class:`~sparsify.patterns.Pattern` (its units within a row; ``"1x1"`` in practice).
        scores: element scores per layer, canonical layout.
        target_sparsity_ratio: the fraction pruned in every row.
        pre_masks: previous masks (monotone: they stay pruned).
        max_sparsity_ratio_per_layer: per-row cap (default: the pattern's).
    """
    out = {}
    for name, score in scores.items():
        score = np.asarray(score)
        if score.ndim < 2 or score.size == 0:
            out[name] = pattern.get_masks_local({name: score}, target_sparsity_ratio,
                                                None if pre_masks is None else {name: pre_masks[name]},
                                                max_sparsity_ratio_per_layer)[name]
            continue
        s2 = to_2d(score, name)
        pre = None if pre_masks is None or pre_masks.get(name) is None else to_2d(np.asarray(pre_masks[name], bool), name)
        rows = {f"{name} (row {i})": s2[i:i + 1] for i in range(s2.shape[0])}
        pre_rows = None if pre is None else {f"{name} (row {i})": pre[i:i + 1] for i in range(s2.shape[0])}
        masks = pattern.get_masks_local(rows, target_sparsity_ratio, pre_rows, max_sparsity_ratio_per_layer)
        out[name] = from_2d(np.concatenate(list(masks.values())), score.shape)
    return out
