"""Gradual pruning while training the benchmark LM: our default, ``erk_wanda``, ``sr_ste``, ``rigl``,
``erk_rigl`` and torch.ao's WeightNormSparsifier.

Every arm starts from the same NumPy initial weights and sees the same batches as the dense
run of its seed; only the blocks' linear weights are pruned (:data:`bench.lm.model.PRUNABLE`).
The schedule is the core's gradual cubic one from 10% to 70% of the steps, an update every
2.5% of the steps; torch.ao's sparsifier is driven at the same update steps with the same
values (``sparsity_level`` set, then ``step()``), unstructured (``(1, 1)`` blocks) or, at setting ``"2:4"``,
2 zeros in every ``(1, 4)`` block (its level is the share of 2:4 blocks: the schedule's value over 0.5). ``sr_ste``
is SR-STE: straight-through gradients plus ``pruned_decay`` on the pruned weights, masks every step;
``sr_ste_at_start`` the same with the whole target from the start step on (the schedule ``"constant"``).
``sr_ste_distill`` is SR-STE plus distillation (:mod:`sparsify_torch.distillation`) from the trained dense
model of the seed (the ``dense`` arm's model: its 1800 steps are not counted in the arm's budget): the task
loss plus ``weight`` times the KL of the teacher's and student's softmax at ``temperature`` (:data:`DISTILL_ARMS`).
``sr_ste_default_teacher`` is SR-STE with ``distillation={}``, the defaults a user gets: the teacher
``"dense_at_start"``, the model itself as it is at the pruning ``start_step`` (10% of the steps, ``prune()``
called before the loop), ``T=2``, the default weight (since issue 58 the fade: 1 at ``start_step``, linearly
to 0 halfway through the pruning window); no extra training is spent on its teacher.
``sr_ste_default_teacher_constant`` is the same teacher with the constant weight 1 (``weight=1.0``: the
default before the fade).
``sr_ste_init_teacher`` is the same with the teacher copied when ``prune()`` is called (the initialisation):
what ``"dense_at_start"`` did before issue 58, kept to measure that change.
``sr_ste_default_teacher_decay`` is the default teacher with its weight decaying linearly from 1 at the pruning
``start_step`` to 0 at its ``end_step`` (``weight_schedule="linear"``, ``init_weight=1``, ``weight=0``);
``sr_ste_default_teacher_decay_half`` the same, reaching 0 halfway through the pruning window
(:func:`distill_settings`).

Example:
    >>> sorted(GRADUAL_ARMS)  # doctest: +NORMALIZE_WHITESPACE
    ['default', 'erk_rigl', 'erk_wanda', 'rigl', 'sr_ste', 'sr_ste_at_start', 'sr_ste_default_teacher',
     'sr_ste_default_teacher_constant', 'sr_ste_default_teacher_decay', 'sr_ste_default_teacher_decay_half',
     'sr_ste_distill', 'sr_ste_init_teacher', 'torch.ao']
    >>> needs_teacher("sr_ste_distill"), needs_teacher("sr_ste_default_teacher")
    (True, False)
    >>> window(1800)
    (180, 1260, 45)
    >>> distill_settings("sr_ste_default_teacher_decay_half", 600)  # doctest: +NORMALIZE_WHITESPACE
    {'weight_schedule': 'linear', 'init_weight': 1.0, 'weight': 0.0, 'start_step': 60, 'end_step': 240}
    >>> setting_target("2:4"), setting_target("90")
    ((0.5, '2:4'), (0.9, '1x1'))
    >>> gradual_config("rigl", "2:4", 1800)
    Traceback (most recent call last):
    ...
    ValueError: regrowth='rigl' works on single weights: pattern must be '1x1', got '2:4'
"""
from __future__ import annotations

import copy
import re
from typing import Any

import torch

import sparsify_torch
from sparsify import GradualSchedule, PruningConfig

from .model import PRUNABLE, CharLM
from .train import Attach

__all__ = ["GRADUAL_ARMS", "DISTILL_ARMS", "needs_teacher", "window", "distill_settings", "setting_target",
           "gradual_config", "gradual_attach"]

