"""Selection: the ``k`` lowest scores, exactly, in a fixed tie order, on any number of threads.

One kernel (:mod:`~sparsify.selection.kernel`: the k-th value, the chunk policy, the bracket, the tie split)
and one routine over parts (:class:`~sparsify.selection.cut.Cut`) serve every selection of the core:

* :mod:`~sparsify.selection.lowest_k`: :func:`exact_prune_count` (how many units a sparsity prunes) and
  :func:`lowest_k_mask` / :func:`lowest_k_keep` of one array;
* :class:`~sparsify.selection.lowest_k_cut.LowestKCut`: over several in-memory arrays (the global scope);
* :class:`~sparsify.selection.streamed_cut.StreamedCut`: over layers whose scores are computed row chunk by
  row chunk (no layer-sized score array);
* :mod:`~sparsify.selection.tie_order`: the order ties are broken in (lower index first);
* :mod:`~sparsify.selection.score_checks`: the one NaN check (:class:`NaNScoreError`).

The sharded cut (:func:`sparsify.distributed.sharded_cut.find_cuts`) brackets and splits ties with the same
kernel across ranks.

Example:
    >>> import numpy as np
    >>> lowest_k_mask(np.array([3.0, 1.0, 1.0, 2.0]), 2).tolist()
    [False, True, True, False]
"""
from .lowest_k import exact_prune_count, lowest_k_keep, lowest_k_mask
from .lowest_k_cut import LowestKCut
from .score_checks import NaNScoreError, check_finite
from .streamed_cut import StreamedCut

__all__ = ["exact_prune_count", "lowest_k_mask", "lowest_k_keep", "LowestKCut", "StreamedCut", "NaNScoreError",
           "check_finite"]
