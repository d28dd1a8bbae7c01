"""The one torch writer of a mask update: weights, masks, stored values, optimizer state.

Both torch pruners write what the core decided (a :class:`sparsify.protocol.MaskUpdate`)
through :func:`write_update`: the single-process :class:`~sparsify_torch.Pruner` and the
FSDP2 :class:`~sparsify_torch.distributed.fsdp.ShardedPruner`. For every pruned weight it

1. reads the dense weight (the values the entries hold under the mask);
2. on a release, multiplies it by ``update.keep_values`` (the last masks: released weights start
   from the pruned values, ``-0.0`` and all, as the multiplication gives them);
3. sets the grown entries (``update.grown``) to zero in the dense weight and in every
   optimizer-state tensor shaped like the weight (Adam's ``exp_avg`` and ``exp_avg_sq``,
   SGD's ``momentum_buffer``; the scalar ``step`` is left alone);
4. stores the dense weight under the new mask ``update.masks``;

then resets the activation statistics, which start again after an update.

What differs between the pruners is only where a weight lives, a :class:`WeightStorage`:

* :class:`ParametrizedStorage` (``Pruner``): the dense weight *is* the parametrization's
  ``original`` (changed in place), the mask its :class:`MaskParametrization` buffer;
  a fused q/k/v weight is its rows of both;
* :class:`ShardStorage` (``ShardedPruner``): the local shard holds ``dense * mask`` (what
  FSDP2 all-gathers), a tensor beside it the dense values where pruned (``stored``, only with
  an optimizer; without one they are lost), and a bool mask the local rows.

Example:
    >>> import numpy as np, torch
    >>> from sparsify.protocol import MaskUpdate
    >>> from sparsify_torch.layers import prunable_weights
    >>> layout = prunable_weights(torch.nn.Linear(3, 1))[0]        # the weight's layout: (1, 3)
    >>> shard = ShardStorage(layout, torch.tensor([[1.0, 0.0, 3.0]]), torch.tensor([[True, False, True]]),
    ...                      stored=torch.tensor([[0.0, -2.0, 0.0]]))
    >>> shard.dense().tolist()                                      # what the core ranks
    [[1.0, -2.0, 3.0]]
    >>> keep = np.array([[False, True, True]])
    >>> write_update(MaskUpdate(step=1, masks={"weight": keep}, keep_values={"weight": keep}), {"weight": shard})
    >>> shard.local.tolist(), shard.stored.tolist(), shard.mask.tolist()
    ([[0.0, -2.0, 3.0]], [[1.0, 0.0, 0.0]], [[False, True, True]])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

import numpy as np
import torch

from sparsify.protocol import MaskUpdate

from .distributed.dtensor import local_tensor
from .layers import PrunableWeight

__all__ = ["WeightStorage", "ParametrizedStorage", "ShardStorage", "optimizer_state", "write_update"]


class WeightStorage(Protocol):
    """Where one pruned weight lives: what :func:`write_update` needs of each pruner.

    Attributes:
        layout: the weight's :class:`~sparsify_torch.layers.PrunableWeight` (canonical masks become
            torch tensors through its ``mask_like``).
    """

    layout: PrunableWeight

    def dense(self) -> torch.Tensor:
        """The dense weight (torch layout): the storage itself or a new tensor, which the writer may change."""

    def optimizer_state(self) -> list[torch.Tensor]:
        """The optimizer-state tensors of this weight (its part of each, in place), read only for regrowth."""

    def store(self, dense: torch.Tensor, mask: np.ndarray) -> None:
        """Hold ``dense`` (from :meth:`dense`, changed by the writer) under the new canonical bool ``mask``."""


def optimizer_state(optimizer: torch.optim.Optimizer | None, param: torch.Tensor,
                    part: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> list[torch.Tensor]:
    """``part`` of each state tensor ``optimizer`` keeps for ``param`` with ``param``'s shape (none without one).

    Example:
        >>> p = torch.nn.Parameter(torch.ones(2))
        >>> opt = torch.optim.Adam([p])
        >>> p.sum().backward(); opt.step()
        >>> [tuple(t.shape) for t in optimizer_state(opt, p)]           # exp_avg, exp_avg_sq; not step
        [(2,), (2,)]
    """
    if optimizer is None:
        return []
    return [part(v) for v in optimizer.state.get(param, {}).values()
            if isinstance(v, torch.Tensor) and tuple(v.shape) == tuple(param.shape)]


@dataclass(frozen=True)
class ParametrizedStorage:
    """A weight under a :class:`~sparsify_torch.parametrization.MaskParametrization` (the ``Pruner``'s).

    Attributes:
        layout: the weight's layout (its ``part`` picks the rows of a fused q/k/v weight).
        original: the parametrization's ``original``, the dense weight (the whole tensor).
        mask: the parametrization's mask buffer (the whole tensor, the weight's dtype).
        optimizer: the optimizer stepping ``original``, or None.

    Example:
        >>> import numpy as np
        >>> from sparsify_torch.layers import prunable_weights
        >>> layout = prunable_weights(torch.nn.Linear(2, 1))[0]
        >>> s = ParametrizedStorage(layout, torch.tensor([[4.0, -5.0]]), torch.ones(1, 2))
        >>> s.store(s.dense(), np.array([[True, False]]))
        >>> s.original.tolist(), s.mask.tolist()                  # dense under the mask
        ([[4.0, -5.0]], [[1.0, 0.0]])
    """

    layout: PrunableWeight
    original: torch.Tensor
    mask: torch.Tensor
    optimizer: torch.optim.Optimizer | None = None

    def dense(self) -> torch.Tensor:
        return self.layout.part(self.original)

    def optimizer_state(self) -> list[torch.Tensor]:
        return optimizer_state(self.optimizer, self.original, self.layout.part)

    def store(self, dense: torch.Tensor, mask: np.ndarray) -> None:
        buffer = self.layout.part(self.mask)            # ``dense`` is ``original`` itself: already in place
        buffer.copy_(self.layout.mask_like(mask, buffer))


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return local_tensor(tensor)


@dataclass(frozen=True)
class ShardStorage:
    """A weight whose local shard holds ``dense * mask`` (the ``ShardedPruner``'s FSDP2 shards).

    Attributes:
        layout: the weight's layout.
        param: the parameter: a DTensor (its local shard is written) or a plain tensor.
        mask: the local bool mask (True = kept), shaped like the local shard.
        stored: the dense values where pruned (zero where kept), shaped like the local shard; None
            without an optimizer (the pruned values are dropped).
        optimizer: the optimizer stepping ``param``, or None.
    """

    layout: PrunableWeight
    param: torch.Tensor
    mask: torch.Tensor
    stored: torch.Tensor | None = None
    optimizer: torch.optim.Optimizer | None = None

    @property
    def local(self) -> torch.Tensor:
        """The local shard (``param`` itself when it is not a DTensor)."""
        return _local(self.param)

    def dense(self) -> torch.Tensor:
        """The shard where kept, the stored values where pruned (the shard itself without stored values)."""
        local = self.local.detach()
        return local if self.stored is None else torch.where(self.mask, local, self.stored)

    def optimizer_state(self) -> list[torch.Tensor]:
        return optimizer_state(self.optimizer, self.param, _local)

    @torch.no_grad()
    def apply_mask(self) -> None:
        """Zero the pruned entries of the local shard (what FSDP2 all-gathers is ``dense * mask``)."""
        self.local.mul_(self.mask)

    @torch.no_grad()
    def swap_in(self) -> None:
        """Before an optimizer step that steps the dense weights: the stored values into the shard."""
        self.local.copy_(torch.where(self.mask, self.local, self.stored))

    @torch.no_grad()
    def swap_out(self) -> None:
        """After it: the pruned values back into ``stored``, zeros into the shard."""
        self.stored.copy_(self.local.masked_fill(self.mask, 0))
        self.local.mul_(self.mask)

    def store(self, dense: torch.Tensor, mask: np.ndarray) -> None:
        keep = self.layout.mask_like(mask, self.mask)
        self.local.copy_(dense * keep)
        if self.stored is not None:
            self.stored.copy_(dense.masked_fill(keep, 0))
        self.mask.copy_(keep)


@torch.no_grad()
def write_update(update: MaskUpdate, storages: Mapping[str, WeightStorage], statistics: Any = None) -> None:
    """Write ``update`` into every weight of ``storages`` (keyed like ``update.masks``; see the module).

    Args:
        update: the core's update (canonical bool arrays per weight).
        storages: where each weight lives, keyed by weight name.
        statistics: activation statistics to ``reset()`` after the update, or None.

    Raises:
        ValueError: ``update.masks`` (or, for a release, ``update.keep_values``) lacks a weight of ``storages``;
            nothing is written then.

    Example:
        >>> import numpy as np
        >>> from sparsify.protocol import MaskUpdate
        >>> from sparsify_torch.layers import prunable_weights
        >>> layout = prunable_weights(torch.nn.Linear(2, 1))[0]
        >>> s = ParametrizedStorage(layout, torch.tensor([[4.0, -5.0]]), torch.tensor([[1.0, 0.0]]))
        >>> ones, last = np.ones((1, 2), bool), np.array([[True, False]])
        >>> write_update(MaskUpdate(2, {"weight": ones}, {"weight": last}, released=True), {"weight": s})
        >>> s.original.tolist(), s.mask.tolist()                  # a release bakes the last zeros
        ([[4.0, -0.0]], [[1.0, 1.0]])
    """
    needed = (("masks", update.masks),) + ((("keep_values", update.keep_values),) if update.released else ())
    for what, arrays in needed:                         # checked before anything changes
        missing = [name for name in storages if name not in arrays]
        if missing:
            raise ValueError(f"update.{what} must hold a mask for every weight written; it lacks {missing} "
                             f"(it holds {sorted(arrays)})")
    for name, storage in storages.items():
        layout, dense = storage.layout, storage.dense()
        if update.released:
            dense.mul_(layout.mask_like(update.keep_values[name], dense))
        grown = update.grown.get(name)
        if grown is not None and grown.any():          # grown weights start at zero, with zeroed optimizer state
            keep = layout.mask_like(~grown, dense)
            dense.mul_(keep)
            for state in storage.optimizer_state():
                state.mul_(keep.to(state.dtype))
        storage.store(dense, update.masks[name])
    if statistics is not None:
        statistics.reset()
