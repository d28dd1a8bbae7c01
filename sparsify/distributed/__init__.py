"""Pruning weights that are sharded across ranks (FSDP, ZeRO), with the exact single-process masks.

* :mod:`~sparsify.distributed.collective`: the :class:`Collective` protocol
  (``allgather`` and ``allreduce_sum`` of small arrays) an adapter supplies,
  plus :class:`SingleProcess`, :class:`ThreadGroup` (ranks as threads) and
  :class:`CountingCollective` (bytes moved);
* :mod:`~sparsify.distributed.sharded_selection`: :func:`sharded_masks`, each
  rank's rows of the masks the core computes on the full weights, bit for bit,
  without gathering weights or scores;
* :mod:`~sparsify.distributed.row_shard`: :class:`RowShard`, which rows of a weight a rank holds;
* :mod:`~sparsify.distributed.sharded_layer` and :mod:`~sparsify.distributed.sharded_cut`: the
  per-layer state of a sharded selection and the exact k-th lowest cut over ranks it relies on;
* :mod:`~sparsify.distributed.sharded_regrowth`: :func:`sharded_regrow`, regrowth (RigL, SET) over
  row shards, each rank's rows of the core's :func:`sparsify.regrowth.regrow`;
* :mod:`~sparsify.distributed.sharded_protocol`: :class:`ShardedPruningProtocol`,
  the update protocol (schedule, release, monotone masks, regrowth, state) over row shards.

Example:
    >>> import numpy as np
    >>> from sparsify.patterns import get_pattern
    >>> w = np.arange(16.0).reshape(4, 4)
    >>> def rank(c):
    ...     shard = RowShard.chunk(w.shape, c.rank, c.world_size)
    ...     return sharded_masks(get_pattern("2:4"), {"w": w[shard.start:shard.stop]}, {"w": shard}, 0.25, c)["w"]
    >>> np.concatenate(ThreadGroup(2).run(rank)).astype(int).tolist()
    [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]
"""
from .collective import Collective, CountingCollective, SingleProcess, ThreadGroup
from .row_shard import RowShard
from .sharded_selection import sharded_masks
from .sharded_regrowth import sharded_regrow
from .sharded_protocol import ShardedPruningProtocol

__all__ = ["Collective", "SingleProcess", "ThreadGroup", "CountingCollective", "RowShard", "sharded_masks",
           "sharded_regrow", "ShardedPruningProtocol"]
