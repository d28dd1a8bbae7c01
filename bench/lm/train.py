"""Dense training of the benchmark LM: AdamW, linear warm-up then cosine decay, batches from the seed.

Example:
    >>> from bench.lm.data import load_corpus
    >>> from bench.lm.model import LMConfig
    >>> corpus = load_corpus()
    >>> cfg = LMConfig(vocab_size=corpus.vocab_size, d_model=16, n_layers=1, n_heads=2, context=8)
    >>> model, info = train_dense(cfg, corpus, seed=0, steps=3, batch_size=4)
    >>> info["steps"], info["final_loss"] > 0
    (3, True)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch.nn import functional as F

from .data import Corpus, batch_offsets, windows
from .model import CharLM, LMConfig, build_model

__all__ = ["TrainSettings", "train_dense", "train_model", "lr_at", "Attach"]

Attach = Callable[[CharLM, torch.optim.Optimizer], tuple]
"""``attach(model, optimizer) -> (after_step, finish)`` or ``(after_step, finish, loss_term)``: a pruning
method's hooks into a training run; ``after_step(step)`` runs after each optimizer step (``step`` counts from 1),
``finish()`` once at the end, ``loss_term(x, logits)`` (a scalar tensor) is added to the task loss of every step
(distillation)."""


@dataclass(frozen=True)
class TrainSettings:
    """Optimizer settings of a dense run."""

    lr: float = 3e-3
    warmup: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    clip: float = 1.0


def lr_at(step: int, steps: int, s: TrainSettings) -> float:
    """Learning rate at ``step``: linear warm-up, then cosine to ``min_lr_ratio * lr``."""
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    p = (step - s.warmup) / max(1, steps - s.warmup)
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def train_dense(cfg: LMConfig, corpus: Corpus, seed: int, steps: int, batch_size: int = 32,
                settings: TrainSettings = TrainSettings(), attach: Optional[Attach] = None) -> tuple[CharLM, dict]:
    """Train a model from :func:`bench.lm.model.init_weights` of ``seed`` on the seed's batch order.

    ``attach`` (see :data:`Attach`) prunes during the run; without it the run is dense.

    Returns the model (``eval()`` mode) and ``{"steps", "seconds", "final_loss"}`` (the mean training
    loss in nats over the last 50 steps).
    """
    torch.manual_seed(seed)
    return train_model(build_model(cfg, seed), corpus, seed, steps, batch_size, settings, attach)


def train_model(model: CharLM, corpus: Corpus, seed: int, steps: int, batch_size: int = 32,
                settings: TrainSettings = TrainSettings(), attach: Optional[Attach] = None) -> tuple[CharLM, dict]:
    """Train ``model`` as it is (e.g. a pruned one, for a fine-tune) on the first ``steps`` batches of the seed's
    order; what :func:`train_dense` returns."""
    cfg = model.cfg
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95), weight_decay=settings.weight_decay)
    hooks = attach(model, opt) if attach is not None else (None, None)
    after_step, finish = hooks[0], hooks[1]
    loss_term = hooks[2] if len(hooks) > 2 else None
    offsets = batch_offsets(corpus, seed, steps, batch_size, cfg.context)
    losses = []
    start = time.perf_counter()
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, settings)
        x, y = (torch.from_numpy(a) for a in windows(corpus.train, offsets[step], cfg.context))
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        task = loss
        if loss_term is not None:
            loss = loss + loss_term(x, logits)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip)
        opt.step()
        if after_step is not None:
            after_step(step + 1)
        losses.append(task.item())
    if finish is not None:
        finish()
    model.eval()
    tail = losses[-50:]
    return model, {"steps": steps, "seconds": time.perf_counter() - start, "final_loss": sum(tail) / len(tail)}
