"""sparsify_torch.distributed.collective: what it hands torch.distributed owns its memory."""
from types import SimpleNamespace

import numpy as np
import torch

from sparsify_torch.distributed.collective import TorchCollective


def test_collective_inputs_never_view_numpy_memory():
    """Freeing a NumPy-backed tensor takes the GIL; gloo's worker thread may free a collective's input late,
    which must not happen during interpreter finalization (a precaution, docs/distributed.md "Teardown")."""
    a = np.array([1.0, 2.0], dtype=np.float32)
    t = TorchCollective._tensor(SimpleNamespace(device=torch.device("cpu")), a)
    a[0] = 9.0
    assert t.tolist() == [1.0, 2.0] and t.dtype == torch.float32
    assert not np.shares_memory(t.numpy(), a)
