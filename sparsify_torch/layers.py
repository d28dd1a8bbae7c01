"""Which weights of a torch model can be pruned, and under which names.

A prunable weight is named like its parameter in ``model.named_parameters()``
of the plain model (``"features.0.weight"``, ``"attn.in_proj_weight"``,
``"attn.out_proj.weight"``); ``op_names``/``excluded_op_names`` regexes are
matched against these names. Torch layouts already are the core's canonical
layout (Linear ``(out, in)``, Conv ``(out, in/groups, *k)``, ConvTranspose
``(in, out/groups, *k)``, Embedding ``(num, dim)``).

Example:
    >>> import torch
    >>> m = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4, 2))
    >>> [(w.name, w.shape) for w in prunable_weights(m)]
    [('0.weight', (4, 1, 3, 3)), ('2.weight', (2, 4))]
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

__all__ = ["PrunableWeight", "prunable_weights", "SUPPORTED_MODULES"]

#: Module types whose weights are prunable, with the tensor names pruned.
SUPPORTED_MODULES: tuple[type[nn.Module], ...] = (
    nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d,
    nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
    nn.Embedding, nn.EmbeddingBag, nn.MultiheadAttention,
)

_MHA_TENSORS = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight")


@dataclass(frozen=True)
class PrunableWeight:
    """One prunable weight: ``module.<tensor_name>``, called ``name`` in configs and masks."""

    name: str
    module: nn.Module
    tensor_name: str
    shape: tuple[int, ...]


def _tensor_names(module: nn.Module) -> list[str]:
    if isinstance(module, nn.MultiheadAttention):
        # out_proj is an nn.Linear sub-module and is found on its own.
        return [t for t in _MHA_TENSORS if _get(module, t) is not None]
    if isinstance(module, SUPPORTED_MODULES):
        return ["weight"] if _get(module, "weight") is not None else []
    return []


def _get(module: nn.Module, tensor_name: str):
    """The raw parameter, looking through existing parametrizations."""
    if hasattr(module, "parametrizations") and tensor_name in module.parametrizations:
        return module.parametrizations[tensor_name].original
    return module._parameters.get(tensor_name)


def prunable_weights(model: nn.Module) -> list[PrunableWeight]:
    """Every weight of a supported layer, in ``named_modules()`` order.

    Uninitialized (lazy) parameters are left out. Names ignore any
    ``parametrizations.`` indirection, so they stay stable once pruned.
    """
    out: list[PrunableWeight] = []
    for mod_name, module in model.named_modules():
        for t in _tensor_names(module):
            p = _get(module, t)
            if isinstance(p, nn.parameter.UninitializedParameter):
                continue
            name = f"{mod_name}.{t}" if mod_name else t
            out.append(PrunableWeight(name, module, t, tuple(p.shape)))
    return out
