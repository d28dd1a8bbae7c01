"""accelerate's ``save_state`` / ``load_state`` with the pruner registered for checkpointing: the model's weights
under their plain names, the pruning state beside them, and a resume that is bit for bit the uninterrupted run."""
from __future__ import annotations

import pytest
import torch
from torch import nn

accelerate = pytest.importorskip("accelerate")

from sparsify_torch import prune  # noqa: E402

pytestmark = pytest.mark.slow        # accelerate's import takes seconds

CONFIG = {"target_sparsity": 0.75, "start_step": 0, "end_step": 6, "pruning_frequency": 2, "monotone": False}


def run(steps, save_to=None, load_from=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    acc = accelerate.Accelerator(cpu=True)
    model, opt = acc.prepare(model, opt)
    pruner = prune(model, CONFIG, optimizer=opt)          # accelerate's optimizer wrapper, unwrapped
    acc.register_for_checkpointing(pruner)
    if load_from is not None:
        acc.load_state(load_from)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)) for _ in range(10)]
    for x, y in batches[pruner.step_count:steps]:
        opt.zero_grad()
        acc.backward(nn.functional.cross_entropy(model(x), y))
        opt.step()
        pruner.step()
        if save_to is not None and pruner.step_count == 3:
            acc.save_state(save_to)
    return model, pruner


def test_save_state_and_load_state_resume_exactly(tmp_path):
    model, pruner = run(8, save_to=tmp_path / "state")
    from safetensors.torch import load_file
    weights = load_file(tmp_path / "state" / "model.safetensors")
    assert sorted(weights) == ["0.bias", "0.weight", "2.bias", "2.weight"]       # plain names, masked values
    resumed, resumed_pruner = run(8, load_from=tmp_path / "state")
    assert resumed_pruner.step_count == 8
    for k, v in model.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k
    assert all(torch.equal(m, resumed_pruner.masks()[n]) for n, m in pruner.masks().items())
