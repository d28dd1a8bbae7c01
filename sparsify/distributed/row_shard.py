"""Which rows of a weight one rank holds: :class:`RowShard`, rows ``[start, stop)`` of dim 0.

FSDP and ZeRO shard each parameter by rows (dim 0, the output channels); the
sharded selection (:mod:`sparsify.distributed.sharded_selection`) takes one
:class:`RowShard` per weight to know which rows of the full tensor a rank's
scores are.

Example:
    >>> [RowShard.chunk((5, 4), r, 2).rows for r in range(2)]
    [3, 2]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["RowShard"]


@dataclass(frozen=True)
class RowShard:
    """Rows ``[start, stop)`` of dim 0 of a weight whose full canonical shape is ``shape``.

    Example:
        >>> RowShard.chunk((5, 4), 3, 4)            # torch.chunk / FSDP2 rows of rank 3 of 4
        RowShard(shape=(5, 4), start=5, stop=5)
        >>> RowShard.chunk((5, 4), 1, 4).local_shape
        (2, 4)
    """

    shape: tuple[int, ...]
    start: int
    stop: int

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        if not shape or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0
                                for d in shape):
            raise ValueError(f"shape must be a non-empty tuple of non-negative ints, got {self.shape!r}")
        for what, v in (("start", self.start), ("stop", self.stop)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{what} must be an integer, got {v!r}")
        if not 0 <= self.start <= self.stop <= shape[0]:
            raise ValueError(f"rows [start, stop) must satisfy 0 <= start <= stop <= shape[0] = {shape[0]}, "
                             f"got [{self.start}, {self.stop})")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        object.__setattr__(self, "start", int(self.start))
        object.__setattr__(self, "stop", int(self.stop))

    @property
    def rows(self) -> int:
        """Number of rows held."""
        return self.stop - self.start

    @property
    def local_shape(self) -> tuple[int, ...]:
        """Shape of the rows held: ``(rows, *shape[1:])``."""
        return (self.rows, *self.shape[1:])

    @classmethod
    def whole(cls, shape: Sequence[int]) -> "RowShard":
        """All rows of ``shape``."""
        shape = tuple(shape)
        return cls(shape, 0, int(shape[0]) if shape else 0)

    @classmethod
    def chunk(cls, shape: Sequence[int], index: int, count: int) -> "RowShard":
        """Rows of part ``index`` of ``count`` as ``torch.chunk`` (and FSDP2's ``Shard(0)``) split them:
        ``ceil(rows / count)`` rows per part, the last parts shorter or empty."""
        shape = tuple(shape)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a positive integer, got {count!r}")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise ValueError(f"index must be an integer in [0, {count}), got {index!r}")
        rows = int(shape[0]) if shape else 0
        size = -(-rows // count)
        start = min(index * size, rows)
        return cls(shape, start, min(start + size, rows))
