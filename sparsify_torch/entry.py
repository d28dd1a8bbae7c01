"""``prune(model, config)``: the torch entry point (a :class:`~sparsify_torch.pruner.Pruner`, or a
:class:`~sparsify_torch.distributed.fsdp.ShardedPruner` for FSDP2 weights).

Example:
    >>> import torch
    >>> m = torch.nn.Linear(4, 4)
    >>> p = prune(m, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    >>> int((m.weight == 0).sum())
    8
"""
from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any, Mapping

import torch
from torch import nn
from torch.nn.utils import parametrize

from sparsify import PruningConfig
from sparsify.criteria import get_criterion
from sparsify.engine import select_layers
from sparsify.protocol import PruningProtocol

from .distributed.dtensor import is_dtensor
from .layers import SUPPORTED_MODULES, PrunableWeight, hooked_weights, prunable_weights
from .optimizer_order import unwrap_optimizer
from .parametrization import MaskParametrization, register_mask
from .pruner import Pruner
from .selection import TiedWeights, apply_selection
from .statistics import check_activation_layers
from .summary import build_summary

if TYPE_CHECKING:
    from sparsify.distillation import DistillationConfig
    from .distillation import Distiller
    from .distributed.fsdp import ShardedPruner

__all__ = ["prune"]

#: ``prune()`` logs what it prunes here (one line, ``INFO``): ``logging.getLogger("sparsify_torch")``.
logger = logging.getLogger("sparsify_torch")


def _has_mask_param(model: nn.Module) -> bool:
    return any(isinstance(m, MaskParametrization) for m in model.modules())


