"""One-shot pruning without training: ``prune_oneshot(model, config, batches)``.

The model is pruned straight to ``config.target_sparsity`` (the schedule window
is ignored: :meth:`sparsify.PruningConfig.oneshot`) with the config's pattern,
scope and criterion. Criteria that read activations (``"wanda"``) see the
calibration ``batches`` first, in ``eval()`` mode and without gradients;
criteria that need gradients are refused (no backward pass runs). The masks
are baked in: the model comes back with plain parameters holding zeros.

Example:
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> batches = [torch.randn(16, 8) for _ in range(4)]
    >>> model = prune_oneshot(model, {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row"}, batches)
    >>> [float((model[i].weight == 0).float().mean()) for i in (0, 2)]
    [0.5, 0.5]
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn

from sparsify import PruningConfig
from sparsify.criteria import get_criterion

from .entry import prune

__all__ = ["prune_oneshot", "default_forward"]


def default_forward(model: nn.Module, batch: Any) -> Any:
    """Run ``model`` on one calibration batch: a tensor, the first item of a tuple/list
    (``(inputs, targets)`` from a DataLoader), or a dict of keyword arguments."""
    if isinstance(batch, torch.Tensor):
        return model(batch)
    if isinstance(batch, (tuple, list)) and batch:
        return model(batch[0])
    if isinstance(batch, Mapping):
        return model(**batch)
    raise TypeError(f"a calibration batch must be a tensor, a (inputs, ...) tuple/list or a dict of model "
                    f"arguments, got {type(batch).__name__}; pass forward=... to run other batches")


def prune_oneshot(model: nn.Module, config: PruningConfig | Mapping[str, Any] | str,
                  batches: Iterable[Any] | None = None, *,
                  forward: Callable[[nn.Module, Any], Any] | None = None) -> nn.Module:
    """Prune ``model`` in place to ``config.target_sparsity`` at once and return it (masks baked in).

    Args:
        model: the trained model.
        config: a ``PruningConfig``, a dict or a YAML path; its target is taken as given.
        batches: calibration batches (needed by criteria that read activations, e.g. ``"wanda"``).
        forward: ``forward(model, batch)`` running one batch (default :func:`default_forward`).

    Raises:
        ValueError: a criterion that needs gradients, or an activation criterion with no batches.
    """
    cfg = PruningConfig.coerce(config).oneshot()
    crit = get_criterion(cfg.criterion)
    if crit.per_step:
        raise ValueError(f"criterion {cfg.criterion!r} needs gradients, but one-shot pruning runs no backward pass; "
                         "use a criterion that needs only weights or activations ('magnitude', 'wanda')")
    if forward is not None and not callable(forward):
        raise TypeError(f"forward must be callable as forward(model, batch), got {type(forward).__name__}")
    needs_data = "activation" in crit.needs
    if needs_data and batches is None:
        raise ValueError(f"criterion {cfg.criterion!r} reads the layers' inputs: pass calibration batches")
    run = forward or default_forward
    pruner = prune(model, cfg)
    try:
        if needs_data:
            was_training = model.training
            model.eval()
            seen = 0
            try:
                with torch.no_grad():
                    for batch in batches:
                        run(model, batch)
                        seen += 1
            finally:
                model.train(was_training)
            if not seen:
                raise ValueError("batches held no calibration batch")
        pruner.step()                          # the update point at step 0, with the target as given
    except BaseException:
        pruner.remove()
        raise
    return pruner.remove()
