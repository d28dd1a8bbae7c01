"""``prune(model, config) -> Pruner``: scheduled mask pruning of a torch model.

The adapter holds no pruning math: at every update point of the schedule it
hands the selected weights (canonical layout = torch layout, NumPy float32)
and, for gradient criteria, their scores to :class:`sparsify.PruningEngine`
and copies the returned masks into each layer's :class:`MaskParametrization`
buffer, in place.

Example:
    >>> import torch
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

from typing import Any, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from sparsify import PruningConfig, PruningEngine, criteria

from .layers import SUPPORTED_MODULES, PrunableWeight, prunable_weights
from .parametrization import MaskParametrization

__all__ = ["Pruner", "prune"]

_STATE_KEYS = ("step", "done_step", "disabled", "names", "masks", "scores")


def _dist_group_size(group: Any) -> int:
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return 1
    return torch.distributed.get_world_size(group)


class Pruner:
    """Follows the schedule of one config on one model. Build it with :func:`prune`.

    Call :meth:`step` once per optimizer step. The pruner counts steps
    itself (the first call moves to step 1) and updates the masks whenever an
    update point of the schedule lies in ``(last update, current step]``, so
    an update is never lost, even across skipped steps or a resume.

    Attributes:
        engine: the :class:`sparsify.PruningEngine` computing the masks.
        config: its validated :class:`sparsify.PruningConfig`.
        names: pruned weight names, in model order.
    """

    def __init__(self, model: nn.Module, engine: PruningEngine, layers: list[PrunableWeight],
                 process_group: Any = None) -> None:
        self.model = model
        self.engine = engine
        self.config = engine.config
        self._layers = {w.name: w for w in layers}
        self.names: list[str] = list(self._layers)
        self._group = process_group
        self._step = 0
        self._done = -1
        self._disabled = False
        self._removed = False
        self._scores: dict[str, torch.Tensor] = {}
        self._pending: dict[str, torch.Tensor] = {}
        self._hooks: list[Any] = []
        if engine.needs_gradients:
            for name in self.names:
                self._hooks.append(self._original(name).register_post_accumulate_grad_hook(self._grad_hook(name)))
        else:
            self._maybe_update()  # an update point at step 0 applies right away

    # ----- access -------------------------------------------------------------------------
    def _original(self, name: str) -> torch.Tensor:
        w = self._layers[name]
        return w.module.parametrizations[w.tensor_name].original

    def _par(self, name: str) -> MaskParametrization:
        w = self._layers[name]
        return w.module.parametrizations[w.tensor_name][0]

    @property
    def step_count(self) -> int:
        """Number of optimizer steps counted so far."""
        return self._step

    @property
    def done_step(self) -> int:
        """Step of the last mask update (-1 if none yet)."""
        return self._done

    def masks(self) -> dict[str, torch.Tensor]:
        """Current masks as boolean tensors (True = kept), keyed by weight name."""
        return {n: self._par(n).bool_mask() for n in self.names}

    def sparsity(self) -> dict[str, float]:
        """Fraction of pruned weights per layer."""
        out = {}
        for n in self.names:
            m = self._par(n).mask
            out[n] = 1.0 - float(torch.count_nonzero(m)) / m.numel()
        return out

    def total_sparsity(self) -> float:
        """Fraction of pruned weights over all pruned layers."""
        tot = sum(self._par(n).mask.numel() for n in self.names)
        kept = sum(int(torch.count_nonzero(self._par(n).mask)) for n in self.names)
        return 1.0 - kept / tot

    # ----- gradient criteria --------------------------------------------------------------
    def _grad_hook(self, name: str):
        def hook(param: torch.Tensor) -> None:
            # deepcopy/other models never carry this hook, but be strict anyway.
            if self._removed or param.grad is None or param is not self._original(name):
                return
            w, g = param.detach(), param.grad.detach()   # g is already zero where the mask is
            if self.config.criterion == "snip":
                self._pending[name] = criteria.snip(w, g)
            else:
                # From the committed average, so gradient accumulation (several
                # backward passes per optimizer step) counts as one step.
                self._pending[name] = criteria.snip_momentum(self._scores.get(name), w, g,
                                                             self.config.criterion_momentum)
        return hook

    def _gradient_scores(self) -> dict[str, torch.Tensor]:
        if not self._scores:
            raise RuntimeError(f"criterion {self.config.criterion!r} needs gradients, but none were seen since "
                               "prune(): call loss.backward() before pruner.step()")
        return {n: self._scores[n] if n in self._scores else torch.zeros_like(self._original(n).detach())
                for n in self.names}

    def _reduce(self, scores: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """All-reduce (mean) the scores over the process group, so every rank gets one mask."""
        world = _dist_group_size(self._group)
        if world == 1:
            return scores
        flat = torch.cat([s.detach().reshape(-1).to(torch.float32) for s in scores.values()])
        torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM, group=self._group)
        flat /= world
        out, off = {}, 0
        for n, s in scores.items():
            out[n] = flat[off:off + s.numel()].view(s.shape)
            off += s.numel()
        return out

    # ----- schedule -----------------------------------------------------------------------
    @torch.no_grad()
    def _update(self, step: int) -> None:
        weights = {n: (self._original(n) * self._par(n).mask).detach().to(torch.float32).cpu().numpy()
                   for n in self.names}
        pre = {n: self._par(n).bool_mask().cpu().numpy() for n in self.names}
        scores = None
        if self.engine.needs_gradients:
            scores = self._gradient_scores()
        elif _dist_group_size(self._group) > 1:
            scores = {n: criteria.magnitude(self._original(n) * self._par(n).mask) for n in self.names}
        if scores is not None:
            scores = {n: s.detach().to(torch.float32).cpu().numpy()
                      for n, s in self._reduce(scores).items()}
        masks = self.engine.compute_masks(weights, step, pre_masks=pre, scores=scores)
        for n in self.names:
            par = self._par(n)
            par.set_mask(torch.from_numpy(np.ascontiguousarray(masks[n])))
            self._original(n).mul_(par.mask)   # pruned weights are exactly zero underneath too

    @torch.no_grad()
    def _disable(self) -> None:
        for n in self.names:
            par = self._par(n)
            self._original(n).mul_(par.mask)
            par.mask.fill_(1)
        self._disabled = True

    def _maybe_update(self) -> None:
        if self._disabled:
            return
        if self.engine.update_due(self._done, self._step):
            self._update(self._step)
            self._done = self._step
        if not self.engine.masking_active(self._step):
            self._disable()

    def _check_alive(self, what: str) -> None:
        if self._removed:
            raise RuntimeError(f"Pruner.{what}() called after Pruner.remove(); the masks are baked into the "
                               "weights and this pruner no longer controls the model")

    def step(self, num_steps: int = 1) -> None:
        """Count ``num_steps`` optimizer steps and update the masks if an update point was reached.

        Call it right after ``optimizer.step()``. With a gradient criterion
        the gradients of the last backward pass are folded into the scores.

        Args:
            num_steps: steps to advance (a positive integer), e.g. when the
                pruner is only called every few optimizer steps.

        Raises:
            RuntimeError: after :meth:`remove`.
        """
        self._check_alive("step")
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}")
        self._scores.update(self._pending)
        self._pending.clear()
        self._step += num_steps
        self._maybe_update()

    # ----- state --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Step counters, masks and criterion state; ``torch.load(weights_only=True)`` safe.

        Example:
            >>> p = prune(torch.nn.Linear(4, 2), {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
            >>> sd = p.state_dict()
            >>> sorted(sd)
            ['config', 'disabled', 'done_step', 'masks', 'names', 'scores', 'step']
            >>> sd["masks"]["weight"].sum().item()
            4
        """
        return {
            "step": self._step,
            "done_step": self._done,
            "disabled": self._disabled,
            "names": list(self.names),
            "masks": {n: m.cpu().clone() for n, m in self.masks().items()},
            "scores": {n: s.detach().cpu().clone() for n, s in self._scores.items()},
            "config": self.config.to_dict(),
        }

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (everything is checked before anything changes).

        Raises:
            ValueError: the state belongs to a model with other pruned weights
                or shapes, or is malformed.
            RuntimeError: after :meth:`remove`.
        """
        self._check_alive("load_state_dict")
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from Pruner.state_dict(), got {type(state).__name__}")
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"state is missing keys {missing}; expected a dict from Pruner.state_dict()")
        names = list(state["names"])
        if names != self.names or set(state["masks"]) != set(self.names):
            raise ValueError(f"state was saved for pruned weights {names}, but this pruner prunes {self.names}; "
                             "load it into a model built the same way and pruned with the same op_names")
        for key in ("step", "done_step"):
            if isinstance(state[key], bool) or not isinstance(state[key], int):
                raise ValueError(f"state[{key!r}] must be an integer, got {state[key]!r}")
        for n in self.names:
            m = state["masks"][n]
            want = tuple(self._par(n).mask.shape)
            if not isinstance(m, torch.Tensor) or tuple(m.shape) != want:
                got = tuple(m.shape) if isinstance(m, torch.Tensor) else type(m).__name__
                raise ValueError(f"state['masks'][{n!r}] has shape {got}, but weight {n!r} has shape {want}")
        for n, s in state["scores"].items():
            if n not in self._layers or not isinstance(s, torch.Tensor) or tuple(s.shape) != tuple(self._par(n).mask.shape):
                raise ValueError(f"state['scores'][{n!r}] does not match a pruned weight of this model")
        for n in self.names:
            self._par(n).set_mask(state["masks"][n])
        self._scores = {n: s.detach().clone().to(self._original(n).device) for n, s in state["scores"].items()}
        self._pending.clear()
        self._step, self._done = int(state["step"]), int(state["done_step"])
        self._disabled = bool(state["disabled"])

    # ----- removal ------------------------------------------------------------------------
    def remove(self) -> nn.Module:
        """Bake the masks into plain parameters and drop the parametrizations and hooks.

        The parameter objects stay the same (optimizers keep working); the
        model then saves and loads as a plain torch model. Returns the model.
        """
        self._check_alive("remove")
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        for n in self.names:
            w = self._layers[n]
            parametrize.remove_parametrizations(w.module, w.tensor_name, leave_parametrized=True)
        self._removed = True
        self._pending.clear()
        return self.model

    def __repr__(self) -> str:
        return (f"Pruner(step={self._step}, pattern={self.config.pattern!r}, scope={self.config.pruning_scope!r}, "
                f"layers={len(self.names)}, sparsity={self.total_sparsity():.3f})")


def _has_mask_param(model: nn.Module) -> bool:
    return any(isinstance(m, MaskParametrization) for m in model.modules())


def prune(model: nn.Module, config: PruningConfig | Mapping[str, Any] | str, *,
          process_group: Any = None) -> Pruner:
    """Register mask parametrizations on the selected weights of ``model``.

    Weights of Linear, Conv1d/2d/3d, ConvTranspose1d/2d/3d, Embedding(Bag)
    and MultiheadAttention (``in_proj_weight`` or ``q/k/v_proj_weight``, and
    ``out_proj.weight``) are candidates; ``config.op_names`` /
    ``excluded_op_names`` regexes pick among their names
    (``"features.0.weight"``). Everything is checked before the model is
    touched. With a magnitude criterion, an update point at the current step
    (step 0) is applied right away; gradient criteria wait for the first
    :meth:`Pruner.step` (the step-0 update is not lost).

    Under ``torch.distributed`` (initialized), scores are all-reduced (mean)
    over ``process_group`` (default: the world) before the core is called, so
    every rank computes the same masks. Call ``prune`` before wrapping the
    model in ``DistributedDataParallel``.

    Args:
        model: the model; modified in place.
        config: a ``PruningConfig``, a dict of its fields or a YAML path.
        process_group: group to reduce scores over (None = default group).

    Returns:
        The :class:`Pruner`; call its ``step()`` once per optimizer step.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: bad config, no weight selected, a pattern that does not
            fit a weight, weights already pruned/parametrized or shared.

    Example:
        >>> m = torch.nn.Linear(4, 4)
        >>> p = prune(m, {"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 0})
        >>> int((m.weight != 0).sum())
        8
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    engine = PruningEngine(config)
    if _has_mask_param(model):
        raise ValueError("model is already pruned (it has MaskParametrization layers); call Pruner.remove() "
                         "before pruning it again")
    candidates = prunable_weights(model)
    if not candidates:
        kinds = ", ".join(t.__name__ for t in SUPPORTED_MODULES)
        raise ValueError(f"model has no prunable weights; supported layers are {kinds}")
    by_name = {w.name: w for w in candidates}
    chosen = engine.select_layers(list(by_name), {n: w.shape for n, w in by_name.items()})
    layers = [by_name[n] for n in chosen]
    seen: dict[int, str] = {}
    for w in layers:
        if parametrize.is_parametrized(w.module, w.tensor_name):
            raise ValueError(f"weight {w.name!r} already has a parametrization; sparsify_torch needs plain weights "
                             "(exclude it with excluded_op_names)")
        p = w.module._parameters[w.tensor_name]
        if id(p) in seen:
            raise ValueError(f"weights {seen[id(p)]!r} and {w.name!r} are the same (tied) parameter; exclude one "
                             "of them with excluded_op_names")
        seen[id(p)] = w.name
        if not p.is_floating_point():
            raise ValueError(f"weight {w.name!r} has dtype {p.dtype}; only floating point weights can be pruned")
    engine.check_layers({w.name: w.shape for w in layers})
    done: list[PrunableWeight] = []
    try:
        for w in layers:
            p = w.module._parameters[w.tensor_name]
            parametrize.register_parametrization(w.module, w.tensor_name,
                                                 MaskParametrization(torch.ones_like(p.detach())))
            done.append(w)
        return Pruner(model, engine, layers, process_group)
    except BaseException:
        for w in done:   # nothing half-applied
            parametrize.remove_parametrizations(w.module, w.tensor_name, leave_parametrized=False)
        raise