# the MNIST-1D accuracy benchmark's SR-STE arm (bench/accuracy/problems.py), tuned there
_SR_STE = {"pruned_gradient": "straight_through", "pruned_decay": 6e-4, "pruning_frequency": 1, "monotone": False}

GRADUAL_ARMS: dict[str, dict[str, Any]] = {
    "default": {},
    "erk_wanda": {"pruning_scope": "erk", "criterion": "wanda"},
    "sr_ste": _SR_STE,
    # SR-STE as its paper trains N:M: the whole target from start_step on (masks every step until end_step)
    "sr_ste_at_start": {**_SR_STE, "sparsity_decay_type": "constant"},
    # dynamic sparsity: the gradual schedule, and at each update the same number of pruned weights regrown
    # where the gradient is largest (RigL), locally or with ERK's layer densities
    "rigl": {"regrowth": "rigl"},
    "erk_rigl": {"pruning_scope": "erk", "regrowth": "rigl"},
    "torch.ao": {},
    # SR-STE, taught by the trained dense model of the seed (DISTILL_ARMS)
    "sr_ste_distill": _SR_STE,
    # SR-STE, taught by the default teacher: the model itself at the pruning start_step, the default weight
    "sr_ste_default_teacher": _SR_STE,
    # the same teacher with the constant weight 1 (the default before issue 58's fade)
    "sr_ste_default_teacher_constant": _SR_STE,
    # SR-STE, taught by the model as prune() found it (the initialisation; dense_at_start before issue 58)
    "sr_ste_init_teacher": _SR_STE,
    # SR-STE, taught by the default teacher with a weight decaying from 1 to 0 over the pruning window
    "sr_ste_default_teacher_decay": _SR_STE,
    # the same, decaying to 0 over the first half of the pruning window
    "sr_ste_default_teacher_decay_half": _SR_STE,
}

#: arm -> the DistillationConfig of its teacher term (``"user"``: the trained dense model of the seed;
#: ``"dense_at_start"``: the model at the pruning start step, the default)
DISTILL_ARMS: dict[str, dict[str, Any]] = {
    "sr_ste_distill": {"temperature": 1.0, "weight": 1.0, "teacher": "user"},
    "sr_ste_default_teacher": {},
    "sr_ste_default_teacher_constant": {"weight": 1.0},
    "sr_ste_init_teacher": {"teacher": "user"},      # the teacher: a copy of the model at attach (init)
    # the weight from 1 at the pruning start_step to 0 at its end_step (to 0 halfway: _half); the window's steps
    # are filled in by distill_settings
    "sr_ste_default_teacher_decay": {"weight_schedule": "linear", "init_weight": 1.0, "weight": 0.0},
    "sr_ste_default_teacher_decay_half": {"weight_schedule": "linear", "init_weight": 1.0, "weight": 0.0},
}
#: arm -> the share of the pruning window its weight ramp spans, from the pruning start_step on
_OVER_PRUNING = {"sr_ste_default_teacher_decay": 1.0, "sr_ste_default_teacher_decay_half": 0.5}
_INIT_TEACHER = ("sr_ste_init_teacher",)


def needs_teacher(arm: str) -> bool:
    """True for an arm taught by the trained dense model of the seed (passed to :func:`gradual_attach`)."""
    return DISTILL_ARMS.get(arm, {}).get("teacher") == "user" and arm not in _INIT_TEACHER


def window(steps: int) -> tuple[int, int, int]:
    """``(start_step, end_step, pruning_frequency)`` of a run of ``steps`` steps."""
    return steps // 10, steps * 7 // 10, max(1, steps // 40)


def distill_settings(arm: str, steps: int) -> dict[str, Any]:
    """The DistillationConfig dict of teacher arm ``arm`` (:data:`DISTILL_ARMS`) over ``steps`` steps: the
    decaying arms' ramp gets its steps from the pruning window (:func:`window`)."""
    if arm not in DISTILL_ARMS:
        raise ValueError(f"arm: one of the teacher arms {list(DISTILL_ARMS)}, got {arm!r}")
    settings = dict(DISTILL_ARMS[arm])
    if arm in _OVER_PRUNING:
        start, end, _ = window(steps)
        settings["start_step"], settings["end_step"] = start, start + round((end - start) * _OVER_PRUNING[arm])
    return settings


