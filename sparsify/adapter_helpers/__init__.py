"""Helpers the adapters share that hold no pruning math: what sits beside the core, not in it.

Nothing here imports a framework at import time; :mod:`.tensorboard` loads the ``tensorboard`` package
only when a writer is made.

Example:
    >>> from sparsify.adapter_helpers.tensorboard import SparsityWriter
    >>> SparsityWriter.__name__
    'SparsityWriter'
"""
