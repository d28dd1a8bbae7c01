"""FSDP2 with activation criteria (gloo, 1/2/4 CPU processes): each rank's inputs, summed over the group.

Every rank forwards its share of the global batch; the masks equal the single-process
``Pruner``'s on the whole batch. Weights and inputs are small integers, so every sum of
squares is exact and the comparison is bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from sparsify.criteria import register_criterion, registered_criteria, unregister_criterion
from sparsify_torch import prune
from test_torch_fsdp import SetWeights, set_weights, spawned_runs

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")


@register_criterion("input_energy", needs=("weight", "activation"))
def input_energy(weight, activation, **_):
    """|w| times the sum of squares of its input channel (a user criterion, registered here)."""
    return abs(weight) * activation * activation


@pytest.fixture(autouse=True, scope="module")
def _forget_input_energy():
    """Registered at import (the spawned ranks import this module too); gone after this module's tests."""
    yield
    if "input_energy" in registered_criteria():     # a module importing this one shares the fixture
        unregister_criterion("input_energy")


CONFIGS = {
    "wanda_revive": {"target_sparsity": 0.5, "criterion": "wanda", "start_step": 0, "end_step": 4,
                     "pruning_frequency": 2, "monotone": False},
    "wanda_row": {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row", "start_step": 1,
                  "end_step": 5, "pruning_frequency": 2},
    "user_global": {"target_sparsity": 0.6, "criterion": "input_energy", "pruning_scope": "global",
                    "start_step": 0, "end_step": 4, "pruning_frequency": 1},
}
STEPS = 6
SHAPES = {"conv.weight": (8, 2, 3, 3), "fc.weight": (16, 8), "head.weight": (6, 16)}


class WNet(nn.Module):
    """A grouped conv (its norms differ per output row), fc and head (6 rows: 2, 2, 2, 0 on 4 ranks)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, groups=2, bias=False)
        self.fc = nn.Linear(8, 16, bias=False)
        self.head = nn.Linear(16, 6, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x.view(-1, 4, 3, 3))).flatten(1)
        return self.head(torch.relu(self.fc(x)))


def weights(step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(50 + step)
    return {n: torch.randint(-1, 2, s, generator=g).float() for n, s in SHAPES.items()}


def inputs(step: int) -> torch.Tensor:
    return torch.randint(-1, 2, (16, 36), generator=torch.Generator().manual_seed(900 + step)).float()


def shard(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard
    for m in (model.conv, model.fc, model.head):
        fully_shard(m)
    return fully_shard(model)


def full_masks(pruner) -> dict[str, np.ndarray]:
    return {n: (m.full_tensor() if hasattr(m, "full_tensor") else m).numpy().copy() for n, m in pruner.masks().items()}


def run(rank: int, world: int, key: str, ckpt: str = "", mode: str = "plain") -> dict:
    """``world`` 0: the single-process reference on the whole batch. ``mode`` "save" saves after step 3,
    "resume" loads that and runs steps 4..6."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    model = WNet()
    if world:
        model = shard(model)
    set_weights(model, weights(0))
    setter = SetWeights(model)
    pruner = prune(model, CONFIGS[key], optimizer=setter)
    part = slice(0, 16) if world == 0 else slice(rank * 16 // world, (rank + 1) * 16 // world)
    first, history, largest = 1, {}, 0.0
    if mode == "resume":
        sd = {"model": get_model_state_dict(model), "pruner": pruner.state_dict()}
        dcp.load(sd, checkpoint_id=ckpt)
        set_model_state_dict(model, sd["model"])
        pruner.load_state_dict(sd["pruner"])
        first = 4
    for step in range(first, STEPS + 1):
        with torch.no_grad():
            model(inputs(step)[part])
        setter.target = weights(step)
        setter.step()
        if world == 0:
            largest = max([largest] + [float(v.max()) for v in pruner.state_dict()["activation_sums"].values()])
        pruner.step()
        history[step] = full_masks(pruner)
        if mode == "save" and step == 3:
            with torch.no_grad():
                model(inputs(99)[part])          # inputs seen since the last update travel in the checkpoint
            dcp.save({"model": get_model_state_dict(model), "pruner": pruner.state_dict()}, checkpoint_id=ckpt)
            break
    return {"history": history, "largest_sum": largest, "type": type(pruner).__name__}


def unseen_run(rank: int, world: int) -> dict:
    """An update with no forward pass on any rank waits (on every rank); one where only rank 0 ran the head
    names every other layer, on every rank."""
    model = shard(WNet())
    pruner = prune(model, CONFIGS["wanda_revive"], optimizer=SetWeights(model))
    pruner.step()
    out = {"waited": (pruner.done_step, pruner.sparsity())}
    with torch.no_grad():
        if rank == 0:
            model.head(torch.ones(2, 16))
        else:
            model.head(torch.ones(0, 16))      # FSDP2 runs every rank's forward collectively; no rows here
    try:
        pruner.step()
        out["partial"] = "no error"
    except ValueError as e:
        out["partial"] = str(e)
    return out


def suite(rank: int, world: int, ckpt: str) -> dict:
    out = {key: run(rank, world, key) for key in CONFIGS}
    if world == 2:
        out["save"] = run(rank, world, "wanda_revive", ckpt, "save")
        out["unseen"] = unseen_run(rank, world)
    if world in (2, 4):
        out["resume"] = run(rank, world, "wanda_revive", ckpt, "resume")
    return out


def reference(key: str, mode: str = "plain") -> dict:
    """The single-process run; "resume" continues in one process the way the checkpoint resumes."""
    if mode == "plain":
        return run(0, 0, key)
    model = WNet()
    set_weights(model, weights(0))
    setter = SetWeights(model)
    pruner = prune(model, CONFIGS[key], optimizer=setter)
    history = {}
    for step in range(1, STEPS + 1):
        with torch.no_grad():
            model(inputs(step)[0:16])
            if step == 4:
                model(inputs(99)[0:16])
        setter.target = weights(step)
        setter.step()
        pruner.step()
        history[step] = full_masks(pruner)
    return {"history": history}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp_act")
    return spawned_runs(suite, tmp, str(tmp / "ckpt"), before={4: 2})


@pytest.mark.parametrize("world", [1, 2, 4])
def test_fsdp_activation_criteria_give_the_single_process_masks_of_the_global_batch(runs, world):
    for key in CONFIGS:
        want = reference(key)
        assert want["type"] == "Pruner" and 0 < want["largest_sum"] < 2 ** 24     # exact float32 sums
        assert any(not m.all() for m in want["history"][STEPS].values())
        for res in runs(world):
            got = res[key]
            assert got["type"] == "ShardedPruner"
            for step, masks in want["history"].items():
                for n, m in masks.items():
                    assert np.array_equal(got["history"][step][n], m), (key, world, step, n)


def test_fsdp_activation_sums_resume_exactly_and_reshard(runs):
    want = reference("wanda_revive", "resume")["history"]
    for world in (2, 4):
        for res in runs(world):
            for step in (4, 5, 6):
                for n, m in want[step].items():
                    assert np.array_equal(res["resume"]["history"][step][n], m), (world, step, n)


def test_fsdp_activation_criteria_wait_for_data_and_name_every_unseen_layer(runs):
    for res in runs(2):
        assert res["unseen"]["waited"] == (-1, {"conv.weight": 0.0, "fc.weight": 0.0, "head.weight": 0.0})
        assert res["unseen"]["partial"] == ("criterion 'wanda' needs the inputs of every pruned weight, but "
                                            "['conv.weight', 'fc.weight'] saw no input since the last update: run "
                                            "the model on data before the update")
