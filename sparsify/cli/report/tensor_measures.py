"""Measures of one tensor: its zeros, the TF layout kind of a kernel, and its conformity to a pattern.

:func:`tensor_stats` measures an array in memory (a streamed ``.npz`` member:
:func:`sparsify.cli.report.npz_stream.streamed_tensor_stats`). TensorFlow and Keras kernels are converted to
the canonical (PyTorch) layout with :func:`sparsify.layout.tf_to_canonical` before a pattern is checked; the
kind is guessed from the name and rank (rank 2: dense, rank >= 3: conv, a ``depthwise`` name: depthwise).

Example:
    >>> w = np.array([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 4.0]])
    >>> pattern_conformity(w, "2:4")["conforms"], tensor_stats("fc.weight", w, pattern="2:4").sparsity
    (True, 0.5)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsify.layout import tf_to_canonical
from sparsify.patterns import get_pattern

from .stats_record import TensorStats

__all__ = ["guess_tf_kind", "pattern_conformity", "tensor_stats"]


def guess_tf_kind(name: str, shape: tuple[int, ...]) -> str | None:
    """Guess the TF layout kind of a kernel from its name and rank (None: not a kernel).

    Example:
        >>> guess_tf_kind("conv/kernel", (3, 3, 8, 16)), guess_tf_kind("dense/kernel", (8, 4))
        ('conv', 'dense')
    """
    low = name.lower()
    if len(shape) < 2:
        return None
    if "embedding" in low:
        return "embedding"
    if "depthwise" in low and len(shape) == 4:
        return "depthwise"
    if "transpose" in low and len(shape) >= 3:
        return "conv_transpose"
    return "dense" if len(shape) == 2 else "conv"


def pattern_conformity(w: np.ndarray, pattern: Any) -> dict[str, Any]:
    """Does the zero structure of a canonical weight satisfy ``pattern``?

    For ``"N:M"``: every group of M consecutive weights along the last axis of
    the 2-D view holds at least N zeros. For ``"NxM"`` blocks: every zero lies
    in a block that is entirely zero (``"1x1"`` always conforms).

    Returns:
        ``{"fits": bool, "conforms": bool | None, "units": int, "violations": int,
        "reason": str | None}``; ``conforms`` is None when the 2-D view does not fit.

    Example:
        >>> pattern_conformity(np.array([[0.0, 0.0, 1.0, 1.0]]), "1x2")["conforms"]
        True
        >>> pattern_conformity(np.array([[0.0, 1.0, 1.0, 1.0]]), "2:4")["violations"]
        1
    """
    pat = get_pattern(pattern)
    w = np.asarray(w)
    reason = pat.shape_fit(w.shape)
    if reason is not None:
        return {"fits": False, "conforms": None, "units": 0, "violations": 0, "reason": reason}
    units, violations = pat.conformity(pat.unit_view(w) != 0)   # every family states its own units and zeros
    return {"fits": True, "conforms": violations == 0, "units": units, "violations": violations, "reason": None}


def tensor_stats(name: str, value: np.ndarray, pattern: Any = None, layout: str = "canonical") -> TensorStats:
    """Statistics of one tensor; ``layout="tf"`` converts kernels to canonical first.

    Example:
        >>> tensor_stats("k", np.zeros((4, 2)), layout="tf").zeros
        8
    """
    value = np.asarray(value)
    zeros = int(value.size - np.count_nonzero(value))
    is_weight = value.ndim >= 2
    conf = None
    if pattern is not None and is_weight:
        canon = value
        if layout == "tf":
            kind = guess_tf_kind(name, value.shape)
            if kind is not None:
                try:
                    canon = tf_to_canonical(value, kind)
                except ValueError:
                    canon = value
        conf = pattern_conformity(canon, pattern)
    return TensorStats(name=name, shape=tuple(int(d) for d in value.shape), dtype=str(value.dtype),
                       size=int(value.size), zeros=zeros, sparsity=(zeros / value.size) if value.size else 0.0,
                       is_weight=is_weight, pattern=conf)
