"""TensorFlow pieces every TF path shares: graph mode (:mod:`sparsify_tf.graph`), the seed API
(:mod:`sparsify_tf.seed`), tf-keras (:mod:`sparsify_tf.keras`) and the tfmot module (:mod:`sparsify_tf.compat`).

:mod:`~sparsify_tf.common.guarded_update` (the one guarded in-graph update, and the core's host function
it calls), :mod:`~sparsify_tf.common.mask_write` (the one writer of a mask update),
:mod:`~sparsify_tf.common.layout_ops` (canonical layout as graph ops), :mod:`~sparsify_tf.common.masking`
(mask variables, masked inputs, op rewiring), :mod:`~sparsify_tf.common.pruning_scope` (scope and collection
names), :mod:`~sparsify_tf.common.graph_utils` (finding prunable ops), :mod:`~sparsify_tf.common.schedule_ops`
(schedule tensors), :mod:`~sparsify_tf.common.optimizer_slots`, :mod:`~sparsify_tf.common.summaries`,
:mod:`~sparsify_tf.common.core_errors` (the core's errors out of a session) and
:mod:`~sparsify_tf.common.export` (clean inference graphs). Nothing here imports :mod:`sparsify_tf.graph`,
:mod:`sparsify_tf.seed` or :mod:`sparsify_tf.keras`.
"""
