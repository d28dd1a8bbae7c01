"""What a torch pruner prunes, and what it leaves dense and why: :meth:`sparsify_torch.Pruner.summary`.

:func:`build_summary` lists every weight the config selected (name, module type,
shape as the core sees it, pattern, target) and every tensor of two or more
dimensions of the model that is not pruned, with the reason: not matched by
``op_names``, excluded by ``excluded_op_names``, the pattern does not fit, tied
to another weight (pruned with it, one mask), computed by an old-style hook, or
a layer type sparsify_torch does not prune (register it with
:func:`sparsify_torch.register_prunable`). The summary is the core's
:class:`sparsify.selection_summary.SelectionSummary` (its :class:`PruningSummary` subclass), the rows
:class:`~sparsify.selection_summary.SummaryRow` objects, as Keras' and TF graphs' summaries are.

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
    >>> print(s.table())      # the table of every adapter's summary
    name      type    shape   pattern  target  sparsity  status
    0.weight  Linear  (4, 4)  1x1      0.5     0.5       selected
    1.table   Mix     (4, 4)  -        -       -         skipped: unsupported type Mix: sparsify_torch.register_prunable adds layer types
    2.weight  Linear  (2, 4)  -        -       -         skipped: excluded by excluded_op_names ('^2')
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping

from torch import nn

from sparsify import PruningConfig
from sparsify.selection_summary import SelectionSummary, SummaryRow

from .layers import PrunableWeight, hooked_weights

__all__ = ["PruningSummary", "build_summary", "selected_summary", "row_target"]

#: the end of the reason of a tied weight pruned with the weight it is tied to
_PRUNED_WITH = "(one weight, pruned with it)"


def row_target(config: PruningConfig) -> float | None:
    """The target of each selected row: the config's with ``pruning_scope`` ``"local"`` or ``"row"`` (every
    weight ends there), else None (the scope sets each weight's sparsity), as the core's
    :func:`sparsify.selection_summary.summarize` does.

    Example:
        >>> row_target(PruningConfig(target_sparsity=0.5)), row_target(PruningConfig(pruning_scope="global"))
        (0.5, None)
    """
    return float(config.target_sparsity) if config.pruning_scope in ("local", "row") else None


class PruningSummary(SelectionSummary):
    """The rows of :meth:`sparsify_torch.Pruner.summary`: a :class:`sparsify.selection_summary.SelectionSummary`
    (the shape Keras and TF graph summaries have; rows are :class:`~sparsify.selection_summary.SummaryRow`,
    selected ones with their current ``sparsity``) with the config, the model's parameter count, the one-line
    count ``prune()`` logs (:meth:`line`) and a ``str()`` grouped into pruned and left-dense weights.

    Attributes:
        config: the pruner's config.
        total_parameters: parameters of the model (each shared tensor once).

    Example:
        >>> s = PruningSummary([SummaryRow("fc.weight", "Linear", (4, 8), "2:4", 0.5)], PruningConfig(), 40)
        >>> s.pruned_parameters, s.line()
        (32, 'pruning 1 weight (32 of 40 parameters): see Pruner.summary()')
    """

    def __init__(self, rows: Iterable[SummaryRow], config: PruningConfig, total_parameters: int):
        super().__init__(rows)
        if not isinstance(config, PruningConfig):
            raise TypeError(f"PruningSummary: config must be a PruningConfig, got {type(config).__name__}")
        self.config = config
        self.total_parameters = int(total_parameters)

    @property
    def pruned_parameters(self) -> int:
        """Entries of the pruned weights (a tied weight once)."""
        return sum(r.size for r in self.selected)

    def with_sparsity(self, sparsity: Mapping[str, float | None]) -> PruningSummary:
        """This summary with each selected row's ``sparsity`` from ``sparsity`` (by name; None where absent)."""
        return PruningSummary((SummaryRow(r.name, r.layer_type, r.shape, r.pattern, r.target,
                                          sparsity=sparsity.get(r.name)) if r.selected else r for r in self.rows),
                              self.config, self.total_parameters)

    def line(self) -> str:
        """The one-line count ``prune()`` logs."""
        tied = sum(1 for r in self.skipped if r.reason.endswith(_PRUNED_WITH))
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
        lines = [head] + _table([[r.name, r.layer_type, str(r.shape), str(r.pattern)]
                                 + ([] if r.target is None else [f"target {r.target:g}"])
                                 + ([] if r.sparsity is None else [f"sparsity {round(r.sparsity, 4)}"]) for r in sel])
        if skip:
            lines += [f"left dense: {len(skip)}"] + _table([[r.name, r.layer_type, str(r.shape) if r.shape else "?",
                                                            r.reason] for r in skip])
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"PruningSummary({self.line()})"


def _count(n: int) -> str:
    for unit, size in (("B", 10 ** 9), ("M", 10 ** 6), ("K", 10 ** 3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max((len(r[i]) for r in rows if i < len(r)), default=0) for i in range(max(map(len, rows), default=0))]
    return ["  " + "  ".join(cell.ljust(widths[i]) if i < len(r) - 1 else cell for i, cell in enumerate(r))
            for r in rows]


def _type_name(module: nn.Module) -> str:
    """The class name of ``module``'s own type: ``"Linear"`` for a layer FSDP2's ``fully_shard`` gave a
    ``FSDPLinear`` class (whose module is ``torch.distributed.fsdp``'s)."""
    for cls in type(module).__mro__:
        if not cls.__module__.startswith("torch.distributed.fsdp"):
            return cls.__name__
    return type(module).__name__


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
    target = row_target(config)
    rows: list[SummaryRow] = []
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
            kind = _type_name(module)
            if w.name in chosen and w.name not in skipped:
                rows.append(SummaryRow(w.name, kind, w.shape, config.pattern, target))
                continue
            if len(w.shape) < 2:
                continue
            if w.name in skipped:
                why = f"the pattern does not fit: {skipped[w.name]}"
            elif w.name in tied:
                pruned = tied[w.name] in chosen and tied[w.name] not in skipped
                why = f"tied to {tied[w.name]!r}" + (f" {_PRUNED_WITH}" if pruned else ", not pruned")
            elif w.name in dropped:
                why = dropped[w.name]
            else:
                why = _why_unselected(w.name, config, select)
            rows.append(SummaryRow(w.name, kind, w.shape, selected=False, reason=why))
        if mod_name in hooked:           # one row for the weight the hook computes (weight_norm's g and v)
            v = module._parameters.get("weight_v", module._parameters.get("weight_orig"))
            rows.append(SummaryRow(f"{mod_name}.weight" if mod_name else "weight", _type_name(module),
                                   tuple(v.shape), selected=False, reason=f"computed by an old-style hook "
                                   f"({hooked[mod_name]}): remove the hook to prune it"))
            covered.update((id(module), t) for t in ("weight_g", "weight_v", "weight_orig"))
        for pname, p in module._parameters.items():
            if p is None or (id(module), pname) in covered:
                continue
            full = f"{mod_name}.{pname}" if mod_name else pname
            if isinstance(p, nn.parameter.UninitializedParameter):
                rows.append(SummaryRow(full, _type_name(module), (), selected=False,   # shape not known yet
                                       reason="uninitialized (lazy) parameter: run a forward pass before prune()"))
                continue
            if p.dim() < 2:
                continue
            if id(p) in seen:
                why = f"tied to {seen[id(p)]!r}"
            elif by_module.get(id(module)):
                why = f"a tensor of {_type_name(module)} that is not pruned"
            else:
                why = f"unsupported type {_type_name(module)}: sparsify_torch.register_prunable adds layer types"
            seen.setdefault(id(p), full)
            rows.append(SummaryRow(full, _type_name(module), tuple(p.shape), selected=False, reason=why))
    total = sum(p.numel() for p in model.parameters() if not isinstance(p, nn.parameter.UninitializedParameter))
    return PruningSummary(rows, config, int(total))


def selected_summary(model: nn.Module, config: PruningConfig, layers: Iterable[PrunableWeight]) -> PruningSummary:
    """The summary of a pruner built without one (by hand): its selected weights only.

    Example:
        >>> from sparsify_torch.layers import prunable_weights
        >>> m = nn.Linear(4, 2)
        >>> [r.name for r in selected_summary(m, PruningConfig(), prunable_weights(m))]
        ['weight']
    """
    target = row_target(config)
    return PruningSummary([SummaryRow(w.name, _type_name(w.module), w.shape, config.pattern, target)
                           for w in layers], config, sum(p.numel() for p in model.parameters()))
