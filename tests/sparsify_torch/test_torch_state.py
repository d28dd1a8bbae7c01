"""State: Pruner/model state dicts, torch.save, deepcopy, torch.compile, resume, remove()."""
from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from sparsify_torch import prune
from torch_helpers import batch, cnn, digits, mlp, train_step

CFG = {"target_sparsity": 0.75, "start_step": 0, "end_step": 20, "pruning_frequency": 5, "excluded_op_names": ["head"]}


def _roundtrip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _trained(steps=12, cfg=CFG, model_fn=mlp):
    x, y = digits(256)
    model = model_fn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    pruner = prune(model, cfg)
    for step in range(1, steps + 1):
        train_step(model, opt, *batch(x, y, step))
        pruner.step()
    return model, opt, pruner, x


def test_pruner_state_dict_roundtrip_weights_only():
    model, _, pruner, _ = _trained()
    state = _roundtrip(pruner.state_dict())
    assert state["step"] == 12 and state["done_step"] == 10 and state["names"] == pruner.names
    assert state["config"]["target_sparsity"] == 0.75
    fresh = mlp(seed=5)
    other = prune(fresh, CFG)
    other.load_state_dict(state)
    assert other.step_count == 12 and other.done_step == 10
    for n in pruner.names:
        assert torch.equal(other.masks()[n], pruner.masks()[n])
    # the loaded pruner continues on the same schedule
    for _ in range(3):
        other.step()
        pruner.step()
    assert other.done_step == pruner.done_step == 15
    assert other.sparsity() == pruner.sparsity()


def test_model_state_dict_roundtrips_into_fresh_pruned_model():
    """The model's state dict holds the plain names (issue 57); with the pruner's it restores a pruned model."""
    model, _, pruner, x = _trained()
    sd = _roundtrip(model.state_dict())
    assert list(sd) == list(mlp().state_dict())
    fresh = mlp(seed=7)
    fresh_pruner = prune(fresh, CFG)
    mask_buffer = fresh.fc1.parametrizations.weight[0].mask
    fresh.load_state_dict(sd)
    fresh_pruner.load_state_dict(_roundtrip(pruner.state_dict()))
    assert fresh.fc1.parametrizations.weight[0].mask is mask_buffer      # loaded in place
    assert torch.equal(fresh(x), model(x))
    assert fresh_pruner.sparsity() == pruner.sparsity()
    for n in pruner.names:
        layer = n.split(".")[0]
        assert torch.equal(getattr(fresh, layer).parametrizations.weight.original,
                           getattr(model, layer).parametrizations.weight.original), n


def test_deepcopy_of_pruned_model():
    model, _, pruner, x = _trained()
    clone = copy.deepcopy(model)
    assert torch.equal(clone(x), model(x))
    assert parametrize.is_parametrized(clone.fc1, "weight")
    before = pruner.sparsity()
    clone.fc1.parametrizations.weight[0].mask.fill_(1)                   # independent buffers
    assert pruner.sparsity() == before and before["fc1.weight"] == pytest.approx(0.65625, abs=1 / 2048)
    assert not torch.equal(clone.fc1.weight, model.fc1.weight)
    model.zero_grad(set_to_none=True)
    clone(x).sum().backward()
    assert model.fc1.parametrizations.weight.original.grad is None
    assert clone.fc1.parametrizations.weight.original.grad is not None


@pytest.mark.slow
def test_torch_compile_forward_follows_in_place_mask_updates():
    # aot_eager: dynamo + AOTAutograd without inductor's C++ codegen, which takes ~17 s on this CPU.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 2, "pruning_frequency": 1})
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(3, 8)
    assert torch.equal(compiled(x), model(x))
    pruner.step()
    pruner.step()
    assert pruner.sparsity()["0.weight"] == 0.5
    assert torch.equal(compiled(x), model(x))