def prune(model: nn.Module, config: PruningConfig | Mapping[str, Any] | str, *,
          process_group: Any = None, log_dir: Any = None, optimizer: Any = None,
          distillation: DistillationConfig | Mapping[str, Any] | str | None = None, teacher: nn.Module | None = None,
          logits_fn: Any = None, select: str | None = None) -> Pruner | ShardedPruner:
    """Register mask parametrizations on the selected weights of ``model``.

    Weights of Linear, Conv1d/2d/3d, ConvTranspose1d/2d/3d, Embedding(Bag)
    and MultiheadAttention (``in_proj_weight.q/.k/.v`` — the three thirds of
    the fused projection, pruned as three weights — or ``q/k/v_proj_weight``,
    and ``out_proj.weight``), ``transformers``' ``Conv1D`` (GPT-2; its ``(in, out)``
    weight is pruned as the ``nn.Linear`` holding its transpose) and layer types
    registered with :func:`sparsify_torch.register_prunable` are candidates;
    ``config.op_names`` / ``excluded_op_names`` regexes pick among their names
    (``"features.0.weight"``), or ``select``. A parameter shared by several layers (tied
    embeddings) is one weight with one mask, pruned under the first of its names that
    ``op_names`` matches, the tie kept (:mod:`sparsify_torch.selection`). The count of
    what is pruned is logged (logger ``"sparsify_torch"``, ``INFO``); :meth:`Pruner.summary`
    lists every weight, pruned or not, and why. Everything is checked before the model is
    touched. With a magnitude criterion, an update point at the current step
    (step 0) is applied right away; gradient criteria wait for the first
    :meth:`Pruner.step` (the step-0 update is not lost).

    Under ``torch.distributed`` (initialized) the masks are those of one process on the
    concatenated batch: activation statistics are summed over ``process_group`` (default:
    the world) at each update, gradient criteria score the gradient DDP all-reduced, so
    every rank computes the same masks. Call ``prune`` before wrapping the model in
    ``DistributedDataParallel``.

    FSDP2: on a model whose weights are DTensors sharded along dim 0
    (``fully_shard``), call ``prune`` *after* ``fully_shard``; it returns a
    :class:`sparsify_torch.distributed.fsdp.ShardedPruner` that keeps each rank's rows of
    the masks only and computes the single-process masks exactly, with small
    collectives (see ``docs/distributed.md``). Pass the ``optimizer`` there too: the pruner
    then keeps the values of the pruned weights beside the shards and the optimizer steps
    the dense weights, as here (required for ``monotone=False`` and
    ``pruned_gradient="straight_through"``).

    Args:
        model: the model; modified in place.
        config: a ``PruningConfig``, a dict of its fields or a YAML path.
        process_group: group to sum activation statistics over (None = default group).
        log_dir: optional TensorBoard directory: ``sparsity/total`` and
            ``sparsity/<weight>`` scalars at every mask update (as Keras'
            ``PruningCallback(log_dir=)``, the same writer), with the ``tensorboard`` package.
        optimizer: the ``torch.optim.Optimizer`` training the model; required with
            ``regrowth`` (grown weights start with zeroed optimizer state), and on FSDP2
            weights for the dense weights under the masks. A wrapper holding it as ``.optimizer``
            (accelerate's ``AcceleratedOptimizer``, the one a ``transformers`` ``TrainerCallback``
            receives) is unwrapped (:func:`unwrap_optimizer`).
        distillation: a :class:`sparsify.DistillationConfig` (or its dict, or a YAML path): the
            dense model teaches the pruned one through ``pruner.distill_loss(inputs, logits)``
            (:mod:`sparsify_torch.distillation`). Its teacher is a frozen deep copy of ``model`` as it
            is when pruning begins (``teacher="dense_at_start"``): taken by ``Pruner.step()`` when the
            count reaches ``config.start_step``, before that update (here, before any mask, when it is
            0), the term being 0 until then; or ``teacher``, from the first step. With no ``weight`` or
            ``weight_schedule`` given, the weight of that default teacher fades: 1 at ``start_step``,
            linearly to 0 at ``start_step + (end_step - start_step) // 2``, then 0 (an explicit weight is
            kept as given).
        teacher: the teacher module with ``distillation={"teacher": "user", ...}``; frozen in place
            (``requires_grad=False``, ``eval()``). On FSDP2, shard it with ``fully_shard`` too.
        logits_fn: picks the logits from the teacher's output when it is not a tensor (default:
            ``.logits``, ``["logits"]`` or ``[0]``).
        select: a one-word selection instead of ``op_names``: ``"transformer_blocks"`` prunes the
            projection weights of the transformer blocks (Linear/Conv1D layers inside them), leaving
            the embeddings and the LM head dense (:func:`sparsify_torch.transformer_block_weights`;
            ``excluded_op_names`` still apply).

    ``model.state_dict()`` keeps the plain model's keys, each pruned weight holding the values the
    model computes with (``original * mask``), so a plain model loads it; the masks and the values
    under them are in ``Pruner.state_dict()`` (:func:`sparsify_torch.parametrization.register_mask`).
    The stored weights stay dense under the masks (``parametrizations.weight.original``):
    the model computes with ``original * mask``, :meth:`Pruner.remove` and exports bake
    the product, and ``monotone=False`` lets a pruned weight come back by the value it
    kept. A pruned weight gets no gradient unless ``pruned_gradient="straight_through"`` (plus
    ``pruned_decay`` times its value with ``pruned_decay``: SR-STE).
    ``criterion="wanda"`` reads the inputs of each pruned layer (forward pre-hooks,
    summed since the last update); ``regrowth="rigl"`` records the dense gradient in
    the backward pass before each update.

    Returns:
        The :class:`Pruner` (a ``ShardedPruner`` for FSDP2 weights); call its
        ``step()`` once per optimizer step.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: bad config, no weight selected, a pattern that does not
            fit a weight, weights already pruned/parametrized, a ``select`` that is not one of
            ``("transformer_blocks",)`` (or given with ``op_names``), a tied weight with a criterion
            that reads layer inputs.

    Example:
        >>> m = torch.nn.Linear(4, 4)
        >>> p = prune(m, {"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 0})
        >>> int((m.weight != 0).sum())
        8
    """
    optimizer = unwrap_optimizer(optimizer)
    config, candidates = _checked_call(model, config, optimizer)
    config = apply_selection(model, config, select)
    distill = _distillation(distillation, teacher)
    ties = TiedWeights.of(candidates, config)                  # a tied weight once
    by_name = {w.name: w for w in ties.offered}
    shapes = {n: w.shape for n, w in by_name.items()}
    params = {w.name: w.module._parameters.get(w.tensor_name) for w in ties.offered}
    sharded = torch.distributed.is_available() and torch.distributed.is_initialized() \
        and any(is_dtensor(p) for p in params.values())
    if sharded:
        if process_group is not None:
            raise ValueError("process_group is for DistributedDataParallel; FSDP2 (DTensor) weights are pruned "
                             "over their own device mesh: pass process_group=None")
        layers = [by_name[n] for n in select_layers(config, list(shapes), shapes)]
        _check_shardable(layers, ties)
    else:
        protocol = PruningProtocol(config, shapes)
        layers = [by_name[n] for n in protocol.names]
        _check_plain(layers)
    _check_selected(layers, params, config)
    _check_tied(layers, ties, config)
    if sharded:       # the sharded protocol is built there, once its rows are known
        from .distributed.fsdp_entry import prune_sharded     # FSDP2 only: torch.distributed.tensor is imported by now

        distiller = _sharded_distiller(model, distill, teacher, logits_fn)
        try:
            pruner = prune_sharded(model, config, layers, params, log_dir=log_dir, optimizer=optimizer,
                                   summarize=lambda unfit: build_summary(model, config, candidates,
                                                                         [w.name for w in layers], unfit, ties.tied,
                                                                         ties.dropped, select))
        except BaseException:
            _drop(distiller)
            raise
        logger.info(pruner.summary().line())
        return _with_distiller(pruner, distiller)
    distiller = None if distill is None else _distiller(model, distill, teacher, logits_fn,   # before any mask
                                                        config.start_step, config.end_step)
    summary = build_summary(model, config, candidates, protocol.names, protocol.skipped, ties.tied, ties.dropped,
                            select)
    aliases: dict[tuple[nn.Module, str], list[PrunableWeight]] = {}      # each tensor once (fused q/k/v too)
    for w in layers:
        aliases.setdefault((w.module, w.tensor_name), []).extend(ties.aliases.get(w.name, []))
    done: list[tuple[nn.Module, str]] = []
    plain_parameters = list(model.named_parameters())      # their order, before the weights move (optimizer_order)
    try:
        for (module, tensor_name), others in aliases.items():
            p = module._parameters[tensor_name]
            mask = MaskParametrization(torch.ones_like(p.detach()), pruned_decay=config.pruned_decay,
                                       straight_through=config.pruned_gradient == "straight_through")
            for m, t in dict.fromkeys([(module, tensor_name)] + [(a.module, a.tensor_name) for a in others]):
                register_mask(m, t, mask)     # tied: the same mask on every layer reading it; plain state-dict names
                done.append((m, t))
        pruner = Pruner(model, protocol, layers, process_group, log_dir, optimizer,
                        parametrized=done[:], summary=summary, plain_parameters=plain_parameters)
        logger.info(summary.line())
        return _with_distiller(pruner, distiller)
    except BaseException:
        for module, tensor_name in done:   # nothing half-applied
            parametrize.remove_parametrizations(module, tensor_name, leave_parametrized=False)
        _drop(distiller)
        raise


