"""Importance criteria: element scores that patterns rank (lowest pruned first).

Pure functions written with array operators only, so they work unchanged on
NumPy arrays and on framework tensors that an adapter keeps on its device.

Example:
    >>> import numpy as np
    >>> magnitude(np.array([-2.0, 1.0])).tolist()
    [2.0, 1.0]
    >>> snip(np.array([-2.0, 1.0]), np.array([0.5, -3.0])).tolist()
    [1.0, 3.0]
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CRITERIA", "GRADIENT_CRITERIA", "magnitude", "snip", "snip_momentum", "needs_gradients"]

CRITERIA = ("magnitude", "snip", "snip_momentum")
GRADIENT_CRITERIA = ("snip", "snip_momentum")


def magnitude(weight: Any) -> Any:
    """``|w|``; for NumPy signed integers as the unsigned type of the same width, so the most
    negative value (``abs`` wraps it to itself) keeps its true magnitude.

    Example:
        >>> import numpy as np
        >>> magnitude(np.array([-128, 3], dtype=np.int8)).tolist()
        [128, 3]
    """
    if isinstance(weight, (np.ndarray, np.generic)) and weight.dtype.kind == "i":
        return np.abs(weight).view(weight.dtype.newbyteorder("=").str.replace("i", "u"))   # two's complement: exact
    return abs(weight)


def snip(weight: Any, grad: Any) -> Any:
    """``|w * g|``: first-order estimate of the loss change from removing w (SNIP)."""
    return abs(weight * grad)


def snip_momentum(previous: Any, weight: Any, grad: Any, momentum: float = 0.9) -> Any:
    """Running average ``momentum * previous + (1 - momentum) * |w * g|``.

    Pass ``previous=None`` for the first step (the average starts at zero).

    Example:
        >>> import numpy as np
        >>> snip_momentum(None, np.array([2.0]), np.array([1.0]), 0.5).tolist()
        [1.0]
    """
    if not 0.0 <= float(momentum) < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    fresh = abs(weight * grad) * (1.0 - momentum)
    return fresh if previous is None else previous * momentum + fresh


def needs_gradients(criterion: str) -> bool:
    """True if ``criterion`` needs gradients (the adapter must collect them)."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    return criterion in GRADIENT_CRITERIA