@pytest.mark.parametrize("criterion", ["magnitude", "snip_momentum"])
def test_interrupted_and_resumed_run_matches_uninterrupted(criterion, tmp_path):
    x, y = digits(256)
    cfg = {**CFG, "criterion": criterion, "pruning_frequency": 4, "end_step": 16}

    def fresh():
        model = cnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        return model, opt, prune(model, cfg)

    def run(model, opt, pruner, steps):
        for step in steps:
            train_step(model, opt, *batch(x, y, step))
            pruner.step()

    m1, o1, p1 = fresh()
    run(m1, o1, p1, range(1, 19))

    m2, o2, p2 = fresh()
    run(m2, o2, p2, range(1, 10))
    torch.save({"model": m2.state_dict(), "opt": o2.state_dict(), "pruner": p2.state_dict()}, tmp_path / "ck.pt")
    del m2, o2, p2
    ck = torch.load(tmp_path / "ck.pt", weights_only=True)
    m3, o3, p3 = fresh()
    m3.load_state_dict(ck["model"])
    o3.load_state_dict(ck["opt"])
    p3.load_state_dict(ck["pruner"])
    run(m3, o3, p3, range(10, 19))

    assert p3.step_count == p1.step_count == 18
    for (k, a), (_, b) in zip(m1.state_dict().items(), m3.state_dict().items()):
        assert torch.equal(a, b), k
    assert p1.sparsity() == p3.sparsity()


def test_remove_bakes_masks_into_the_same_parameters():
    model, opt, pruner, x = _trained()
    out = model(x)
    originals = {n: getattr(model, n.split(".")[0]).parametrizations.weight.original for n in pruner.names}
    masks = pruner.masks()
    assert pruner.remove() is model
    for n, p in originals.items():
        mod = getattr(model, n.split(".")[0])
        assert not parametrize.is_parametrized(mod)
        assert mod.weight is p and isinstance(mod.weight, nn.Parameter)
        assert torch.all(mod.weight[~masks[n]] == 0)
    assert torch.allclose(model(x), out)
    sd = _roundtrip(model.state_dict())
    assert set(sd) == set(mlp().state_dict())
    plain = mlp(seed=3)
    plain.load_state_dict(sd)
    assert torch.allclose(plain(x), out)
    train_step(model, opt, *batch(x, torch.zeros(len(x), dtype=torch.long), 0))   # still trains
    with pytest.raises(RuntimeError, match="remove"):
        pruner.step()
    with pytest.raises(RuntimeError, match="remove"):
        pruner.remove()


def test_model_moved_to_another_dtype_after_prune_keeps_pruning():
    x, y = digits(64)
    model = mlp()
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2})
    model.double()                                        # buffers are replaced, parameters converted in place
    assert model.fc1.parametrizations.weight[0].mask.dtype == torch.float64
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 5):
        train_step(model, opt, x.double(), y)
        pruner.step()
    assert pruner.sparsity()["fc1.weight"] == 0.5
    assert model.fc1.weight.dtype == torch.float64 and int((model.fc1.weight == 0).sum()) == 1024
    assert repr(pruner) == "Pruner(step=4, pattern='1x1', scope='local', layers=3, sparsity=0.500)"


def test_figures_and_masks_after_remove_are_the_last_masks():
    """After remove() the pruner still reports what it left: masks, sparsity, repr, state_dict."""
    model = nn.Sequential(nn.MultiheadAttention(8, 2), nn.ConvTranspose2d(4, 6, 2, groups=2))
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    masks, sparsity, total, state = pruner.masks(), pruner.sparsity(), pruner.total_sparsity(), pruner.state_dict()
    text = repr(pruner)
    pruner.remove()
    after = pruner.masks()
    assert list(after) == list(masks) == ["0.in_proj_weight.q", "0.in_proj_weight.k", "0.in_proj_weight.v",
                                          "0.out_proj.weight", "1.weight"]
    for n, m in masks.items():
        assert after[n].dtype == torch.bool and torch.equal(after[n], m), n
    assert pruner.sparsity() == sparsity and all(v == 0.5 for v in sparsity.values())
    assert pruner.total_sparsity() == total == 0.5
    assert repr(pruner) == text == "Pruner(step=0, pattern='1x1', scope='local', layers=5, sparsity=0.500)"
    assert all(torch.equal(pruner.state_dict()["masks"][n], state["masks"][n]) for n in masks)
    assert torch.equal(model[1].weight != 0, masks["1.weight"])       # the layout of the torch weight
    after["1.weight"][:] = False                                       # a copy: the pruner keeps its masks
    assert pruner.sparsity() == sparsity
