"""Dense weights under the mask, monotone=False, straight-through gradients, regrowth, Wanda and one-shot
pruning, on small real models trained as a user trains them."""
import copy

import numpy as np
import pytest
import torch
from torch import nn

import sparsify_torch
from sparsify import PruningConfig
from sparsify.criteria import register_criterion, unregister_criterion


def _digits(n_train=1200):
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def _train(model, x, y, steps, pruner=None, opt=None, lr=1e-2):
    opt = opt or torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (64,), generator=g)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if pruner is not None:
            pruner.step()
    return opt


def _accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def test_stored_weights_stay_dense_under_the_mask_and_the_model_sees_zeros():
    lin = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, -2.0, 3.0, -4.0], [0.5, 6.0, -7.0, 8.0]]))
    pruner = sparsify_torch.prune(lin, {"target_sparsity": 0.5, "end_step": 0})
    assert lin.weight.tolist() == [[0.0, 0.0, 0.0, -4.0], [0.0, 6.0, -7.0, 8.0]]
    assert lin.parametrizations.weight.original.tolist() == [[1.0, -2.0, 3.0, -4.0], [0.5, 6.0, -7.0, 8.0]]
    pruner.remove()
    assert lin.weight.tolist() == [[0.0, 0.0, 0.0, -4.0], [0.0, 6.0, -7.0, 8.0]]   # baked


@pytest.mark.parametrize("monotone", [True, False])
def test_a_pruned_weight_comes_back_only_when_monotone_is_false(monotone):
    lin = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    cfg = {"sparsity_decay_type": "constant", "target_sparsity": 0.5, "start_step": 0, "end_step": 2,
           "pruning_frequency": 1, "monotone": monotone}
    pruner = sparsify_torch.prune(lin, cfg)
    assert pruner.masks()["weight"].tolist() == [[False, False, True, True]]
    with torch.no_grad():          # the kept weights shrink below the stored values of the pruned ones
        lin.parametrizations.weight.original.copy_(torch.tensor([[1.0, 2.0, 0.1, 0.2]]))
    pruner.step()
    expected = [[False, False, True, True]] if monotone else [[True, True, False, False]]
    assert pruner.masks()["weight"].tolist() == expected


@pytest.mark.parametrize("mode,expect_grad", [("none", False), ("straight_through", True)])
def test_pruned_gradient_none_or_straight_through(mode, expect_grad):
    lin = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    sparsify_torch.prune(lin, {"target_sparsity": 0.5, "end_step": 0, "pruned_gradient": mode})
    lin(torch.ones(1, 4)).sum().backward()
    grad = lin.parametrizations.weight.original.grad
    assert grad[0, 2:].tolist() == [1.0, 1.0]
    assert bool((grad[0, :2] != 0).all()) is expect_grad


def _conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv1d(4, 8, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 9, 4))


@pytest.mark.parametrize("decay", [0.0, 0.3])
def test_sr_ste_sgd_step_moves_every_weight_by_lr_times_grad_plus_decay(decay):
    """SR-STE (pruned_decay): one plain SGD step on a small conv net moves the dense weight by
    lr * (g + decay * w * (1 - mask)), g the gradient of the masked weight the model computed with."""
    model, lr = _conv_net(), 0.1
    x, y = torch.randn(16, 4, 20), torch.randint(0, 4, (16,))
    reference = _conv_net()               # the same initial weights, unpruned: masked by hand below
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    cfg = {"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 0, "pruning_frequency": 1,
           "pruned_gradient": "straight_through", "pruned_decay": decay, "monotone": False}
    pruner = sparsify_torch.prune(model, cfg, optimizer=opt)
    masks = {n: m.to(torch.float32) for n, m in pruner.masks().items()}
    assert set(masks) == {"0.weight", "3.weight"} and all(float(m.mean()) == 0.5 for m in masks.values())
    dense = {n: model.get_submodule(n[:-7]).parametrizations.weight.original.detach().clone() for n in masks}
    with torch.no_grad():
        for n, m in masks.items():
            reference.get_submodule(n[:-7]).weight.mul_(m)
    nn.functional.cross_entropy(reference(x), y).backward()
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    for n, m in masks.items():
        g = reference.get_submodule(n[:-7]).weight.grad
        want = dense[n] - lr * (g + decay * dense[n] * (1 - m))
        got = model.get_submodule(n[:-7]).parametrizations.weight.original.detach()
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
        pruned = (m == 0) & (dense[n] != 0)
        assert bool(pruned.any())


