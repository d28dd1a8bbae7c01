"""The :class:`Pruner` that :func:`sparsify_torch.prune` returns: scheduled mask pruning of a torch model.

The adapter holds no pruning math and no step logic: the core's
:class:`sparsify.PruningProtocol` decides when masks change and computes them.
The adapter counts optimizer steps, hands the protocol the selected weights
(canonical layout = torch layout, NumPy float32, shared memory on CPU) and,
for gradient criteria, their scores, and copies the masks it gets back into
each layer's :class:`MaskParametrization` buffer, in place.

Example:
    >>> import torch
    >>> from sparsify_torch import prune
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    >>> pruner.sparsity()
    {'0.weight': 0.5, '2.weight': 0.5}
    >>> float((model[0].weight == 0).float().mean())
    0.5
    >>> pruner.step()            # once per optimizer step, like an LR scheduler
    >>> _ = pruner.remove()      # bake the masks into plain parameters
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from sparsify.criteria import gradient_score
from sparsify.protocol import MaskUpdate, PruningProtocol

from . import mask_write
from .layers import PrunableWeight
from .mask_write import ParametrizedStorage
from .parametrization import MaskParametrization
from .pruner_base import PrunerBase, dist_group_size
from .frozen_pruned import FrozenPruned, PrunedParam
from .statistics import ActivationNorms

__all__ = ["Pruner"]


class Pruner(PrunerBase):
    """Follows the schedule of one config on one model. Build it with :func:`prune`.

    Call :meth:`step` once per optimizer step. The pruner counts steps
    itself (the first call moves to step 1) and updates the masks whenever an
    update point of the schedule lies in ``(last update, current step]``, so
    an update is never lost, even across skipped steps or a resume.

    Attributes:
        protocol: the core :class:`sparsify.PruningProtocol` deciding the updates.
        config: its validated :class:`sparsify.PruningConfig`.
        names: pruned weight names, in model order.
    """

    def __init__(self, model: nn.Module, protocol: PruningProtocol, layers: list[PrunableWeight],
                 process_group: Any = None, log_dir: Any = None, optimizer: Any = None) -> None:
        # TensorBoard, like Keras
        super().__init__(protocol, layers, None if log_dir is None else _writer(log_dir))
        self.model = model
        self.optimizer = optimizer
        self._group = process_group
        self._backward_seen: set[str] = set()
        self._score_queued = False
        self._loads = [self._par(n).loads for n in self.names]
        if "activation" in protocol.engine.needs:
            self._activations = self._activation_reader(layers)
            self.hooks.append(self._activations)
        if self.config.pruned_gradient == "none":      # pruned values and their optimizer state stay put
            self.hooks.append(FrozenPruned(self._pruned_params, optimizer))
        if protocol.engine.scored_every_step:
            self.hooks += [self._original(n).register_post_accumulate_grad_hook(self._grad_hook(n)) for n in self.names]
        self.start()

    def _activation_reader(self, layers: list[PrunableWeight]) -> Any:
        """The inputs' statistics: this process's (:class:`ActivationNorms`), or under ``torch.distributed``
        summed over the group (a ``GroupActivationNorms``, loaded only then)."""
        if dist_group_size(self._group) == 1:
            return ActivationNorms(layers, self.config.criterion)
        from .fsdp_activations import GroupActivationNorms
        from .torch_collective import TorchCollective
        return GroupActivationNorms(layers, TorchCollective(self._group), self.config.criterion)

    def _pruned_params(self) -> list[PrunedParam]:
        """Each parametrized tensor (once, fused q/k/v too) with its whole mask buffer."""
        out = []
        for module, tensor_name in dict.fromkeys((w.module, w.tensor_name) for w in self._layers.values()):
            par = module.parametrizations[tensor_name]
            out.append(PrunedParam(par.original, par.original, par[0].mask))
        return out

    # ----- access -------------------------------------------------------------------------
    def _original(self, name: str) -> torch.Tensor:
        w = self._layers[name]
        return w.module.parametrizations[w.tensor_name].original

    def _par(self, name: str) -> MaskParametrization:
        w = self._layers[name]
        return w.module.parametrizations[w.tensor_name][0]

    def masks(self) -> dict[str, torch.Tensor]:
        """Current masks as boolean tensors (True = kept) in each weight's torch layout, keyed by name
        (after :meth:`remove`: the last masks, on the CPU)."""
        if self.removed:
            return {n: pw.from_canonical(self.protocol.masks[n]).to(torch.bool, copy=True)
                    for n, pw in self._layers.items()}
        return {n: self._layers[n].part(self._par(n).bool_mask()) for n in self.names}

    def sparsity(self) -> dict[str, float | None]:
        """Fraction of pruned weights per layer; None for a layer skipped (``protocol.skipped``)."""
        self._sync()
        return self.protocol.layer_sparsity()

    def total_sparsity(self) -> float:
        """Fraction of pruned weights over all pruned layers."""
        self._sync()
        return self.protocol.total_sparsity()

    def _sync(self) -> None:
        """Re-read the mask buffers into the protocol if a ``model.load_state_dict`` replaced them
        (after :meth:`remove` there are no buffers: the protocol keeps the last masks)."""
        if self.removed:
            return
        loads = [self._par(n).loads for n in self.names]
        if loads != self._loads:
            self.protocol.restore(self.protocol.done_step,
                                  {n: w.to_canonical(w.part(self._par(n).bool_mask())) for n, w in self._layers.items()})
            self._loads = loads

    # ----- gradient criteria --------------------------------------------------------------
    def _grad_hook(self, name: str):
        def hook(param: torch.Tensor) -> None:
            # deepcopy/other models never carry this hook, but be strict anyway.
            if self.removed or param.grad is None or param is not self._original(name):
                return
            self._backward_seen.add(name)
            if not self._score_queued:
                # Score once the backward pass is over: under DDP the gradient is then the batch mean DDP
                # all-reduced (its own end-of-backward callback was queued during the pass; ours goes after it).
                self._score_queued = True
                engine = torch.autograd.Variable._execution_engine
                engine.queue_callback(lambda: engine.queue_callback(self._score_gradients))
        return hook

    def _score_gradients(self) -> None:
        """The per-step criterion of this backward pass, from the final (DDP: all-reduced) gradients."""
        self._score_queued = False
        for name in self._backward_seen:
            param = self._original(name)
            if param.grad is None:
                continue
            part = self._layers[name].part
            w, g = part(param.detach()), part(param.grad.detach())   # g is already zero where the mask is
            # From the committed average, so gradient accumulation (several
            # backward passes per optimizer step) counts as one step.
            self._pending[name] = gradient_score(self.config, self._scores.get(name), w, g)
        self._backward_seen.clear()

    # ----- schedule -----------------------------------------------------------------------
    def read_weights(self) -> dict[str, np.ndarray]:
        """Canonical NumPy views of the stored weights, dense under the mask (no copy for float32 CPU
        weights): pruned entries hold the values they keep, which ``monotone=False`` ranks."""
        return {n: pw.to_canonical(pw.part(self._original(n).detach())) for n, pw in self._layers.items()}

    def read_grads(self) -> dict[str, np.ndarray]:
        """Canonical dense gradients of the weights the model used in the last backward pass (RigL)."""
        out = {}
        for n, pw in self._layers.items():
            g = self._par(n).dense_grad
            if g is None:
                raise RuntimeError(f"regrowth={self.config.regrowth!r} needs the gradient of {n!r} at the update, but "
                                   "no backward pass ran since the last one: call loss.backward() before pruner.step()")
            out[n] = pw.to_canonical(pw.part(g))
        return out

    def read_activations(self) -> dict[str, np.ndarray]:
        """Per-input-channel norms of each layer's inputs since the last update (the core's window);
        ``ValueError`` names every layer that saw none while others did."""
        return self._activations.canonical()

    def _set_capture(self, on: bool) -> None:
        for n in self.names:
            self._par(n).capture_grad = on

    def _score_like(self, name: str) -> torch.Tensor:
        return torch.zeros_like(self._layers[name].part(self._original(name)))

    def _before_step(self) -> None:
        self._score_queued = False          # a backward pass that failed midway never ran its callback

    def _storages(self) -> dict[str, ParametrizedStorage]:
        """Where each weight lives: the parametrization's ``original`` and mask buffer."""
        return {n: ParametrizedStorage(pw, self._original(n), self._par(n).mask, self.optimizer)
                for n, pw in self._layers.items()}

    def write_update(self, update: MaskUpdate) -> None:
        # the stored weights stay dense under the mask; a release bakes the zeros of the last masks, then unmasks
        mask_write.write_update(update, self._storages(), self._activations)

    # ----- state --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Step counters, masks, config and criterion state; ``torch.load(weights_only=True)`` safe.

        Example:
            >>> from sparsify_torch import prune
            >>> p = prune(torch.nn.Linear(4, 2), {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
            >>> sd = p.state_dict()
            >>> sorted(sd)
            ['config', 'done_step', 'masks', 'names', 'released', 'scores', 'step', 'version']
            >>> sd["masks"]["weight"].sum().item()
            4
        """
        core = self.protocol.state_dict()      # masks in the canonical layout, like the core's
        core["masks"] = {n: torch.from_numpy(m) for n, m in core["masks"].items()}
        out = {**core, "step": self._step, "scores": {n: s.detach().cpu().clone() for n, s in self._scores.items()}}
        if self._activations is not None:     # inputs seen since the last update (criteria that read them)
            out.update(self._activations.checkpoint())
        return out

    def _loaded_mask(self, name: str, mask: torch.Tensor) -> np.ndarray:
        return mask.detach().cpu().numpy()          # saved in the canonical layout, like the core's

    def _write_loaded(self, checked: Any) -> None:
        restored = self.protocol.masks                 # written as an update to themselves: only the buffers change
        mask_write.write_update(MaskUpdate(self.protocol.done_step, restored, restored), self._storages())
        self._loads = [self._par(n).loads for n in self.names]

    # ----- removal ------------------------------------------------------------------------
    def remove(self) -> nn.Module:
        """Bake the masks into plain parameters and drop the parametrizations and hooks.

        The parameter objects stay the same (optimizers keep working); the
        model then saves and loads as a plain torch model. Returns the model.
        """
        self.check_alive("remove")
        self.warn_if_target_unreached("Pruner.remove()")
        self.release_resources()
        for module, tensor_name in dict.fromkeys((w.module, w.tensor_name) for w in self._layers.values()):
            parametrize.remove_parametrizations(module, tensor_name, leave_parametrized=True)
        self.removed = True
        self._pending.clear()
        return self.model

    def __repr__(self) -> str:
        return (f"Pruner(step={self._step}, pattern={self.config.pattern!r}, scope={self.config.pruning_scope!r}, "
                f"layers={len(self.names)}, sparsity={self.total_sparsity():.3f})")


def _writer(log_dir: Any) -> Any:
    """A :class:`~sparsify_torch.tensorboard.SparsityWriter` (its module loads only when ``log_dir`` is given)."""
    from .tensorboard import SparsityWriter
    return SparsityWriter(log_dir)
