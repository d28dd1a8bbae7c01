"""Sparsity patterns and their registry.

A pattern turns per-element scores into boolean masks (True = kept) with an
exact number of pruned units. Scores and masks are ``dict[str, np.ndarray]``
keyed by layer name, in the canonical (PyTorch) layout; patterns work on the
2-D view of :mod:`sparsify.layout`.

* :mod:`~sparsify.patterns.registry`: families by name (``register_pattern``,
  ``get_pattern``, ``pattern_examples`` for help texts);
* :mod:`~sparsify.patterns.base`: :class:`Pattern`, exact selection, local and
  global scope, monotone masks; :mod:`~sparsify.patterns.allocation`: the
  global per-layer allocation;
* one module per family: :mod:`~sparsify.patterns.nxm` (``"NxM"`` blocks,
  ``"channelxM"`` all rows by M columns, ``"Nxchannel"`` N rows by all
  columns) and :mod:`~sparsify.patterns.ninm` (``"N:M"``, N pruned of every M
  along the last axis: ``"2:4"`` keeps 2 of 4, ``"1:4"`` keeps 3 of 4) and
  :mod:`~sparsify.patterns.kernel_blocks` (``"OxIxK"``, O outputs by I inputs
  at one kernel tap or over the whole kernel: ``"channelx1xkernel"`` removes
  input channels of a conv).

Example:
    >>> import numpy as np
    >>> p = get_pattern("1x2")
    >>> p.get_mask_single(np.array([[1.0, 2.0, 9.0, 9.0]]), 0.5).astype(int).tolist()
    [[0, 0, 1, 1]]
    >>> get_pattern("2:4").get_mask_single(np.array([[4.0, 1.0, 3.0, 2.0]]), 0.5).astype(int).tolist()
    [[1, 0, 1, 0]]
"""
from .allocation import allocate_pruned_units
from .base import BLOCK_REDUCTIONS, Pattern, config_value
from .registry import (get_pattern, pattern_examples, pattern_family, pattern_summaries, register_pattern,
                       registered_patterns, unregister_pattern)
from .nxm import PatternNxM                   # registration order: NxM first, then N:M
from .ninm import PatternNInM
from .kernel_blocks import PatternKernelBlocks   # then OxIxK

__all__ = [
    "register_pattern", "unregister_pattern", "get_pattern", "registered_patterns", "pattern_examples", "pattern_summaries",
    "pattern_family", "Pattern", "PatternNxM", "PatternNInM", "PatternKernelBlocks", "BLOCK_REDUCTIONS", "allocate_pruned_units",
    "config_value",
]
