"""Per-layer bookkeeping of the sharded selection: :class:`ShardedLayer`.

A layer's local rows, its unit scores once prepared, and which rows every
rank holds (learnt in the handshake of :func:`~sparsify.distributed.sharded_masks`),
so that the global index of any rank's units is known on every rank.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .row_shard import RowShard

__all__ = ["ShardedLayer"]


@dataclass
class ShardedLayer:
    """One layer's state during a sharded selection: this rank's rows and units, and every rank's rows.

    Example:
        >>> layer = ShardedLayer("w", 0, RowShard((4, 2), 0, 2), np.zeros((2, 2)), None,
        ...                      units_per_row_block=2, starts=[0, 2], stops=[2, 4])
        >>> layer.unit_range(1)                     # rank 1's units: the 2nd and 3rd rows
        (4, 4)
    """

    name: str
    pos: int
    shard: RowShard
    score: np.ndarray                       # this rank's rows (canonical layout)
    pre: np.ndarray | None
    skip: bool = False                      # left dense (skip_incompatible_layers)
    block_rows: int = 1
    units_per_row_block: int = 0            # units in one block-row of the 2-D view
    prepared: tuple | None = None           # Pattern.prepare_units of the local rows
    units: np.ndarray | None = None         # flat local unit scores (set on every rank once selection starts)
    starts: list[int] = field(default_factory=list)   # per rank: first row
    stops: list[int] = field(default_factory=list)
    n_total: int = 0

    def unit_range(self, rank: int) -> tuple[int, int]:
        """(global index of the first unit, number of units) of ``rank``'s rows."""
        return (self.starts[rank] // self.block_rows * self.units_per_row_block,
                (self.stops[rank] - self.starts[rank]) // self.block_rows * self.units_per_row_block)
