"""TensorBoard scalars of a :class:`~sparsify_torch.Pruner` (``sparsify_torch.prune(..., log_dir=)``).

The same writer and tags as the Keras callback's ``log_dir=``
(:mod:`sparsify.adapter_helpers.tensorboard`): ``sparsity/total`` and ``sparsity/<weight name>`` at every
mask update, from ``pruner.protocol.figures()``. Needs the ``tensorboard`` package
(``pip install tensorboard``); it is imported only when a writer is made.

Example:
    >>> import tempfile, torch, sparsify_torch
    >>> d = tempfile.mkdtemp()
    >>> p = sparsify_torch.prune(torch.nn.Linear(8, 8), {"target_sparsity": 0.5, "start_step": 0, "end_step": 0},
    ...                          log_dir=d)
    >>> _ = p.remove()
    >>> read_scalars(d)["sparsity/weight"]
    [(0, 0.5)]
"""
from __future__ import annotations

from sparsify.adapter_helpers import tensorboard
from sparsify.adapter_helpers.tensorboard import read_scalars

__all__ = ["SparsityWriter", "read_scalars"]


class SparsityWriter(tensorboard.SparsityWriter):
    """The writer of ``sparsify_torch.prune(..., log_dir=)`` (``ShardedPruner``: rank 0 writes).

    Raises:
        TypeError: ``log_dir`` is not a path.
        ImportError: the ``tensorboard`` package is missing (names what to install).
    """
