"""Regrowth (RigL, SET) over weights sharded by rows: each rank's rows of :func:`sparsify.regrowth.regrow`.

:func:`sharded_regrow` swaps, per layer, the same kept weights for the same pruned
ones as the single-process :func:`~sparsify.regrowth.regrow` on the full weights,
bit for bit: the count ``d`` comes from the layer's kept and pruned counts over all
ranks (one all-gather); the ``d`` lowest-scoring kept weights are dropped and the
``d`` pruned weights with the largest ``|grad|`` (``"rigl"``) or the lowest draw of
the layer's random matrix (``"set"``; each rank draws its rows of the same matrix by
advancing the generator) are grown. Both cuts are exact k-th selections over the
ranks (:func:`~sparsify.distributed.sharded_cut.find_cuts`), ties to the lower flat
index of the 2-D view, as in the core. A NaN gradient raises the core's error on
every rank.

Example:
    >>> from sparsify.distributed import ThreadGroup
    >>> masks = np.array([[True, True], [False, False]])
    >>> scores = np.array([[3.0, 1.0], [0.0, 0.0]])
    >>> grads = np.array([[0.0, 0.0], [0.1, 5.0]])
    >>> def rank(c):                       # rank r holds row r
    ...     shard = RowShard((2, 2), c.rank, c.rank + 1)
    ...     rows = slice(c.rank, c.rank + 1)
    ...     new, grown = sharded_regrow({"w": masks[rows]}, {"w": scores[rows]}, {"w": grads[rows]}, 0.5,
    ...                                 "rigl", 10, {"w": shard}, c)
    ...     return new["w"].tolist(), grown["w"].tolist()
    >>> ThreadGroup(2).run(rank)
    [([[True, False]], [[False, False]]), ([[False, True]], [[False, True]])]
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..layout import from_2d, to_2d
from ..selection.lowest_k import exact_prune_count
from ..selection.score_checks import check_finite
from .collective import Collective
from .row_shard import RowShard
from .sharded_cut import CutProblem, find_cuts
from .sharded_layer import ShardedLayer

__all__ = ["sharded_regrow"]


def _rows_2d(a: np.ndarray) -> np.ndarray:
    """:func:`~sparsify.layout.to_2d` of a rank's rows, also when it holds none."""
    a = np.asarray(a)
    if a.ndim >= 3 and a.shape[0] == 0:
        return a.reshape(0, int(np.prod(a.shape[1:])))
    return to_2d(a)


def _set_draws(step: int, index: int, shard: RowShard, cols: int) -> np.ndarray:
    """This rank's rows of ``default_rng([step, index]).random((rows, cols))``, the core's SET draw."""
    rng = np.random.default_rng([int(step) & 0xFFFFFFFF, index])
    rng.bit_generator.advance(shard.start * cols)          # one 64-bit draw per float64
    return rng.random((shard.rows, cols))


def sharded_regrow(masks: Mapping[str, np.ndarray], scores: Mapping[str, np.ndarray],
                   grads: Mapping[str, np.ndarray] | None, fraction: float, method: str, step: int,
                   shards: Mapping[str, RowShard], collective: Collective, *, sample_size: int | None = None,
                   ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """:func:`sparsify.regrowth.regrow` on this rank's rows; collective (every rank calls it with its rows).

    Args:
        masks: the scheduled masks of this rank's rows (canonical layout), in the protocol's layer order
            (which seeds ``"set"``).
        scores: the criterion's element scores of the same rows.
        grads: the gradients of the same rows (``"rigl"``); None for ``"set"``.
        fraction: :func:`~sparsify.regrowth.regrowth_fraction` at ``step``.
        method: ``"rigl"`` or ``"set"``.
        step: the update step.
        shards: the rows this rank holds of each layer.
        collective: the process group.
        sample_size: as in :func:`~sparsify.distributed.sharded_masks`.

    Returns:
        ``(masks, grown)`` of this rank's rows.
    """
    if method not in ("rigl", "set"):
        raise ValueError(f"method must be 'rigl' or 'set', got {method!r}")
    if method == "rigl" and grads is None:
        raise ValueError("regrowth='rigl' grows the pruned weights with the largest gradients: pass grads")
    names = list(masks)
    m2 = {n: _rows_2d(np.asarray(masks[n], dtype=bool)) for n in names}
    local = np.array([[shards[n].start, shards[n].stop, np.count_nonzero(m2[n]), m2[n].size - np.count_nonzero(m2[n])]
                      for n in names], dtype=np.int64).reshape(len(names), 4)
    every = np.stack(collective.allgather(local.reshape(-1))).reshape(-1, len(names), 4)     # (ranks, layers, 4)
    drops, grows, layers = [], [], []
    nan = ""
    for index, n in enumerate(names):
        kept, pruned = int(every[:, index, 2].sum()), int(every[:, index, 3].sum())
        d = min(exact_prune_count(fraction, kept, keep_one=False), pruned)
        if d <= 0 or np.ndim(masks[n]) < 2:
            continue
        cols = m2[n].shape[1]
        starts, stops = every[:, index, 0].tolist(), every[:, index, 1].tolist()

        def layer(units: np.ndarray) -> ShardedLayer:
            out = ShardedLayer(n, index, shards[n], units, None, units_per_row_block=cols, starts=starts, stops=stops)
            out.units = units
            return out
        s2 = _rows_2d(scores[n])
        # the core: the pruned weights score -inf, the d lowest after them among the kept are dropped
        drops.append(CutProblem([layer(np.where(m2[n], s2, -np.inf).reshape(-1))], pruned + d, collective.world_size,
                                sample_size))
        if method == "rigl":
            key = -np.abs(_rows_2d(np.asarray(grads[n], dtype=np.float64)))
            if not nan:
                try:
                    check_finite(np.where(~m2[n], key, np.inf).reshape(-1), n)
                except ValueError as e:
                    nan = str(e)
        else:
            key = _set_draws(step, index, shards[n], cols)
        grows.append(CutProblem([layer(np.where(~m2[n], key, np.inf).reshape(-1))], d, collective.world_size,
                                sample_size))
        layers.append(n)
    flags = collective.allgather(np.frombuffer(nan.encode(), dtype=np.uint8))
    for r, f in enumerate(flags):                              # the first rank's NaN error, on every rank
        if f.size:
            msg = bytes(f.astype(np.uint8)).decode(errors="replace")
            raise ValueError(msg if r == collective.rank else f"{msg} (raised on rank {r})")
    find_cuts(collective, drops + grows)
    new = {n: np.asarray(masks[n], dtype=bool).copy() for n in names}
    grown = {n: np.zeros(np.shape(masks[n]), dtype=bool) for n in names}
    for n, drop, grow in zip(layers, drops, grows):
        rank = collective.rank
        dropped = ~drop.keep(0, rank).reshape(m2[n].shape) & m2[n]
        added = ~grow.keep(0, rank).reshape(m2[n].shape)
        new[n] = from_2d((m2[n] & ~dropped) | added, np.shape(masks[n]))
        grown[n] = from_2d(added, np.shape(masks[n]))
    return new, grown