def _checked_call(model: Any, config: Any, optimizer: Any) -> tuple[PruningConfig, list[PrunableWeight]]:
    """The checks of a call to :func:`prune` on either path (plain or FSDP2 weights): the model, the config
    (coerced here, once), the optimizer; returns the config and the candidate weights."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError("model is a TorchScript module (torch.jit.script/trace); its weights cannot be "
                        "parametrized: call prune() on the eager model, train, Pruner.remove(), then script it")
    config = PruningConfig.coerce(config)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if config.regrowth != "none" and optimizer is None:
        raise ValueError(f"regrowth={config.regrowth!r} zeroes the optimizer state of grown weights: pass the "
                         "optimizer, prune(model, config, optimizer=opt)")
    if _has_mask_param(model):
        raise ValueError("model is already pruned (it has MaskParametrization layers); call Pruner.remove() "
                         "before pruning it again")
    candidates = prunable_weights(model)
    if not candidates:
        kinds = ", ".join(t.__name__ for t in SUPPORTED_MODULES)
        raise ValueError(f"model has no prunable weights; supported layers are {kinds} and transformers' Conv1D "
                         "(sparsify_torch.register_prunable adds your own layer types)")
    hooked = hooked_weights(model)
    if hooked:
        warnings.warn(f"layers {sorted(hooked)} compute their weight with an old-style hook "
                      f"({', '.join(sorted(set(hooked.values())))}); their weights are not pruned. Remove the hook "
                      "(torch.nn.utils.remove_spectral_norm / remove_weight_norm) to prune them", stacklevel=3)
    return config, candidates


def _check_selected(layers: list[PrunableWeight], params: Mapping[str, Any], config: PruningConfig) -> None:
    """The checks of the selected weights on either path: floating point, and inputs a criterion reads."""
    for w in layers:
        p = params[w.name]
        if not p.is_floating_point():
            raise ValueError(f"weight {w.name!r} has dtype {p.dtype}; only floating point weights can be pruned")
    if "activation" in get_criterion(config.criterion).needs:
        check_activation_layers(layers, config.criterion)


def _check_shardable(layers: list[PrunableWeight], ties: TiedWeights) -> None:
    """FSDP2 prunes the rows of each shard: no weight stored transposed, no tied weight."""
    for w in layers:
        if w.transposed:
            raise ValueError(f"weight {w.name!r} ({type(w.module).__name__}) is stored (in, out): its rows in the "
                             "core's layout are not its rows on the shards, so it cannot be pruned sharded; exclude "
                             "it with excluded_op_names")
        if w.name in ties.aliases:
            raise ValueError(f"weight {w.name!r} is tied to {[a.name for a in ties.aliases[w.name]]}; tied weights "
                             "are not pruned sharded (FSDP2): exclude them with excluded_op_names")


def _check_tied(layers: list[PrunableWeight], ties: TiedWeights, config: PruningConfig) -> None:
    """A criterion that reads a layer's inputs cannot score a weight several layers read."""
    if "activation" not in get_criterion(config.criterion).needs:
        return
    tied = {w.name: [a.name for a in ties.aliases[w.name]] for w in layers if w.name in ties.aliases}
    if tied:
        raise ValueError(f"criterion {config.criterion!r} reads the inputs of each pruned layer, but tied weights "
                         f"are read by several layers: {tied}; exclude them with excluded_op_names")


