"""What an adapter writes back after an update: :class:`MaskUpdate` (from :meth:`sparsify.PruningProtocol.advance`).

Example:
    >>> import numpy as np
    >>> keep = {"w": np.array([True, False])}
    >>> update = MaskUpdate(3, keep, keep)
    >>> update.step, update.released, update.grown
    (3, False, {})
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

__all__ = ["MaskUpdate"]


@dataclass(frozen=True)
class MaskUpdate:
    """What an adapter writes back after :meth:`PruningProtocol.advance`.

    The arrays are the protocol's own: read them, do not modify them.

    Attributes:
        step: the step the update was applied at (the new ``done_step``).
        masks: the new masks (canonical layout, bool, True = kept) of every
            pruned weight; all ones after a release.
        keep_values: per weight, True where the weight (and its optimizer slots) keeps
            its value, False where the adapter sets it to exactly zero now. Equal to
            ``masks`` for an update; the last pruning masks for a release (so released
            weights start from the pruned values).
        released: True when this call released the masks (``leave_enabled=False``).
        grown: entries regrowth grew (True), per layer: the adapter sets them to zero in the
            weights and their optimizer slots (they are kept in ``masks``). Empty without regrowth.

    Example:
        >>> keep = {"w": np.array([True, False])}
        >>> MaskUpdate(3, keep, keep).keep_values["w"].tolist()
        [True, False]
    """

    step: int
    masks: dict[str, np.ndarray]
    keep_values: dict[str, np.ndarray]
    released: bool = False
    grown: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
