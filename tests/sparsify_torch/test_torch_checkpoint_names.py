"""A model being pruned saves like the plain model (issue 57): ``model.state_dict()`` holds the plain names with
the masked values, plain state dicts load into it, and with ``Pruner.state_dict()`` a resume is exact.
(``sparsify_torch.parametrization.register_mask``; ``stored`` in ``Pruner.state_dict``.)"""
from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from sparsify_torch import prune
from sparsify_torch.optimizer_order import unwrap_optimizer
from torch_helpers import batch, cnn, digits, mlp, train_step

GRADUAL = {"target_sparsity": 0.75, "start_step": 0, "end_step": 12, "pruning_frequency": 4,
           "excluded_op_names": ["head"]}


def _roundtrip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _train(model, opt, pruner, steps, x, y):
    for step in steps:
        train_step(model, opt, *batch(x, y, step))
        pruner.step()


def test_state_dict_mid_pruning_loads_strictly_into_a_plain_model_with_the_masked_values():
    x, y = digits(256)
    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    pruner = prune(model, GRADUAL)
    _train(model, opt, pruner, range(1, 7), x, y)
    assert pruner.done_step == 4 and 0 < pruner.total_sparsity() < 0.75
    sd = _roundtrip(model.state_dict())
    plain = cnn(seed=3)
    assert list(sd) == list(plain.state_dict())            # the plain keys, in the plain model's order
    result = plain.load_state_dict(sd, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    masks = pruner.masks()
    for n in ("conv1.weight", "conv2.weight", "fc.weight"):
        layer = n.split(".")[0]
        assert torch.equal(getattr(plain, layer).weight, getattr(model, layer).weight), n
        assert torch.all(getattr(plain, layer).weight[~masks[n]] == 0), n
        assert not torch.all(getattr(model, layer).parametrizations.weight.original[~masks[n]] == 0), n
    assert torch.equal(plain(x), model(x))


def test_a_plain_state_dict_from_before_pruning_loads_into_a_model_being_pruned():
    dense = mlp(seed=1)
    model = mlp()
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    masks = pruner.masks()
    original = model.fc1.parametrizations.weight.original
    assert model.load_state_dict(dense.state_dict(), strict=True).missing_keys == []
    assert model.fc1.parametrizations.weight.original is original          # loaded in place
    assert torch.equal(original, dense.fc1.weight)                          # the values, under the same masks
    assert all(torch.equal(pruner.masks()[n], masks[n]) for n in masks)
    assert torch.equal(model.fc1.weight, dense.fc1.weight * masks["fc1.weight"])
    assert torch.equal(model.fc1.bias, dense.fc1.bias)


def test_old_state_dicts_with_parametrization_keys_still_load_masks_included():
    model = mlp()
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    old = {}
    for name, layer in model.named_children():
        if hasattr(layer, "parametrizations"):
            old[f"{name}.bias"] = layer.bias.detach().clone()
            old[f"{name}.parametrizations.weight.original"] = layer.parametrizations.weight.original.detach() + 1
            old[f"{name}.parametrizations.weight.0.mask"] = torch.ones_like(layer.parametrizations.weight[0].mask)
    other = mlp(seed=2)
    other_pruner = prune(other, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    other.load_state_dict(old)
    assert torch.equal(other.fc2.weight, model.fc2.parametrizations.weight.original + 1)
    assert other_pruner.sparsity() == {"fc1.weight": 0.0, "fc2.weight": 0.0, "head.weight": 0.0}
    assert pruner.sparsity()["fc1.weight"] == 0.5


@pytest.mark.parametrize("cfg", [
    {"monotone": False},                                         # pruned weights come back by their kept values
    {"pruned_gradient": "straight_through", "pruned_decay": 1e-3},   # pruned weights train
    {"criterion": "snip_momentum"},
], ids=["monotone_false", "straight_through", "snip_momentum"])
def test_resume_from_plain_model_state_and_pruner_state_is_bit_exact(cfg):
    x, y = digits(256)
    config = {**GRADUAL, "pruning_frequency": 2, **cfg}

    def fresh():
        model = mlp()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        return model, opt, prune(model, config, optimizer=opt)

    m1, o1, p1 = fresh()
    _train(m1, o1, p1, range(1, 15), x, y)
    m2, o2, p2 = fresh()
    _train(m2, o2, p2, range(1, 8), x, y)
    saved = _roundtrip({"model": m2.state_dict(), "opt": o2.state_dict(), "pruner": p2.state_dict()})
    assert not any("parametrizations" in k for k in saved["model"])
    assert any(bool(v.ne(0).any()) for v in saved["pruner"]["stored"].values())   # values under the masks
    m3, o3, p3 = fresh()
    m3.load_state_dict(saved["model"], strict=True)
    o3.load_state_dict(saved["opt"])
    p3.load_state_dict(saved["pruner"])
    assert p3.step_count == 7
    for n in p2.names:
        layer = n.split(".")[0]
        assert torch.equal(getattr(m3, layer).parametrizations.weight.original,
                           getattr(m2, layer).parametrizations.weight.original), n
    _train(m3, o3, p3, range(8, 15), x, y)
    assert p3.step_count == p1.step_count == 14
    for (k, a), (k3, b) in zip(m1.state_dict().items(), m3.state_dict().items()):
        assert k == k3 and torch.equal(a, b), k
    assert all(torch.equal(p1.masks()[n], p3.masks()[n]) for n in p1.names)
    assert p1.sparsity() == p3.sparsity()


def test_stored_values_in_the_pruner_state_are_checked_before_anything_changes():
    model = mlp()
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    good = pruner.state_dict()
    assert sorted(good["stored"]) == pruner.names
    assert torch.equal(good["stored"]["fc1.weight"],
                       model.fc1.parametrizations.weight.original.detach() * ~pruner.masks()["fc1.weight"])
    before = {n: t.clone() for n, t in pruner.state_dict()["stored"].items()}
    with pytest.raises(ValueError, match=r"state\['stored'\]\['fc1.weight'\] must be a float tensor of shape "
                                         r"\(32, 64\), got torch.float32 tensor of shape \(2, 2\)"):
        pruner.load_state_dict({**good, "stored": {**good["stored"], "fc1.weight": torch.ones(2, 2)}})
    with pytest.raises(ValueError, match=r"state\['stored'\] must be a dict of tensors keyed by pruned weight "
                                         r"name \(of \['fc1.weight', 'fc2.weight', 'head.weight'\]\), got \['x'\]"):
        pruner.load_state_dict({**good, "stored": {"x": torch.ones(1)}})
    assert all(torch.equal(pruner.state_dict()["stored"][n], v) for n, v in before.items())
    legacy = {k: v for k, v in good.items() if k != "stored"}     # a state saved before 'stored' existed
    pruner.load_state_dict(legacy)
    assert all(torch.equal(pruner.state_dict()["stored"][n], v) for n, v in before.items())


def test_multihead_attention_and_transposed_conv_save_plain_names():
    torch.manual_seed(0)
    model = nn.Sequential(nn.MultiheadAttention(8, 2), nn.ConvTranspose2d(4, 6, 2, groups=2),
                          nn.MultiheadAttention(4, 1, kdim=3, vdim=5))
    plain_keys = list(model.state_dict())
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    assert len(pruner.names) == 9        # q/k/v thirds, out_proj, the conv, q/k/v_proj_weight, out_proj
    sd = model.state_dict()
    assert list(sd) == plain_keys
    assert torch.equal(sd["0.in_proj_weight"], model[0].in_proj_weight)
    assert float((sd["0.in_proj_weight"] == 0).float().mean()) == 0.5
    assert torch.equal(sd["2.k_proj_weight"], model[2].k_proj_weight)
    torch.manual_seed(1)
    plain = nn.Sequential(nn.MultiheadAttention(8, 2), nn.ConvTranspose2d(4, 6, 2, groups=2),
                          nn.MultiheadAttention(4, 1, kdim=3, vdim=5))
    plain.load_state_dict(sd, strict=True)
    assert torch.equal(plain[1].weight, model[1].weight)


def test_deep_copy_and_keep_vars_and_remove():
    model = mlp()
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    clone = copy.deepcopy(model)
    clone.fc1.parametrizations.weight.original.data.fill_(2.0)        # the copy's hooks read the copy
    assert torch.all(clone.state_dict()["fc1.weight"][pruner.masks()["fc1.weight"]] == 2.0)
    assert not torch.equal(model.state_dict()["fc1.weight"], clone.state_dict()["fc1.weight"])
    kept = model.state_dict(keep_vars=True)
    assert kept["fc1.bias"] is model.fc1.bias and not kept["fc1.weight"].requires_grad
    pruner.remove()
    assert list(model.state_dict()) == list(mlp().state_dict())
    assert model.state_dict()["fc1.weight"] is not None and model.load_state_dict(mlp(seed=4).state_dict())


def test_prune_unwraps_an_optimizer_held_as_dot_optimizer():
    class Wrapped:                    # what accelerate's AcceleratedOptimizer and Lightning's LightningOptimizer do
        def __init__(self, optimizer):
            self.optimizer = optimizer

    x, y = digits(128)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    pruner = prune(model, {**GRADUAL, "regrowth": "rigl"}, optimizer=Wrapped(Wrapped(opt)))
    assert pruner.optimizer is opt and unwrap_optimizer(None) is None
    _train(model, opt, pruner, range(1, 6), x, y)      # an update at 4; step 5 freezes what it pruned
    assert opt.state[model.fc1.parametrizations.weight.original]["momentum_buffer"][~pruner.masks()["fc1.weight"]] \
        .eq(0).all()
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer, got Wrapped"):
        prune(mlp(), GRADUAL, optimizer=Wrapped("sgd"))


def test_tied_weights_save_under_both_plain_names():
    torch.manual_seed(0)
    emb, head = nn.Embedding(8, 4), nn.Linear(4, 8, bias=False)
    head.weight = emb.weight                            # one parameter, read by two layers
    model = nn.Sequential(emb, head)
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    assert pruner.names == ["0.weight"]                 # one weight, one mask, the tie kept
    sd = model.state_dict()
    assert list(sd) == ["0.weight", "1.weight"] and torch.equal(sd["0.weight"], sd["1.weight"])
    assert float((sd["1.weight"] == 0).float().mean()) == 0.5
    plain = nn.Sequential(nn.Embedding(8, 4), nn.Linear(4, 8, bias=False))
    plain[1].weight = plain[0].weight
    plain.load_state_dict(sd, strict=True)
    ids = torch.arange(8)
    assert torch.equal(plain(ids), model(ids))
