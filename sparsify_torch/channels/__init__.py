"""Structured channel pruning for PyTorch: calibrate, select, physically remove channels.

The public API follows ENOT's pruning documentation (``enot.pruning``).

Example:
    >>> import torch
    >>> from sparsify_torch.channels import calibrate_and_prune_model_equal
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 2, 1))
    >>> small = calibrate_and_prune_model_equal(net, [torch.randn(2, 3, 8, 8)], lambda out, x: out.pow(2).mean())
    >>> small[0].out_channels
    4
"""
from sparsify.channels.selection import default_architecture_optimization_strategy

from .api import calibrate_and_prune_model, calibrate_and_prune_model_equal, calibrate_and_prune_model_optimal
from .calibration import PruningCalibrator, calibrate_model_for_pruning
from .criteria import get_criteria_label_dict, iterate_over_gate_criteria
from .info import ModelPruningInfo
from .optimal import OptimalPruningLabelSelector
from .pruning_config import check_pruning_config, get_labels_for_uniform_pruning, get_least_important_labels_by_config
from .samples import default_sample_to_model_inputs, default_sample_to_n_samples
from .selection import PruningLabelSelector, TopKPruningLabelSelector, UniformPruningLabelSelector
from .surgery import PruningCheckError, prune_model  # noqa: F401 (PruningCheckError: raised by prune_model)

__all__ = [
    "calibrate_and_prune_model_equal",
    "calibrate_and_prune_model_optimal",
    "calibrate_and_prune_model",
    "PruningCalibrator",
    "calibrate_model_for_pruning",
    "ModelPruningInfo",
    "prune_model",
    "PruningLabelSelector",
    "TopKPruningLabelSelector",
    "UniformPruningLabelSelector",
    "OptimalPruningLabelSelector",
    "iterate_over_gate_criteria",
    "get_criteria_label_dict",
    "get_labels_for_uniform_pruning",
    "check_pruning_config",
    "get_least_important_labels_by_config",
    "default_architecture_optimization_strategy",
    "default_sample_to_n_samples",
    "default_sample_to_model_inputs",
]
