"""Integrations with the trainers people use, each in its own module and imported only when used:

* :mod:`sparsify_torch.integrations.huggingface`: ``SparsifyCallback`` for ``transformers.Trainer``;
* :mod:`sparsify_torch.integrations.lightning`: ``SparsifyCallback`` for ``lightning.pytorch.Trainer``.

Importing this package imports neither ``transformers`` nor ``lightning`` (its modules do). What both
callbacks save beside the model's checkpoint is :mod:`sparsify_torch.integrations.training_state`.

Example:
    >>> from sparsify_torch.integrations import training_state
    >>> training_state.__all__
    ['pruning_state', 'restore_pruning_state', 'advance_to_step', 'checked_callback_settings']
"""
from __future__ import annotations

__all__: list[str] = []
