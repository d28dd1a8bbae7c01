"""What serves :func:`sparsify_tf.prune_graph`: whole-graph pruning of a ``tf.compat.v1`` graph from a config.

:mod:`~sparsify_tf.graph.pruning` (:func:`~sparsify_tf.prune_graph`, :class:`~sparsify_tf.GraphPruning`),
:mod:`~sparsify_tf.graph.setup` (its named steps: checks, selection, variables),
:mod:`~sparsify_tf.graph.handles` (what a :class:`~sparsify_tf.GraphPruning` holds and does in a session),
:mod:`~sparsify_tf.graph.statistics` (input statistics and dense gradients for Wanda and RigL) and
:mod:`~sparsify_tf.graph.hook` (:class:`~sparsify_tf.PruningHook`); :mod:`~sparsify_tf.graph.distillation`
(the distillation term and the teacher's snapshot). Import the names from ``sparsify_tf``.
"""
