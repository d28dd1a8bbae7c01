"""The benchmark's character-level decoder-only transformer, GPT-2 shaped, with NumPy initial weights.

Pre-LayerNorm blocks (``ln1 -> attention -> +``, ``ln2 -> MLP -> +``), learned
positions, a final LayerNorm and a head tied to the token embedding: exactly
GPT-2's computation (tanh GELU, LayerNorm eps 1e-5, no dropout), so the trained
weights map one to one onto a Hugging Face ``GPT2LMHeadModel``
(``bench/lm/peer.py``). The attention's q, k and v are three ``nn.Linear`` (the
canonical layout: three weights), GPT-2's fused ``c_attn`` is their concatenation.

:func:`init_weights` draws every initial weight with NumPy from the seed (GPT-2's
scheme: normal(0, 0.02), the residual projections scaled by ``1/sqrt(2 * layers)``,
zero biases, unit LayerNorm scales), so another framework can start from the same
numbers.

Example:
    >>> import torch
    >>> cfg = LMConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2, context=8)
    >>> model = build_model(cfg, seed=0)
    >>> tuple(model(torch.zeros(2, 8, dtype=torch.long)).shape)
    (2, 8, 11)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["LMConfig", "CharLM", "init_weights", "build_model", "PRUNABLE", "bits_per_char"]

PRUNABLE = r"^blocks\.\d+\.(q|k|v|o|fc1|fc2)\.weight$"
"""``op_names`` regex of the weights the benchmark prunes: every linear of the blocks (not embeddings/head)."""


@dataclass(frozen=True)
class LMConfig:
    """Shape of the model."""

    vocab_size: int
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    context: int = 64

    def to_dict(self) -> dict:
        """Plain dict (for results)."""
        return asdict(self)


class Block(nn.Module):
    """One pre-LayerNorm transformer block."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class CharLM(nn.Module):
    """Token + position embeddings, ``n_layers`` blocks, final LayerNorm, head tied to the token embedding."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


def init_weights(cfg: LMConfig, seed: int) -> dict[str, np.ndarray]:
    """Every parameter of :class:`CharLM` (torch names and layout), float32, drawn from ``seed``.

    Drawn in ``named_parameters()`` order from one ``np.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    shapes = {n: tuple(p.shape) for n, p in CharLM(cfg).named_parameters()}
    out = {}
    for name, shape in shapes.items():
        if name.endswith("bias"):
            w = np.zeros(shape)
        elif ".ln" in name or name.startswith("ln_f"):
            w = np.ones(shape)
        else:
            std = 0.02 / math.sqrt(2 * cfg.n_layers) if name.endswith(("o.weight", "fc2.weight")) else 0.02
            w = rng.normal(0.0, std, size=shape)
        out[name] = w.astype(np.float32)
    return out


def build_model(cfg: LMConfig, seed: int) -> CharLM:
    """A :class:`CharLM` holding :func:`init_weights` of ``seed``."""
    model = CharLM(cfg)
    weights = init_weights(cfg, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name]))
    return model


def bits_per_char(logits_fn, inputs: np.ndarray, targets: np.ndarray, batch_size: int = 64) -> float:
    """Mean cross-entropy in bits of ``logits_fn(input_ids) -> (b, t, vocab)`` over the windows."""
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(inputs), batch_size):
            x = torch.from_numpy(inputs[i:i + batch_size])
            y = torch.from_numpy(targets[i:i + batch_size])
            logits = logits_fn(x).float()
            total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
            count += y.numel()
    return total / count / math.log(2)
