"""An optimizer's state is numbered by parameter position; after prune() model.parameters() lists a pruned layer's
bias before its weight. The supported resume recipes are exact, and the others are refused clearly (issue 57)."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from sparsify_torch import prune
from sparsify_torch.optimizer_order import misplaced_state, out_of_plain_order

CFG = {"target_sparsity": 0.75, "start_step": 0, "end_step": 6, "pruning_frequency": 2}


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(8)]


def train(model: nn.Module, opt: torch.optim.Optimizer, pruner, data) -> None:
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        pruner.step()


def checkpoint(model, opt, pruner) -> dict:
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "pruner": pruner.state_dict()}, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def before_prune(passed: bool = True):
    """The model, an Adam built before prune() (``passed`` to it: pruned values and their state kept), the pruner."""
    model = build()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, opt, prune(model, CFG, optimizer=opt if passed else None)


def final(model, pruner) -> dict:
    return {**model.state_dict(), **{f"mask:{n}": m for n, m in pruner.masks().items()}}


def uninterrupted(passed: bool) -> dict:
    model, opt, pruner = before_prune(passed)
    train(model, opt, pruner, batches())
    return final(model, pruner)


def halfway(passed: bool) -> dict:
    """A checkpoint after 4 of 8 steps, the optimizer built before prune()."""
    model, opt, pruner = before_prune(passed)
    train(model, opt, pruner, batches()[:4])
    return checkpoint(model, opt, pruner)


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), k


def test_resume_with_the_optimizer_built_before_prune_in_both_runs_is_exact():
    saved = halfway(True)
    model, opt, pruner = before_prune(True)
    model.load_state_dict(saved["model"])
    pruner.load_state_dict(saved["pruner"])
    opt.load_state_dict(saved["opt"])
    pruner.check_optimizer(opt)
    train(model, opt, pruner, batches()[4:])
    assert_same(final(model, pruner), uninterrupted(True))


def test_an_optimizer_built_after_prune_on_plain_parameters_resumes_exactly():
    saved = halfway(False)         # built before prune(), not given to it: the run an optimizer built after can be
    model = build()
    pruner = prune(model, CFG)
    opt = torch.optim.Adam(pruner.plain_parameters(), lr=1e-2)
    model.load_state_dict(saved["model"])
    pruner.load_state_dict(saved["pruner"])
    opt.load_state_dict(saved["opt"])
    pruner.check_optimizer(opt)
    train(model, opt, pruner, batches()[4:])
    assert_same(final(model, pruner), uninterrupted(False))


def test_an_optimizer_built_after_prune_on_model_parameters_is_refused_by_check_optimizer():
    model = build()
    pruner = prune(model, CFG)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    assert [n for n, _ in model.named_parameters()][:2] == ["0.bias", "0.parametrizations.weight.original"]
    with pytest.raises(ValueError, match=r"param group 0 lists the parameters in the order model.parameters\(\) has "
                                         r"after prune\(\) \(\['0.bias', '0.weight', '2.bias', '2.weight'\] ...\), "
                                         r"not the plain model's \(\['0.weight', '0.bias', '2.weight', '2.bias'\] "
                                         r"...\).*pruner.plain_parameters\(\)"):
        pruner.check_optimizer(opt)
    opt.load_state_dict(halfway(True)["opt"])     # what the pitfall does: 0.weight's moments on 0.bias ...
    with pytest.raises(RuntimeError):              # ... and, left alone, Adam fails on the shapes
        train(model, opt, pruner, batches()[4:5])
    after = torch.optim.Adam(model.parameters(), lr=1e-2)          # the other way round: state numbered after
    train(model, after, pruner, batches()[:1])
    plain_order = torch.optim.Adam(pruner.plain_parameters(), lr=1e-2)
    plain_order.load_state_dict(after.state_dict())
    with pytest.raises(ValueError, match=r"optimizer holds state 'exp_avg' of shape \(8,\) for parameter 0 "
                                         r"\('0.weight', shape \(8, 6\)\) \(12 such entries\): the state dict was "
                                         r"saved by an optimizer that listed the parameters in another order"):
        pruner.check_optimizer(plain_order)


def test_an_optimizer_given_to_prune_refuses_a_state_dict_numbered_after_prune_before_loading():
    model = build()
    pruner = prune(model, CFG)
    after = torch.optim.Adam(model.parameters(), lr=1e-2)
    train(model, after, pruner, batches()[:2])
    saved = after.state_dict()
    model, opt, pruner = before_prune()
    with pytest.raises(ValueError, match=r"optimizer is given state 'exp_avg' of shape \(8,\) for parameter 0 "
                                         r"\('0.weight', shape \(8, 6\)\)"):
        opt.load_state_dict(saved)
    assert opt.state_dict()["state"] == {}          # nothing loaded
    with pytest.warns(UserWarning, match="before the pruning schedule reached its target"):
        pruner.remove()
    opt.load_state_dict(saved)                      # the pruner no longer checks it


def test_grouped_optimizers_built_after_prune_keep_the_plain_order_within_groups():
    model = build()
    pruner = prune(model, CFG)
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]       # the Trainer's grouping
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    pruner.check_optimizer(torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]))
    odd = [p for _, p in model.named_parameters()][::-1]      # an order of the user's own: not judged
    pruner.check_optimizer(torch.optim.SGD(odd, lr=0.1))
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer, got list"):
        pruner.check_optimizer(decay)


def test_misplaced_state_and_out_of_plain_order_on_literal_inputs():
    a, b, c = (nn.Parameter(torch.zeros(s)) for s in ((2, 3), (2,), (3, 3)))
    opt = torch.optim.Adam([a, b, c])
    state = {"state": {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(2), "exp_avg_sq": torch.zeros(2, 3)},
                       2: {"exp_avg": torch.zeros(3, 3), "row_var": torch.zeros(3)}}}
    assert misplaced_state(opt, state) == [(0, "exp_avg", (2,), (2, 3))]
    assert misplaced_state(opt) == []
    assert out_of_plain_order([[b, a, c]], plain=[a, b, c], current=[b, a, c]) == [(0, [1, 0, 2])]
    assert out_of_plain_order([[a, b], [c]], plain=[a, b, c], current=[b, a, c]) == []
    assert out_of_plain_order([[c, b, a]], plain=[a, b, c], current=[b, a, c]) == []
