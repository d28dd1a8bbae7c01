"""``prune_sharded``: the FSDP2 path of :func:`sparsify_torch.prune`, checking what only sharded weights need and
building the :class:`~sparsify_torch.distributed.fsdp.ShardedPruner` (``prune`` has checked the call, coerced the config and
selected the weights, once for both paths).

Example:
    >>> prune_sharded.__name__
    'prune_sharded'
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Shard

from sparsify import PruningConfig
from sparsify.distributed import RowShard, ShardedPruningProtocol

from ..layers import PrunableWeight
from ..summary import PruningSummary
from .collective import TorchCollective
from .fsdp import ShardedPruner, is_sharded

__all__ = ["prune_sharded"]


def _row_shard(name: str, param: DTensor) -> RowShard:
    """The rows of ``param`` this rank holds, checking that it is sharded along dim 0 like FSDP2 does."""
    mesh = param.device_mesh
    if mesh.ndim != 1 or tuple(param.placements) != (Shard(0),):
        raise ValueError(f"weight {name!r} is a DTensor placed {tuple(param.placements)} on a {mesh.ndim}-D mesh; "
                         "sparsify_torch prunes DTensors sharded along dim 0 on a 1-D mesh (FSDP2's fully_shard "
                         "default), exclude it with excluded_op_names")
    shard = RowShard.chunk(tuple(param.shape), mesh.get_local_rank(), mesh.size())
    local = tuple(param.to_local().shape)
    if local != shard.local_shape:
        raise ValueError(f"weight {name!r}: this rank holds a local shard of shape {local}, but dim-0 sharding "
                         f"over {mesh.size()} ranks gives {shard.local_shape}; only torch.chunk-style row shards "
                         "are supported")
    return shard


def prune_sharded(model: nn.Module, config: PruningConfig, layers: list[PrunableWeight], params: Mapping[str, Any], *,
                  sample_size: int | None = None, log_dir: Any = None,
                  optimizer: torch.optim.Optimizer | None = None,
                  summarize: Callable[[Mapping[str, str]], PruningSummary] | None = None) -> ShardedPruner:
    """The FSDP2 path of :func:`sparsify_torch.prune` (called by it when weights are DTensors).

    ``layers`` are the weights ``config`` selects, checked by ``prune`` as on the plain path; ``params[name]``
    is the parameter of each. What only sharded weights need is checked here, before anything changes.
    ``summarize(unfit)`` gives the pruner's :meth:`~sparsify_torch.distributed.fsdp.ShardedPruner.summary` from the weights
    the pattern does not fit (``protocol.skipped``).
    """
    if optimizer is None:
        dense = [f"{k}={getattr(config, k)!r}" for k, plain in
                 (("monotone", True), ("pruned_gradient", "none"), ("regrowth", "none")) if getattr(config, k) != plain]
        if dense:
            raise ValueError(f"{', '.join(dense)} on FSDP2 (DTensor) weights needs the values of the pruned weights, "
                             "which the optimizer steps: pass it, prune(model, config, optimizer=opt)")
    plain = [w.name for w in layers if not is_sharded(params[w.name])]
    if plain:
        raise ValueError(f"weights {plain} are plain tensors while other weights of the model are FSDP2 shards "
                         "(DTensors); apply fully_shard to the whole model (the root too) before prune(), or exclude "
                         "them with excluded_op_names")
    for w in layers:
        if w.rows is not None or w.conv_transpose_groups:
            kind = "the fused in_proj_weight of MultiheadAttention" if w.rows is not None else "a transposed conv"
            raise ValueError(f"weight {w.name!r} is {kind}: its rows in the core's layout are not its rows on the "
                             "shards, so it cannot be pruned sharded; exclude it with excluded_op_names (for "
                             "attention, separate q/k/v projections work)")
    mesh = params[layers[0].name].device_mesh
    other = [w.name for w in layers if params[w.name].device_mesh != mesh]
    if other:
        raise ValueError(f"weights {other} are sharded over another device mesh than {layers[0].name!r} "
                         f"({mesh}); sparsify_torch prunes weights sharded over one mesh")
    shards = {w.name: _row_shard(w.name, params[w.name]) for w in layers}
    collective = TorchCollective(mesh.get_group(), device="cpu" if mesh.device_type == "cpu" else None)
    protocol = ShardedPruningProtocol(config, {w.name: w.shape for w in layers}, shards, collective,
                                      sample_size=sample_size)
    return ShardedPruner(model, protocol, layers, {w.name: params[w.name] for w in layers}, collective, log_dir,
                         optimizer, summary=None if summarize is None else summarize(protocol.skipped))
