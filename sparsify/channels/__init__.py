"""Structured (channel) pruning's framework-neutral math, one room: what the adapters' channel tracers and
pruners (``sparsify_torch.channels``, ``sparsify_keras.channels``) share. NumPy only.

* :mod:`~sparsify.channels.groups`: which channels must be removed together (a union-find over channel ids,
  reshapes of a channel dimension);
* :mod:`~sparsify.channels.selection`: which labels to prune (scores per group, pruning order, counts, the
  latency search's space);
* :mod:`~sparsify.channels.config`: a pruning config's per-group counts or fractions.

Example:
    >>> import numpy as np
    >>> from sparsify.channels.selection import ChannelScores, uniform_pruning_labels
    >>> uniform_pruning_labels(ChannelScores([np.arange(4)], [np.array([3., 1., 2., 0.])]), 0.5)
    [1, 3]
"""
