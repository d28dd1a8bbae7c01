"""What :class:`~sparsify_torch.pruner.Pruner` and :class:`~sparsify_torch.distributed.fsdp.ShardedPruner` share.

The torch side of the adapter contract (``docs/design.md``): a pruner reads the
canonical weights (:meth:`PrunerBase.read_weights`), hands them with gradient
scores, dense gradients and activation statistics to the core's
:class:`sparsify.PruningProtocol`, and writes the :class:`sparsify.MaskUpdate`
it gets back (:meth:`PrunerBase.write_update`). Also the checks of step
counters and the one validation of saved states (:meth:`PrunerBase.load_state_dict`) both pruners use.

Example:
    >>> check_num_steps(2)
    2
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import torch

from sparsify import PruningEngine
from sparsify.adapter import collect_reads
from sparsify.target_check import warn_if_unreached
from sparsify.protocol import MaskUpdate, PruningProtocol

if TYPE_CHECKING:
    from .tensorboard import SparsityWriter


__all__ = ["PrunerBase", "check_state_counters", "check_num_steps", "dist_group_size"]

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


def dist_group_size(group: Any) -> int:
    """Size of ``group`` under ``torch.distributed`` (1 when it is not initialized)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return 1
    return torch.distributed.get_world_size(group)


class PrunerBase:
    """The one torch update loop, shared by :class:`Pruner` and :class:`~sparsify_torch.distributed.fsdp.ShardedPruner`.

    It counts optimizer steps (:meth:`step`), applies an update point at step 0 at once when the
    config needs no data, arms RigL's dense-gradient capture for the backward pass before an
    update, waits for inputs (activation criteria, ``sparsify.activation_stats``), folds per-step
    gradient scores and hands the core exactly the readers the config needs
    (``collect_reads``). A subclass sets ``_activations`` (or leaves None), calls :meth:`start`
    at the end of its ``__init__`` and implements the template methods: :meth:`read_weights`,
    :meth:`write_update` (the adapter contract, ``docs/design.md``), :meth:`_score_like` (zeros
    shaped like a weight's scores), :meth:`_set_capture`; :meth:`_before_step` and :meth:`_sync`
    are optional. ``hooks`` collects handles dropped by :meth:`release_resources`;
    ``after_remove`` ends the error of a call after ``remove()``.
    """

    after_remove = "the masks are baked into the weights and this pruner no longer controls the model"

    def __init__(self, protocol: PruningProtocol, layers: list[Any], writer: SparsityWriter | None = None) -> None:
        self.protocol = protocol
        self.config = protocol.config
        self.names: list[str] = list(protocol.names)
        self.writer = writer
        self.hooks: list[Any] = []
        self.removed = False
        self._step = 0
        self._layers = {w.name: w for w in layers}
        self._scores: dict[str, torch.Tensor] = {}      # per-step criterion: committed at each step
        self._pending: dict[str, torch.Tensor] = {}     # ... and of the backward passes since
        self._activations: Any = None
        # RigL: the dense gradient of the backward pass before an update
        self._capture_grads = "grad" in protocol.engine.needs and not protocol.engine.scored_every_step
        self.distiller: Any = None         # a sparsify_torch.distillation.Distiller (prune(distillation=...))

    # ----- template methods ---------------------------------------------------------------------
    def read_weights(self) -> dict[str, np.ndarray]:  # pragma: no cover - template method
        """The canonical NumPy weights of the pruned layers (dense under the mask)."""
        raise NotImplementedError

    def write_update(self, update: MaskUpdate) -> None:  # pragma: no cover - template method
        """Write a mask update (masks, zeros of a release, grown entries) into torch state."""
        raise NotImplementedError

    def _score_like(self, name: str) -> torch.Tensor:  # pragma: no cover - template method
        """Zero scores of ``name`` (torch layout) for a weight no backward pass reached."""
        raise NotImplementedError

    def _set_capture(self, on: bool) -> None:  # pragma: no cover - template method
        """Record (or not) the dense gradients in the next backward pass (RigL)."""
        raise NotImplementedError

    def _state_rows(self, what: str, name: str, value: Any) -> torch.Tensor:
        """This pruner's part of a saved tensor ``state[what][name]`` (the tensor itself; FSDP2: this rank's
        rows); raise ``ValueError`` for one it cannot hold."""
        return value

    def _loaded_mask(self, name: str, mask: torch.Tensor) -> np.ndarray:  # pragma: no cover - template method
        """A saved mask of ``name`` (a tensor), as the core's canonical array of this pruner's rows."""
        raise NotImplementedError

    def _check_loaded(self, state: Mapping[str, Any]) -> Any:
        """Check the state entries only this pruner saves (before anything changes); returns what
        :meth:`_write_loaded` writes."""

    def _write_loaded(self, checked: Any) -> None:  # pragma: no cover - template method
        """Write the protocol's restored masks (and what :meth:`_check_loaded` returned) into torch state."""
        raise NotImplementedError

    def _before_step(self) -> None:
        """What a subclass does first in :meth:`step` (e.g. FSDP2: zero the pruned shard entries)."""

    def _sync(self) -> None:
        """Re-read framework state into the protocol before an update (e.g. mask buffers a load replaced)."""

    # ----- the loop -----------------------------------------------------------------------------
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

    def warn_if_target_unreached(self, where: str) -> bool:
        """Warn once (:class:`sparsify.target_check.TargetNotReachedWarning`) if training ends before the
        schedule applied its final sparsity; called by ``remove()``. Returns True if it warned now."""
        return warn_if_unreached(self.protocol, self._step, where=where, stacklevel=4)

    def start(self) -> None:
        """End of construction: an update point at step 0 applies right away when it needs no data
        (per-step scores, inputs or gradients wait for the first :meth:`step`). If it fails, no hook or
        open event file is left behind."""
        try:
            if not (self.engine.scored_every_step or self._activations is not None or self._capture_grads):
                self._maybe_update(0, {})
        except BaseException:
            self.release_resources()
            raise
        self._arm_capture()

    def step(self, num_steps: int = 1) -> None:
        """Count ``num_steps`` optimizer steps and update the masks if an update point was reached.

        Call it right after ``optimizer.step()`` (on every rank under ``torch.distributed``). With a
        per-step criterion the scores of the last backward pass are folded in.

        Args:
            num_steps: steps to advance (a positive integer), e.g. when the
                pruner is only called every few optimizer steps.

        Raises:
            RuntimeError: after ``remove()``, or a per-step criterion saw no gradients.
            ValueError: ``num_steps`` is not a positive integer, or the update failed (e.g. NaN
                weights). A failed step changes nothing: fix the cause and call it again.
        """
        self.check_alive("step")
        check_num_steps(num_steps)
        self._before_step()
        step, scores = self._step + num_steps, {**self._scores, **self._pending}
        if self.distiller is not None:        # a dense_at_start teacher: the model before the update at start_step
            self.distiller.reach(step)
        self._maybe_update(step, scores)          # raises before anything changes
        self._scores, self._step = scores, step
        self._pending.clear()
        self._arm_capture()

    def _maybe_update(self, step: int, gradient_scores: Mapping[str, torch.Tensor]) -> None:
        """Update the masks if an update point lies in ``(done_step, step]`` and the data it needs is there
        (an activation criterion waits for inputs); raises before any change."""
        if not self.protocol.due(step) or (self._activations is not None and self._activations.waiting()):
            return
        self._sync()
        scores = (lambda: self._gradient_scores(gradient_scores)) if self.engine.scored_every_step else None
        reads = collect_reads(self.protocol, self)      # the readers this config needs (docs/design.md)
        self.advance_to(step, scores, grads=reads.get("grads"), activations=reads.get("activations"))

    def _gradient_scores(self, scores: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
        """The per-step criterion's scores, canonical (zeros for a weight no backward pass reached)."""
        if not scores:
            raise RuntimeError(f"criterion {self.config.criterion!r} needs gradients, but none were seen since "
                               "prune(): call loss.backward() before pruner.step()")
        return {n: self._layers[n].to_canonical(scores[n] if n in scores else self._score_like(n))
                for n in self.names}

    def _arm_capture(self) -> None:
        """Record dense gradients only in the backward pass before an update (RigL)."""
        if self._capture_grads and not self.removed:
            nxt = self.protocol.next_step()
            self._set_capture(0 <= nxt <= self._step + 1)

    def advance_to(self, step: int, scores: Any = None, grads: Any = None, activations: Any = None) -> None:
        """Advance the protocol to ``step``; write the masks and the TensorBoard figures of an update."""
        update = self.protocol.advance(step, weights=self.read_weights, scores=scores, grads=grads,
                                       activations=activations)
        if update is not None:
            self.write_update(update)
            if self.writer is not None:
                self.writer.write(self.protocol.figures(), step)

    # ----- state -------------------------------------------------------------------------------
    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; everything is checked before anything changes.

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: the state was saved with another config (the differing keys are named), for
                other pruned weights or shapes, or is malformed (the entry is named).
            RuntimeError: after ``remove()``.
        """
        self.check_alive("load_state_dict")
        step = check_state_counters(state, type(self).__name__)
        self.protocol.check_state(state)                # config, pruned weights (and FSDP2: rows) first
        masks = state["masks"]
        if not isinstance(masks, Mapping) or set(masks) != set(self.names):
            got = sorted(masks) if isinstance(masks, Mapping) else type(masks).__name__
            raise ValueError(f"state['masks'] must hold a mask per pruned weight {self.names}, got {got}")
        for n in self.names:
            if not isinstance(masks[n], torch.Tensor):
                raise ValueError(f"state['masks'][{n!r}] must be a tensor, got {type(masks[n]).__name__}")
        canonical = {n: self._loaded_mask(n, self._state_rows("masks", n, masks[n])) for n in self.names}
        scores = self._loaded_scores(state)
        checked = self._check_loaded(state)
        if self._activations is not None:
            self._activations.restore(state, check_only=True)
        self.protocol.restore(state["done_step"], canonical, released=state["released"])   # raises before any change
        self._write_loaded(checked)
        if self._activations is not None:
            self._activations.restore(state)
        self._scores = scores
        self._pending.clear()
        self._step = step

    def _loaded_scores(self, state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The per-step criterion's scores of a saved state, checked, on the weights' devices: those of the
        weights ``state['scored']`` names (default: every key of ``state['scores']``)."""
        scores = state["scores"]
        if not isinstance(scores, Mapping):
            raise ValueError(f"state['scores'] must be a dict of tensors keyed by weight name, got "
                             f"{type(scores).__name__}")
        for n in scores:
            if n not in self._layers:
                raise ValueError(f"state['scores'] holds {n!r}, which is not a pruned weight (of {self.names})")
        scored = state.get("scored", sorted(scores))
        if not isinstance(scored, (list, tuple)) or not all(n in self._layers for n in scored):
            raise ValueError(f"state['scored'] must be a list of pruned weight names (of {self.names}), got {scored!r}")
        out = {}
        for n in scored:
            if n not in scores:
                raise ValueError(f"state['scores'] lacks the scores of {n!r} named in state['scored']")
            like, s = self._score_like(n), scores[n]
            s = self._state_rows("scores", n, s) if isinstance(s, torch.Tensor) else s
            if not isinstance(s, torch.Tensor) or s.shape != like.shape or not s.is_floating_point() \
                    or not bool(torch.isfinite(s).all()):
                got = f"{s.dtype} tensor of shape {tuple(s.shape)}" if isinstance(s, torch.Tensor) else type(s).__name__
                bad = isinstance(s, torch.Tensor) and s.is_floating_point() and s.shape == like.shape
                raise ValueError(f"state['scores'][{n!r}] must be a finite float tensor of shape {tuple(like.shape)}, "
                                 f"got {got}" + (" holding NaN or inf" if bad else ""))
            out[n] = s.detach().clone().to(like.device)
        return out

    def attach_distiller(self, distiller: Any) -> None:
        """Use ``distiller`` (a :class:`~sparsify_torch.distillation.Distiller`) for :meth:`distill_loss`;
        its hooks go with :meth:`release_resources`."""
        self.distiller = distiller
        self.hooks.append(distiller)

    def distill_loss(self, inputs: Any, student_logits: torch.Tensor) -> torch.Tensor:
        """The distillation term at the current step, to add to the task loss before ``backward()``:
        ``loss = task_loss + pruner.distill_loss(x, logits)`` where ``logits = model(x)``. The teacher runs
        on ``inputs`` (a tensor, a tuple of arguments or a dict of keyword arguments) without a graph.

        Raises:
            RuntimeError: ``prune`` was called without ``distillation=``, or after ``remove()``.
        """
        self.check_alive("distill_loss")
        if self.distiller is None:
            raise RuntimeError("distill_loss() needs a teacher: prune(model, config, distillation={...})")
        return self.distiller.loss(inputs, student_logits, self._step)

    def release_resources(self) -> None:
        """Drop the hooks and close the TensorBoard event file."""
        for h in self.hooks:
            h.remove()
        self.hooks.clear()
        if self.writer is not None:
            self.writer.close()

    def check_alive(self, what: str) -> None:
        """Raise ``RuntimeError`` if ``remove()`` was called (``what`` names the call)."""
        if self.removed:
            name = type(self).__name__
            raise RuntimeError(f"{name}.{what}() called after {name}.remove(); {self.after_remove}")
