"""The torch adapter under data parallelism, one room: FSDP2 shards, DTensors and the collective they share.

* :mod:`~sparsify_torch.distributed.fsdp`: :class:`~sparsify_torch.distributed.fsdp.ShardedPruner`, the pruner
  of FSDP2-sharded weights (``sparsify_torch.prune`` returns it for DTensor weights);
* :mod:`~sparsify_torch.distributed.fsdp_entry`: building it from ``prune``'s checked call;
* :mod:`~sparsify_torch.distributed.fsdp_activations`: activation statistics summed over the data-parallel group
  (DDP's ``Pruner`` too);
* :mod:`~sparsify_torch.distributed.collective`: :class:`~sparsify_torch.distributed.collective.TorchCollective`,
  the core's collective (:mod:`sparsify.distributed`) over ``torch.distributed``;
* :mod:`~sparsify_torch.distributed.dtensor`: recognising a DTensor without importing ``torch.distributed.tensor``.

Importing this package imports none of them (``import sparsify_torch`` stays free of FSDP).

Example:
    >>> import torch
    >>> from sparsify_torch.distributed.dtensor import is_dtensor
    >>> is_dtensor(torch.zeros(2))
    False
"""
