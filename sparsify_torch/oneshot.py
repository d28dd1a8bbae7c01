"""One-shot pruning without training: ``prune_oneshot(model, config, batches)``.

The model is pruned straight to ``config.target_sparsity`` (the schedule window
is ignored: :meth:`sparsify.PruningConfig.oneshot`) with the config's pattern,
scope and criterion. Criteria that read activations (``"wanda"``) see the
calibration ``batches`` first, in ``eval()`` mode and without gradients;
criteria that need gradients are refused (no backward pass runs). The masks
are baked in: the model comes back with plain parameters holding zeros.

``method="sparsegpt"`` prunes every selected ``nn.Linear`` (or ``transformers``' ``Conv1D``, or a
registered 2-D layer: :func:`sparsify_torch.register_prunable`) with SparseGPT
(:mod:`sparsify.sparsegpt`: the core's reconstruction from the inverse Hessian of
the layer's inputs) instead of masking by a criterion: kept weights are updated to
compensate for the pruned ones. Layers are pruned one at a time in the model's
definition order, as the paper does: each layer's Hessian is collected by a
forward hook over all calibration batches run through the model whose earlier
layers are already pruned (``sequential=True``; one pass over the batches per
layer). ``sequential=False`` collects every layer's Hessian in one pass of the
dense model. Unstructured patterns (``"1x1"``, ``pruning_scope="local"``: every
layer exactly ``target_sparsity``) and full N:M (``target_sparsity = N/M``).

Example:
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> batches = [torch.randn(16, 8) for _ in range(4)]
    >>> model = prune_oneshot(model, {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row"}, batches)
    >>> [float((model[i].weight == 0).float().mean()) for i in (0, 2)]
    [0.5, 0.5]
    >>> model = prune_oneshot(torch.nn.Sequential(torch.nn.Linear(8, 8)), {"target_sparsity": 0.5, "pattern": "2:4"},
    ...                       batches, method="sparsegpt", block_size=4)
    >>> model[0].weight.reshape(8, 2, 4).ne(0).sum(-1).unique().tolist()
    [2]
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

import torch
from torch import nn
from torch.nn.utils import parametrize

from sparsify import PruningConfig, select_names
from sparsify.criteria import oneshot_needs_data
from sparsify.sparsegpt import (ONESHOT_METHODS, HessianAccumulator, oneshot_method_options, sparsegpt_prune,
                                sparsegpt_target)

from .entry import prune
from .layers import PrunableWeight, is_linear_like, prunable_weights
from .selection import TiedWeights, apply_selection

__all__ = ["prune_oneshot", "default_forward", "ONESHOT_METHODS"]



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
                  forward: Callable[[nn.Module, Any], Any] | None = None, method: str = "criterion",
                  dampening: Optional[float] = None, block_size: Optional[int] = None,
                  sequential: Optional[bool] = None, select: Optional[str] = None) -> nn.Module:
    """Prune ``model`` in place to ``config.target_sparsity`` at once and return it (masks baked in).

    Args:
        model: the trained model.
        config: a ``PruningConfig``, a dict or a YAML path; its target is taken as given.
        batches: calibration batches (needed by criteria that read activations, e.g. ``"wanda"``,
            and by ``method="sparsegpt"``, which runs them once per layer: pass a list, not a generator).
        forward: ``forward(model, batch)`` running one batch (default :func:`default_forward`).
        method: ``"criterion"`` (mask by the config's criterion, weights unchanged) or ``"sparsegpt"``.
        dampening: ``method="sparsegpt"`` only: fraction of the Hessian's mean diagonal added (default 0.01).
        block_size: ``method="sparsegpt"`` only: columns per lazy-update block (default 128).
        sequential: ``method="sparsegpt"`` only: collect each layer's inputs after the earlier layers are
            pruned (default True) or all from the dense model in one pass (False).
        select: a one-word selection instead of the config's ``op_names``: ``"transformer_blocks"`` (the
            projection weights of the transformer blocks; embeddings and LM head left dense; see
            :func:`sparsify_torch.transformer_block_weights`).

    Raises:
        ValueError: an unknown method or an option it does not take, a criterion that needs gradients,
            an activation criterion or SparseGPT with no batches, or a config SparseGPT cannot follow.
    """
    options = oneshot_method_options(method, dampening, block_size, sequential)
    if forward is not None and not callable(forward):
        raise TypeError(f"forward must be callable as forward(model, batch), got {type(forward).__name__}")
    cfg = apply_selection(model, PruningConfig.coerce(config), select).oneshot()
    run = forward or default_forward
    if options is not None:
        return _sparsegpt_oneshot(model, cfg, batches, run, **options)
    return _criterion_oneshot(model, cfg, batches, run)


def _run_batches(model: nn.Module, batches: Iterable[Any], run: Callable[[nn.Module, Any], Any]) -> int:
    """Run every batch through ``model`` in ``eval()`` mode without gradients; returns how many ran."""
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
    return seen


def _criterion_oneshot(model: nn.Module, cfg: PruningConfig, batches: Iterable[Any] | None,
                       run: Callable[[nn.Module, Any], Any]) -> nn.Module:
    """Masks by the config's criterion (today's behaviour): one Pruner update at step 0, baked in."""
    needs_data = oneshot_needs_data(cfg.criterion, batches is not None, "batches")
    pruner = prune(model, cfg)
    try:
        if needs_data and not _run_batches(model, batches, run):
            raise ValueError("batches held no calibration batch")
        pruner.step()                          # the update point at step 0, with the target as given
    except BaseException:
        pruner.remove()
        raise
    return pruner.remove()


def _sparsegpt_layers(model: nn.Module, cfg: PruningConfig) -> list[tuple[str, PrunableWeight]]:
    """The selected weights, in definition order, as ``(name, weight)``: plain weights of Linear-like
    layers (``nn.Linear``, ``Conv1D``, registered 2-D layers) read by one layer; anything else is refused."""
    ties = TiedWeights.of(prunable_weights(model), cfg)
    chosen = set(select_names([w.name for w in ties.offered], cfg.op_names, cfg.excluded_op_names))
    layers, refused, tied = [], [], []
    for w in ties.offered:
        if w.name not in chosen:
            continue
        if w.name in ties.aliases:
            tied.append(w.name)
            continue
        ok = (is_linear_like(w.module, w.tensor_name) and w.rows is None
              and not parametrize.is_parametrized(w.module, w.tensor_name))
        (layers if ok else refused).append((w.name, w))
    if tied:
        raise ValueError(f"method='sparsegpt' reconstructs a weight from its layer's inputs, but {tied} are tied "
                         f"(read by several layers: {[a.name for n in tied for a in ties.aliases[n]]}); exclude them "
                         "with excluded_op_names")
    if refused:
        raise ValueError(f"method='sparsegpt' prunes plain nn.Linear weights only; exclude "
                         f"{[n for n, _ in refused]} with excluded_op_names (or remove their parametrizations; "
                         "Conv1D and registered 2-D layers are taken too)")
    if not layers:
        raise ValueError(f"op_names={cfg.op_names} excluded_op_names={cfg.excluded_op_names} select no weight")
    return layers


def _collect_hessians(model: nn.Module, layers: list[tuple[str, PrunableWeight]], batches: list[Any],
                      run: Callable[[nn.Module, Any], Any]) -> list[HessianAccumulator]:
    """One pass over ``batches`` with a forward pre-hook on each of ``layers`` accumulating its inputs."""
    accs = [HessianAccumulator(pw.shape[1], name=name) for name, pw in layers]

    def hook_for(acc: HessianAccumulator):
        def hook(_module: nn.Module, args: tuple) -> None:
            x = args[0].detach()
            acc.add(x.reshape(-1, x.shape[-1]).to(device="cpu", dtype=torch.float64).numpy())
        return hook

    handles = [pw.module.register_forward_pre_hook(hook_for(acc)) for acc, (_, pw) in zip(accs, layers)]
    try:
        _run_batches(model, batches, run)
    finally:
        for h in handles:
            h.remove()
    return accs


def _sparsegpt_oneshot(model: nn.Module, cfg: PruningConfig, batches: Iterable[Any] | None,
                       run: Callable[[nn.Module, Any], Any], *, dampening: float, block_size: int,
                       sequential: bool) -> nn.Module:
    """Prune each selected Linear-like weight with SparseGPT, in definition order, weights written in place
    (a weight stored ``(in, out)``, Conv1D's, is reconstructed as its transpose)."""
    target = sparsegpt_target(cfg)
    layers = _sparsegpt_layers(model, cfg)
    if batches is None:
        raise ValueError("method='sparsegpt' reconstructs each layer from its inputs: pass calibration batches")
    batches = list(batches)
    if not batches:
        raise ValueError("batches held no calibration batch")
    accs = None if sequential else _collect_hessians(model, layers, batches, run)
    for i, (name, pw) in enumerate(layers):
        acc = _collect_hessians(model, [(name, pw)], batches, run)[0] if sequential else accs[i]
        param = pw.parameter()
        w = param.detach().to(device="cpu", dtype=torch.float64)
        new_w, _ = sparsegpt_prune((w.T if pw.transposed else w).contiguous().numpy(), acc.hessian(),
                                   block_size=block_size, dampening=dampening, name=name, **target)
        new = torch.from_numpy(new_w)
        with torch.no_grad():
            param.copy_((new.T if pw.transposed else new).to(dtype=param.dtype, device=param.device))
    return model
