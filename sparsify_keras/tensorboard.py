"""TensorBoard scalars of a Keras pruning run (``PruningCallback(log_dir=)``), with the ``tensorboard`` package
alone (no TensorFlow needed).

The same writer and tags as ``sparsify_torch.prune(..., log_dir=)``
(:mod:`sparsify.adapter_helpers.tensorboard`): ``sparsity/total`` and ``sparsity/<weight path>`` at every
mask update.

Example:
    >>> import tempfile
    >>> from sparsify.adapter_helpers.tensorboard import read_scalars
    >>> d = tempfile.mkdtemp()
    >>> w = SparsityWriter(d)
    >>> w.write({"sparsity": 0.5, "sparsity/fc/kernel": 0.5}, step=3); w.close()
    >>> read_scalars(d)["sparsity/fc/kernel"]
    [(3, 0.5)]
"""
from __future__ import annotations

from sparsify.adapter_helpers import tensorboard

__all__ = ["SparsityWriter"]


class SparsityWriter(tensorboard.SparsityWriter):
    """The writer of ``PruningCallback(log_dir=)`` (Keras 3 on every backend, and tf-keras).

    Raises:
        TypeError: ``log_dir`` is not a path.
        ImportError: the ``tensorboard`` package is missing (names what to install).
    """
