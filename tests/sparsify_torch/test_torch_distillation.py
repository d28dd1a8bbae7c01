"""Distillation while pruning in torch: frozen teacher, the loss against the core's NumPy reference, saving."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from torch import nn

from sparsify import DistillationConfig
from sparsify.distillation import distillation_loss
from sparsify.distillation import kd_loss as np_kd_loss
from sparsify_torch import prune
from sparsify_torch.distillation import kd_loss
from torch_helpers import batch, digits, mlp

GRADUAL = {"target_sparsity": 0.75, "start_step": 0, "end_step": 20, "pruning_frequency": 5}


def net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def test_torch_kd_equals_the_numpy_reference_on_literal_logits():
    s = [[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]
    t = [[3.0, 2.0, 1.0], [1.0, 1.0, -1.0]]
    for temp in (1.0, 2.0, 0.5):
        got = kd_loss(torch.tensor(s, dtype=torch.float64), torch.tensor(t, dtype=torch.float64), temp)
        assert float(got.detach()) == pytest.approx(np_kd_loss(s, t, temp), rel=1e-12)
    assert float(kd_loss(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[3.0, 2.0, 1.0]]), 1.0)) == \
        pytest.approx(1.150420765208883, rel=1e-6)


def test_distill_loss_equals_the_core_reference_with_features_and_a_ramp():
    student = net()
    teacher = net()
    with torch.no_grad():
        for p in teacher.parameters():
            p.mul_(-0.5)
    cfg = {"temperature": 2.0, "weight": 0.8, "weight_schedule": "linear", "start_step": 0, "end_step": 4,
           "features": ["1"], "feature_weight": 0.3, "teacher": "user"}
    pruner = prune(student, {**GRADUAL, "start_step": 100, "end_step": 100}, distillation=cfg, teacher=teacher)
    x = torch.tensor([[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, 1.0, -1.0]])
    for step in range(3):
        out = student(x)
        got = pruner.distill_loss(x, out)
        want = distillation_loss(DistillationConfig(**cfg), step, out.detach().numpy(), teacher(x).detach().numpy(),
                                 [student[:2](x).detach().numpy()], [teacher[:2](x).detach().numpy()])
        assert float(got.detach()) == pytest.approx(want, rel=1e-5)
        assert got.requires_grad == (step > 0)        # w(0) = 0: a constant zero, no teacher pass
        pruner.step()
    assert pruner.step_count == 3


def test_loss_is_zero_while_student_equals_teacher():
    model = net()
    pruner = prune(model, {**GRADUAL, "start_step": 5}, distillation={"temperature": 3.0, "features": ["0", "2"]})
    x = torch.randn(6, 4)
    assert float(pruner.distill_loss(x, model(x)).detach()) == 0.0
    pruner.step()
    assert float(pruner.distill_loss(x, model(x)).detach()) == 0.0


def test_teacher_is_frozen_and_unchanged_while_the_student_trains():
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    pruner = prune(model, GRADUAL, optimizer=opt, distillation={"temperature": 2.0, "weight": 1.0})
    teacher = pruner.distiller.teacher
    before = {n: p.detach().clone() for n, p in teacher.named_parameters()}
    assert not teacher.training and all(not p.requires_grad for p in teacher.parameters())
    assert not any(m is teacher for m in model.modules())
    assert {id(p) for p in teacher.parameters()}.isdisjoint(id(p) for g in opt.param_groups for p in g["params"])
    data = digits()
    model.train()
    first = last = None
    for step in range(25):
        x, y = batch(*data, step)
        out = model(x)
        kd = pruner.distill_loss(x, out)
        loss = nn.functional.cross_entropy(out, y) + kd
        opt.zero_grad()
        loss.backward()
        opt.step()
        pruner.step()
        first = float(kd.detach()) if step == 1 else first
        last = float(kd.detach())
    assert all(p.grad is None for p in teacher.parameters())
    assert all(torch.equal(p, before[n]) for n, p in teacher.named_parameters())
    assert not teacher.training
    assert pruner.total_sparsity() == pytest.approx(0.75, abs=0.01)
    assert first > 0 and last > 0


def test_pruned_model_saves_and_loads_without_the_teacher():
    model = net()
    pruner = prune(model, {**GRADUAL, "start_step": 0, "end_step": 0}, distillation={"features": ["1"], "weight": 1.0})
    assert not any("teacher" in k for k in model.state_dict())
    assert set(model.state_dict()) == {f"{i}.{k}" for i in (0, 2) for k in ("bias", "weight")}  # plain (issue 57)
    assert all(not isinstance(v, nn.Module) for v in pruner.state_dict().values())
    pruner.remove()
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    assert sorted(state) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    fresh = net()
    fresh.load_state_dict(state)
    assert torch.equal(fresh[0].weight, model[0].weight)
    assert float((fresh[0].weight == 0).float().mean()) == 0.75
    # the hooks went with remove(): a forward pass records nothing more
    model(torch.ones(1, 4))
    assert pruner.distiller._student.outputs == {}
    with pytest.raises(RuntimeError, match=r"Pruner.distill_loss\(\) called after Pruner.remove\(\)"):
        pruner.distill_loss(torch.ones(1, 4), model(torch.ones(1, 4)))


def test_dense_at_start_copies_the_model_before_any_mask():
    model = net()
    dense = model[0].weight.detach().clone()
    pruner = prune(model, {**GRADUAL, "start_step": 0, "end_step": 0}, distillation={"weight": 1.0})
    assert float((model[0].weight == 0).float().mean()) == 0.75
    assert torch.equal(pruner.distiller.teacher[0].weight, dense)
    assert not any(hasattr(m, "parametrizations") for m in pruner.distiller.teacher.modules())
    x = torch.randn(3, 4)
    assert float(pruner.distill_loss(x, model(x)).detach()) > 0


def test_bad_arguments_raise_before_anything_changes():
    model = net()
    with pytest.raises(ValueError, match=r"features \['blocks.0'\] are not modules of the student"):
        prune(model, GRADUAL, distillation={"features": ["blocks.0"]})
    with pytest.raises(ValueError, match="teacher='user' needs the teacher module"):
        prune(model, GRADUAL, distillation={"teacher": "user"})
    with pytest.raises(ValueError, match="a teacher module was passed but distillation teacher='dense_at_start'"):
        prune(model, GRADUAL, distillation={}, teacher=net())
    with pytest.raises(ValueError, match="teacher was passed without distillation"):
        prune(model, GRADUAL, teacher=net())
    with pytest.raises(ValueError, match="unknown distillation key 'temp'"):
        prune(model, GRADUAL, distillation={"temp": 2.0})
    assert not any(hasattr(m, "parametrizations") for m in model.modules())
    assert all(not m._forward_hooks for m in model.modules())
    pruner = prune(model, GRADUAL)
    with pytest.raises(RuntimeError, match="distill_loss\\(\\) needs a teacher"):
        pruner.distill_loss(torch.ones(1, 4), model(torch.ones(1, 4)))


def test_user_teacher_with_dict_inputs_and_hf_style_output():
    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = net()

        def forward(self, input_ids: torch.Tensor) -> dict:
            return {"logits": self.body(input_ids)}

    student, teacher = Wrapped(), Wrapped()
    pruner = prune(student, {**GRADUAL, "start_step": 3}, distillation={"teacher": "user", "temperature": 1.0},
                   teacher=teacher)
    assert all(not p.requires_grad for p in teacher.parameters()) and not teacher.training
    x = torch.randn(2, 4)
    got = pruner.distill_loss({"input_ids": x}, student(input_ids=x)["logits"])
    assert float(got.detach()) == 0.0      # same initial weights (net() seeds)
    with torch.no_grad():
        teacher.body[2].bias.add_(torch.tensor([1.0, 0.0, -1.0]))
    out = student(input_ids=x)["logits"]
    want = np_kd_loss(out.detach().numpy(), teacher(input_ids=x)["logits"].numpy(), 1.0)
    assert float(pruner.distill_loss({"input_ids": x}, out).detach()) == pytest.approx(want, rel=1e-5)


def test_distillation_pulls_a_pruned_student_to_its_teacher():
    torch.manual_seed(0)
    model = mlp()
    data = digits()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    pruner = prune(model, {**GRADUAL, "start_step": 0, "end_step": 0}, optimizer=opt,
                   distillation={"temperature": 1.0, "weight": 1.0})
    x, _ = batch(*data, 0)
    start = float(pruner.distill_loss(x, model(x)).detach())
    for step in range(30):          # distillation alone: the student imitates the dense teacher
        xb, _ = batch(*data, step)
        loss = pruner.distill_loss(xb, model(xb))
        opt.zero_grad()
        loss.backward()
        opt.step()
        pruner.step()
    end = float(pruner.distill_loss(x, model(x)).detach())
    assert end < 0.5 * start
    assert np.isclose(pruner.total_sparsity(), 0.75, atol=0.01)


def test_dense_at_start_is_the_model_at_start_step_when_prune_comes_first():
    """The usual recipe: prune() before the loop, pruning from step 5: the teacher is the model after 5
    optimizer steps (not its initialisation), and the term is exactly 0 before."""
    model = mlp()
    calls = []
    user_hook = model.fc1.register_forward_hook(lambda *_: calls.append(1))     # the user's: the copy keeps it
    data = digits()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    pruner = prune(model, {"target_sparsity": 0.75, "start_step": 5, "end_step": 7, "pruning_frequency": 1,
                           "criterion": "wanda"}, optimizer=opt, distillation={"features": ["fc2"], "weight": 1.0})
    assert pruner.distiller.teacher is None
    at_start, terms = None, []
    for step in range(8):
        x, y = batch(*data, step)
        out = model(x)
        kd = pruner.distill_loss(x, out)
        terms.append(kd)
        loss = nn.functional.cross_entropy(out, y) + kd
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 4:       # the model after 5 optimizer steps, before pruner.step() counts the 5th
            at_start = {f"{m}.{t}": getattr(model.get_submodule(m), t).detach().clone()
                        for m in ("fc1", "fc2", "head") for t in ("weight", "bias")}
            assert pruner.distiller.teacher is None and float((model.fc1.weight == 0).float().mean()) == 0.0
        pruner.step()
    assert [float(t) for t in terms[:5]] == [0.0] * 5 and not any(t.requires_grad for t in terms[:5])
    # from step 5 the teacher runs; the update at step 5 prunes 0% (the schedule starts there), so 0 exactly
    assert float(terms[5].detach()) == 0.0 and terms[5].requires_grad
    assert all(float(t.detach()) > 0 and t.requires_grad for t in terms[6:])
    teacher = pruner.distiller.teacher
    assert set(teacher.state_dict()) == set(at_start)
    assert all(torch.equal(teacher.state_dict()[k], v) for k, v in at_start.items())
    assert float((model.fc1.weight == 0).float().mean()) > 0        # the update at step 5 came after the copy
    assert not any(hasattr(m, "parametrizations") for m in teacher.modules())
    assert all(not p.requires_grad and p.grad is None for p in teacher.parameters()) and not teacher.training
    # the copy runs the user's hook, not the pruner's (wanda's input statistics) nor the student's recorder
    assert list(teacher.fc1._forward_hooks) == [user_hook.id]
    assert all(not m._forward_pre_hooks for m in teacher.modules())
    before = len(calls)
    pruner.distiller.teacher_outputs(torch.ones(1, 64))
    assert len(calls) == before + 1


def test_dense_at_start_restored_past_start_step_is_taken_at_the_first_term():
    model = net()
    config = {**GRADUAL, "start_step": 2, "end_step": 2}
    pruner = prune(model, config, distillation={"weight": 1.0})
    for _ in range(3):
        pruner.step()
    state = pruner.state_dict()
    fresh = net()
    resumed = prune(fresh, config, distillation={"weight": 1.0})
    resumed.load_state_dict(state)
    assert resumed.distiller.teacher is None
    x = torch.randn(3, 4)
    assert float(resumed.distill_loss(x, fresh(x)).detach()) == 0.0      # the teacher: the model as restored
    assert torch.equal(resumed.distiller.teacher[0].weight, fresh[0].weight)


def test_default_weight_fades_over_the_first_half_of_the_pruning_window_when_prune_comes_first():
    """``distillation={}``, prune() at step 0, pruning from step 4 to 12: the weight is 0 before step 4 (no
    teacher yet), 1 at 4, linearly to 0 at 4 + (12 - 4) // 2 = 8, then 0; the term is that weight times the KD."""
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 4, "end_step": 12, "pruning_frequency": 2},
                   optimizer=opt, distillation={"temperature": 1.0})
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    weights, terms, refs = [], [], []
    for step in range(12):
        out = model(x)
        term = pruner.distill_loss(x, out)
        teacher = pruner.distiller.teacher
        weights.append(pruner.distiller.config.weight_at(step) if teacher is not None else None)
        terms.append(float(term.detach()))
        refs.append(0.0 if teacher is None else float(kd_loss(out.detach(), teacher(x), 1.0)))
        opt.zero_grad()
        (nn.functional.cross_entropy(out, y) + term).backward()
        opt.step()
        pruner.step()
    assert weights == [None] * 4 + [1.0, 0.75, 0.5, 0.25, 0.0, 0.0, 0.0, 0.0]
    assert terms[:4] == [0.0] * 4 and terms[8:] == [0.0] * 4
    assert all(r > 0 for r in refs[5:8])
    assert np.allclose(terms[4:8], [w * r for w, r in zip(weights[4:8], refs[4:8])], rtol=1e-5, atol=1e-7)


def test_an_explicit_weight_is_kept_constant_from_the_pruning_start():
    model = net()
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 4, "end_step": 12, "pruning_frequency": 2},
                   distillation={"weight": 1.0})
    assert pruner.distiller.config == DistillationConfig(weight=1.0)
    assert [pruner.distiller.config.weight_at(s) for s in (4, 8, 100)] == [1.0, 1.0, 1.0]


def test_default_weight_needs_a_pruning_window_to_fade_over():
    model = net()
    with pytest.raises(ValueError, match=r"falls to 0 halfway through the pruning window, which needs an end_step at "
                                         r"least 2 steps after start_step, got start_step=3, end_step=4"):
        prune(model, {**GRADUAL, "start_step": 3, "end_step": 4}, distillation={})
    assert not any(hasattr(m, "parametrizations") for m in model.modules())
