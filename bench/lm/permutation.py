"""Activation-aware 2:4 channel permutation of the whole benchmark LM (bench only: the ``2:4+aperm`` setting).

:func:`sparsify_torch.permute_for_nm` permutes the channels its tracer can follow, which in
this model are the MLP's hidden channels (fc1 rows, fc2 columns), and chooses the order by
weight magnitude. This module also permutes the residual stream, which the tracer leaves
alone: one order of the ``d_model`` channels applied to the token and position embeddings,
every LayerNorm's scale and shift, the columns of every q, k, v and fc1 and the rows (and
biases) of every o and fc2. LayerNorm is equivariant under a channel permutation and the
head is tied to the embedding, so the model computes exactly the same. Each order comes
from :func:`sparsify.nm_channel_permutation` on ``|W| * ||x||`` (Wanda's scores) of the
layers that read those channels, stacked along the output axis, so the 2:4 groups keep
more of what one-shot methods that weigh activations keep.

Example:
    >>> import torch
    >>> from bench.lm.model import LMConfig, build_model
    >>> model = build_model(LMConfig(vocab_size=9, d_model=16, n_layers=1, n_heads=2, context=8), seed=0)
    >>> x = torch.randint(0, 9, (4, 8))
    >>> before = model(x)
    >>> report = permute_whole_model(model, [x], rounds=2)
    >>> sorted(report), bool(torch.allclose(model(x), before, atol=1e-5))
    (['blocks.0.hidden', 'residual'], True)
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sparsify import nm_channel_permutation, nm_kept_magnitude

from .model import CharLM

__all__ = ["input_norms", "permute_whole_model"]


def input_norms(model: CharLM, batches: list[torch.Tensor], layers: list[nn.Linear]) -> list[np.ndarray]:
    """Per-input-channel L2 norm of each of ``layers``' inputs over ``batches``."""
    sums = [torch.zeros(m.in_features, dtype=torch.float64) for m in layers]

    def hook_for(total: torch.Tensor):
        def hook(_module: nn.Module, args: tuple) -> None:
            total.add_(args[0].double().pow(2).sum(dim=(0, 1)))
        return hook

    hooks = [m.register_forward_pre_hook(hook_for(s)) for m, s in zip(layers, sums)]
    try:
        with torch.no_grad():
            for b in batches:
                model(b)
    finally:
        for h in hooks:
            h.remove()
    return [s.sqrt().numpy() for s in sums]


def _order(scored: list[tuple[nn.Linear, np.ndarray]], rounds: int) -> np.ndarray:
    """One input-channel order for the stacked Wanda scores of the consumers."""
    stack = np.concatenate([np.abs(m.weight.detach().double().numpy()) * n[None, :] for m, n in scored])
    return nm_channel_permutation(stack, "2:4", rounds=rounds)


def _kept(scored: list[tuple[nn.Linear, np.ndarray]], perm: np.ndarray) -> list[float]:
    stack = np.concatenate([np.abs(m.weight.detach().double().numpy()) * n[None, :] for m, n in scored])
    return [nm_kept_magnitude(stack, "2:4"), nm_kept_magnitude(stack, "2:4", perm)]


def _permute_residual(model: CharLM, perm: torch.Tensor) -> None:
    """Apply one order to every tensor that holds a residual-stream channel."""
    model.wte.weight.data = model.wte.weight.data[:, perm]
    model.wpe.weight.data = model.wpe.weight.data[:, perm]
    norms = [model.ln_f] + [ln for b in model.blocks for ln in (b.ln1, b.ln2)]
    for ln in norms:
        ln.weight.data, ln.bias.data = ln.weight.data[perm], ln.bias.data[perm]
    for b in model.blocks:
        for m in (b.q, b.k, b.v, b.fc1):
            m.weight.data = m.weight.data[:, perm]
        for m in (b.o, b.fc2):
            m.weight.data, m.bias.data = m.weight.data[perm], m.bias.data[perm]


def permute_whole_model(model: CharLM, batches: list[torch.Tensor], rounds: int = 200) -> dict[str, list[float]]:
    """Permute the residual stream and each MLP's hidden channels in place; returns, per permuted set, the
    Wanda score the 2:4 groups keep ``[before, after]``."""
    blocks = list(model.blocks)
    readers = [m for b in blocks for m in (b.q, b.k, b.v, b.fc1)]
    report = {}
    with torch.no_grad():
        scored = list(zip(readers, input_norms(model, batches, readers)))
        perm = _order(scored, rounds)
        report["residual"] = _kept(scored, perm)
        _permute_residual(model, torch.from_numpy(perm))
        for i, b in enumerate(blocks):
            scored = list(zip([b.fc2], input_norms(model, batches, [b.fc2])))
            perm = _order(scored, rounds)
            report[f"blocks.{i}.hidden"] = _kept(scored, perm)
            p = torch.from_numpy(perm)
            b.fc1.weight.data, b.fc1.bias.data = b.fc1.weight.data[p], b.fc1.bias.data[p]
            b.fc2.weight.data = b.fc2.weight.data[:, p]
    return report
