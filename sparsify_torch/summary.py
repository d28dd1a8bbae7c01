"""What a torch pruner prunes, and what it leaves dense and why: :meth:`sparsify_torch.Pruner.summary`.

:func:`build_summary` lists every weight the config selected (name, module type,
shape as the core sees it, pattern, target) and every tensor of two or more
dimensions of the model that is not pruned, with the reason: not matched by
``op_names``, excluded by ``excluded_op_names``, the pattern does not fit, tied
to another weight (pruned with it, one mask), computed by an old-style hook, or
a layer type sparsify_torch does not prune (register it with
:func:`sparsify_torch.register_prunable`).

Example:
    >>> import torch, sparsify_torch
    >>> class Mix(torch.nn.Module):                     # a layer type sparsify_torch does not know
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.table = torch.nn.Parameter(torch.ones(4, 4))
    ...     def forward(self, x):
    ...         return x @ self.table
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), Mix(), torch.nn.Linear(4, 2))
    >>> p = sparsify_torch.prune(model, {"target_sparsity": 0.5, "excluded_op_names": ["^2"],
    ...                                  "start_step": 0, "end_step": 0})
    >>> s = p.summary()
    >>> [r.name for r in s.selected], [(r.name, r.reason) for r in s.skipped]  # doctest: +NORMALIZE_WHITESPACE
    (['0.weight'], [('1.table', 'unsupported type Mix: sparsify_torch.register_prunable adds layer types'),
                    ('2.weight', "excluded by excluded_op_names ('^2')")])
    >>> print(s)  # doctest: +NORMALIZE_WHITESPACE
    pruned: 1 weight, 16 of 46 parameters (pattern 1x1, scope local, target 0.5)
      0.weight  Linear  (4, 4)  1x1  target 0.5  sparsity 0.5
    left dense: 2
      1.table   Mix     (4, 4)  unsupported type Mix: sparsify_torch.register_prunable adds layer types
      2.weight  Linear  (2, 4)  excluded by excluded_op_names ('^2')
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterator, Mapping

from torch import nn

from sparsify import PruningConfig

from .layers import PrunableWeight, hooked_weights

__all__ = ["WeightRow", "PruningSummary", "build_summary"]


@dataclass(frozen=True)
class WeightRow:
    """One tensor of the model in a :class:`PruningSummary`.

    Attributes:
        name: the weight's name (what ``op_names`` matches; a parameter's name for tensors that are not
            prunable weights).
        module_type: the class name of the layer holding it.
        shape: the shape the core sees (``(out, in, ...)``; the tensor's own shape when not prunable).
        selected: pruned by this pruner.
        pattern: the pattern it is pruned with (None when not selected).
        target: the target sparsity (of the layer with ``pruning_scope="local"``, else of all pruned
            weights together); None when not selected.
        reason: why it is not pruned (None when selected).
        sparsity: its sparsity when the summary was taken (None when not selected).
    """

    name: str
    module_type: str
    shape: tuple[int, ...]
    selected: bool
    pattern: str | None = None
    target: float | None = None
    reason: str | None = None
    sparsity: float | None = None


@dataclass(frozen=True)
class PruningSummary:
    """The rows of :meth:`sparsify_torch.Pruner.summary`, model order, with a readable ``str()``.

    Attributes:
        rows: every pruned weight and every unpruned tensor of two or more dimensions.
        config: the pruner's config.
        total_parameters: parameters of the model (each shared tensor once).
    """

    rows: tuple[WeightRow, ...]
    config: PruningConfig
    total_parameters: int

    @property
    def selected(self) -> list[WeightRow]:
        """The pruned weights."""
        return [r for r in self.rows if r.selected]

    @property
    def skipped(self) -> list[WeightRow]:
        """The tensors left dense (or pruned through a tie: ``reason`` starts with ``"tied to"``)."""
        return [r for r in self.rows if not r.selected]

    @property
    def pruned_parameters(self) -> int:
        """Entries of the pruned weights (a tied weight once)."""
        return sum(_numel(r.shape) for r in self.selected)

    def __iter__(self) -> Iterator[WeightRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def line(self) -> str:
        """The one-line count ``prune()`` logs."""
        tied = sum(1 for r in self.skipped if r.reason.endswith("(one weight, pruned with it)"))
        dense = len(self.skipped) - tied
        n = len(self.selected)
        out = (f"pruning {n} weight{'s' * (n != 1)} ({_count(self.pruned_parameters)} of "
               f"{_count(self.total_parameters)} parameters)")
        if tied:
            out += f"; {tied} tied weight{'s' * (tied != 1)} pruned under another name"
        if dense:
            out += f"; {dense} tensor{'s' * (dense != 1)} with 2+ dimensions left dense"
        return out + ": see Pruner.summary()"

    def __str__(self) -> str:
        c = self.config
        sel, skip = self.selected, self.skipped
        head = (f"pruned: {len(sel)} weight{'s' * (len(sel) != 1)}, {self.pruned_parameters} of "
                f"{self.total_parameters} parameters (pattern {c.pattern}, scope {c.pruning_scope}, "
                f"target {c.target_sparsity})")
        lines = [head] + _table([[r.name, r.module_type, str(r.shape), str(r.pattern), f"target {r.target}"]
                                 + ([] if r.sparsity is None else [f"sparsity {round(r.sparsity, 4)}"]) for r in sel])
        if skip:
            lines += [f"left dense: {len(skip)}"] + _table([[r.name, r.module_type, str(r.shape), r.reason]
                                                           for r in skip])
        return "\n".join(lines)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _count(n: int) -> str:
    for unit, size in (("B", 10 ** 9), ("M", 10 ** 6), ("K", 10 ** 3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max((len(r[i]) for r in rows if i < len(r)), default=0) for i in range(max(map(len, rows), default=0))]
    return ["  " + "  ".join(cell.ljust(widths[i]) if i < len(r) - 1 else cell for i, cell in enumerate(r))
            for r in rows]


def _why_unselected(name: str, config: PruningConfig, select: str | None) -> str:
    exc = next((r for r in config.excluded_op_names if re.search(r, name)), None)
    if exc is not None:
        return f"excluded by excluded_op_names ({exc!r})"
    if select is not None:
        return f"not selected by select={select!r}"
    return f"not matched by op_names {config.op_names}"


def build_summary(model: nn.Module, config: PruningConfig, candidates: list[PrunableWeight], names: list[str],
                  skipped: Mapping[str, str], tied: Mapping[str, str], dropped: Mapping[str, str],
                  select: str | None = None) -> PruningSummary:
    """The summary of a pruner over ``model``.

    Args:
        model: the model (read before any parametrization).
        config: the pruner's config.
        candidates: every prunable weight of the model.
        names: the names the core selected.
        skipped: ``{name: why}`` of selected weights the pattern does not fit (left dense).
        tied: ``{name: name pruned under}`` of tied weights pruned through another name.
        dropped: ``{name: why}`` of tied weights left dense.
        select: the one-word selection that chose ``config.op_names``, if any.
    """
    chosen = set(names)
    rows: list[WeightRow] = []
    seen: dict[int, str] = {}                     # parameter -> first name listed
    covered: set[tuple[int, str]] = set()         # (module, tensor) pairs the candidates cover
    by_module: dict[int, list[PrunableWeight]] = {}
    for w in candidates:
        by_module.setdefault(id(w.module), []).append(w)
    hooked = hooked_weights(model)
    for mod_name, module in model.named_modules():
        for w in by_module.get(id(module), []):
            covered.add((id(module), w.tensor_name))
            p = w.parameter()
            if p is not None and w.rows is None:
                seen.setdefault(id(p), w.name)
            kind = type(module).__name__
            if w.name in chosen and w.name not in skipped:
                rows.append(WeightRow(w.name, kind, w.shape, True, config.pattern, config.target_sparsity))
                continue
            if len(w.shape) < 2:
                continue
            if w.name in skipped:
                why = f"the pattern does not fit: {skipped[w.name]}"
            elif w.name in tied:
                pruned = tied[w.name] in chosen and tied[w.name] not in skipped
                why = f"tied to {tied[w.name]!r}" + (" (one weight, pruned with it)" if pruned else ", not pruned")
            elif w.name in dropped:
                why = dropped[w.name]
            else:
                why = _why_unselected(w.name, config, select)
            rows.append(WeightRow(w.name, kind, w.shape, False, reason=why))
        if mod_name in hooked:           # one row for the weight the hook computes (weight_norm's g and v)
            v = module._parameters.get("weight_v", module._parameters.get("weight_orig"))
            rows.append(WeightRow(f"{mod_name}.weight" if mod_name else "weight", type(module).__name__,
                                  tuple(v.shape), False, reason=f"computed by an old-style hook ({hooked[mod_name]}):"
                                  " remove the hook to prune it"))
            covered.update((id(module), t) for t in ("weight_g", "weight_v", "weight_orig"))
        for pname, p in module._parameters.items():
            if p is None or (id(module), pname) in covered:
                continue
            full = f"{mod_name}.{pname}" if mod_name else pname
            if isinstance(p, nn.parameter.UninitializedParameter):
                rows.append(WeightRow(full, type(module).__name__, (), False,
                                      reason="uninitialized (lazy) parameter: run a forward pass before prune()"))
                continue
            if p.dim() < 2:
                continue
            if id(p) in seen:
                why = f"tied to {seen[id(p)]!r}"
            elif by_module.get(id(module)):
                why = f"a tensor of {type(module).__name__} that is not pruned"
            else:
                why = f"unsupported type {type(module).__name__}: sparsify_torch.register_prunable adds layer types"
            seen.setdefault(id(p), full)
            rows.append(WeightRow(full, type(module).__name__, tuple(p.shape), False, reason=why))
    total = sum(p.numel() for p in model.parameters() if not isinstance(p, nn.parameter.UninitializedParameter))
    return PruningSummary(tuple(rows), config, int(total))


def with_sparsity(summary: PruningSummary, sparsity: Mapping[str, float | None]) -> PruningSummary:
    """``summary`` with each pruned weight's current ``sparsity``."""
    rows = tuple(replace(r, sparsity=sparsity.get(r.name)) if r.selected else r for r in summary.rows)
    return replace(summary, rows=rows)
