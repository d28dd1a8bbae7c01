"""sparsify_tf: the TensorFlow adapter of sparsify.

Its folders say what serves what:

* :mod:`sparsify_tf.graph`: the high-level :func:`prune_graph` entry point (which follows the core's
  ``sparsify.PruningProtocol``) with :class:`PruningHook` (pruned weights and their optimizer slots stay
  exactly zero through training), and distillation from the dense model (:func:`distillation_loss`,
  :func:`teacher_snapshot_op`);
* :mod:`sparsify_tf.seed`: the SparseML seed API (``create_op_pruning``, ``get_or_create_ks_scheduled_graph_ops``,
  SparseML's mask creators...);
* :mod:`sparsify_tf.common`: what every TF path shares (the guarded in-graph update, the mask writer, layout
  ops, mask variables, scope names, schedule tensors, optimizer slots, summaries and the export of clean
  inference graphs);
* :mod:`sparsify_tf.tflite` and :mod:`sparsify_tf.xnnpack`: TFLite conversion with the sparsity optimisation,
  and what XNNPACK's sparse inference needs of a Keras model (:func:`xnnpack_report`,
  :func:`export_tflite_xnnpack`);
* ``sparsify_tf.keras``: tf-keras (Keras 2), imported on demand, not here;
* ``sparsify_tf.compat``: the tfmot-compatible module ``sparsify_tf.compat.tfmot``.

Every public name is importable from ``sparsify_tf`` itself.

Example:
    >>> import sparsify_tf
    >>> callable(sparsify_tf.prune_graph)
    True
"""
from sparsify.extras import missing_framework

try:                                # without TensorFlow: an ImportError naming the extra to install
    import tensorflow as _tf
except ImportError as _e:
    raise missing_framework("sparsify_tf", "tensorflow", "tf", _e,
                            "; for Keras 3 on JAX or PyTorch use sparsify_keras (from sparsify_keras import "
                            "PruningCallback)") from None

from sparsify.triton_conflict import warn_if_triton_conflict as _warn_if_triton_conflict
_warn_if_triton_conflict()          # torch loaded too: triton, loaded after TensorFlow, would crash the process

from .common.export import export_frozen_graph, export_saved_model
from .common.graph_utils import get_prunable_ops_and_inputs, is_prunable_op
from .common.optimizer_slots import find_optimizer_slots
from .common.schedule_ops import schedule_tensors
from .graph.distillation import distillation_loss, teacher_snapshot_op
from .graph.hook import PruningHook
from .graph.pruning import GraphPruning, prune_graph
from .seed.mask_creator import CoreMaskCreator
from .seed.mask_creator_coercion import get_mask_creator
from .seed.mask_creator_pruning import (
    BlockPruningMaskCreator, DimensionPruningMaskCreator, GroupedPruningMaskCreator, PruningMaskCreator,
    UnstructuredPruningMaskCreator, load_mask_creator,
)
from .seed.mask_pruning import (
    PruningOpVars, PruningScope, apply_op_vars_masks, create_constant_op_pruning, create_graph_ops_pruning,
    create_ks_schedule_ops, create_ks_scheduled_constant_graph_ops, create_op_pruning,
    create_op_pruning_no_update, create_summaries_pruning, get_or_create_graph_ops_pruning,
    get_or_create_ks_schedule_ops, get_or_create_ks_scheduled_graph_ops, get_scheduled_update_op,
)
from .seed.utils import VAR_INDEX_FROM_TRAINABLE, eval_tensor_sparsity, get_op_input_var
from .xnnpack import export_tflite_xnnpack, xnnpack_report, xnnpack_sparse_on_this_cpu

__all__ = [
    "prune_graph", "GraphPruning", "PruningHook", "distillation_loss", "teacher_snapshot_op", "export_frozen_graph", "export_saved_model",
    "PruningOpVars", "PruningScope", "create_op_pruning_no_update", "create_op_pruning",
    "create_constant_op_pruning", "create_graph_ops_pruning", "get_or_create_graph_ops_pruning",
    "create_summaries_pruning", "apply_op_vars_masks", "create_ks_schedule_ops",
    "get_or_create_ks_schedule_ops", "get_scheduled_update_op", "get_or_create_ks_scheduled_graph_ops",
    "create_ks_scheduled_constant_graph_ops", "CoreMaskCreator", "get_mask_creator",
    "get_prunable_ops_and_inputs", "is_prunable_op", "schedule_tensors", "find_optimizer_slots",
    "PruningMaskCreator", "UnstructuredPruningMaskCreator", "GroupedPruningMaskCreator", "DimensionPruningMaskCreator",
    "BlockPruningMaskCreator", "load_mask_creator", "VAR_INDEX_FROM_TRAINABLE", "eval_tensor_sparsity",
    "get_op_input_var", "export_tflite_xnnpack", "xnnpack_report", "xnnpack_sparse_on_this_cpu",
]