def test_sr_ste_refuses_bad_decays():
    from sparsify_torch.parametrization import MaskParametrization

    with pytest.raises(ValueError, match=r"pruned_decay=0.001 decays the pruned weights .*pruned_gradient='none'"):
        sparsify_torch.prune(nn.Linear(4, 2), {"pruned_decay": 1e-3})
    with pytest.raises(ValueError, match="pruned_decay must be a finite number >= 0, got -1"):
        sparsify_torch.prune(nn.Linear(4, 2), {"pruned_gradient": "straight_through", "pruned_decay": -1})
    mask = torch.ones(2)
    with pytest.raises(ValueError, match=r"pruned_decay=0.5 needs straight_through=True"):
        MaskParametrization(mask, pruned_decay=0.5)
    with pytest.raises(ValueError, match="pruned_decay must be a finite number >= 0, got nan"):
        MaskParametrization(mask, straight_through=True, pruned_decay=float("nan"))
    with pytest.raises(TypeError, match="pruned_decay must be a number >= 0, got '0.1'"):
        MaskParametrization(mask, straight_through=True, pruned_decay="0.1")


def test_sr_ste_pruner_state_survives_a_round_trip_and_refuses_another_decay():
    cfg = {"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 4, "pruning_frequency": 1,
           "pruned_gradient": "straight_through", "pruned_decay": 2e-4, "monotone": False}
    pruner = sparsify_torch.prune(nn.Linear(8, 4), cfg)
    pruner.step()
    state = pruner.state_dict()
    assert state["config"]["pruned_decay"] == 2e-4
    again = sparsify_torch.prune(nn.Linear(8, 4), cfg)
    again.load_state_dict(state)
    assert again.step_count == 1 and again.config.pruned_decay == 2e-4
    other = sparsify_torch.prune(nn.Linear(8, 4), {**cfg, "pruned_decay": 0.0})
    with pytest.raises(ValueError, match="pruned_decay"):
        other.load_state_dict(state)


@pytest.mark.parametrize("method", ["rigl", "set"])
def test_regrowth_trains_at_exact_sparsity_and_grown_weights_start_at_zero(method):
    x, y, xt, yt = _digits()
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    cfg = {"sparsity_decay_type": "constant", "target_sparsity": 0.8, "start_step": 0, "end_step": 60,
           "pruning_frequency": 20, "regrowth": method, "regrowth_fraction": 0.3}
    pruner = sparsify_torch.prune(model, cfg, optimizer=opt)
    seen = []
    original_write = pruner.write_update  # observe what each update writes, as a user's logger would

    def spy(update):
        original_write(update)
        seen.append({n: g.copy() for n, g in update.grown.items()})
    pruner.write_update = spy
    _train(model, x, y, 100, pruner, opt)
    # RigL waits for a backward pass, so its step-0 update runs at the first step; SET's runs in prune()
    grown = [sum(int(g.sum()) for g in s.values()) for s in seen]
    assert len(grown) == (4 if method == "rigl" else 3)
    assert all(n > 0 for n in grown[:-1]) and grown[-1] == 0         # the fraction is 0 at end_step
    assert pruner.sparsity() == {"0.weight": pytest.approx(0.8, abs=1e-3), "2.weight": pytest.approx(0.8, abs=1e-2)}
    assert _accuracy(model, xt, yt) > 0.7          # it learns (chance: 0.1)


def test_grown_entries_are_zero_in_the_weight_and_the_optimizer_state():
    lin = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    opt = torch.optim.Adam(lin.parameters(), lr=0.1)
    cfg = {"sparsity_decay_type": "constant", "target_sparsity": 0.5, "start_step": 1, "end_step": 10,
           "pruning_frequency": 5, "regrowth": "rigl", "regrowth_fraction": 0.5}
    pruner = sparsify_torch.prune(lin, cfg, optimizer=opt)
    lin(torch.tensor([[0.0, 5.0, 1.0, 1.0]])).sum().backward()     # dense gradient: the input
    opt.step()
    opt.zero_grad()
    pruner.step()                                                  # step 1: prune 1.0, 2.0; drop 3.0, grow index 1
    assert pruner.masks()["weight"].tolist() == [[False, True, False, True]]
    original = lin.parametrizations.weight.original
    assert original[0, 1].item() == 0.0
    assert opt.state[original]["exp_avg"][0, 1].item() == 0.0 and opt.state[original]["exp_avg_sq"][0, 1].item() == 0.0


