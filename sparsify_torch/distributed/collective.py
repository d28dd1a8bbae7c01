"""``TorchCollective``: the core's :class:`sparsify.distributed.Collective` over a ``torch.distributed`` group.

The sharded selection (:mod:`sparsify.distributed`) moves small NumPy arrays
between ranks; this class does it with ``all_gather`` / ``all_reduce``.

Example:
    >>> TorchCollective.__name__
    'TorchCollective'
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["TorchCollective"]


class TorchCollective:
    """:class:`sparsify.distributed.Collective` over a ``torch.distributed`` process group.

    ``allgather`` first gathers the lengths (one int64 per rank), then the
    arrays padded to the longest; ``allreduce_sum`` is one ``all_reduce``.
    Tensors live on ``device`` (the CPU for gloo, the current GPU for NCCL).

    Args:
        group: the process group (None: the default group).
        device: where the communication tensors live (default: CPU, or the
            current CUDA device when the group's backend is NCCL).
    """

    def __init__(self, group: Any = None, device: torch.device | str | None = None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("TorchCollective needs torch.distributed to be initialized "
                               "(torch.distributed.init_process_group)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        if device is None:
            nccl = "nccl" in str(dist.get_backend(group)).lower()
            device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        self.device = torch.device(device)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """A tensor that owns its memory (a copy), never a view of NumPy memory: gloo's worker thread may drop
        the last reference to a collective's input after the call returned, and freeing a NumPy-backed tensor
        takes the GIL, which a thread must not do while the interpreter finalizes (a precaution; see
        docs/distributed.md, "Teardown")."""
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device, copy=True)

    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        a = np.ascontiguousarray(np.asarray(array).reshape(-1))
        sizes = [torch.zeros(1, dtype=torch.int64, device=self.device) for _ in range(self.world_size)]
        dist.all_gather(sizes, self._tensor(np.array([a.size], dtype=np.int64)), group=self.group)
        lengths = [int(s.item()) for s in sizes]
        longest = max(lengths)
        padded = np.zeros(longest, dtype=a.dtype)
        padded[:a.size] = a
        out = [torch.empty(longest, dtype=torch.from_numpy(padded).dtype, device=self.device)
               for _ in range(self.world_size)]
        if longest:
            dist.all_gather(out, self._tensor(padded), group=self.group)
        return [t[:n].cpu().numpy() for t, n in zip(out, lengths)]

    def allreduce_sum(self, array: np.ndarray) -> np.ndarray:
        a = np.asarray(array)
        t = self._tensor(a)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t.cpu().numpy().astype(a.dtype, copy=False)
