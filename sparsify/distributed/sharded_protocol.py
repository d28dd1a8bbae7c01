"""The update protocol over weights sharded by rows: every rank holds only its rows of the masks.

:class:`ShardedPruningProtocol` is a :class:`sparsify.PruningProtocol` (same
schedule, release, monotone masks, state and figures) whose weights, scores
and masks are this rank's rows (:class:`~sparsify.distributed.RowShard`).
Updates call :func:`~sparsify.distributed.sharded_masks`, so the masks are
exactly the single-process protocol's on the full weights. Every rank calls
:meth:`~sparsify.PruningProtocol.advance` (and :meth:`restore`) with the same
steps: they are collective. The sparsity figures are over the full weights.

Example:
    >>> import numpy as np
    >>> from sparsify.distributed import RowShard, ThreadGroup
    >>> w = np.arange(1.0, 17.0).reshape(4, 4)
    >>> cfg = {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}
    >>> def rank(c):
    ...     shard = RowShard.chunk(w.shape, c.rank, c.world_size)
    ...     proto = ShardedPruningProtocol(cfg, {"w": w.shape}, {"w": shard}, c)
    ...     update = proto.advance(0, {"w": w[shard.start:shard.stop]})
    ...     return update.masks["w"].astype(int).tolist(), proto.total_sparsity()
    >>> ThreadGroup(2).run(rank)
    [([[0, 0, 0, 0], [0, 0, 0, 0]], 0.5), ([[1, 1, 1, 1], [1, 1, 1, 1]], 0.5)]
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..config import PruningConfig
from ..patterns.erk_scope import erk_layer_ratios
from ..protocol import PruningProtocol, counted_sparsity_figures
from ..regrowth import regrowth_fraction
from .collective import Collective
from .row_shard import RowShard
from .sharded_regrowth import sharded_regrow
from .sharded_selection import sharded_masks

__all__ = ["ShardedPruningProtocol"]


class ShardedPruningProtocol(PruningProtocol):
    """:class:`sparsify.PruningProtocol` for this rank's rows of every weight.

    Args:
        config: a ``PruningConfig``, a dict of its fields or a YAML path.
        shapes: every candidate weight's full canonical shape, in model order.
        shards: the rows this rank holds of (at least) every selected weight:
            a :class:`RowShard` or a ``(start, stop)`` pair.
        collective: the process group (:class:`~sparsify.distributed.Collective`).
        min_ndim: as in :class:`sparsify.PruningProtocol`.
        sample_size: passed to :func:`~sparsify.distributed.sharded_masks`.

    Attributes:
        shards: ``{name: RowShard}`` of the selected weights.
        local_shapes: the shapes of this rank's rows (what ``advance`` takes and ``masks`` holds).
    """

    def __init__(self, config: PruningConfig | Mapping[str, Any] | str, shapes: Mapping[str, tuple[int, ...]],
                 shards: Mapping[str, RowShard | tuple[int, int]], collective: Collective, *,
                 min_ndim: int = 2, sample_size: int | None = None) -> None:
        if not isinstance(shards, Mapping):
            raise TypeError(f"shards must be a dict of RowShard or (start, stop) keyed by weight name, "
                            f"got {type(shards).__name__}")
        self._given_shards = dict(shards)
        self.collective = collective
        self.sample_size = sample_size
        self.shards: dict[str, RowShard] = {}
        super().__init__(config, shapes, min_ndim=min_ndim)
        self._pruned = np.zeros(len(self.names), dtype=np.int64)     # over all ranks, per layer

    def held_shapes(self, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        missing = [n for n in shapes if n not in self._given_shards]
        if missing:
            raise ValueError(f"shards lacks the selected weights {missing}; give the rows this rank holds of each")
        for n, shape in shapes.items():
            given = self._given_shards[n]
            if isinstance(given, RowShard):
                if given.shape != tuple(shape):
                    raise ValueError(f"shards[{n!r}] is for shape {given.shape}, but the weight's canonical shape "
                                     f"is {tuple(shape)}")
                self.shards[n] = given
            elif isinstance(given, (tuple, list)) and len(given) == 2:
                self.shards[n] = RowShard(tuple(shape), *given)
            else:
                raise TypeError(f"shards[{n!r}] must be a RowShard or a (start, stop) pair, got {given!r}")
        return {n: self.shards[n].local_shape for n in shapes}

    def __repr__(self) -> str:
        return "Sharded" + super().__repr__() + f" (rank {self.collective.rank} of {self.collective.world_size})"

    # ----- masks over shards -----------------------------------------------------------------
    def new_masks(self, weights: Mapping[str, np.ndarray], step: int, scores: Mapping[str, np.ndarray] | None,
                  grads: Mapping[str, np.ndarray] | None = None,
                  activations: Mapping[str, np.ndarray] | None = None,
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        if scores is None:
            scores = self.engine.criterion_scores(weights, activations)
        pre = self.masks if self.config.monotone else None
        live = [n for n in self.names if int(np.prod(self.shapes[n])) > 0]
        if self.config.pruning_scope == "row":        # rows are compared within themselves: no collective
            out = self.engine.pattern.get_masks({n: scores[n] for n in live}, self.engine.target_sparsity(step),
                                                None if pre is None else {n: pre[n] for n in live})
        elif self.config.pruning_scope == "erk":      # per-layer counts from the full shapes, each layer local
            target, pattern = self.engine.target_sparsity(step), self.engine.pattern
            ratios = erk_layer_ratios(pattern, {n: self.shapes[n] for n in live}, pattern.check_ratio(target),
                                      pattern.max_sparsity_ratio_per_layer)
            out = {}
            for n in live:
                out.update(sharded_masks(pattern, {n: scores[n]}, self.shards, ratios[n], self.collective,
                                         None if pre is None else {n: pre[n]}, sample_size=self.sample_size))
        else:
            out = sharded_masks(self.engine.pattern, {n: scores[n] for n in live}, self.shards,
                                self.engine.target_sparsity(step), self.collective,
                                None if pre is None else {n: pre[n] for n in live}, sample_size=self.sample_size)
        out.update({n: np.ones(self.local_shapes[n], dtype=bool) for n in self.names if n not in out})
        out = {n: out[n] for n in self.names}
        fraction = regrowth_fraction(self.config, step)
        if fraction <= 0:
            return out, {n: np.zeros(self.local_shapes[n], dtype=bool) for n in self.names}
        if self.config.regrowth == "rigl" and grads is None:
            raise ValueError("regrowth='rigl' grows the pruned weights with the largest gradients, but no "
                             "gradients were collected: run a backward pass before the update")
        return sharded_regrow(out, scores, grads, fraction, self.config.regrowth, step, self.shards,
                              self.collective, sample_size=self.sample_size)

    def advance(self, step: int, weights: Any = None, scores: Any = None, *, grads: Any = None,
                activations: Any = None):
        """:meth:`sparsify.PruningProtocol.advance` with this rank's rows; collective (every rank calls it)."""
        update = super().advance(step, weights, scores, grads=grads, activations=activations)
        if update is not None:
            self._count()
        return update

    def restore(self, done_step: int, masks: Mapping[str, np.ndarray], *, released: bool | None = None) -> None:
        """:meth:`sparsify.PruningProtocol.restore` with this rank's rows of the masks; collective."""
        super().restore(done_step, masks, released=released)
        self._count()

    def _count(self) -> None:
        local = np.array([m.size - np.count_nonzero(m) for m in self.masks.values()], dtype=np.int64)
        self._pruned = np.asarray(self.collective.allreduce_sum(local), dtype=np.int64)

    # ----- figures over the full weights ---------------------------------------------------------
    @property
    def any_pruned(self) -> bool:
        """True if some mask, on any rank, holds a zero."""
        return bool(self._pruned.any())

    def layer_sparsity(self) -> dict[str, float | None]:
        """Fraction of pruned weights per layer, over all ranks; None for a layer :attr:`skipped`."""
        out = {}
        for n, k in zip(self.names, self._pruned):      # computed as the single-process protocol does
            size = int(np.prod(self.shapes[n]))
            out[n] = None if n in self.skipped else 1.0 - float(size - int(k)) / size if size else 0.0
        return out

    def total_sparsity(self) -> float:
        """Fraction of pruned weights over all pruned layers and ranks."""
        return self.figures()["sparsity"]

    def figures(self, prefix: str = "sparsity") -> dict[str, float]:
        """:func:`sparsify.protocol.sparsity_figures` of the full masks (counts summed over the ranks)."""
        return counted_sparsity_figures({n: (int(k), int(np.prod(self.shapes[n])))
                                         for n, k in zip(self.names, self._pruned)}, prefix)

    # ----- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """:meth:`sparsify.PruningProtocol.state_dict` with this rank's rows of the masks, plus
        ``"shards"``: ``{name: [start, stop]}``."""
        state = super().state_dict()
        state["shards"] = {n: [s.start, s.stop] for n, s in self.shards.items()}
        return state

    def check_state(self, state: Mapping[str, Any]) -> None:
        """:meth:`sparsify.PruningProtocol.check_state`, and a state saved for other rows is refused: a
        checkpoint saved on a different number of ranks must be resharded first
        (``torch.distributed.checkpoint`` does this for DTensor masks)."""
        saved = state.get("shards") if isinstance(state, Mapping) else None
        if saved is not None:
            mine = {n: [s.start, s.stop] for n, s in self.shards.items()}
            if {n: [int(x) for x in v] for n, v in dict(saved).items()} != mine:
                raise ValueError(f"state holds the rows {dict(saved)} but this rank holds {mine}; load masks "
                                 "resharded for this rank (e.g. with torch.distributed.checkpoint)")
        super().check_state(state)

