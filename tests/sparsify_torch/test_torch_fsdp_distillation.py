"""Distillation with FSDP2 (gloo, 2 CPU processes): a sharded frozen teacher gives the single-process loss."""
from __future__ import annotations

import torch

from sparsify_torch import prune
from test_torch_fsdp import Net, shard_model, spawn

CONFIG = {"target_sparsity": 0.5, "start_step": 0, "end_step": 2, "pruning_frequency": 1}
DISTILL = {"temperature": 2.0, "features": ["fc1"], "feature_weight": 0.5, "teacher": "user"}
STEPS = 3


def _inputs(step: int) -> torch.Tensor:
    return torch.randn(4, 32, generator=torch.Generator().manual_seed(step))


def _losses(model: torch.nn.Module, teacher: torch.nn.Module, full) -> dict:
    """Train ``STEPS`` steps on the distillation term alone; the losses, the teacher before and after."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = [full(p).detach().clone() for p in teacher.parameters()]
    pruner = prune(model, CONFIG, optimizer=opt, distillation=DISTILL, teacher=teacher)
    losses = []
    for step in range(STEPS):
        x = _inputs(step)                       # every rank the whole batch: the single-process loss
        loss = pruner.distill_loss(x, model(x))
        losses.append(float(loss.detach()))
        opt.zero_grad()
        loss.backward()
        opt.step()
        pruner.step()
    return {"losses": losses, "unchanged": all(torch.equal(full(p), b) for p, b in zip(teacher.parameters(), before)),
            "frozen": not teacher.training and not any(p.requires_grad or p.grad is not None
                                                       for p in teacher.parameters()),
            "local_rows": [tuple(p.to_local().shape) if hasattr(p, "to_local") else tuple(p.shape)
                           for p in teacher.parameters()][:1]}


def sharded_run(rank: int, world: int) -> dict:
    torch.manual_seed(0)
    model, teacher = shard_model(Net()), shard_model(Net())
    with torch.no_grad():                       # the teacher: the model's shards as pruning begins
        for t, s in zip(teacher.parameters(), model.parameters()):
            t.to_local().copy_(s.to_local())
    try:
        prune(model, CONFIG, distillation={})
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    return {**_losses(model, teacher, lambda p: p.full_tensor()), "refused": refused}


def test_fsdp_sharded_teacher_gives_the_single_process_losses(tmp_path):
    torch.manual_seed(0)
    model = Net()
    teacher = Net()
    teacher.load_state_dict(model.state_dict())
    want = _losses(model, teacher, lambda p: p)
    assert want["losses"][0] == 0.0 and want["losses"][1] > 0       # step 0: no mask yet, student == teacher
    for rank, got in enumerate(spawn(sharded_run, 2, tmp_path)):
        assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(got["losses"], want["losses"])), \
            (rank, got["losses"], want["losses"])
        assert got["unchanged"] and got["frozen"]
        assert got["local_rows"] == [(4, 2, 3, 3)]        # conv.weight (8, 2, 3, 3): each rank holds half the teacher
        assert "FSDP2 modules cannot be deep-copied" in got["refused"]
