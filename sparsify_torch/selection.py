"""Which candidate weights :func:`sparsify_torch.prune` offers the core: tied weights once, and the LM selection word.

**Tied weights.** One ``nn.Parameter`` read by several layers (GPT-2's ``wte`` and
``lm_head``, Llama with ``tie_word_embeddings=True``) is one weight with one mask:
it is offered to the core once, under the first of its names that ``op_names``
matches (in model order), and every layer reading it gets the same mask (the tie
is kept). Its other names are reported "tied to" that one. If
``excluded_op_names`` excludes any of its names, the weight stays dense (excluding
``lm_head.weight`` keeps the head dense, and so the tied embedding).

**"transformer_blocks".** ``select="transformer_blocks"`` (``prune``,
``prune_oneshot``) prunes the projection weights of a transformer's blocks — the
Linear-like layers (``nn.Linear``, ``transformers``' ``Conv1D``, registered 2-D
layers) inside the repeated blocks, a ``ModuleList``/``Sequential`` of blocks of
one class — and leaves the embeddings, the LM head and anything outside the
blocks dense: what Wanda, SparseGPT and llm-compressor prune. The weights of an
``nn.MultiheadAttention`` (torchvision's ViT) are left out: it multiplies by them
itself, so input-reading methods cannot see them; name them in ``op_names``.
:func:`transformer_block_weights` gives the ``op_names`` it stands for.

Example:
    >>> import torch
    >>> from torch import nn
    >>> class Block(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.up, self.down = nn.Linear(4, 8), nn.Linear(8, 4)
    >>> class LM(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.embed = nn.Embedding(10, 4)
    ...         self.layers = nn.ModuleList([Block(), Block()])
    ...         self.head = nn.Linear(4, 10, bias=False)
    ...         self.head.weight = self.embed.weight                      # tied
    >>> [r.replace("\\\\", "") for r in transformer_block_weights(LM())]      # anchored, dots escaped
    ['^layers.0.up.weight$', '^layers.0.down.weight$', '^layers.1.up.weight$', '^layers.1.down.weight$']
    >>> from sparsify import PruningConfig
    >>> from sparsify_torch.layers import prunable_weights
    >>> ties = TiedWeights.of(prunable_weights(LM()), PruningConfig())
    >>> [w.name for w in ties.offered][:2], ties.tied
    (['embed.weight', 'layers.0.up.weight'], {'head.weight': 'embed.weight'})
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from sparsify import PruningConfig, select_names

from .layers import PrunableWeight, is_linear_like, prunable_weights

__all__ = ["SELECTIONS", "TiedWeights", "transformer_block_weights", "apply_selection"]

#: The one-word selections ``prune(..., select=)`` takes.
SELECTIONS = ("transformer_blocks",)


@dataclass(frozen=True)
class TiedWeights:
    """The candidates with each tied weight once.

    Attributes:
        offered: the weights the core chooses among (model order), each tied weight under one name.
        tied: ``{other name: name it is pruned under}`` for the tied weights offered.
        aliases: ``{name pruned under: [the other layers' weights]}`` (they get the same mask).
        dropped: ``{name: why}`` of the tied weights left dense because ``excluded_op_names`` excludes one
            of their names.
    """

    offered: list[PrunableWeight]
    tied: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, list[PrunableWeight]] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, candidates: list[PrunableWeight], config: PruningConfig) -> "TiedWeights":
        """Group ``candidates`` by the parameter they read (and rows of it) and pick each group's name."""
        groups: dict[tuple[Any, ...], list[PrunableWeight]] = {}
        for w in candidates:
            p = w.parameter()           # None: several originals (reported when pruning), never tied here
            key = (id(p), w.rows) if p is not None else (id(w.module), w.tensor_name, w.rows)
            groups.setdefault(key, []).append(w)
        names = [w.name for w in candidates]
        matched = set(select_names(names, config.op_names, []))
        excluded = set(select_names(names, config.excluded_op_names, []))
        out = cls([])
        for members in groups.values():
            if len({(id(m.module), m.tensor_name) for m in members}) == 1:     # one tensor (or q/k/v rows of it)
                out.offered.append(members[0])
                continue
            hit = [m.name for m in members if m.name in excluded]
            if hit:                         # the whole weight stays dense
                out.dropped.update({m.name: f"tied to {hit[0]!r}, which excluded_op_names excludes"
                                    for m in members if m.name not in excluded})
                continue
            chosen = next((m for m in members if m.name in matched), members[0])
            out.offered.append(chosen)
            others = [m for m in members if m is not chosen]
            out.aliases[chosen.name] = others
            out.tied.update({m.name: chosen.name for m in others})
        order = {w.name: i for i, w in enumerate(candidates)}
        out.offered.sort(key=lambda w: order[w.name])
        return out


def _block_lists(model: nn.Module) -> list[str]:
    """Names of the outermost ``ModuleList``/``Sequential`` containers whose children are blocks of one class
    holding Linear-like layers (not Linear-like themselves)."""
    found: list[str] = []
    for name, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)) or any(
                name == f or name.startswith(f"{f}.") for f in found):
            continue
        children = list(module.children())
        if not children or len({type(c) for c in children}) != 1 or is_linear_like(children[0]):
            continue
        if all(any(is_linear_like(m) for m in c.modules()) for c in children):
            found.append(name)
    return found


def transformer_block_weights(model: nn.Module) -> list[str]:
    """``op_names`` regexes (one per weight, anchored) selecting the projection weights of ``model``'s
    transformer blocks: the Linear-like weights inside each repeated block (see the module docstring).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: the model has no such blocks.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    prefixes = tuple(f"{n}." if n else "" for n in _block_lists(model))
    # nn.MultiheadAttention computes with its weights itself (its out_proj's forward never runs): left out
    inside_mha = {id(m.out_proj) for m in model.modules() if isinstance(m, nn.MultiheadAttention)}
    names = [w.name for w in prunable_weights(model)
             if is_linear_like(w.module, w.tensor_name) and id(w.module) not in inside_mha
             and prefixes and w.name.startswith(prefixes)]
    if not names:
        raise ValueError(f"select='transformer_blocks' found no transformer blocks in {type(model).__name__} (a "
                         "ModuleList or Sequential of blocks of one class holding Linear-like layers); choose the "
                         "weights with op_names instead")
    return [f"^{re.escape(n)}$" for n in names]


def apply_selection(model: nn.Module, config: PruningConfig, select: str | None) -> PruningConfig:
    """``config`` with the ``op_names`` of the one-word ``select`` (``config`` itself for None).

    Raises:
        ValueError: ``select`` is not one of :data:`SELECTIONS` or None, the config chooses ``op_names`` too,
            or the model has nothing it selects.
    """
    if select is None:
        return config
    if not isinstance(select, str) or select not in SELECTIONS:
        raise ValueError(f"select must be one of {SELECTIONS} or None, got {select!r}")
    if list(config.op_names) != [".*"]:
        raise ValueError(f"select={select!r} chooses the weights itself; the config's op_names={config.op_names} "
                         "would be replaced: pass one of them (excluded_op_names still apply)")
    return config.replace(op_names=transformer_block_weights(model))
