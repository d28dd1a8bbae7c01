"""One-shot pruning, then a short fine-tune taught by the dense model (issue 49): the recipe of
Sparse-Llama-3.1-2of4 (SparseGPT, then distillation) on the benchmark LM.

The one-shot model's zeros are kept as they are: ``sparsify_torch.prune`` with the same target and pattern,
the whole target from step 0 (``sparsity_decay_type="constant"``) and one update (at step 0, magnitude: the
one-shot zeros are the smallest weights), so the fine-tune trains only the kept weights; the trained dense model
of the seed is the teacher (``pruner.distill_loss``: KL of the softmaxes at temperature 1, weight 1, plus the task
loss). AdamW from :data:`FINETUNE` on the first batches of the seed's order. ``sparsegpt+ft`` is the same
fine-tune without the teacher (the task loss alone): what the teacher adds is the difference of the two.

Example:
    >>> finetune_config("2:4", 180)["pattern"], finetune_config("50", 180)["target_sparsity"]
    ('2:4', 0.5)
"""
from __future__ import annotations

import re
from typing import Any

import torch

import sparsify_torch
from sparsify import PruningConfig

from .data import Corpus
from .gradual import DISTILL_ARMS
from .model import PRUNABLE, CharLM
from .oneshot import setting_config
from .train import TrainSettings, train_model

__all__ = ["FINETUNE", "FINETUNE_ARMS", "finetune_config", "oneshot_finetune"]

FINETUNE = TrainSettings(lr=3e-4, warmup=20, min_lr_ratio=0.1, weight_decay=0.01, clip=1.0)
"""Fine-tune settings: a tenth of the dense run's peak learning rate, a short warm-up, cosine decay."""

FINETUNE_ARMS = {"sparsegpt+distill_ft": ("sparsegpt", True), "sparsegpt+ft": ("sparsegpt", False)}
"""Fine-tune arm -> (the one-shot arm it starts from, whether the dense model teaches)."""


def finetune_config(setting: str, steps: int) -> dict[str, Any]:
    """The fixed-mask config of a fine-tune of ``steps`` steps at a one-shot ``setting`` (``"50"``, ``"2:4"``)."""
    config = {**setting_config(setting), "sparsity_decay_type": "constant", "start_step": 0, "end_step": steps,
              "pruning_frequency": steps, "op_names": [PRUNABLE]}
    PruningConfig.from_dict(config)
    return config


def oneshot_finetune(pruned: CharLM, corpus: Corpus, seed: int, setting: str, steps: int, batch_size: int = 32,
                     teacher: CharLM | None = None) -> tuple[CharLM, dict[str, Any]]:
    """Fine-tune ``pruned`` (one-shot, zeros baked in) in place for ``steps`` steps, taught by ``teacher``
    (None: the task loss alone).

    Returns the model (``eval()``, masks baked in) and ``{"steps", "seconds", "final_loss", "kept_zeros"}``:
    ``kept_zeros`` is True when the masks the fine-tune trained under are exactly the one-shot zeros.
    """
    pruned.requires_grad_(True)            # a copy of a teacher that an earlier fine-tune froze in place
    zeros = {n: (p == 0) for n, p in pruned.named_parameters() if re.search(PRUNABLE, n)}
    found: dict[str, bool] = {}

    def attach(model: CharLM, opt: torch.optim.Optimizer) -> tuple:
        config = finetune_config(setting, steps)
        if teacher is None:
            pruner = sparsify_torch.prune(model, config, optimizer=opt)
        else:
            pruner = sparsify_torch.prune(model, config, optimizer=opt, distillation=DISTILL_ARMS["sr_ste_distill"],
                                          teacher=teacher)
        masks = pruner.masks()
        found["kept_zeros"] = all(torch.equal(~masks[n], zeros[n]) for n in zeros)
        hooks = (lambda _step: pruner.step()), pruner.remove
        return hooks if teacher is None else (*hooks, pruner.distill_loss)

    model, info = train_model(pruned.train(), corpus, seed, steps, batch_size, FINETUNE, attach)
    return model, {**info, **found}

