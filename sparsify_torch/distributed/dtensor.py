"""DTensor checks that never import ``torch.distributed.tensor`` (about half a second of import time).

A tensor can only be a DTensor (an FSDP2 shard) once ``torch.distributed.tensor`` has been imported: by
``fully_shard``, ``distribute_tensor`` or ``torch.distributed.checkpoint``. Until then every tensor is plain,
and these checks say so without importing it; ``import sparsify_torch`` therefore costs little more than
``import torch`` (``bench/bench_import.py``).

Example:
    >>> import torch
    >>> from sparsify_torch.distributed.dtensor import is_dtensor, local_tensor
    >>> t = torch.ones(2)
    >>> is_dtensor(t), local_tensor(t) is t
    (False, True)
"""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["is_dtensor", "local_tensor"]


def is_dtensor(tensor: Any) -> bool:
    """True for a DTensor (a parameter sharded by FSDP2 or ``distribute_tensor``)."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(tensor, module.DTensor)


def local_tensor(tensor: Any) -> Any:
    """This process's shard of a DTensor; any other tensor itself."""
    return tensor.to_local() if is_dtensor(tensor) else tensor
