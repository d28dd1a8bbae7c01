"""``prune(model, config) -> Pruner``: scheduled mask pruning of a torch model.

The adapter holds no pruning math and no step logic: the core's
:class:`sparsify.PruningProtocol` decides when masks change and computes them.
The adapter counts optimizer steps, hands the protocol the selected weights
(canonical layout = torch layout, NumPy float32, shared memory on CPU) and,
for gradient criteria, their scores, and copies the masks it gets back into
each layer's :class:`MaskParametrization` buffer, in place.

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

import warnings
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from sparsify import PruningConfig, PruningEngine
from sparsify.criteria import get_criterion
from sparsify.protocol import MaskUpdate, PruningProtocol

from .layers import SUPPORTED_MODULES, PrunableWeight, hooked_weights, prunable_weights
from .parametrization import MaskParametrization
from .statistics import ActivationNorms, check_activation_layers
from .tensorboard import SparsityWriter

if TYPE_CHECKING:                   # pragma: no cover
    from .fsdp import ShardedPruner

__all__ = ["Pruner", "prune"]

_STATE_KEYS = ("step", "done_step", "released", "names", "masks", "scores", "config")


def check_state_counters(state: Any, owner: str) -> int:
    """Check a pruner state's keys and step counters (before anything changes); returns its step.

    Example:
        >>> check_state_counters({"step": 3, "done_step": -1, "released": False, "names": [], "masks": {},
        ...                       "scores": {}, "config": {}}, "Pruner")
        3
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict from {owner}.state_dict(), got {type(state).__name__}")
    missing = [k for k in _STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"state is missing keys {missing}; expected a dict from {owner}.state_dict()")
    step, done = state["step"], state["done_step"]
    for key, v in (("step", step), ("done_step", done)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"state[{key!r}] must be an integer, got {v!r}")
    if not 0 <= step < 2 ** 63 or not -1 <= done <= step:
        raise ValueError(f"state['step'] must be >= 0 and state['done_step'] in [-1, step]; got "
                         f"step={step}, done_step={done}")
    return step


