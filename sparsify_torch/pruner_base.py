"""What :class:`~sparsify_torch.pruner.Pruner` and :class:`~sparsify_torch.fsdp.ShardedPruner` share.

The torch side of the adapter contract (``docs/design.md``): a pruner reads the
canonical weights (:meth:`PrunerBase.read_weights`), hands them with gradient
scores, dense gradients and activation statistics to the core's
:class:`sparsify.PruningProtocol`, and writes the :class:`sparsify.MaskUpdate`
it gets back (:meth:`PrunerBase.write_update`). Also the checks of step
counters and saved states both pruners use.

Example:
    >>> check_num_steps(2)
    2
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from sparsify import PruningConfig, PruningEngine
from sparsify.criteria import get_criterion
from sparsify.protocol import MaskUpdate, PruningProtocol

from .tensorboard import SparsityWriter

__all__ = ["PrunerBase", "check_state_counters", "check_num_steps", "gradient_score", "dist_group_size"]

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


def dist_group_size(group: Any) -> int:
    """Size of ``group`` under ``torch.distributed`` (1 when it is not initialized)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return 1
    return torch.distributed.get_world_size(group)


class PrunerBase:
    """What :class:`Pruner` and :class:`~sparsify_torch.fsdp.ShardedPruner` share around the core protocol.

    A subclass calls ``super().__init__(protocol, writer)`` and implements the two template methods
    of the adapter contract (``docs/design.md``): :meth:`read_weights` (the canonical weights, dense
    under the mask) and :meth:`write_update` (a :class:`sparsify.MaskUpdate` into torch state).
    ``hooks`` collects handles (gradient hooks, activation statistics) dropped by :meth:`release_resources`;
    ``after_remove`` ends the error of a call after ``remove()``.
    """

    after_remove = "the masks are baked into the weights and this pruner no longer controls the model"

    def __init__(self, protocol: PruningProtocol, writer: SparsityWriter | None = None) -> None:
        self.protocol = protocol
        self.config = protocol.config
        self.names: list[str] = list(protocol.names)
        self.writer = writer
        self.hooks: list[Any] = []
        self.removed = False
        self._step = 0

    def read_weights(self) -> dict[str, np.ndarray]:  # pragma: no cover - template method
        """The canonical NumPy weights of the pruned layers (dense under the mask)."""
        raise NotImplementedError

    def write_update(self, update: MaskUpdate) -> None:  # pragma: no cover - template method
        """Write a mask update (masks, zeros of a release, grown entries) into torch state."""
        raise NotImplementedError


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

    def advance_to(self, step: int, scores: Any = None, grads: Any = None, activations: Any = None) -> None:
        """Advance the protocol to ``step``; write the masks and the TensorBoard figures of an update."""
        update = self.protocol.advance(step, weights=self.read_weights, scores=scores, grads=grads,
                                       activations=activations)
        if update is not None:
            self.write_update(update)
            if self.writer is not None:
                self.writer.write(self.protocol.figures(), step)

    def release_resources(self) -> None:
        """Drop the hooks and close the TensorBoard event file."""
        for h in self.hooks:
            h.remove()
        self.hooks.clear()
        if self.writer is not None:
            self.writer.close()

    def check_alive(self, what: str) -> None:
        """Raise ``RuntimeError`` if :meth:`remove` was called (``what`` names the call)."""
        if self.removed:
            name = type(self).__name__
            raise RuntimeError(f"{name}.{what}() called after {name}.remove(); {self.after_remove}")


