"""Pruning FSDP2 models (``torch.distributed.fsdp.fully_shard``): masks sharded like the weights.

After ``fully_shard`` every parameter is a DTensor sharded along dim 0: each
rank holds a range of rows. ``sparsify_torch.prune`` notices this and returns
a :class:`ShardedPruner`, which never gathers a weight, a score or a mask:

* **masks** are this rank's rows only (a boolean tensor per weight, beside the
  local shard); :meth:`ShardedPruner.masks` returns them as DTensors placed
  like the weights;
* **selection** is the core's :class:`sparsify.distributed.ShardedPruningProtocol`:
  each rank scores its own rows and the exact k-th unit (and its tie break) is
  found with small collectives (:class:`TorchCollective`), so the masks are
  bit for bit those of the single-process core on the full weights;
* **dense under the mask**: FSDP2 owns the parameters (all-gather before
  forward, reduce-scatter after backward), so no parametrization is
  registered. The shards hold ``weight * mask`` during forward and backward
  (so FSDP2 all-gathers the masked weight) and the pruner keeps the values of
  the pruned entries beside them, in a tensor per weight shaped like the local
  shard (``stored``), which ``monotone=False`` ranks. With
  ``pruned_gradient="none"`` (the default) the pruned gradient entries are
  zeroed on the sharded gradient once FSDP2 has reduced it (a
  post-accumulate-grad hook, which FSDP2 calls) and, with
  ``prune(..., optimizer=opt)``, the stored values and the pruned entries'
  optimizer state do not move (:mod:`sparsify_torch.frozen_pruned`, as in the
  single-process :class:`~sparsify_torch.Pruner`). With
  ``"straight_through"`` an optimizer step pre-hook puts the stored values back
  into the shards and a post-hook takes them out again, so the optimizer steps
  the dense weights (with the gradient of the masked weight the model used, plus
  ``pruned_decay`` times the stored values: SR-STE) as it steps
  ``parametrizations.weight.original``. Without an optimizer the
  pruned entries are dropped (zeros) after every step, which only
  ``monotone=True`` without regrowth allows;
* **what criteria and regrowth read**: activation criteria (``wanda``) read
  every rank's inputs, summed over the group at each update
  (:mod:`sparsify_torch.distributed.fsdp_activations`); RigL reads this rank's rows of the
  reduced dense gradient of the backward pass before an update; the core
  (:func:`sparsify.distributed.sharded_regrow`) swaps exactly the weights the
  single-process core swaps, and grown weights start at zero with zeroed
  optimizer state;
* **checkpoints**: :meth:`ShardedPruner.state_dict` holds DTensor masks,
  stored values (and ``snip_momentum`` scores), so
  ``torch.distributed.checkpoint`` saves and loads it, resharding when the
  number of ranks changes.

Call ``prune`` after ``fully_shard`` (on the whole model, so every pruned
weight is sharded) and ``pruner.step()`` after every ``optimizer.step()``;
every rank must call both (they are collective).

Example:
    >>> is_sharded(torch.zeros(2))
    False
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from sparsify.criteria import gradient_score
from sparsify.distributed import ShardedPruningProtocol
from sparsify.protocol import MaskUpdate

from .. import mask_write
from ..frozen_pruned import FrozenPruned, PrunedParam
from ..layers import PrunableWeight
from ..mask_write import ShardStorage
from ..pruner_base import PrunerBase
from ..summary import PruningSummary, selected_summary
from ..tensorboard import SparsityWriter
from .collective import TorchCollective
from .fsdp_activations import GroupActivationNorms

__all__ = ["TorchCollective", "ShardedPruner", "is_sharded"]


def is_sharded(tensor: Any) -> bool:
    """True for a DTensor (a parameter sharded by FSDP2 or ``distribute_tensor``)."""
    return isinstance(tensor, DTensor)


class ShardedPruner(PrunerBase):
    """Follows the schedule of one config on a model whose pruned weights are FSDP2 shards.

    Build it with :func:`sparsify_torch.prune` after ``fully_shard``. Same use
    as :class:`sparsify_torch.Pruner`: :meth:`step` once per optimizer step
    (on every rank), :meth:`state_dict` / :meth:`load_state_dict`,
    :meth:`sparsity`. Every method that changes masks is collective. With an
    ``optimizer`` the pruned entries keep their values (see the module
    docstring and :meth:`dense_weights`).

    Attributes:
        protocol: the core :class:`sparsify.distributed.ShardedPruningProtocol`.
        config: its validated :class:`sparsify.PruningConfig`.
        names: pruned weight names, in model order.
        collective: the :class:`TorchCollective` over the weights' device mesh.
    """

    after_remove = "this pruner no longer controls the model"

    def __init__(self, model: nn.Module, protocol: ShardedPruningProtocol, layers: list[PrunableWeight],
                 params: Mapping[str, DTensor], collective: TorchCollective, log_dir: Any = None,
                 optimizer: torch.optim.Optimizer | None = None, *, summary: PruningSummary | None = None) -> None:
        # TensorBoard on rank 0 only: the figures are over all ranks (counts summed at each update)
        super().__init__(protocol, layers,
                         SparsityWriter(log_dir) if log_dir is not None and collective.rank == 0 else None)
        self.model = model
        self._summary = summary
        self.collective = collective
        self.optimizer = optimizer
        self._params = dict(params)
        self._mask: dict[str, torch.Tensor] = {
            n: torch.ones(protocol.local_shapes[n], dtype=torch.bool, device=self._params[n].device)
            for n in self.names}
        # values of the pruned entries (zero where kept), kept beside the shards when an optimizer steps them
        self._stored: dict[str, torch.Tensor] = {} if optimizer is None else {
            n: torch.zeros_like(self._local(n)) for n in self.names}
        self._straight_through = self.config.pruned_gradient == "straight_through"
        self._decay = self.config.pruned_decay
        self.hooks += [self._params[n].register_post_accumulate_grad_hook(self._grad_hook(n)) for n in self.names]
        if optimizer is not None and self._straight_through:    # the optimizer steps the dense weights
            self.hooks += [optimizer.register_step_pre_hook(self._before_optimizer_step),
                           optimizer.register_step_post_hook(self._after_optimizer_step)]
        elif optimizer is not None:       # pruned values (kept in ``stored``) and their optimizer state stay put
            self.hooks.append(FrozenPruned(self._pruned_params, optimizer))
        if "activation" in protocol.engine.needs:      # each rank's inputs, summed over the group at updates
            self._activations = GroupActivationNorms(layers, collective, self.config.criterion)
            self.hooks.append(self._activations)
        self._capture_now = False
        self._dense_grads: dict[str, torch.Tensor] = {}
        self.start()

    def _local(self, name: str) -> torch.Tensor:
        return self._params[name].to_local()

    def _dtensor(self, name: str, local: torch.Tensor) -> DTensor:
        p = self._params[name]
        return DTensor.from_local(local, p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                  stride=_contiguous_stride(tuple(p.shape)))

    def masks(self) -> dict[str, DTensor]:
        """Current masks (bool, True = kept) as DTensors sharded like the weights, keyed by name."""
        return {n: self._dtensor(n, self._mask[n].clone()) for n in self.names}

    def local_masks(self) -> dict[str, torch.Tensor]:
        """This rank's rows of the masks (bool tensors, shapes of the local shards)."""
        return {n: m.clone() for n, m in self._mask.items()}

    def dense_weights(self) -> dict[str, DTensor]:
        """The weights dense under the masks, as DTensors placed like the weights (what the single-process
        ``Pruner`` keeps in ``parametrizations.weight.original``): the shards where kept, the stored values
        where pruned (zeros without an optimizer)."""
        return {n: self._dtensor(n, self._dense(n).clone()) for n in self.names}

    def _pruned_params(self) -> list[PrunedParam]:
        """Each sharded parameter with its local shard and mask (the shard holds zeros where pruned)."""
        return [PrunedParam(self._params[n], self._local(n), self._mask[n], zero_pruned=True) for n in self.names]

    def _storage(self, name: str) -> ShardStorage:
        """Where ``name`` lives: the local shard (``dense * mask``), the stored values, the local mask."""
        return ShardStorage(self._layers[name], self._params[name], self._mask[name], self._stored.get(name),
                            self.optimizer)

    def _dense(self, name: str) -> torch.Tensor:
        return self._storage(name).dense()

    # ----- the optimizer steps the dense weights -----------------------------------------------
    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.removed:
            for n in self._stored:
                self._storage(n).swap_in()

    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.removed:
            for n in self._stored:
                self._storage(n).swap_out()

    def sparsity(self) -> dict[str, float | None]:
        """Fraction of pruned weights per layer, over the full weights (None: skipped, ``protocol.skipped``)."""
        return self.protocol.layer_sparsity()

    def total_sparsity(self) -> float:
        """Fraction of pruned weights over all pruned layers, over the full weights."""
        return self.protocol.total_sparsity()

    # ----- gradients ---------------------------------------------------------------------------
    def _grad_hook(self, name: str):
        def hook(param: torch.Tensor) -> None:
            if self.removed or param.grad is None:
                return
            with torch.no_grad():
                g = param.grad.to_local() if isinstance(param.grad, DTensor) else param.grad
                if self._capture_now:
                    self._dense_grads[name] = g.detach().clone()  # of the masked weight the model used
                if not self._straight_through:
                    g.mul_(self._mask[name])                 # pruned entries get no gradient
                elif self._decay:                            # SR-STE: + decay * (pruned values)
                    g.add_(self._stored[name].to(g.dtype) * self._decay)    # the rounding of parametrization.py
                if self.engine.scored_every_step:
                    self._pending[name] = gradient_score(self.config, self._scores.get(name), self._dense(name), g)
        return hook

    # ----- schedule ----------------------------------------------------------------------------
    def read_weights(self) -> dict[str, np.ndarray]:
        """This rank's rows of the canonical weights, dense under the mask (pruned entries: the stored values)."""
        return {n: pw.to_canonical(self._dense(n)) for n, pw in self._layers.items()}

    def read_grads(self) -> dict[str, np.ndarray]:
        """This rank's rows of the dense (reduced) gradients of the last backward pass (RigL), canonical."""
        missing = [n for n in self.names if n not in self._dense_grads]
        if missing:
            raise RuntimeError(f"regrowth={self.config.regrowth!r} needs the gradient of {missing[0]!r} at the update, "
                               "but no backward pass ran since the last one: call loss.backward() before pruner.step()")
        return {n: pw.to_canonical(self._dense_grads[n]) for n, pw in self._layers.items()}

    def _set_capture(self, on: bool) -> None:
        self._capture_now = on

    def _score_like(self, name: str) -> torch.Tensor:
        return torch.zeros_like(self._local(name))

    def read_activations(self) -> dict[str, np.ndarray]:
        """Per-input-channel norms of every rank's inputs since the last update (collective), broadcastable
        to this rank's rows."""
        return self._activations.canonical(self.protocol.shards)

    def _apply_masks(self) -> None:
        for n in self.names:
            self._storage(n).apply_mask()

    def _before_step(self) -> None:
        self._apply_masks()          # the pruned entries of every local shard are zero after each step

    def write_update(self, update: MaskUpdate) -> None:
        """New masks into the shards: ``dense * mask`` in the shard, the rest in the stored values; a release
        bakes the zeros of the last masks first, as the single-process ``Pruner`` does."""
        mask_write.write_update(update, {n: self._storage(n) for n in self.names}, self._activations)
        self._dense_grads.clear()

    # ----- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Step counters, config, DTensor masks, stored values (and ``snip_momentum`` scores), for
        ``torch.distributed.checkpoint``.

        ``masks``, ``stored`` and ``scores`` are DTensors placed like the weights, so
        ``torch.distributed.checkpoint.load`` reshards them for another number
        of ranks. ``stored`` holds the values of the pruned entries (zero where kept;
        empty without an optimizer). With a gradient criterion ``scores`` has an entry per pruned
        weight (zeros until the first gradient) and ``scored`` names those that hold scores.
        """
        core = self.protocol.state_dict()
        state = {k: v for k, v in core.items() if k not in ("masks", "shards")}
        state["masks"] = self.masks()
        state["stored"] = {n: self._dtensor(n, v.clone()) for n, v in self._stored.items()}
        scores = {}
        if self.engine.scored_every_step:
            for n in self.names:
                local = self._scores[n].detach().clone() if n in self._scores else torch.zeros_like(self._local(n))
                scores[n] = self._dtensor(n, local.to(torch.float32))
        state["scores"] = scores
        state["scored"] = sorted(self._scores)
        state["step"] = self._step
        if self._activations is not None:     # global sums of the inputs since the last update (collective)
            state.update(self._activations.checkpoint())
        return state

    def _state_rows(self, what: str, name: str, value: Any) -> torch.Tensor:
        """This rank's rows of a DTensor placed like the weight, or of a full tensor. Masks and stored values
        loaded by :meth:`load_state_dict` may be either (``torch.distributed.checkpoint`` loads DTensors into
        this pruner's ``state_dict()``; a single-process ``Pruner.state_dict()`` holds full tensors)."""
        p = self._params[name]
        if isinstance(value, DTensor):
            if tuple(value.shape) != tuple(p.shape) or tuple(value.placements) != tuple(p.placements) \
                    or value.device_mesh.size() != p.device_mesh.size():
                raise ValueError(f"state[{what!r}][{name!r}] is a DTensor of shape {tuple(value.shape)} placed "
                                 f"{tuple(value.placements)}; the weight is {tuple(p.shape)} placed "
                                 f"{tuple(p.placements)} on {p.device_mesh.size()} ranks (load the checkpoint with "
                                 "torch.distributed.checkpoint into this pruner's state_dict())")
            return value.to_local()
        if isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(p.shape):
            shard = self.protocol.shards[name]            # a full tensor (e.g. a single-process state)
            return value[shard.start:shard.stop]
        raise ValueError(f"state[{what!r}][{name!r}] must be a DTensor placed like the weight or a full tensor of "
                         f"shape {tuple(p.shape)}, got {type(value).__name__}")

    def _loaded_mask(self, name: str, mask: torch.Tensor) -> np.ndarray:
        return self._layers[name].to_canonical(mask.cpu())

    def _check_loaded(self, state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """This rank's rows of the saved stored values (a state without them, e.g. a single-process one,
        stores zeros)."""
        stored = state.get("stored") or {}
        if not isinstance(stored, Mapping) or not set(stored) <= set(self.names):
            got = sorted(stored) if isinstance(stored, Mapping) else type(stored).__name__
            raise ValueError(f"state['stored'] must be a dict of tensors keyed by pruned weight name (of "
                             f"{self.names}), got {got}")
        local = {n: self._state_rows("stored", n, stored[n]) for n in self._stored if n in stored}
        for n, v in local.items():
            if not v.is_floating_point() or not bool(torch.isfinite(v).all()):
                raise ValueError(f"state['stored'][{n!r}] is not a finite float tensor")
        return local

    def _write_loaded(self, checked: dict[str, torch.Tensor]) -> None:
        for n in self.names:
            self._mask[n].copy_(self._layers[n].from_canonical(self.protocol.masks[n]).to(self._mask[n].device))
        for n, v in self._stored.items():
            v.copy_(checked[n].masked_fill(self._mask[n], 0) if n in checked else torch.zeros_like(v))
        self._apply_masks()

    def remove(self) -> nn.Module:
        """Stop pruning: drop the hooks and the stored values (the pruned weights stay zero, as
        ``Pruner.remove()`` bakes ``weight * mask``). Returns the model."""
        self.check_alive("remove")
        self.warn_if_target_unreached("ShardedPruner.remove()")
        self._apply_masks()
        self.release_resources()
        self.removed = True
        self._stored.clear()
        return self.model

    def summary(self) -> PruningSummary:
        """What this pruner prunes and leaves dense and why, as :meth:`sparsify_torch.Pruner.summary` gives it
        for a plain model (shapes and parameter counts of the full weights, sparsity over all ranks; not
        collective: every rank gets the same summary). ``prune()`` logs its one-line count."""
        base = self._summary
        if base is None:        # built by hand: its weights only
            base = selected_summary(self.model, self.config, self._layers.values())
        return base.with_sparsity(self.sparsity())

    def __repr__(self) -> str:
        return (f"ShardedPruner(step={self._step}, pattern={self.config.pattern!r}, "
                f"scope={self.config.pruning_scope!r}, layers={len(self.names)}, rank={self.collective.rank}/"
                f"{self.collective.world_size}, sparsity={self.total_sparsity():.3f})")


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(stride))
