"""sparsify_tf: the TensorFlow adapter of sparsify.

Graph mode (``tf.compat.v1``): the seed API (:mod:`sparsify_tf.mask_pruning`,
built on :mod:`sparsify_tf.pruning_scope`, :mod:`sparsify_tf.masking` and
:mod:`sparsify_tf.schedule_ops`), the high-level :func:`prune_graph` entry point
(:mod:`sparsify_tf.graph_pruning`, which follows the core's
``sparsify.PruningProtocol``) with :class:`PruningHook`
(:mod:`sparsify_tf.pruning_hook`; pruned weights and their optimizer slots
stay exactly zero through training), and export of clean inference graphs
(:mod:`sparsify_tf.export`). The Keras callback lives in ``sparsify_tf.keras``
(imported on demand, not here).

Example:
    >>> import sparsify_tf
    >>> callable(sparsify_tf.prune_graph)
    True
"""
from .export import export_frozen_graph, export_saved_model
from .graph_pruning import GraphPruning, prune_graph
from .graph_utils import get_prunable_ops_and_inputs, is_prunable_op
from .mask_creator import CoreMaskCreator
from .mask_creator_coercion import get_mask_creator
from .mask_creator_pruning import (
    BlockPruningMaskCreator, DimensionPruningMaskCreator, GroupedPruningMaskCreator, PruningMaskCreator,
    UnstructuredPruningMaskCreator, load_mask_creator,
)
from .mask_pruning import (
    PruningOpVars, PruningScope, apply_op_vars_masks, create_constant_op_pruning, create_graph_ops_pruning,
    create_ks_schedule_ops, create_ks_scheduled_constant_graph_ops, create_op_pruning,
    create_op_pruning_no_update, create_summaries_pruning, get_or_create_graph_ops_pruning,
    get_or_create_ks_schedule_ops, get_or_create_ks_scheduled_graph_ops, get_scheduled_update_op,
)
from .optimizer_slots import find_optimizer_slots
from .pruning_hook import PruningHook
from .schedule_ops import schedule_tensors
from .seed_utils import VAR_INDEX_FROM_TRAINABLE, eval_tensor_sparsity, get_op_input_var

__all__ = [
    "prune_graph", "GraphPruning", "PruningHook", "export_frozen_graph", "export_saved_model",
    "PruningOpVars", "PruningScope", "create_op_pruning_no_update", "create_op_pruning",
    "create_constant_op_pruning", "create_graph_ops_pruning", "get_or_create_graph_ops_pruning",
    "create_summaries_pruning", "apply_op_vars_masks", "create_ks_schedule_ops",
    "get_or_create_ks_schedule_ops", "get_scheduled_update_op", "get_or_create_ks_scheduled_graph_ops",
    "create_ks_scheduled_constant_graph_ops", "CoreMaskCreator", "get_mask_creator",
    "get_prunable_ops_and_inputs", "is_prunable_op", "schedule_tensors", "find_optimizer_slots",
    "PruningMaskCreator", "UnstructuredPruningMaskCreator", "GroupedPruningMaskCreator", "DimensionPruningMaskCreator",
    "BlockPruningMaskCreator", "load_mask_creator", "VAR_INDEX_FROM_TRAINABLE", "eval_tensor_sparsity",
    "get_op_input_var",
]