def test_regrowth_needs_the_optimizer():
    with pytest.raises(ValueError, match="pass the optimizer"):
        sparsify_torch.prune(nn.Linear(4, 4), {"regrowth": "set"})
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        sparsify_torch.prune(nn.Linear(4, 4), {}, optimizer="adam")


def test_wanda_masks_follow_the_input_norms_literal():
    lin = nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]))
    pruner = sparsify_torch.prune(lin, {"criterion": "wanda", "target_sparsity": 0.5, "end_step": 0,
                                        "pruning_scope": "row"})
    assert pruner.masks()["weight"].all()              # waits for the inputs
    lin(torch.tensor([[10.0, 0.0, 0.1], [0.0, 0.0, 0.1]]))   # norms 10, 0, 0.141
    pruner.step()
    # row 0 scores 10, 0, 0.42 -> prune 1 of 3 (1.5 -> 1); row 1 scores 30, 0, 0.14 -> prune 1
    assert pruner.masks()["weight"].tolist() == [[True, False, True], [True, False, True]]


def test_wanda_update_waits_for_inputs_and_names_every_layer_without_any():
    model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 4), nn.Linear(4, 2))
    pruner = sparsify_torch.prune(model, {"criterion": "wanda", "target_sparsity": 0.5, "start_step": 0,
                                          "end_step": 2, "pruning_frequency": 1})
    pruner.step(2)                                     # no input seen: the updates wait, at any step
    assert pruner.done_step == -1 and pruner.total_sparsity() == 0.0
    model[0](torch.ones(1, 2))                        # only the first layer ran
    with pytest.raises(ValueError) as err:
        pruner.step()
    assert str(err.value) == ("criterion 'wanda' needs the inputs of every pruned weight, but ['2.weight', "
                              "'3.weight'] saw no input since the last update: run the model on data before the update")
    assert pruner.step_count == 2 and pruner.done_step == -1      # a failed step changes nothing
    model(torch.ones(1, 2))
    pruner.step()
    assert pruner.done_step == 3 and pruner.total_sparsity() == 0.5


def test_wanda_on_grouped_conv_uses_each_group_s_channels():
    conv = nn.Conv1d(4, 4, 1, groups=2, bias=False)
    with torch.no_grad():
        conv.weight.fill_(1.0)
    pruner = sparsify_torch.prune(conv, {"criterion": "wanda", "target_sparsity": 0.5, "end_step": 0,
                                         "pruning_scope": "row"})
    conv(torch.tensor([[[1.0], [2.0], [4.0], [3.0]]]))
    pruner.step()
    # rows 0, 1 read channels 0, 1 (norms 1, 2); rows 2, 3 read channels 2, 3 (norms 4, 3)
    assert pruner.masks()["weight"][:, :, 0].tolist() == [[False, True], [False, True], [True, False], [True, False]]


def test_wanda_refuses_layers_without_input_channels():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"\['0.weight'\] are not Linear or convolution weights"):
        sparsify_torch.prune(model, {"criterion": "wanda"})


@pytest.mark.slow
def test_oneshot_wanda_keeps_more_accuracy_than_magnitude_on_a_trained_mlp():
    x, y, xt, yt = _digits()
    acc = {"magnitude": [], "wanda": [], "magnitude 2:4": [], "wanda 2:4": []}
    configs = {"magnitude": {"target_sparsity": 0.5}, "wanda": {"target_sparsity": 0.5, "criterion": "wanda",
                                                                "pruning_scope": "row"},
               "magnitude 2:4": {"pattern": "2:4"}, "wanda 2:4": {"pattern": "2:4", "criterion": "wanda"}}
    for seed in range(5):
        model = _mlp(seed)
        _train(model, x, y, 600)
        for name, cfg in configs.items():
            pruned = sparsify_torch.prune_oneshot(copy.deepcopy(model), cfg, [x[:256]])
            assert float((pruned[0].weight == 0).float().mean()) == 0.5
            acc[name].append(_accuracy(pruned, xt, yt))
    mean = {k: float(np.mean(v)) for k, v in acc.items()}
    assert mean["wanda"] > mean["magnitude"] and mean["wanda 2:4"] > mean["magnitude 2:4"], mean


