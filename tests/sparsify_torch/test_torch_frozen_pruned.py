"""sparsify_torch.frozen_pruned: with pruned_gradient="none" pruned weights and their optimizer state do not move."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import sparsify_torch
from sparsify_torch.frozen_pruned import FrozenPruned, PrunedParam

OPTIMIZERS = {
    "sgd_momentum_wd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.05),
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.05, weight_decay=0.05),
    "adam_l2": lambda params: torch.optim.Adam(params, lr=0.05, weight_decay=0.05, amsgrad=True),
}


def _train(make_opt, pruned_gradient: str, pass_optimizer: bool, steps: int = 6):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = make_opt(model.parameters())
    pruner = sparsify_torch.prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0,
                                          "pruned_gradient": pruned_gradient},
                                  optimizer=opt if pass_optimizer else None)
    original = model[0].parametrizations.weight.original
    pruned = ~pruner.masks()["0.weight"]
    before = original.detach().clone()
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        pruner.step()
    return pruner, opt, original, pruned, before


@pytest.mark.parametrize("pass_optimizer", [True, False])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_pruned_values_and_their_optimizer_state_do_not_move(name, pass_optimizer):
    pruner, opt, original, pruned, before = _train(OPTIMIZERS[name], "none", pass_optimizer)
    assert int(pruned.sum()) == 64                                    # the 16x8 layer: 64 pruned
    assert torch.equal(original.detach()[pruned], before[pruned])    # bit for bit, 6 steps
    assert bool((original.detach()[~pruned] != before[~pruned]).all())        # the kept ones trained
    states = [v for v in opt.state[original].values() if v.shape == original.shape]
    assert states and all(bool((s[pruned] == 0).all()) for s in states)
    pruner.remove()


def test_straight_through_pruned_weights_are_stepped_like_any_weight():
    _, _, original, pruned, before = _train(OPTIMIZERS["sgd_momentum_wd"], "straight_through", True)
    assert bool((original.detach()[pruned] != before[pruned]).all())


def test_remove_drops_the_hooks():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, weight_decay=0.5)
    sparsify_torch.prune(lin, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}, optimizer=opt).remove()
    before = lin.weight.detach().clone()
    lin.weight.grad = torch.zeros_like(lin.weight)
    opt.step()
    assert torch.allclose(lin.weight.detach(), before * 0.95) and int((lin.weight == 0).sum()) == 8   # no freezing


def test_monotone_false_revives_the_frozen_values_with_zero_state_as_the_tf_writer():
    """Weight decay alone shrinks the kept weights; the frozen pruned ones then outrank them and come back
    with the values they had when pruned and zero momentum (what the TF writer's stored values and zeroed
    slots give)."""
    lin = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[4.0, 1.0, 3.0, 2.0]]))
    opt = torch.optim.SGD(lin.parameters(), lr=1.0, momentum=0.9, weight_decay=0.3)
    pruner = sparsify_torch.prune(lin, {"init_sparsity": 0.5, "target_sparsity": 0.5, "start_step": 0,
                                        "end_step": 4, "pruning_frequency": 2, "monotone": False}, optimizer=opt)
    original = lin.parametrizations.weight.original
    assert pruner.masks()["weight"].tolist() == [[True, False, True, False]]
    for _ in range(2):
        original.grad = torch.zeros_like(original)
        opt.step()
        pruner.step()
    # kept: w -> 0.7 w -> 0.22 w (momentum 0.9 on the decay); pruned 1.0 and 2.0 frozen: they now rank first
    assert pruner.masks()["weight"].tolist() == [[False, True, False, True]]
    w = original.detach()[0]
    assert w[1].item() == 1.0 and w[3].item() == 2.0
    assert w[0].item() == pytest.approx(0.88) and w[2].item() == pytest.approx(0.66)
    assert opt.state[original]["momentum_buffer"][0, [1, 3]].tolist() == [0.0, 0.0]
    newly_pruned = w[[0, 2]].clone()
    original.grad = torch.zeros_like(original)
    opt.step()
    pruner.step()
    w = original.detach()[0]
    assert torch.equal(w[[0, 2]], newly_pruned)                       # frozen from their pruning on
    assert opt.state[original]["momentum_buffer"][0].tolist()[0] == 0.0
    assert w[1].item() == pytest.approx(0.7) and w[3].item() == pytest.approx(1.4)   # fresh momentum


def test_frozen_pruned_hooks_only_optimizers_holding_the_parameter():
    p, other = nn.Parameter(torch.tensor([1.0, 2.0])), nn.Parameter(torch.tensor([1.0, 2.0]))
    freeze = FrozenPruned(lambda: [PrunedParam(p, p, torch.tensor([1.0, 0.0]))])      # global hooks
    for param in (p, other):
        opt = torch.optim.SGD([param], lr=0.5, weight_decay=1.0)
        param.grad = torch.zeros(2)
        opt.step()
    assert p.tolist() == [0.5, 2.0] and other.tolist() == [0.5, 1.0]
    freeze.remove()
    opt = torch.optim.SGD([p], lr=0.5, weight_decay=1.0)
    opt.step()
    assert p.tolist() == [0.25, 1.0]


def test_a_dropped_global_freeze_collected_during_an_optimizer_step_does_not_break_the_step():
    """Regression (CI, the demo's fault tests): a pruner dropped in a reference cycle was collected while an
    optimizer iterated torch's global hooks, and its finalizer removed hooks from that dict mid-iteration."""
    import gc

    p = nn.Parameter(torch.tensor([1.0, 2.0]))

    def params_collecting_garbage():
        gc.collect()                                                 # as a collection inside the step would
        return [PrunedParam(p, p, torch.tensor([1.0, 0.0]))]

    gc.disable()
    try:
        dropped = FrozenPruned(lambda: [])
        dropped.cycle = dropped                                      # only the cycle collector frees it
        del dropped
        live = FrozenPruned(params_collecting_garbage)
        after = FrozenPruned(lambda: [])                             # a hook still to come in the iteration
        opt = torch.optim.SGD([p], lr=0.5, weight_decay=1.0)
        p.grad = torch.zeros(2)
        opt.step()
    finally:
        gc.enable()
    assert p.tolist() == [0.5, 2.0]
    live.remove()
    after.remove()


def test_a_mask_changed_or_replaced_between_steps_is_read_afresh():
    p = nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    entry = {"keep": torch.tensor([1.0, 0.0, 1.0])}
    opt = torch.optim.SGD([p], lr=0.5, weight_decay=1.0)
    freeze = FrozenPruned(lambda: [PrunedParam(p, p, entry["keep"])], opt)
    p.grad = torch.zeros(3)
    opt.step()
    assert p.tolist() == [0.5, 2.0, 1.5]
    entry["keep"].copy_(torch.tensor([0.0, 1.0, 1.0]))             # changed in place (an update)
    opt.step()
    assert p.tolist() == [0.5, 1.0, 0.75]
    entry["keep"] = torch.tensor([1.0, 1.0, 0.0])                    # replaced (a load)
    opt.step()
    assert p.tolist() == [0.25, 0.5, 0.75]
    freeze.remove()
