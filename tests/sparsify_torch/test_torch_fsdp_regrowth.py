"""FSDP2 with regrowth (gloo, 1/2/4 CPU processes): RigL and SET swap the same weights as the single-process Pruner.

Weights, inputs and so gradients are small integers (FSDP2 divides the reduced gradient by
a power of two), so the gradient ranking is exact and the comparison is bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

from sparsify_torch import prune
from test_torch_fsdp import SetWeights, set_weights, spawned_runs
from test_torch_fsdp_activations import WNet, _forget_input_energy, inputs, shard, weights  # noqa: F401

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

CONFIGS = {
    "rigl": {"target_sparsity": 0.5, "regrowth": "rigl", "regrowth_fraction": 0.5, "start_step": 0, "end_step": 6,
             "pruning_frequency": 2},
    "set_global": {"target_sparsity": 0.6, "regrowth": "set", "regrowth_fraction": 0.4, "pruning_scope": "global",
                   "start_step": 1, "end_step": 7, "pruning_frequency": 2, "monotone": False},
}
STEPS = 7


def run(rank: int, world: int, key: str) -> dict:
    """``world`` 0: the single-process reference on the whole batch."""
    model = WNet() if world == 0 else shard(WNet())
    set_weights(model, weights(0))
    setter = SetWeights(model)
    pruner = prune(model, CONFIGS[key], optimizer=setter)
    part = slice(0, 16) if world == 0 else slice(rank * 16 // world, (rank + 1) * 16 // world)
    full = (lambda t: t) if world == 0 else (lambda t: t.full_tensor())
    history = {}
    for step in range(1, STEPS + 1):
        setter.zero_grad()
        model(inputs(step)[part]).sum().backward()
        setter.target = weights(step)
        setter.step()
        before = {n: full(m).numpy().copy() for n, m in pruner.masks().items()}
        pruner.step()
        masks = {n: full(m).numpy().copy() for n, m in pruner.masks().items()}
        if world == 0:
            dense = {n: model.get_submodule(n.rsplit(".", 1)[0]).parametrizations.weight.original.detach().numpy().copy()
                     for n in pruner.names}
        else:
            dense = {n: w.full_tensor().numpy().copy() for n, w in pruner.dense_weights().items()}
        history[step] = {"masks": masks, "dense": dense, "before": before}
    return {"history": history, "type": type(pruner).__name__}


def no_backward_run(rank: int, world: int) -> str:
    model = shard(WNet())
    pruner = prune(model, CONFIGS["rigl"], optimizer=SetWeights(model))
    try:
        pruner.step()
    except RuntimeError as e:
        return str(e)
    return "no error"


def suite(rank: int, world: int, tmp: str) -> dict:
    out = {key: run(rank, world, key) for key in CONFIGS}
    if world == 2:
        out["no_backward"] = no_backward_run(rank, world)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp_regrow")
    return spawned_runs(suite, tmp, str(tmp))


@pytest.mark.parametrize("world", [1, 2, 4])
def test_fsdp_regrowth_swaps_the_single_process_weights(runs, world):
    for key in CONFIGS:
        want = run(0, 0, key)["history"]
        # regrowth did swap: some weight kept after an update was pruned before it, and it starts at zero
        swapped = [(s, n) for s, h in want.items() for n in h["masks"]
                   if (h["masks"][n] & ~h["before"][n]).any() and s < STEPS]
        assert swapped, key
        for res in runs(world):
            assert res[key]["type"] == "ShardedPruner"
            for step, h in want.items():
                for n in h["masks"]:
                    assert np.array_equal(res[key]["history"][step]["masks"][n], h["masks"][n]), (key, world, step, n)
                    assert np.array_equal(res[key]["history"][step]["dense"][n], h["dense"][n]), (key, world, step, n)


def test_fsdp_rigl_needs_a_backward_pass(runs):
    for res in runs(2):
        assert res["no_backward"] == ("regrowth='rigl' needs the gradient of 'conv.weight' at the update, but no "
                                      "backward pass ran since the last one: call loss.backward() before pruner.step()")
