"""What a config prunes in a Keras model, and what it leaves dense and why: :func:`selection_summary`.

Every variable of rank 2 or more below the model is one row of a :class:`sparsify.selection_summary.SelectionSummary`
(name = the weight's path, as ``op_names`` match it; its layer's class; its Keras shape): the selected
weights with their pattern and target, the others with the reason (``"not matched"``, ``"excluded"``,
``"unsupported type"`` for a layer sparsify cannot prune, ``"unsupported weight (bias)"`` for a weight of a
prunable layer that is not its kernel, ``"tied to <path>"`` for a variable shared with a weight listed
earlier, ``"pattern ... does not fit"`` with ``skip_incompatible_layers``). Keras 3 (every backend) and tf-keras.
:meth:`sparsify_keras.PruningCallback.summary` is this for the callback's model and config.

Example:
    >>> import keras
    >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="fc"), keras.layers.Dense(2, name="head")])
    >>> s = selection_summary(m, {"target_sparsity": 0.5, "excluded_op_names": ["head"]})
    >>> [(r.name, r.status) for r in s]
    [('fc/kernel', 'selected'), ('head/kernel', 'skipped: excluded')]
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

from sparsify import PruningConfig
from sparsify.engine import PruningEngine
from sparsify.selection_summary import UNSUPPORTED, SelectionSummary, SummaryRow, summarize, tied_to

from .compat import iter_tree, own_variables, short_name
from .layers import find_prunable_weights, pruning_root, weight_kinds
from .state import model_state

__all__ = ["selection_summary"]


def _rows(model: Any) -> list:
    """Per variable of rank 2+ below ``model``, in walk order: ``(path, layer type, shape)`` for a prunable
    weight, a skipped :class:`SummaryRow` for any other (unsupported, tied)."""
    prunable = {id(pw.variable): pw for pw in find_prunable_weights(model)}
    state = model_state(model)
    ignored = {id(v) for v in (state.state_variables if state is not None else [])}
    first_path: dict[int, str] = {}
    rows: list = []
    for path, layer in iter_tree(pruning_root(model)):
        kind = type(layer).__name__
        for var in own_variables(layer):
            shape = tuple(int(d) for d in var.shape)
            if len(shape) < 2 or id(var) in ignored:
                continue
            name = f"{path}/{short_name(var)}"
            if id(var) in first_path:
                if first_path[id(var)] != name:
                    rows.append(SummaryRow(name, kind, shape, selected=False, reason=tied_to(first_path[id(var)])))
                continue
            first_path[id(var)] = name
            pw = prunable.get(id(var))
            if pw is not None and pw.path == name:
                rows.append((name, kind, shape))
            elif pw is not None:             # found under another path first
                rows.append(SummaryRow(name, kind, shape, selected=False, reason=tied_to(pw.path)))
            else:
                reason = f"unsupported weight ({short_name(var)})" if weight_kinds(layer) else UNSUPPORTED
                rows.append(SummaryRow(name, kind, shape, selected=False, reason=reason))
    return rows


def selection_summary(model: Any, config: PruningConfig | Mapping[str, Any] | str,
                      unfit: Mapping[str, str] | None = None) -> SelectionSummary:
    """The summary of what ``config`` prunes in ``model`` (see the module); nothing is changed.

    Args:
        model: a built Keras 3 or tf-keras model.
        config: a :class:`sparsify.PruningConfig`, a dict or a YAML path.
        unfit: the weights the pattern does not fit (``{path: reason}``); default: checked here (with
            ``skip_incompatible_layers``; without it such a config is a ``ValueError`` when pruning starts,
            and the weights are shown as selected).

    Raises:
        ValueError: the model is not built; a bad config.
    """
    cfg = PruningConfig.coerce(config)
    if not getattr(model, "built", False):
        raise ValueError(f"model {getattr(model, 'name', model)!r} is not built: build it (or call it on a batch) "
                         "so its weights exist before asking what is pruned")
    rows = _rows(model)
    if unfit is None:
        unfit = {}
        if cfg.skip_incompatible_layers:
            chosen = {r.name: r for r in summarize(cfg, rows).selected}
            shapes = {pw.path: pw.canonical_shape for pw in find_prunable_weights(model) if pw.path in chosen}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")        # the warning is for pruning; here it is a row
                unfit = PruningEngine(cfg).check_layers(shapes)
    return summarize(cfg, rows, unfit=unfit)
