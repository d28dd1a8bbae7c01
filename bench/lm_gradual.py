"""Gradual pruning while training the benchmark LM: our default, ``erk_wanda`` and torch.ao's WeightNormSparsifier.

Every arm starts from the same NumPy initial weights and sees the same batches as the dense
run of its seed; only the blocks' linear weights are pruned (:data:`bench.lm_model.PRUNABLE`).
The schedule is the core's gradual cubic one from 10% to 70% of the steps, an update every
2.5% of the steps; torch.ao's sparsifier is driven at the same update steps with the same
values (``sparsity_level`` set, then ``step()``), unstructured (``(1, 1)`` blocks).

Example:
    >>> sorted(GRADUAL_ARMS)
    ['default', 'erk_wanda', 'torch.ao']
    >>> window(1800)
    (180, 1260, 45)
"""
from __future__ import annotations

import re
from typing import Any, Callable

import torch

import sparsify_torch
from sparsify import GradualSchedule

from .lm_model import PRUNABLE, CharLM
from .lm_train import Attach

__all__ = ["GRADUAL_ARMS", "window", "gradual_attach"]

GRADUAL_ARMS: dict[str, dict[str, Any]] = {
    "default": {},
    "erk_wanda": {"pruning_scope": "erk", "criterion": "wanda"},
    "torch.ao": {},
}


def window(steps: int) -> tuple[int, int, int]:
    """``(start_step, end_step, pruning_frequency)`` of a run of ``steps`` steps."""
    return steps // 10, steps * 7 // 10, max(1, steps // 40)


def _ours(config: dict[str, Any]) -> Attach:
    def attach(model: CharLM, opt: torch.optim.Optimizer) -> tuple[Callable[[int], None], Callable[[], None]]:
        pruner = sparsify_torch.prune(model, config, optimizer=opt)
        return (lambda _step: pruner.step()), pruner.remove
    return attach


def _torch_ao(target: float, steps: int) -> Attach:
    def attach(model: CharLM, opt: torch.optim.Optimizer) -> tuple[Callable[[int], None], Callable[[], None]]:
        from torch.ao.pruning import WeightNormSparsifier

        sched = GradualSchedule(0.0, target, *window(steps), 3.0)
        sp = WeightNormSparsifier(sparsity_level=0.0, sparse_block_shape=(1, 1), zeros_per_block=1)
        names = [n for n, _ in model.named_parameters() if re.search(PRUNABLE, n)]
        sp.prepare(model, config=[{"tensor_fqn": n} for n in names])

        def after_step(step: int) -> None:
            if bool(sched.update_ready(step)):
                for group in sp.groups:
                    group["sparsity_level"] = float(sched.sparsity(step))
                sp.step()
        return after_step, sp.squash_mask
    return attach


def gradual_attach(arm: str, target: float, steps: int) -> Attach:
    """The :data:`bench.lm_train.Attach` of an arm at ``target`` sparsity over a run of ``steps`` steps."""
    if arm == "torch.ao":
        return _torch_ao(target, steps)
    start, end, freq = window(steps)
    return _ours({"target_sparsity": target, "start_step": start, "end_step": end, "pruning_frequency": freq,
                  "op_names": [PRUNABLE], **GRADUAL_ARMS[arm]})