def test_oneshot_takes_the_target_as_given_and_refuses_gradient_criteria():
    model = _mlp()
    sparsify_torch.prune_oneshot(model, PruningConfig(target_sparsity=0.75, start_step=500, end_step=900))
    assert float((model[0].weight == 0).float().mean()) == 0.75
    assert not any("parametrizations" in n for n, _ in model.named_parameters())
    with pytest.raises(ValueError, match="one-shot pruning runs no backward pass"):
        sparsify_torch.prune_oneshot(_mlp(), {"criterion": "snip"})
    with pytest.raises(ValueError, match="pass calibration batches"):
        sparsify_torch.prune_oneshot(_mlp(), {"criterion": "wanda"})


def test_a_criterion_registered_in_user_code_works_in_torch():
    @register_criterion("test_torch_distance", needs=("weight",))
    def distance(weight, **_):
        return abs(weight - 0.1)
    try:
        lin = nn.Linear(4, 1, bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.tensor([[0.1, 1.0, 0.2, -0.3]]))
        pruner = sparsify_torch.prune(lin, {"criterion": "test_torch_distance", "target_sparsity": 0.5, "end_step": 0})
        assert pruner.masks()["weight"].tolist() == [[False, True, False, True]]
    finally:
        unregister_criterion("test_torch_distance")


def test_regrowth_resumes_bit_exactly():
    x, y, _, _ = _digits()
    cfg = {"sparsity_decay_type": "constant", "target_sparsity": 0.8, "start_step": 0, "end_step": 60,
           "pruning_frequency": 10, "regrowth": "set"}

    def run(split):
        model = _mlp(3)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        pruner = sparsify_torch.prune(model, cfg, optimizer=opt)
        _train(model, x, y, split, pruner, opt)
        state = copy.deepcopy((model.state_dict(), opt.state_dict(), pruner.state_dict()))
        model2 = _mlp(4)
        opt2 = torch.optim.Adam(model2.parameters(), lr=1e-2)
        pruner2 = sparsify_torch.prune(model2, cfg, optimizer=opt2)
        model2.load_state_dict(state[0])
        opt2.load_state_dict(state[1])
        pruner2.load_state_dict(state[2])
        return model2, pruner2, opt2

    ref = _mlp(3)
    opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    pr = sparsify_torch.prune(ref, cfg, optimizer=opt)
    _train(ref, x, y, 35, pr, opt)
    model2, pruner2, opt2 = run(35)
    for a, b in zip(ref.state_dict().values(), model2.state_dict().values()):
        assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(pr.masks().values(), pruner2.masks().values()))


def test_the_torch_pruner_implements_the_adapter_contract():
    from sparsify.adapter import ActivationReader, GradientReader, MaskWriter, WeightReader
    pruner = sparsify_torch.prune(_mlp(), {"end_step": 0})
    assert all(isinstance(pruner, kind) for kind in (WeightReader, GradientReader, ActivationReader, MaskWriter))


def test_wanda_resumes_bit_exactly_with_the_inputs_seen_since_the_last_update():
    x, y, _, _ = _digits()
    cfg = {"criterion": "wanda", "target_sparsity": 0.6, "start_step": 0, "end_step": 40, "pruning_frequency": 10}

    def fresh(seed):
        model = _mlp(seed)
        return model, sparsify_torch.prune(model, cfg)

    ref, pr = fresh(5)
    opt = _train(ref, x, y, 15, pr)
    state = copy.deepcopy((ref.state_dict(), opt.state_dict(), pr.state_dict()))
    assert set(state[2]["activation_sums"]) == {"0.weight", "2.weight"}
    _train(ref, x, y, 10, pr, opt)          # crosses the update at step 20

    model, pruner = fresh(6)
    opt2 = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.load_state_dict(state[0])
    opt2.load_state_dict(state[1])
    pruner.load_state_dict(state[2])
    _train(model, x, y, 10, pruner, opt2)
    assert all(torch.equal(a, b) for a, b in zip(pr.masks().values(), pruner.masks().values()))
    bad = dict(state[2], activation_sums={"0.weight": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"activation sums of '0.weight' must be a tensor of shape \(64,\)"):
        pruner.load_state_dict(bad)