def check_num_steps(num_steps: Any) -> int:
    """``num_steps`` of ``step()``, checked: a positive integer.

    Example:
        >>> check_num_steps(3)
        3
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}")
    return num_steps


def gradient_score(config: PruningConfig, previous: torch.Tensor | None, weight: torch.Tensor,
                   grad: torch.Tensor) -> torch.Tensor:
    """The score of a per-step criterion after a backward pass, evaluated on torch tensors: e.g. ``snip``
    of this pass, or the ``snip_momentum`` running average from the committed ``previous`` one (None
    before the first). A criterion with a running state returns its new state as its scores' next
    ``previous`` (for ``snip_momentum`` they are the same tensor).

    Example:
        >>> cfg = PruningConfig(criterion="snip")
        >>> gradient_score(cfg, None, torch.tensor([2.0, -1.0]), torch.tensor([0.5, 3.0])).tolist()
        [1.0, 3.0]
    """
    crit = get_criterion(config.criterion)
    inputs = {"weight": weight, "grad": grad, "state": previous}
    out = crit.scores(config=config, **{k: v for k, v in inputs.items() if k in crit.needs})
    return out[1] if "state" in crit.needs else out


def _dist_group_size(group: Any) -> int:
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return 1
    return torch.distributed.get_world_size(group)


class PrunerBase:
    """What :class:`Pruner` and :class:`~sparsify_torch.fsdp.ShardedPruner` share around the core protocol.

    Subclasses set ``protocol``, ``_weights`` (a reader of the canonical weights), ``_write(update)``,
    ``_writer`` (a :class:`SparsityWriter` or None), ``_hooks`` (gradient hook handles) and ``_removed``;
    ``_after_remove`` ends the error of a call after ``remove()``.
    """

    _after_remove = "the masks are baked into the weights and this pruner no longer controls the model"

    @property
    def engine(self) -> PruningEngine:
        """The core :class:`sparsify.PruningEngine` (schedule, pattern, criterion)."""
        return self.protocol.engine

    @property
    def step_count(self) -> int:
        """Number of optimizer steps counted so far."""
        return self._step

    @property
    def done_step(self) -> int:
        """Step of the last mask update (-1 if none yet)."""
        return self.protocol.done_step

    def _advance(self, step: int, scores: Any, grads: Any = None, activations: Any = None) -> None:
        """Advance the protocol to ``step``; write the masks and the TensorBoard figures of an update."""
        update = self.protocol.advance(step, weights=self._weights, scores=scores, grads=grads,
                                       activations=activations)
        if update is not None:
            self._write(update)
            if self._writer is not None:
                self._writer.write(self.protocol.figures(), step)

    def _release_resources(self) -> None:
        """Drop the gradient hooks and close the TensorBoard event file."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if self._writer is not None:
            self._writer.close()

    def _check_alive(self, what: str) -> None:
        if self._removed:
            name = type(self).__name__
            raise RuntimeError(f"{name}.{what}() called after {name}.remove(); {self._after_remove}")


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
        self.model = model
        self.optimizer = optimizer
        self._writer = None if log_dir is None else SparsityWriter(log_dir)   # TensorBoard, like Keras' log_dir
        self.protocol = protocol
        self.config = protocol.config
        self._layers = {w.name: w for w in layers}
        self.names: list[str] = list(protocol.names)
        self._group = process_group
        self._step = 0
        self._removed = False
        self._scores: dict[str, torch.Tensor] = {}
        self._pending: dict[str, torch.Tensor] = {}
        self._hooks: list[Any] = []
        self._loads = [self._par(n).loads for n in self.names]
        needs = protocol.engine.needs
        self._activations = ActivationNorms(layers) if "activation" in needs else None
        self._capture_grads = "grad" in needs and not protocol.engine.needs_gradients   # RigL: dense gradients
        if self._activations is not None:
            self._hooks.append(self._activations)
        if protocol.engine.needs_gradients:
            for name in self.names:
                self._hooks.append(self._original(name).register_post_accumulate_grad_hook(self._grad_hook(name)))
        else:
            try:
                if not self._waits_for_data():
                    self._maybe_update(0, {})  # an update point at step 0 applies right away
            except BaseException:
                self._release_resources()   # prune() fails: no hook or open event file is left behind
                raise
        self._arm_capture()

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
        if self._removed:
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
        if self._removed:
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
            if self._removed or param.grad is None or param is not self._original(name):
                return
            part = self._layers[name].part
            w, g = part(param.detach()), part(param.grad.detach())   # g is already zero where the mask is
            # From the committed average, so gradient accumulation (several
            # backward passes per optimizer step) counts as one step.
            self._pending[name] = gradient_score(self.config, self._scores.get(name), w, g)
        return hook

    def _gradient_scores(self, scores: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if not scores:
            raise RuntimeError(f"criterion {self.config.criterion!r} needs gradients, but none were seen since "
                               "prune(): call loss.backward() before pruner.step()")
        return {n: scores[n] if n in scores else torch.zeros_like(self._layers[n].part(self._original(n)))
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
    def _weights(self) -> dict[str, np.ndarray]:
        """Canonical NumPy views of the stored weights, dense under the mask (no copy for float32 CPU
        weights): pruned entries hold the values they keep, which ``monotone=False`` ranks."""
        return {n: pw.to_canonical(pw.part(self._original(n).detach())) for n, pw in self._layers.items()}

    def _dense_grads(self) -> dict[str, np.ndarray]:
        """Canonical dense gradients of the weights the model used in the last backward pass (RigL)."""
        out = {}
        for n, pw in self._layers.items():
            g = self._par(n).dense_grad
            if g is None:
                raise RuntimeError(f"regrowth={self.config.regrowth!r} needs the gradient of {n!r} at the update, but "
                                   "no backward pass ran since the last one: call loss.backward() before pruner.step()")
            out[n] = pw.to_canonical(pw.part(g))
        return out

    def _activation_norms(self) -> dict[str, np.ndarray]:
        if not self._activations.seen():
            raise RuntimeError(f"criterion {self.config.criterion!r} needs the inputs of every pruned layer, but some "
                               "saw no forward pass since the last update: run the model before pruner.step()")
        return self._activations.canonical()

    def _waits_for_data(self) -> bool:
        """True when an update needs statistics no pass produced yet (activations, dense gradients)."""
        return self._activations is not None or self._capture_grads

    def _arm_capture(self) -> None:
        """Record dense gradients only in the backward pass before an update (RigL)."""
        if self._capture_grads and not self._removed:
            nxt = self.protocol.next_step()
            on = nxt >= 0 and nxt <= self._step + 1
            for n in self.names:
                self._par(n).capture_grad = on

    def _scores_now(self, gradient_scores: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
        """Gradient-criterion scores (from ``gradient_scores``), or magnitudes, all-reduced over the process group."""
        if self.engine.needs_gradients:
            scores = self._gradient_scores(gradient_scores)
        else:
            acts = self._activation_norms() if self._activations is not None else None
            core = self.engine.criterion_scores(self._weights(), acts)
            scores = {n: self._layers[n].from_canonical(np.asarray(s, dtype=np.float32)) for n, s in core.items()}
        return {n: self._layers[n].to_canonical(s) for n, s in self._reduce(scores).items()}

    @torch.no_grad()
    def _set_masks(self, masks: Mapping[str, np.ndarray], zero: Mapping[str, np.ndarray] | None = None) -> None:
        """Copy canonical masks into the buffers in place; zero the stored weights where ``zero`` is False."""
        for n, pw in self._layers.items():
            buffer, original = pw.part(self._par(n).mask), pw.part(self._original(n))
            if zero is not None:
                original.mul_(pw.mask_like(zero[n], original))
            buffer.copy_(pw.mask_like(masks[n], buffer))

    @torch.no_grad()
    def _zero_grown(self, grown: Mapping[str, np.ndarray]) -> None:
        """Grown weights start at zero, with zeroed optimizer state."""
        for n, g in grown.items():
            if not g.any():
                continue
            pw = self._layers[n]
            original = self._original(n)
            keep = pw.mask_like(~g, original)
            pw.part(original).mul_(keep)
            state = self.optimizer.state.get(original, {}) if self.optimizer is not None else {}
            for v in state.values():
                if isinstance(v, torch.Tensor) and v.shape == original.shape:
                    pw.part(v).mul_(keep.to(v.dtype))

    def _write(self, update: MaskUpdate) -> None:
        # the stored weights stay dense under the mask; a release bakes the zeros of the last masks, then unmasks
        self._set_masks(update.masks, update.zero if update.released else None)
        self._zero_grown(update.grown)
        if self._activations is not None:
            self._activations.reset()

    def _maybe_update(self, step: int, gradient_scores: Mapping[str, torch.Tensor]) -> None:
        """Update the masks if an update point lies in ``(done_step, step]``; raises before any change."""
        if not self.protocol.due(step):
            return
        self._sync()
        needs_scores = self.engine.needs_gradients or _dist_group_size(self._group) > 1
        self._advance(step, (lambda: self._scores_now(gradient_scores)) if needs_scores else None,
                      grads=self._dense_grads if self._capture_grads else None,
                      activations=self._activation_norms if self._activations is not None else None)

    def step(self, num_steps: int = 1) -> None:
        """Count ``num_steps`` optimizer steps and update the masks if an update point was reached.

        Call it right after ``optimizer.step()``. With a gradient criterion
        the gradients of the last backward pass are folded into the scores.

        Args:
            num_steps: steps to advance (a positive integer), e.g. when the
                pruner is only called every few optimizer steps.

        Raises:
            RuntimeError: after :meth:`remove`, or a gradient criterion saw no gradients.
            ValueError: ``num_steps`` is not a positive integer, or the update failed (e.g. NaN
                weights). A failed step changes nothing: fix the cause and call it again.
        """
        self._check_alive("step")
        step, scores = self._step + check_num_steps(num_steps), {**self._scores, **self._pending}
        self._maybe_update(step, scores)          # raises before anything changes
        self._scores, self._step = scores, step
        self._pending.clear()
        self._arm_capture()

    # ----- state --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Step counters, masks, config and criterion state; ``torch.load(weights_only=True)`` safe.

        Example:
            >>> p = prune(torch.nn.Linear(4, 2), {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
            >>> sd = p.state_dict()
            >>> sorted(sd)
            ['config', 'done_step', 'masks', 'names', 'released', 'scores', 'step', 'version']
            >>> sd["masks"]["weight"].sum().item()
            4
        """
        core = self.protocol.state_dict()      # masks in the canonical layout, like the core's
        core["masks"] = {n: torch.from_numpy(m) for n, m in core["masks"].items()}
        return {**core, "step": self._step,
                "scores": {n: s.detach().cpu().clone() for n, s in self._scores.items()}}

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (everything is checked before anything changes).

        Raises:
            ValueError: the state was saved with another config (the differing keys
                are named), for other pruned weights or shapes, or is malformed.
            RuntimeError: after :meth:`remove`.
        """
        self._check_alive("load_state_dict")
        step = check_state_counters(state, "Pruner")
        masks = state["masks"]
        if not isinstance(masks, Mapping) or not all(isinstance(m, torch.Tensor) for m in masks.values()):
            raise ValueError("state['masks'] must be a dict of tensors keyed by weight name")
        scores = state["scores"]
        if not isinstance(scores, Mapping):
            raise ValueError("state['scores'] must be a dict of tensors keyed by weight name")
        for n, s in scores.items():
            if n not in self._layers:
                raise ValueError(f"state['scores'] holds {n!r}, which is not a pruned weight (of {self.names})")
            shape = tuple(self._layers[n].part(self._original(n)).shape)
            if not isinstance(s, torch.Tensor) or tuple(s.shape) != shape or not s.is_floating_point() \
                    or not bool(torch.isfinite(s).all()):
                got = (f"{s.dtype} tensor of shape {tuple(s.shape)}" if isinstance(s, torch.Tensor)
                       else type(s).__name__)
                raise ValueError(f"state['scores'][{n!r}] must be a finite float tensor of shape {shape}, got {got}"
                                 + (" holding NaN or inf" if isinstance(s, torch.Tensor) and s.is_floating_point()
                                    and tuple(s.shape) == shape else ""))
        core = {**state, "masks": {n: m.detach().cpu().numpy() for n, m in masks.items()}}
        self.protocol.load_state_dict(core)            # checks the rest; raises before any change
        self._set_masks(self.protocol.masks)
        self._loads = [self._par(n).loads for n in self.names]
        self._scores = {n: s.detach().clone().to(self._original(n).device) for n, s in scores.items()}
        self._pending.clear()
        self._step = step

    # ----- removal ------------------------------------------------------------------------
    def remove(self) -> nn.Module:
        """Bake the masks into plain parameters and drop the parametrizations and hooks.

        The parameter objects stay the same (optimizers keep working); the
        model then saves and loads as a plain torch model. Returns the model.
        """
        self._check_alive("remove")
        self._release_resources()
        for module, tensor_name in dict.fromkeys((w.module, w.tensor_name) for w in self._layers.values()):
            parametrize.remove_parametrizations(module, tensor_name, leave_parametrized=True)
        self._removed = True
        self._pending.clear()
        return self.model

    def __repr__(self) -> str:
        return (f"Pruner(step={self._step}, pattern={self.config.pattern!r}, scope={self.config.pruning_scope!r}, "
                f"layers={len(self.names)}, sparsity={self.total_sparsity():.3f})")


def _has_mask_param(model: nn.Module) -> bool:
    return any(isinstance(m, MaskParametrization) for m in model.modules())


def prune(model: nn.Module, config: PruningConfig | Mapping[str, Any] | str, *,
          process_group: Any = None, log_dir: Any = None, optimizer: Any = None) -> "Pruner | ShardedPruner":
    """Register mask parametrizations on the selected weights of ``model``.

    Weights of Linear, Conv1d/2d/3d, ConvTranspose1d/2d/3d, Embedding(Bag)
    and MultiheadAttention (``in_proj_weight.q/.k/.v`` — the three thirds of
    the fused projection, pruned as three weights — or ``q/k/v_proj_weight``,
    and ``out_proj.weight``) are candidates; ``config.op_names`` /
    ``excluded_op_names`` regexes pick among their names
    (``"features.0.weight"``). Everything is checked before the model is
    touched. With a magnitude criterion, an update point at the current step
    (step 0) is applied right away; gradient criteria wait for the first
    :meth:`Pruner.step` (the step-0 update is not lost).

    Under ``torch.distributed`` (initialized), scores are all-reduced (mean)
    over ``process_group`` (default: the world) before the core is called, so
    every rank computes the same masks. Call ``prune`` before wrapping the
    model in ``DistributedDataParallel``.

    FSDP2: on a model whose weights are DTensors sharded along dim 0
    (``fully_shard``), call ``prune`` *after* ``fully_shard``; it returns a
    :class:`sparsify_torch.fsdp.ShardedPruner` that keeps each rank's rows of
    the masks only and computes the single-process masks exactly, with small
    collectives (see ``docs/distributed.md``).

    Args:
        model: the model; modified in place.
        config: a ``PruningConfig``, a dict of its fields or a YAML path.
        process_group: group to reduce scores over (None = default group).
        log_dir: optional TensorBoard directory: ``sparsity/total`` and
            ``sparsity/<weight>`` scalars at every mask update (as Keras'
            ``PruningCallback(log_dir=)``), through ``torch.utils.tensorboard``.
        optimizer: the ``torch.optim.Optimizer`` training the model; required with
            ``regrowth`` (grown weights start with zeroed optimizer state).

    The stored weights stay dense under the masks (``parametrizations.weight.original``):
    the model computes with ``original * mask``, :meth:`Pruner.remove` and exports bake
    the product, and ``monotone=False`` lets a pruned weight come back by the value it
    kept. A pruned weight gets no gradient unless ``pruned_gradient="straight_through"``.
    ``criterion="wanda"`` reads the inputs of each pruned layer (forward pre-hooks,
    summed since the last update); ``regrowth="rigl"`` records the dense gradient in
    the backward pass before each update.

    Returns:
        The :class:`Pruner` (a ``ShardedPruner`` for FSDP2 weights); call its
        ``step()`` once per optimizer step.

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
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError("model is a TorchScript module (torch.jit.script/trace); its weights cannot be "
                        "parametrized: call prune() on the eager model, train, Pruner.remove(), then script it")
    config = PruningConfig.coerce(config)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if config.regrowth != "none" and optimizer is None:
        raise ValueError(f"regrowth={config.regrowth!r} zeroes the optimizer state of grown weights: pass the "
                         "optimizer, prune(model, config, optimizer=opt)")
    if _has_mask_param(model):
        raise ValueError("model is already pruned (it has MaskParametrization layers); call Pruner.remove() "
                         "before pruning it again")
    candidates = prunable_weights(model)
    if not candidates:
        kinds = ", ".join(t.__name__ for t in SUPPORTED_MODULES)
        raise ValueError(f"model has no prunable weights; supported layers are {kinds}")
    hooked = hooked_weights(model)
    if hooked:
        warnings.warn(f"layers {sorted(hooked)} compute their weight with an old-style hook "
                      f"({', '.join(sorted(set(hooked.values())))}); their weights are not pruned. Remove the hook "
                      "(torch.nn.utils.remove_spectral_norm / remove_weight_norm) to prune them", stacklevel=2)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        from .fsdp import is_sharded, prune_sharded      # FSDP2: weights are DTensor shards
        params = {w.name: w.module._parameters.get(w.tensor_name) for w in candidates}
        if any(is_sharded(p) for p in params.values()):
            if process_group is not None:
                raise ValueError("process_group is for DistributedDataParallel; FSDP2 (DTensor) weights are pruned "
                                 "over their own device mesh: pass process_group=None")
            unsupported = [f"{k}={getattr(config, k)!r}" for k, plain in
                           (("regrowth", "none"), ("pruned_gradient", "none")) if getattr(config, k) != plain]
            if "activation" in get_criterion(config.criterion).needs:
                unsupported.append(f"criterion={config.criterion!r}")
            if unsupported:
                raise ValueError(f"{', '.join(unsupported)} is not supported on FSDP2 (DTensor) weights yet; "
                                 "prune the unsharded model, or use the defaults")
            return prune_sharded(model, config, candidates, params, log_dir=log_dir)
    by_name = {w.name: w for w in candidates}
    protocol = PruningProtocol(config, {n: w.shape for n, w in by_name.items()})
    layers = [by_name[n] for n in protocol.names]
    if "activation" in protocol.engine.needs:
        check_activation_layers(layers, config.criterion)
    owner: dict[int, PrunableWeight] = {}     # parameter -> first weight reading it
    tensors = list(dict.fromkeys((w.module, w.tensor_name) for w in layers))
    for w in layers:
        if parametrize.is_parametrized(w.module, w.tensor_name):
            kinds = [type(x).__name__ for x in w.module.parametrizations[w.tensor_name]]
            raise ValueError(f"weight {w.name!r} already has a parametrization ({', '.join(kinds)}); sparsify_torch "
                             "needs plain weights: exclude it with excluded_op_names, or remove it first "
                             f"(torch.nn.utils.parametrize.remove_parametrizations(module, {w.tensor_name!r}))")
        p = w.module._parameters[w.tensor_name]
        first = owner.setdefault(id(p), w)
        if (first.module, first.tensor_name) != (w.module, w.tensor_name):
            raise ValueError(f"weights {first.name!r} and {w.name!r} are the same (tied) parameter; exclude one "
                             "of them with excluded_op_names")
        if not p.is_floating_point():
            raise ValueError(f"weight {w.name!r} has dtype {p.dtype}; only floating point weights can be pruned")
        if p.is_meta:
            raise ValueError(f"weight {w.name!r} is on the meta device (it holds no data); materialize the model "
                             "(model.to_empty(device=...) and initialise its weights) before pruning")
    done: list[tuple[nn.Module, str]] = []
    try:
        for module, tensor_name in tensors:
            p = module._parameters[tensor_name]
            parametrize.register_parametrization(module, tensor_name, MaskParametrization(
                torch.ones_like(p.detach()), straight_through=config.pruned_gradient == "straight_through"))
            done.append((module, tensor_name))
        return Pruner(model, protocol, layers, process_group, log_dir, optimizer)
    except BaseException:
        for module, tensor_name in done:   # nothing half-applied
            parametrize.remove_parametrizations(module, tensor_name, leave_parametrized=False)
        raise
