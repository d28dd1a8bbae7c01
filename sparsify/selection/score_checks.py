"""Scores the selection refuses: :func:`check_finite` raises :class:`NaNScoreError` naming the layer.

A NaN score has no place in an order, so every selection checks for it before
cutting; infinities are legal (``+inf`` keeps a unit, ``-inf`` prunes it first).

Example:
    >>> import numpy as np
    >>> check_finite(np.array([1.0, np.inf, -np.inf]), "fc1")     # no NaN: nothing raised
"""
from __future__ import annotations

import numpy as np

__all__ = ["NaNScoreError", "check_finite", "nan_error"]


class NaNScoreError(ValueError):
    """A score is NaN (a ``ValueError``, so callers may catch either)."""


def check_finite(values: np.ndarray, name: str) -> None:
    """Raise :class:`NaNScoreError` (a ``ValueError``) naming ``name`` if ``values`` holds a NaN.

    Infinities are legal scores: ``+inf`` keeps a unit, ``-inf`` prunes it first.

    Example:
        >>> check_finite(np.array([1.0, np.nan]), "fc1")
        Traceback (most recent call last):
        ...
        sparsify.selection.score_checks.NaNScoreError: layer 'fc1': scores contain NaN; fix the weights or gradients before pruning
    """
    kind = values.dtype.kind
    if kind == "f":
        found = values.size > 0 and bool(np.isnan(np.maximum.reduce(values, axis=None)))   # maximum propagates NaN
    elif kind == "c":
        with np.errstate(over="ignore", invalid="ignore"):
            found = bool(np.isnan(np.sum(values))) and bool(np.isnan(values).any())    # inf - inf: exact check
    else:
        return
    if found:
        raise nan_error(name)


def nan_error(name: str) -> NaNScoreError:
    """The error for a NaN among the scores of ``name`` (raised by :func:`check_finite`, and by a selection that
    finds one while it reads the scores).

    Example:
        >>> str(nan_error("fc1"))
        "layer 'fc1': scores contain NaN; fix the weights or gradients before pruning"
    """
    return NaNScoreError(f"layer {name!r}: scores contain NaN; fix the weights or gradients before pruning")
