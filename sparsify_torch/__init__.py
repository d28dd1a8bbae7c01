"""PyTorch adapter of sparsify: mask parametrizations driven by the core engine.

``prune(model, config)`` registers a :class:`MaskParametrization` on every
selected weight and returns a :class:`Pruner`; call ``pruner.step()`` once per
optimizer step and ``pruner.remove()`` to bake the masks in. Structured
channel pruning lives in ``sparsify_torch.channels`` (import it explicitly).

Example:
    >>> import torch, sparsify_torch
    >>> model = torch.nn.Linear(4, 4)
    >>> pruner = sparsify_torch.prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    >>> round(pruner.total_sparsity(), 2)
    0.5
"""
from __future__ import annotations

from sparsify.extras import missing_framework

try:                                # without torch: an ImportError naming the extra to install
    import torch as _torch
except ImportError as _e:
    raise missing_framework("sparsify_torch", "torch", "torch", _e) from None

from sparsify.triton_conflict import warn_if_triton_conflict as _warn_if_triton_conflict
_warn_if_triton_conflict()          # TensorFlow loaded first: triton, loaded later, would crash the process

from .layers import SUPPORTED_MODULES, PrunableWeight, prunable_weights, register_prunable, unregister_prunable
from .parametrization import MaskParametrization
from .entry import prune
from .pruner import Pruner
from .selection import transformer_block_weights
from .summary import PruningSummary

from typing import TYPE_CHECKING
if TYPE_CHECKING:          # loaded on first use (``__getattr__`` below); named here for readers and tools
    from .oneshot import prune_oneshot
    from .permutation import PermutationReport, permute_for_nm
    from .sparse_inference import SparseConv1x1, SparseLinear, sparse_inference_plan, to_sparse_inference

__all__ = ["MaskParametrization", "Pruner", "prune", "prune_oneshot", "prunable_weights", "PrunableWeight",
           "SUPPORTED_MODULES", "register_prunable", "unregister_prunable", "transformer_block_weights",
           "PruningSummary", "permute_for_nm", "PermutationReport",
           "to_sparse_inference", "sparse_inference_plan", "SparseLinear", "SparseConv1x1"]

#: names loaded on first use (PEP 562: one-shot pruning, N:M permutation and sparse inference pull in
#: modules a training loop does not need)
_LAZY = ("prune_oneshot", "permute_for_nm", "PermutationReport", "to_sparse_inference", "sparse_inference_plan",
         "SparseLinear", "SparseConv1x1")


def __getattr__(name: str):
    if name == "prune_oneshot":
        from . import oneshot as module
    elif name in ("permute_for_nm", "PermutationReport"):
        from . import permutation as module
    elif name in _LAZY:
        from . import sparse_inference as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value = getattr(module, name)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
