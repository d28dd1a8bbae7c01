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
from .summary import PruningSummary, selected_summary
from .optimizer_order import check_order, check_state, plain_name, unwrap_optimizer

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
                 process_group: Any = None, log_dir: Any = None, optimizer: Any = None, *,
                 parametrized: list[tuple[nn.Module, str]] | None = None,
                 summary: PruningSummary | None = None,
                 plain_parameters: list[tuple[str, nn.Parameter]] | None = None) -> None:
        # TensorBoard, like Keras
        super().__init__(protocol, layers, None if log_dir is None else _writer(log_dir))
        self.model = model
        # every (layer, tensor) under a mask: the pruned weights' and those of the layers tied to them
        self._parametrized = list(dict.fromkeys(parametrized if parametrized is not None else
                                                [(w.module, w.tensor_name) for w in layers]))
        self._summary = summary
        # the plain model's (name, parameter) order, taken by prune() before the weights moved (optimizer_order)
        self._plain_named = list(plain_parameters) if plain_parameters is not None else [
            (plain_name(n), q) for n, q in model.named_parameters()]
        self.optimizer = optimizer
        self._group = process_group
        self._backward_seen: set[str] = set()
        self._score_queued = False
        self._loads = [self._par(n).loads for n in self.names]
        if "activation" in protocol.engine.needs:
            self._activations = self._activation_reader(layers)
            self.hooks.append(self._activations)
        if optimizer is not None:      # a state dict numbered in another order is refused before it loads
            self.hooks.append(optimizer.register_load_state_dict_pre_hook(self._check_loaded_optimizer_state))
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
        from .distributed.collective import TorchCollective
        from .distributed.fsdp_activations import GroupActivationNorms
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

        With the model's own ``state_dict()`` (plain names, masked values) it is everything a resume needs:
        ``stored`` holds, per weight (torch layout, like ``FSDP2``'s ``ShardedPruner``), the values the
        pruned entries keep under the mask (zero where kept), which ``monotone=False`` ranks and
        ``pruned_gradient="straight_through"`` trains. Load the model's state first, then this one.

        Example:
            >>> from sparsify_torch import prune
            >>> p = prune(torch.nn.Linear(4, 2), {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
            >>> sd = p.state_dict()
            >>> sorted(sd)
            ['config', 'done_step', 'masks', 'names', 'released', 'scores', 'step', 'stored', 'version']
            >>> sd["masks"]["weight"].sum().item()
            4
        """
        core = self.protocol.state_dict()      # masks in the canonical layout, like the core's
        core["masks"] = {n: torch.from_numpy(m) for n, m in core["masks"].items()}
        out = {**core, "step": self._step, "scores": {n: s.detach().cpu().clone() for n, s in self._scores.items()}}
        if self._activations is not None:     # inputs seen since the last update (criteria that read them)
            out.update(self._activations.checkpoint())
        if not self.removed:                  # the values under the masks (model.state_dict() holds the product)
            out["stored"] = {n: pw.part(self._original(n)).detach().masked_fill(pw.part(self._par(n).mask) != 0, 0)
                             .to("cpu", copy=True) for n, pw in self._layers.items()}
        return out

    def _check_loaded(self, state: Any) -> dict[str, torch.Tensor]:
        """The saved values of the pruned entries (``state['stored']``; a state without them, saved by an
        older version, leaves the stored weights as they are), checked once the masks fit (the core's
        ``restore`` names a misfit mask first)."""
        if any(tuple(state["masks"][n].shape) != self._layers[n].shape for n in self.names):
            return {}
        stored = state.get("stored") or {}
        if not isinstance(stored, dict) or not set(stored) <= set(self.names):
            got = sorted(stored) if isinstance(stored, dict) else type(stored).__name__
            raise ValueError(f"state['stored'] must be a dict of tensors keyed by pruned weight name (of "
                             f"{self.names}), got {got}")
        for n, v in stored.items():
            like = self._layers[n].part(self._original(n))
            if not isinstance(v, torch.Tensor) or not v.is_floating_point() or v.shape != like.shape:
                got = f"{v.dtype} tensor of shape {tuple(v.shape)}" if isinstance(v, torch.Tensor) else type(v).__name__
                raise ValueError(f"state['stored'][{n!r}] must be a float tensor of shape {tuple(like.shape)}, got {got}")
        return stored

    def _loaded_mask(self, name: str, mask: torch.Tensor) -> np.ndarray:
        return mask.detach().cpu().numpy()          # saved in the canonical layout, like the core's

    def _write_loaded(self, checked: Any) -> None:
        restored = self.protocol.masks                 # written as an update to themselves: only the buffers change
        mask_write.write_update(MaskUpdate(self.protocol.done_step, restored, restored), self._storages())
        with torch.no_grad():
            for n, values in checked.items():           # the pruned entries' values, under the restored masks
                pw = self._layers[n]
                dense = pw.part(self._original(n))
                dense.copy_(torch.where(pw.part(self._par(n).mask) != 0, dense, values.to(dense)))
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
        for module, tensor_name in self._parametrized:     # a tied parameter: the same object again each time
            parametrize.remove_parametrizations(module, tensor_name, leave_parametrized=True)
        self.removed = True
        self._pending.clear()
        return self.model

    # ----- optimizers ---------------------------------------------------------------------------
    def plain_parameters(self) -> list[nn.Parameter]:
        """The model's parameters in the plain (unpruned) model's order: each pruned weight's stored tensor
        (``parametrizations.<name>.original``, the same parameter object) where the plain weight was.

        After ``prune()``, ``model.parameters()`` lists a pruned layer's bias before its weight, so an optimizer
        built on it numbers its state differently from one built before ``prune()`` or on the plain model
        (:mod:`sparsify_torch.optimizer_order`). Build an optimizer after ``prune()`` on this list instead:
        its state dicts are then interchangeable with those of an optimizer built before ``prune()``.

        Example:
            >>> from sparsify_torch import prune
            >>> m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
            >>> plain = list(m.parameters())
            >>> p = prune(m, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
            >>> same = lambda a, b: [id(x) for x in a] == [id(x) for x in b]
            >>> same(m.parameters(), plain), same(p.plain_parameters(), plain)
            (False, True)
            >>> opt = torch.optim.Adam(p.plain_parameters(), lr=1e-3)    # numbered like one built before prune()
        """
        listed = {id(q) for _, q in self._plain_named}
        return [q for _, q in self._plain_named] + [q for q in self.model.parameters() if id(q) not in listed]

    def check_optimizer(self, optimizer: Any) -> None:
        """Raise if ``optimizer`` does not list this model's parameters in the plain model's order (built on
        ``model.parameters()`` after ``prune()``), or holds a state tensor whose shape is not its parameter's
        (a state dict loaded from an optimizer that numbered the parameters otherwise). Call it after building
        an optimizer after ``prune()`` or loading its state; see :meth:`plain_parameters`.

        Raises:
            ValueError: naming the param group and the parameters out of order, or the misplaced state.

        Example:
            >>> from sparsify_torch import prune
            >>> m = torch.nn.Linear(4, 4)
            >>> p = prune(m, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
            >>> p.check_optimizer(torch.optim.SGD(p.plain_parameters(), lr=0.1))
            >>> p.check_optimizer(torch.optim.SGD(m.parameters(), lr=0.1))  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: optimizer: param group 0 lists the parameters in the order model.parameters() has after prune() (['bias', 'weight']), not the plain model's (['weight', 'bias']): ...
        """
        inner = unwrap_optimizer(optimizer)
        if not isinstance(inner, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        check_order(inner, self._plain_named, list(self.model.parameters()))
        check_state(inner, self._plain_named)

    def _check_loaded_optimizer_state(self, optimizer: torch.optim.Optimizer, state_dict: dict) -> None:
        """``load_state_dict`` pre-hook of the optimizer given to ``prune()``: refuse misplaced state."""
        if not self.removed:
            check_state(optimizer, self._plain_named, state_dict)

    def summary(self) -> PruningSummary:
        """Every weight this pruner prunes (name, module type, shape, pattern, target, current sparsity)
        and every other tensor of two or more dimensions of the model, with why it is left dense (not
        matched by ``op_names``, excluded, unsupported type, tied to another weight, hooked...).
        ``str()`` of it is a table; ``prune()`` logs its one-line count (:meth:`PruningSummary.line`). It is the
        :class:`sparsify.selection_summary.SelectionSummary` Keras and TF graph summaries are (rows:
        :class:`~sparsify.selection_summary.SummaryRow`).

        Example:
            >>> from sparsify_torch import prune
            >>> m = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8))
            >>> p = prune(m, {"target_sparsity": 0.5, "op_names": ["^1"], "start_step": 0, "end_step": 0})
            >>> [(r.name, r.selected, r.reason) for r in p.summary()]
            [('0.weight', False, "not matched by op_names ['^1']"), ('1.weight', True, '')]
            >>> p.summary().line()
            'pruning 1 weight (32 of 72 parameters); 1 tensor with 2+ dimensions left dense: see Pruner.summary()'
        """
        base = self._summary
        if base is None:        # a Pruner built by hand: its weights only
            base = selected_summary(self.model, self.config, self._layers.values())
        return base.with_sparsity(self.sparsity())

    def __repr__(self) -> str:
        return (f"Pruner(step={self._step}, pattern={self.config.pattern!r}, scope={self.config.pruning_scope!r}, "
                f"layers={len(self.names)}, sparsity={self.total_sparsity():.3f})")


def _writer(log_dir: Any) -> Any:
    """A :class:`~sparsify_torch.tensorboard.SparsityWriter` (its module loads only when ``log_dir`` is given)."""
    from .tensorboard import SparsityWriter
    return SparsityWriter(log_dir)
