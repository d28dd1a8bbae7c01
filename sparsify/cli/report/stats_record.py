"""One tensor's line of a sparsity report: :class:`TensorStats`.

Measured from an array in memory (:func:`sparsify.cli.report.tensor_measures.tensor_stats`)
or streamed from an ``.npz`` member (:func:`sparsify.cli.report.npz_stream.streamed_tensor_stats`).

Example:
    >>> TensorStats("fc.weight", (2, 4), "float32", 8, 4, 0.5, True).sparsity
    0.5
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TensorStats"]


@dataclass
class TensorStats:
    """Sparsity of one tensor (and conformity of its 2-D view to a pattern); ``encoding`` and
    ``stored_bytes``: how an int8 ``.npz`` stores it (None for other files)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    size: int
    zeros: int
    sparsity: float
    is_weight: bool
    pattern: dict[str, Any] | None = None
    encoding: str | None = None
    stored_bytes: int | None = None
