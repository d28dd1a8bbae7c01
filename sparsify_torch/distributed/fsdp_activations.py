"""Input-activation statistics summed over the data-parallel group (FSDP2 and DDP).

Data parallelism splits the batch: each rank sees its own inputs. :class:`GroupActivationNorms`
sums the squares of each pruned layer's inputs per input channel on every rank
(:class:`~sparsify_torch.statistics.ActivationNorms`) and all-reduces the sums and
call counts (one float32 ``all_reduce`` through the
:class:`~sparsify_torch.distributed.collective.TorchCollective` per read) before the core's
:class:`~sparsify.activation_stats.ActivationWindow` sees them, so every rank's
criterion reads the statistics of the global batch: the masks of the single-process
:class:`~sparsify_torch.Pruner` run on the concatenated batches (equal bit for bit
when the sums are exact, else up to the order of the float additions).

Checkpoints hold the global sums (replicated on every rank, what
``torch.distributed.checkpoint`` saves once); taking the state folds the ranks'
sums into the first rank's, so a resumed run on the same ranks adds the same
numbers in the same order as the uninterrupted one.

Example:
    >>> GroupActivationNorms.__name__
    'GroupActivationNorms'
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from sparsify.distributed import RowShard

from ..layers import PrunableWeight
from ..statistics import ActivationNorms
from .collective import TorchCollective

__all__ = ["GroupActivationNorms"]


class GroupActivationNorms:
    """Per-input-channel input norms of the pruned layers over every rank's batches since the last update.

    Args:
        weights: the pruned weights (Linear and convolution weights, checked by
            :func:`~sparsify_torch.statistics.check_activation_layers`).
        collective: the :class:`~sparsify_torch.distributed.collective.TorchCollective` of the data-parallel
            group (DDP's process group, FSDP2's mesh group); its rank 0 holds the folded sums.
        criterion: the criterion's name, for errors.
    """

    def __init__(self, weights: list[PrunableWeight], collective: TorchCollective, criterion: str) -> None:
        self.names = [w.name for w in weights]
        self._weights = list(weights)
        self._local = ActivationNorms(weights, criterion)
        self._collective, self._rank, self._criterion = collective, collective.rank, criterion

    def _reduced(self) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
        """(global sums of every weight, global calls of every weight); collective: one float32 ``all_reduce``
        of the sums and call counts packed together."""
        local, calls, widths = self._local.state(), self._local.local_calls(), self._local.widths()
        parts = [local[n].float().numpy() if n in local else np.zeros(widths[n], np.float32) for n in self.names]
        flat = self._collective.allreduce_sum(np.concatenate(parts + [np.array([calls[n] for n in self.names],
                                                                               np.float32)]))
        flat = torch.from_numpy(flat)
        sums = dict(zip(self.names, flat[:-len(self.names)].split([widths[n] for n in self.names])))
        return sums, {n: int(c) for n, c in zip(self.names, flat[-len(self.names):].tolist())}

    def waiting(self) -> bool:
        """True while no pruned layer saw an input on any rank since the last update (collective): an update
        due now waits, on every rank."""
        sums, calls = self._reduced()
        self._local.sync(sums, calls)
        return self._local.window.waiting()

    def canonical(self, shards: Mapping[str, RowShard] | None = None) -> dict[str, np.ndarray]:
        """The norms of the global batch (this rank's rows of them with ``shards``: FSDP2), broadcastable to
        each weight (or local shard); collective.

        Raises:
            ValueError: some pruned layers saw no input on any rank since the last update (all named, on every
                rank).
        """
        sums, calls = self._reduced()
        self._local.sync(sums, calls)
        norms = self._local.window.read()
        for n, v in norms.items():                 # grouped convolutions: one row of norms per output row
            if shards is not None and v.shape[0] > 1:
                norms[n] = v[shards[n].start:shards[n].stop]
        return norms

    def checkpoint(self) -> dict[str, Any]:
        """``activation_sums`` (global, every weight; zeros where unseen) and ``activation_seen``; collective.
        Folds the ranks' sums into rank 0's (the same global sums, added in the order a resumed run adds them)."""
        sums, calls = self._reduced()
        seen = [n for n in self.names if calls[n] > 0]
        self._local.load_state({n: sums[n] for n in seen} if self._rank == 0 else {})
        return {"activation_sums": sums, "activation_seen": seen}

    def restore(self, state: Mapping[str, Any], check_only: bool = False) -> None:
        """Restore :meth:`checkpoint` output (or a single-process ``Pruner`` state's ``activation_sums``): rank 0
        holds the sums, the other ranks none. Checked before anything changes (``check_only``: only checked).

        Raises:
            ValueError: missing or malformed sums, names that are not pruned weights.
        """
        sums = state.get("activation_sums")
        if not isinstance(sums, Mapping):
            raise ValueError(f"criterion {self._criterion!r} reads activations: state['activation_sums'] must be "
                             "the dict the pruner's state_dict() saved")
        seen = state.get("activation_seen", sorted(sums))
        if not isinstance(seen, (list, tuple)) or not all(n in sums for n in seen):
            raise ValueError(f"state['activation_seen'] must list names of state['activation_sums'], got {seen!r}")
        self._local.check_state({n: sums[n] for n in seen})         # raises before any change
        if not check_only:
            self._local.load_state({n: sums[n] for n in seen} if self._rank == 0 else {})

    def reset(self) -> None:
        """Start a new window (after an update)."""
        self._local.reset()

    def remove(self) -> None:
        """Drop the forward hooks."""
        self._local.remove()
