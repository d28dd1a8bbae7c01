"""What a trainer callback saves beside the model's checkpoint, and how it puts it back.

The model's own checkpoint holds the plain weights (masked values,
:func:`sparsify_torch.parametrization.register_mask`); the pruning state beside it is :func:`pruning_state`: the pruner's state (masks, the values under them, step
counters, criterion state) and, with ``distillation={"teacher": "dense_at_start"}``, the teacher's weights (the
model when pruning began, which a resumed run could not copy again). :func:`restore_pruning_state` loads it
into a pruner built by :func:`sparsify_torch.prune` on the resumed model, after the model's weights.

Example:
    >>> import torch
    >>> from sparsify_torch import prune
    >>> model = torch.nn.Linear(4, 2)
    >>> state = pruning_state(prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}))
    >>> sorted(state)
    ['pruner', 'version']
    >>> other = torch.nn.Linear(4, 2)
    >>> other.load_state_dict(model.state_dict())
    <All keys matched successfully>
    >>> pruner = prune(other, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    >>> restore_pruning_state(pruner, state)
    >>> torch.equal(other.weight, model.weight)
    True
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

__all__ = ["pruning_state", "restore_pruning_state", "advance_to_step", "checked_callback_settings"]

_VERSION = 1


def _dense_at_start(pruner: Any) -> Any:
    """The pruner's distiller when its teacher is a copy it took (``"dense_at_start"``), else None."""
    distiller = getattr(pruner, "distiller", None)
    if distiller is None or distiller.config.teacher != "dense_at_start":
        return None
    return distiller


def pruning_state(pruner: Any) -> dict[str, Any]:
    """The pruning state to save beside the model's checkpoint (``torch.load(weights_only=True)`` safe):
    ``{"version", "pruner": pruner.state_dict(), "teacher": ...}``, the teacher's weights only for a
    ``"dense_at_start"`` teacher already taken."""
    out: dict[str, Any] = {"version": _VERSION, "pruner": pruner.state_dict()}
    distiller = _dense_at_start(pruner)
    if distiller is not None and distiller.teacher is not None:
        out["teacher"] = {k: v.detach().to("cpu", copy=True) for k, v in distiller.teacher.state_dict().items()}
    return out


def restore_pruning_state(pruner: Any, state: Mapping[str, Any]) -> None:
    """Load :func:`pruning_state` output into ``pruner`` (built on the model whose weights are loaded).

    Raises:
        ValueError: ``state`` is not such a dict, or the pruner refuses its state (another config, other
            weights: see :meth:`sparsify_torch.Pruner.load_state_dict`).
    """
    if not isinstance(state, Mapping) or state.get("version") != _VERSION or "pruner" not in state:
        got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"not a pruning state saved by sparsify_torch.integrations (a dict with 'version' "
                         f"{_VERSION} and 'pruner'), got {got}")
    pruner.load_state_dict(state["pruner"])
    teacher = state.get("teacher")
    distiller = _dense_at_start(pruner)
    if teacher is not None and distiller is not None:
        distiller.reach(distiller.start_step)          # a copy of the model, whose weights are then the saved ones
        with torch.no_grad():
            distiller.teacher.load_state_dict(teacher)


def advance_to_step(pruner: Any, global_step: int) -> None:
    """Call ``pruner.step()`` for the optimizer steps the trainer made since (none if it is not ahead)."""
    behind = int(global_step) - pruner.step_count
    if behind > 0:
        pruner.step(behind)


def checked_callback_settings(distillation: Any, teacher: Any, flags: Mapping[str, Any]) -> Any:
    """The checks every trainer callback makes of its arguments, before anything is built: the distillation
    config (coerced; None without one), a teacher only with a distillation, and each flag a bool.

    Example:
        >>> checked_callback_settings({"temperature": 2.0}, None, {"remove_at_end": False}).temperature
        2.0
        >>> checked_callback_settings(None, None, {"remove_at_end": "yes"})
        Traceback (most recent call last):
        ...
        TypeError: remove_at_end must be True or False, got 'yes'
    """
    if distillation is not None:
        from sparsify.distillation import DistillationConfig
        distillation = DistillationConfig.coerce(distillation)
    elif teacher is not None:
        raise ValueError("teacher was passed without distillation: SparsifyCallback(config, "
                         "distillation={'teacher': 'user'}, teacher=module)")
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    return distillation
