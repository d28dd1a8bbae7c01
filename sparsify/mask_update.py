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
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["MaskUpdate"]


@dataclass(frozen=True, init=False)
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
            weights start from the pruned values). Formerly ``zero`` (a deprecated alias:
            True there meant "keep", not "zero").
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

    def __init__(self, step: int, masks: dict[str, np.ndarray], keep_values: dict[str, np.ndarray] | None = None,
                 released: bool = False, grown: dict[str, np.ndarray] | None = None, *,
                 zero: dict[str, np.ndarray] | None = None) -> None:
        if zero is not None:
            warnings.warn("MaskUpdate(zero=...) is deprecated: pass keep_values=... (same arrays)",
                          DeprecationWarning, stacklevel=2)
            if keep_values is not None:
                raise TypeError("pass keep_values or its deprecated name zero, not both")
            keep_values = zero
        if keep_values is None:
            raise TypeError("MaskUpdate needs keep_values (the masks whose False entries are zeroed now)")
        for name, value in (("step", step), ("masks", masks), ("keep_values", keep_values),
                            ("released", released), ("grown", {} if grown is None else grown)):
            object.__setattr__(self, name, value)

    @property
    def zero(self) -> dict[str, np.ndarray]:
        """Deprecated alias of :attr:`keep_values` (True = keep the value, despite the name)."""
        warnings.warn("MaskUpdate.zero is deprecated: use MaskUpdate.keep_values (True = keep the value)",
                      DeprecationWarning, stacklevel=2)
        return self.keep_values
