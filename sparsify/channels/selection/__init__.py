"""Framework-neutral math for structured (channel) pruning.

A model's prunable channels come in *groups*: channels that must be removed
together (a conv's output channels, the BatchNorm after it, the input channels
of every consumer, every branch of a residual add). Each channel has a global
integer *label* and an importance *criterion* (higher = more important). This
package chooses which labels to prune; it never imports torch or tensorflow.

* :mod:`~sparsify.channels.selection.scores`: :class:`ChannelScores` and the
  :class:`GroupedScores` protocol (labels, criteria, segments per group);
* :mod:`~sparsify.channels.selection.order`: the pruning order inside one group
  (least important first, every segment keeps ``min_channels``);
* :mod:`~sparsify.channels.selection.labels`: counts and the seed's selection
  functions (uniform ratio, per-group config);
* :mod:`~sparsify.channels.selection.search_space`: what the latency-driven
  search may keep per group;
* :mod:`~sparsify.channels.selection.segments`: segments from layer channel
  sets, labels split back into groups.

Example:
    >>> import numpy as np
    >>> info = ChannelScores([np.arange(3), np.arange(3, 7)], [np.array([2., 0., 1.]), np.array([4., 7., 5., 6.])])
    >>> pruning_order(info.group_criteria[1]).tolist(), least_important_labels(info, [1, 2])
    ([0, 2, 3], [1, 3, 5])
"""
from .labels import (check_pruning_counts, check_pruning_ratio, criterion_by_label, iter_group_scores,
                     least_important_labels, max_prunable_per_group, n_channels_to_prune, uniform_pruning_labels)
from .order import (cumulative_pruning_cost, least_important_indices, max_channels_to_prune, pruning_order,
                    segment_min_channels)
from .scores import ChannelScores, GroupedScores, MinChannels, group_segments, group_sizes
from .search_space import (architecture_search_space, default_architecture_optimization_strategy,
                           strategy_min_channels)
from .segments import segments_from_layer_channels, split_labels_by_group

__all__ = [
    "ChannelScores",
    "GroupedScores",
    "least_important_indices",
    "pruning_order",
    "cumulative_pruning_cost",
    "segment_min_channels",
    "max_channels_to_prune",
    "max_prunable_per_group",
    "check_pruning_ratio",
    "n_channels_to_prune",
    "iter_group_scores",
    "criterion_by_label",
    "uniform_pruning_labels",
    "check_pruning_counts",
    "least_important_labels",
    "default_architecture_optimization_strategy",
    "split_labels_by_group",
    "segments_from_layer_channels",
    "strategy_min_channels",
    "architecture_search_space",
    "group_sizes",
    "group_segments",
    "MinChannels",
]