def _check_plain(layers: list[PrunableWeight]) -> None:
    """The checks of plain (not FSDP2) weights before they are parametrized: not parametrized yet, one
    parameter per weight (tied ones are merged before), not on the meta device."""
    owner: dict[int, PrunableWeight] = {}     # parameter -> first weight reading it
    for w in layers:
        if parametrize.is_parametrized(w.module, w.tensor_name):
            kinds = [type(x).__name__ for x in w.module.parametrizations[w.tensor_name]]
            raise ValueError(f"weight {w.name!r} already has a parametrization ({', '.join(kinds)}); sparsify_torch "
                             "needs plain weights: exclude it with excluded_op_names, or remove it first "
                             f"(torch.nn.utils.parametrize.remove_parametrizations(module, {w.tensor_name!r}))")
        p = w.module._parameters[w.tensor_name]
        first = owner.setdefault(id(p), w)
        if (first.module, first.tensor_name) != (w.module, w.tensor_name):
            raise ValueError(f"weights {first.name!r} and {w.name!r} are the same (tied) parameter; exclude one "
                             "of them with excluded_op_names")
        if p.is_meta:
            raise ValueError(f"weight {w.name!r} is on the meta device (it holds no data); materialize the model "
                             "(model.to_empty(device=...) and initialise its weights) before pruning")


def _distillation(distillation: Any, teacher: Any) -> DistillationConfig | None:
    """The checked distillation config of ``prune`` (None without one)."""
    if distillation is None:
        if teacher is not None:
            raise ValueError("teacher was passed without distillation: prune(..., distillation={'teacher': 'user'}, "
                             "teacher=module)")
        return None
    from sparsify.distillation import DistillationConfig     # loaded when a distillation is asked for
    return DistillationConfig.coerce(distillation)


def _sharded_distiller(model: nn.Module, distill: DistillationConfig | None, teacher: nn.Module | None,
                       logits_fn: Any) -> Distiller | None:
    """The distiller of an FSDP2 model: its teacher must be the user's (FSDP2 refuses ``deepcopy``)."""
    if distill is None:
        return None
    if distill.teacher == "dense_at_start":
        raise ValueError("distillation teacher='dense_at_start' copies the model, but FSDP2 modules cannot "
                         "be deep-copied: build the teacher (the same model, fully_shard the same way, its "
                         "shards copied from the model's before prune) and pass it: prune(..., "
                         "distillation={'teacher': 'user', ...}, teacher=teacher)")
    return _distiller(model, distill, teacher, logits_fn)


def _distiller(model: nn.Module, distill: DistillationConfig, teacher: nn.Module | None, logits_fn: Any,
               start_step: int = 0, end_step: int | None = None) -> Distiller:
    """The distiller of ``prune``; a ``"dense_at_start"`` teacher is copied at ``start_step`` (the schedule's), and
    its default weight fades to 0 halfway to ``end_step``."""
    from .distillation import Distiller     # loaded when a distillation is asked for
    return Distiller(model, distill, teacher, logits_fn, start_step=start_step, end_step=end_step)


def _drop(distiller: Distiller | None) -> None:
    if distiller is not None:
        distiller.remove()


def _with_distiller(pruner: Pruner | ShardedPruner, distiller: Distiller | None) -> Pruner | ShardedPruner:
    if distiller is not None:
        pruner.attach_distiller(distiller)
    return pruner