def _ours(config: dict[str, Any], distillation: dict[str, Any] | None = None,
          teacher: torch.nn.Module | None = None, teacher_at_init: bool = False) -> Attach:
    def attach(model: CharLM, opt: torch.optim.Optimizer) -> tuple:
        nonlocal teacher
        if teacher_at_init:
            teacher = copy.deepcopy(model)
        if distillation is None:
            pruner = sparsify_torch.prune(model, config, optimizer=opt)
            return (lambda _step: pruner.step()), pruner.remove
        pruner = sparsify_torch.prune(model, config, optimizer=opt, distillation=distillation, teacher=teacher)
        return (lambda _step: pruner.step()), pruner.remove, pruner.distill_loss
    return attach


def setting_target(setting: str) -> tuple[float, str]:
    """``(target sparsity, pattern)`` of a ``--gradual-targets`` entry: a percent, or ``"2:4"`` (0.5 of pattern 2:4)."""
    if setting == "2:4":
        return 0.5, "2:4"
    if not setting.isdigit() or not 0 <= int(setting) < 100:
        raise ValueError(f"--gradual-targets: a percent in [0, 100) or '2:4', got {setting!r}")
    return int(setting) / 100, "1x1"


def _torch_ao(target: float, steps: int, pattern: str = "1x1") -> Attach:
    def attach(model: CharLM, opt: torch.optim.Optimizer) -> tuple:
        from torch.ao.pruning import WeightNormSparsifier

        sched = GradualSchedule(0.0, target, *window(steps), 3.0)
        block, zeros, scale = ((1, 4), 2, 1.0 / target) if pattern == "2:4" else ((1, 1), 1, 1.0)
        sp = WeightNormSparsifier(sparsity_level=0.0, sparse_block_shape=block, zeros_per_block=zeros)
        names = [n for n, _ in model.named_parameters() if re.search(PRUNABLE, n)]
        sp.prepare(model, config=[{"tensor_fqn": n} for n in names])

        def after_step(step: int) -> None:
            if bool(sched.update_ready(step)):
                for group in sp.groups:
                    group["sparsity_level"] = float(sched.sparsity(step)) * scale
                sp.step()
        return after_step, sp.squash_mask
    return attach


def gradual_config(arm: str, setting: str, steps: int, op_names: str = PRUNABLE) -> dict[str, Any]:
    """Our config of arm ``arm`` (not ``torch.ao``) at ``setting`` over ``steps`` steps, checked; ``op_names``:
    the regex of the pruned weights' names (another framework's names for the same linears).

    Raises:
        ValueError: the arm cannot run the setting (e.g. RigL regrowth at 2:4), with the config's reason.
    """
    if arm not in GRADUAL_ARMS or arm == "torch.ao":
        raise ValueError(f"arm: one of {[a for a in GRADUAL_ARMS if a != 'torch.ao']}, got {arm!r}")
    target, pattern = setting_target(setting)
    start, end, freq = window(steps)
    config = {"target_sparsity": target, "pattern": pattern, "start_step": start, "end_step": end,
              "pruning_frequency": freq, "op_names": [op_names], **GRADUAL_ARMS[arm]}
    PruningConfig.from_dict(config)
    return config


def gradual_attach(arm: str, setting: str, steps: int, teacher: torch.nn.Module | None = None) -> Attach:
    """The :data:`bench.lm.train.Attach` of an arm at ``setting`` (a percent or ``"2:4"``) over ``steps`` steps;
    ``teacher``: the trained dense model of the seed, for the arms :func:`needs_teacher` names (and only them)."""
    if needs_teacher(arm) != (teacher is not None):
        raise ValueError(f"arm {arm!r}: a teacher is {'needed' if needs_teacher(arm) else 'not used'}")
    if arm in DISTILL_ARMS:
        return _ours(gradual_config(arm, setting, steps), distill_settings(arm, steps), teacher,
                     arm in _INIT_TEACHER)
    if arm == "torch.ao":
        target, pattern = setting_target(setting)
        return _torch_ao(target, steps, pattern)
    return _ours(gradual_config(arm, setting, steps))
