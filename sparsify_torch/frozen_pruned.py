"""Pruned weights do not move under the optimizer (``pruned_gradient="none"``; docs/design.md, rule 8).

A pruned weight gets no gradient, but an optimizer still moves it: SGD's momentum
buffer and weight decay, Adam's moments, AdamW's decoupled decay. The TF writer
freezes pruned values and zeroes their optimizer slots; so does torch, with one
pair of optimizer step hooks (:class:`FrozenPruned`):

* the **pre-hook** copies the values of every pruned parameter the stepping
  optimizer holds (into a buffer kept per parameter, no host sync; none for FSDP2 shards,
  whose pruned entries are zeros and whose pruned values live beside them);
* the **post-hook** puts the pruned entries' old values back (the same values,
  for finite weights) and zeroes their entries in every optimizer-state tensor
  shaped like the parameter
  (``momentum_buffer``, ``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``; the scalar
  ``step`` is left alone).

A pruned weight therefore keeps its value and holds zero optimizer state until a
mask update revives it (``monotone=False``) or grows it (regrowth), and
``monotone=False`` ranks the same values in TF and torch. With the optimizer
given to :func:`sparsify_torch.prune` the hooks are that optimizer's; without one
they are global (``torch.optim.optimizer.register_optimizer_step_pre_hook``) and
act on any optimizer holding a pruned parameter. ``Pruner.remove()`` removes them.

Example:
    >>> p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    >>> opt = torch.optim.SGD([p], lr=0.5, momentum=0.9, weight_decay=0.5)
    >>> freeze = FrozenPruned(lambda: [PrunedParam(p, p, torch.tensor([True, False]))], opt)
    >>> p.grad = torch.tensor([1.0, 0.0]); opt.step()
    >>> p.tolist(), opt.state[p]["momentum_buffer"].tolist()      # entry 1 is pruned: unchanged, no momentum
    ([0.25, 2.0], [1.5, 0.0])
    >>> freeze.remove()
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .mask_write import optimizer_state

__all__ = ["PrunedParam", "FrozenPruned"]


@dataclass(frozen=True)
class PrunedParam:
    """One parameter with pruned entries.

    Attributes:
        param: the tensor the optimizer holds (``parametrizations.weight.original``, an FSDP2 DTensor).
        local: its values on this process (``param`` itself, or the DTensor's local shard).
        keep: the mask, shaped like ``local``: True (or 1) where kept, False (or 0) where pruned.
        zero_pruned: True when ``local`` holds zeros where pruned and the values live elsewhere (FSDP2's
            ``stored``): the post-hook zeroes them again and no copy is taken.
    """

    param: torch.Tensor
    local: torch.Tensor
    keep: torch.Tensor
    zero_pruned: bool = False


# Objects with no optimizer of their own. One pair of global hooks, registered once and never removed, serves
# them all: they are held weakly, so a pruner dropped with its model ends its part. Removing a global hook
# from a finalizer instead would mutate torch's hook dict while an optimizer step may be iterating it (a
# garbage collection inside a hook runs finalizers): "OrderedDict mutated during iteration".
_EVERY_OPTIMIZER: weakref.WeakSet[FrozenPruned] = weakref.WeakSet()
_GLOBAL_HOOKS: list[Any] = []


def _pre_every(optimizer: Any, args: Any, kwargs: Any) -> None:
    for frozen in list(_EVERY_OPTIMIZER):
        frozen._pre(optimizer)


def _post_every(optimizer: Any, args: Any, kwargs: Any) -> None:
    for frozen in list(_EVERY_OPTIMIZER):
        frozen._post(optimizer)


def _watch_every_optimizer(frozen: FrozenPruned) -> None:
    if not _GLOBAL_HOOKS:
        _GLOBAL_HOOKS.extend([register_optimizer_step_pre_hook(_pre_every),
                              register_optimizer_step_post_hook(_post_every)])
    _EVERY_OPTIMIZER.add(frozen)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


class FrozenPruned:
    """Optimizer step hooks that keep pruned values and zero their optimizer state (see the module).

    Args:
        params: returns the pruned parameters now (their masks change at updates).
        optimizer: the optimizer to hook; None: every optimizer (global hooks), each acting on the
            pruned parameters it holds.
    """

    def __init__(self, params: Callable[[], list[PrunedParam]], optimizer: torch.optim.Optimizer | None = None):
        self._params = params
        self._before: dict[int, list[tuple[PrunedParam, Any]]] = {}
        self._buffers: dict[int, list[Any]] = {}
        self._global = optimizer is None
        if self._global:
            _watch_every_optimizer(self)
            self._handles: list[Any] = []
        else:
            self._handles = [optimizer.register_step_pre_hook(self._pre),
                             optimizer.register_step_post_hook(self._post)]

    def _copy(self, entry: PrunedParam) -> tuple[torch.Tensor, torch.Tensor]:
        """This parameter's buffers, allocated once: its values before the step, and ``1 - mask`` (refreshed
        when the mask changed in place)."""
        key = id(entry.param)
        held = self._buffers.get(key)
        if held is None or held[0].shape != entry.local.shape or held[0].device != entry.local.device:
            held = [torch.empty_like(entry.local), None, None]
            self._buffers[key] = held
        stamp = (id(entry.keep), entry.keep.data_ptr(), entry.keep._version)    # this mask, unchanged since
        if held[2] != stamp or held[1] is None:
            held[1], held[2] = 1 - entry.keep.to(entry.local.dtype), stamp
        return held[0].copy_(entry.local), held[1]

    @torch.no_grad()
    def _pre(self, optimizer: torch.optim.Optimizer, args: Any = None, kwargs: Any = None) -> None:
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self._before[id(optimizer)] = [(e, None if e.zero_pruned else self._copy(e))
                                       for e in self._params() if id(e.param) in held]

    @torch.no_grad()
    def _post(self, optimizer: torch.optim.Optimizer, args: Any = None, kwargs: Any = None) -> None:
        # Arithmetic with the 0/1 mask, not torch.where: as exact for finite values (x * 1 + y * 0 == x,
        # x * 0 + y * 1 == y, up to the sign of a zero) and several times faster on CPU.
        for entry, copied in self._before.pop(id(optimizer), []):
            keep = entry.keep.to(entry.local.dtype)          # no copy for the Pruner's mask buffer
            entry.local.mul_(keep)
            if copied is not None:
                before, pruned = copied
                entry.local.addcmul_(before, pruned)
            for state in optimizer_state(optimizer, entry.param, _local):
                state.mul_(keep.to(state.dtype))

    def remove(self) -> None:
        """Drop the hooks."""
        _EVERY_OPTIMIZER.discard(self)
        for h in self._handles:
            h.remove()
        self._handles = []
        self._handles.clear()
        self._before.clear()
        self._buffers.clear()
