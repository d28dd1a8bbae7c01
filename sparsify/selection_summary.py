"""What a pruning run selected, and what it left dense and why: one table for every adapter.

Each adapter (torch ``Pruner.summary()``, Keras ``PruningCallback.summary()``, tf-keras, TF graphs)
walks its model and makes one :class:`SummaryRow` per weight of rank 2 or more: a *selected* row
(name, layer type, shape, pattern, target) for every weight it prunes, and a *skipped* row with the
reason for every other one (``"not matched"``, ``"excluded"``, ``"unsupported type"``,
``"tied to <name>"``, ...). :class:`SelectionSummary` holds the rows in model order, prints them as an
aligned table and gives them back as plain dicts (for JSON, logs, tests).

Example:
    >>> s = SelectionSummary([
    ...     SummaryRow("dense/kernel", "Dense", (16, 8), "unstructured", 0.5),
    ...     SummaryRow("emb/embeddings", "Embedding", (100, 8), selected=False, reason=EXCLUDED),
    ... ])
    >>> [r.name for r in s.selected], [r.reason for r in s.skipped]
    (['dense/kernel'], ['excluded'])
    >>> print(s)
    1 weight selected (128 parameters), 1 skipped (800 parameters: 1 excluded)
    name            type       shape     pattern       target  status
    dense/kernel    Dense      (16, 8)   unstructured  0.5     selected
    emb/embeddings  Embedding  (100, 8)  -             -       skipped: excluded
    >>> s.to_dict()["skipped"][0]["shape"]
    [100, 8]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

from .config import PruningConfig
from .engine import select_names

__all__ = ["EXCLUDED", "NOT_MATCHED", "UNSUPPORTED", "SelectionSummary", "SummaryRow", "summarize", "tied_to"]

#: The weight's name matched no selection (``op_names`` / ``layer_names`` / ``target`` selection).
NOT_MATCHED = "not matched"
#: The weight was matched but named in ``excluded_op_names`` (or the adapter's own exclusions).
EXCLUDED = "excluded"
#: The weight belongs to a layer type the adapter cannot prune.
UNSUPPORTED = "unsupported type"


def tied_to(name: str) -> str:
    """The reason for a weight that is the same tensor as the selected weight ``name`` (pruned once, there).

    Example:
        >>> tied_to("transformer.wte.weight")
        'tied to transformer.wte.weight'
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"tied_to: name must be a non-empty str, got {name!r}")
    return f"tied to {name}"


