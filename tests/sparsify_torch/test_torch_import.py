"""``import sparsify_torch`` loads neither FSDP2's ``torch.distributed.tensor`` nor the channel tracer (issue 47:
the import costs at most 0.2 s over ``import torch``; bench/bench_import.py measures it). They load on use, and
a DTensor is recognised without them (``sparsify_torch.distributed.dtensor``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sparsify_torch.distributed.dtensor import is_dtensor, local_tensor

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["torch.distributed.tensor", "torch.distributed.fsdp", "sparsify_torch.channels", "sparsify_torch.distributed.fsdp",
         "sparsify_torch.distributed.fsdp_entry"]


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2"))
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.splitlines()[-1])


@pytest.mark.slow
def test_import_and_a_plain_prune_load_no_fsdp_and_no_tracer():
    assert _loaded_after("import torch\nloaded = set(sys.modules)") == []     # torch alone loads none of them
    code = ("import torch, sparsify_torch\n"
            "model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))\n"
            "pruner = sparsify_torch.prune(model, {'target_sparsity': 0.5, 'start_step': 0, 'end_step': 0})\n"
            "assert pruner.sparsity() == {'0.weight': 0.5, '2.weight': 0.5}, pruner.sparsity()")
    assert _loaded_after(code) == []


@pytest.mark.slow
def test_the_channel_tracer_loads_when_permute_for_nm_runs():
    code = ("import torch, sparsify_torch\n"
            "model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))\n"
            "report = sparsify_torch.permute_for_nm(model, (torch.randn(2, 8),), '2:4', rounds=2)\n"
            "assert report.layers, report")
    assert "sparsify_torch.channels" in _loaded_after(code)


def test_plain_tensors_are_not_dtensors_and_a_dtensor_is():
    t = torch.ones(3)
    assert is_dtensor(t) is False and local_tensor(t) is t
    from torch.distributed.tensor import DTensor         # what fully_shard / distribute_tensor import first

    class FakeShard(DTensor):                             # isinstance is all is_dtensor asks
        def __new__(cls):
            return torch.Tensor._make_subclass(cls, torch.zeros(2))

        def to_local(self):
            return torch.ones(1)

    shard = FakeShard()
    assert is_dtensor(shard) is True and local_tensor(shard).tolist() == [1.0]
