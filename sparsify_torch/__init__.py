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

from .layers import SUPPORTED_MODULES, PrunableWeight, prunable_weights
from .parametrization import MaskParametrization
from .oneshot import prune_oneshot
from .entry import prune
from .pruner import Pruner
from .permutation import PermutationReport, permute_for_nm
from .sparse_inference import SparseConv1x1, SparseLinear, sparse_inference_plan, to_sparse_inference

__all__ = ["MaskParametrization", "Pruner", "prune", "prune_oneshot", "prunable_weights", "PrunableWeight",
           "SUPPORTED_MODULES", "permute_for_nm", "PermutationReport",
           "to_sparse_inference", "sparse_inference_plan", "SparseLinear", "SparseConv1x1"]