@dataclass(frozen=True)
class SummaryRow:
    """One weight of rank 2 or more: selected for pruning (with its pattern and target) or skipped (with why).

    Attributes:
        name: the weight's name as the adapter's config names it (``"dense/kernel"``, ``"fc1.weight"``).
        layer_type: the class name of the layer or module holding it (``"Dense"``, ``"Conv1D"``).
        shape: the weight's shape as the framework stores it (a tuple of ints, rank 2 or more); ``()`` for a
            skipped weight whose shape is not known yet (a lazy parameter, before its first call).
        pattern: the pattern it is pruned with (``"unstructured"``, ``"2:4"``, ``"4x1"``); None when skipped.
        target: its target sparsity in [0, 1], or None (skipped, or no per-weight target: a global scope).
        selected: True if the weight is pruned.
        reason: why it is not pruned (non-empty exactly when ``selected`` is False).
        sparsity: optional, a selected weight's sparsity in [0, 1] when the summary was taken (torch's
            ``Pruner.summary()`` fills it); None when not known or skipped.

    Example:
        >>> SummaryRow("fc.weight", "Linear", [4, 8], "2:4", 0.5).shape
        (4, 8)
        >>> SummaryRow("fc.weight", "Linear", (4, 8), "2:4", 0.5, selected=False, reason="")
        Traceback (most recent call last):
        ...
        ValueError: SummaryRow 'fc.weight': a skipped row needs a reason (got reason='') and no pattern or target (got pattern='2:4', target=0.5)
        >>> SummaryRow("fc.weight", "Linear", (4, 8), "2:4", 0.5, sparsity=0.25).sparsity
        0.25
    """
    name: str
    layer_type: str
    shape: tuple
    pattern: str | None = None
    target: float | None = None
    selected: bool = True
    reason: str = ""
    sparsity: float | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"SummaryRow: name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.layer_type, str) or not self.layer_type:
            raise ValueError(f"SummaryRow {self.name!r}: layer_type must be a non-empty str, got {self.layer_type!r}")
        try:
            shape = tuple(int(d) for d in self.shape)
        except (TypeError, ValueError):
            raise TypeError(f"SummaryRow {self.name!r}: shape must be a sequence of ints, got {self.shape!r}") from None
        if (len(shape) < 2 and (shape or self.selected is not False)) or any(d < 0 for d in shape):
            raise ValueError(f"SummaryRow {self.name!r}: shape must have rank 2 or more and no negative "
                             f"dimension (or be () for a skipped weight whose shape is not known), got {shape}")
        object.__setattr__(self, "shape", shape)
        if not isinstance(self.selected, bool):
            raise TypeError(f"SummaryRow {self.name!r}: selected must be a bool, got {self.selected!r}")
        if not isinstance(self.reason, str):
            raise TypeError(f"SummaryRow {self.name!r}: reason must be a str, got {self.reason!r}")
        if self.selected:
            if not isinstance(self.pattern, str) or not self.pattern:
                raise ValueError(f"SummaryRow {self.name!r}: a selected row needs a pattern (a non-empty str), "
                                 f"got {self.pattern!r}")
            if self.reason:
                raise ValueError(f"SummaryRow {self.name!r}: a selected row has no reason, got {self.reason!r}")
            if self.target is not None:
                if isinstance(self.target, bool) or not isinstance(self.target, (int, float)) \
                        or not 0.0 <= float(self.target) <= 1.0 or math.isnan(float(self.target)):
                    raise ValueError(f"SummaryRow {self.name!r}: target must be a float in [0, 1] or None, "
                                     f"got {self.target!r}")
                object.__setattr__(self, "target", float(self.target))
        elif not self.reason or self.pattern is not None or self.target is not None:
            raise ValueError(f"SummaryRow {self.name!r}: a skipped row needs a reason (got reason={self.reason!r}) "
                             f"and no pattern or target (got pattern={self.pattern!r}, target={self.target!r})")
        if self.sparsity is not None:
            if not self.selected:
                raise ValueError(f"SummaryRow {self.name!r}: a skipped row has no sparsity, got {self.sparsity!r}")
            if isinstance(self.sparsity, bool) or not isinstance(self.sparsity, (int, float)) \
                    or math.isnan(float(self.sparsity)) or not 0.0 <= float(self.sparsity) <= 1.0:
                raise ValueError(f"SummaryRow {self.name!r}: sparsity must be a float in [0, 1] or None, "
                                 f"got {self.sparsity!r}")
            object.__setattr__(self, "sparsity", float(self.sparsity))

    @property
    def size(self) -> int:
        """The number of elements of the weight (0 when its shape is not known).

        Example:
            >>> SummaryRow("k", "Conv2D", (3, 3, 4, 8), "unstructured", 0.8).size
            288
        """
        return math.prod(self.shape) if self.shape else 0

    @property
    def status(self) -> str:
        """``"selected"`` or ``"skipped: <reason>"`` (the table's last column)."""
        return "selected" if self.selected else f"skipped: {self.reason}"

    def to_dict(self) -> dict:
        """The row as plain JSON-ready values (shape as a list; ``"sparsity"`` only when the row has one).

        Example:
            >>> SummaryRow("w", "Dense", (2, 2), selected=False, reason="excluded").to_dict()
            {'name': 'w', 'layer_type': 'Dense', 'shape': [2, 2], 'pattern': None, 'target': None, 'selected': False, 'reason': 'excluded'}
            >>> SummaryRow("w", "Dense", (2, 2), "2:4", 0.5, sparsity=0.5).to_dict()["sparsity"]
            0.5
        """
        out = {"name": self.name, "layer_type": self.layer_type, "shape": list(self.shape),
               "pattern": self.pattern, "target": self.target, "selected": self.selected, "reason": self.reason}
        if self.sparsity is not None:
            out["sparsity"] = self.sparsity
        return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class SelectionSummary:
    """The rows of one model, in model order: :attr:`selected`, :attr:`skipped`, a table as ``str()``.

    Args:
        rows: :class:`SummaryRow` objects; names must be unique.

    Example:
        >>> s = SelectionSummary([SummaryRow("a", "Linear", (2, 4), "unstructured", 0.5)])
        >>> len(s), s["a"].pattern, s.headline()
        (1, 'unstructured', '1 weight selected (8 parameters), 0 skipped')
        >>> SelectionSummary([s["a"], s["a"]])
        Traceback (most recent call last):
        ...
        ValueError: SelectionSummary: rows must have unique names; repeated: ['a']
    """

    def __init__(self, rows: Iterable[SummaryRow]):
        rows = tuple(rows)
        for row in rows:
            if not isinstance(row, SummaryRow):
                raise TypeError(f"SelectionSummary: rows must be SummaryRow objects, got {type(row).__name__}: "
                                f"{row!r}")
        seen: set[str] = set()
        repeated = sorted({r.name for r in rows if r.name in seen or seen.add(r.name)})
        if repeated:
            raise ValueError(f"SelectionSummary: rows must have unique names; repeated: {repeated}")
        self._rows = rows
        self._by_name = {r.name: r for r in rows}

    @property
    def rows(self) -> tuple:
        """Every row, in model order."""
        return self._rows

    @property
    def selected(self) -> tuple:
        """The rows of the weights that are pruned."""
        return tuple(r for r in self._rows if r.selected)

    @property
    def skipped(self) -> tuple:
        """The rows of the weights of rank 2+ that are left dense, each with its reason."""
        return tuple(r for r in self._rows if not r.selected)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[SummaryRow]:
        return iter(self._rows)

    def __getitem__(self, name: str) -> SummaryRow:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"SelectionSummary: no row named {name!r}; names: {list(self._by_name)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def headline(self) -> str:
        """One line: how many weights (and parameters) are selected and skipped, and why, by reason.

        Example:
            >>> SelectionSummary([SummaryRow("a", "Dense", (2, 2), selected=False, reason="not matched"),
            ...                   SummaryRow("b", "Dense", (2, 2), selected=False, reason="not matched")]).headline()
            '0 weights selected (0 parameters), 2 skipped (8 parameters: 2 not matched)'
        """
        sel, skip = self.selected, self.skipped
        line = f"{_plural(len(sel), 'weight')} selected ({sum(r.size for r in sel)} parameters), {len(skip)} skipped"
        if skip:
            reasons: dict[str, int] = {}
            for r in skip:
                reasons[r.reason] = reasons.get(r.reason, 0) + 1
            why = ", ".join(f"{n} {reason}" for reason, n in reasons.items())
            line += f" ({sum(r.size for r in skip)} parameters: {why})"
        return line

    def table(self) -> str:
        """The rows as an aligned text table (header first; ``-`` where a value does not apply; a
        ``sparsity`` column before ``status`` when some row has a sparsity).

        Example:
            >>> print(SelectionSummary([SummaryRow("a", "Linear", (2, 4), "2:4", 0.5, sparsity=0.5)]).table())
            name  type    shape   pattern  target  sparsity  status
            a     Linear  (2, 4)  2:4      0.5     0.5       selected
        """
        show_sparsity = any(r.sparsity is not None for r in self._rows)
        header = ("name", "type", "shape", "pattern", "target") + ("sparsity",) * show_sparsity + ("status",)
        cells = [header] + [(r.name, r.layer_type, str(r.shape) if r.shape else "?", r.pattern or "-",
                             "-" if r.target is None else f"{r.target:g}")
                            + (("-" if r.sparsity is None else f"{r.sparsity:.4g}",) * show_sparsity)
                            + (r.status,) for r in self._rows]
        widths = [max(len(line[i]) for line in cells) for i in range(len(header) - 1)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(line[:-1], widths)) + "  " + line[-1]
                         for line in cells)

    def __str__(self) -> str:
        return self.headline() + "\n" + self.table()

    def __repr__(self) -> str:
        return f"SelectionSummary({self.headline()})"

    def to_dict(self) -> dict:
        """``{"selected": [row dicts], "skipped": [row dicts]}``, each list in model order (JSON-ready)."""
        return {"selected": [r.to_dict() for r in self.selected], "skipped": [r.to_dict() for r in self.skipped]}


