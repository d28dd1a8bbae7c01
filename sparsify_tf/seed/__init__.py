"""The SparseML seed API (``sparseml.tensorflow_v1.optim``'s names and arguments) on ``tf.compat.v1`` graphs.

:mod:`~sparsify_tf.seed.mask_pruning` (the facade: ``create_op_pruning``, ``get_or_create_ks_scheduled_graph_ops``
and the rest), :mod:`~sparsify_tf.seed.mask_creator` (:class:`~sparsify_tf.CoreMaskCreator`: the core's masks in
the graph), :mod:`~sparsify_tf.seed.mask_creator_pruning` (SparseML's mask creator classes),
:mod:`~sparsify_tf.seed.mask_creator_coercion` (:func:`~sparsify_tf.get_mask_creator`) and
:mod:`~sparsify_tf.seed.utils` (SparseML's ``get_op_input_var``, ``eval_tensor_sparsity``). Import the names
from ``sparsify_tf``.
"""