def summarize(config: PruningConfig | Mapping[str, Any], weights: Iterable[SummaryRow | tuple],
              *, unfit: Mapping[str, str] | None = None) -> SelectionSummary:
    """The summary of ``config`` over a model's weights of rank 2+, by the core's selection rule.

    Args:
        config: the pruning config (``op_names`` / ``excluded_op_names`` select, ``pattern`` and, for
            ``pruning_scope`` ``"local"`` or ``"row"``, ``target_sparsity`` fill the selected rows; other
            scopes set each layer's sparsity at the update, so their rows have no target).
        weights: in model order, each either ``(name, layer_type, shape)`` for a weight the adapter can prune
            (the config decides: selected, ``"not matched"`` or ``"excluded"``), or a :class:`SummaryRow`
            the adapter decided itself (``"unsupported type"``, ``"tied to ..."``), kept as it is.
        unfit: ``{name: reason}`` of selected weights the pattern does not fit, left dense
            (``PruningProtocol.skipped`` with ``skip_incompatible_layers``).

    Example:
        >>> s = summarize({"target_sparsity": 0.5, "op_names": ["fc"], "excluded_op_names": ["fc2"]},
        ...               [("fc1/kernel", "Dense", (4, 8)), ("fc2/kernel", "Dense", (8, 2)),
        ...                ("emb/embeddings", "Embedding", (10, 4)),
        ...                SummaryRow("pos/embeddings", "PositionEmbedding", (6, 4), selected=False, reason=UNSUPPORTED)])
        >>> [(r.name, r.status) for r in s]        # doctest: +NORMALIZE_WHITESPACE
        [('fc1/kernel', 'selected'), ('fc2/kernel', 'skipped: excluded'), ('emb/embeddings', 'skipped: not matched'),
         ('pos/embeddings', 'skipped: unsupported type')]
        >>> s["fc1/kernel"].target, s["fc1/kernel"].pattern
        (0.5, '1x1')
    """
    cfg = PruningConfig.coerce(config)
    unfit = dict(unfit or {})
    target = float(cfg.target_sparsity) if cfg.pruning_scope in ("local", "row") else None
    rows = []
    for item in weights:
        if isinstance(item, SummaryRow):
            rows.append(item)
            continue
        try:
            name, layer_type, shape = item
        except (TypeError, ValueError):
            raise TypeError(f"summarize: weights must hold SummaryRow objects or (name, layer_type, shape) tuples, "
                            f"got {item!r}") from None
        if not select_names([name], cfg.op_names, []):
            reason = NOT_MATCHED
        elif not select_names([name], [".*"], cfg.excluded_op_names):
            reason = EXCLUDED
        elif name in unfit:
            reason = f"pattern {cfg.pattern!r} does not fit ({unfit[name]})"
        else:
            rows.append(SummaryRow(name, layer_type, shape, cfg.pattern, target))
            continue
        rows.append(SummaryRow(name, layer_type, shape, selected=False, reason=reason))
    return SelectionSummary(rows)
