"""`sparsify_torch.quantization`: int8 that keeps every pruned zero, after training and through QAT, and its files."""
from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

import sparsify_torch
from sparsify_torch.distillation import frozen_copy
from sparsify.int8_format import int8_tensors, load_int8_npz
from sparsify.quantization import quantize_int8
from sparsify_torch.quantization import (FakeQuantInt8, Int8Linear, add_fake_quant, int8_document, int8_weights,
                                         load_int8_state_dict, quantizable_layers, quantize_model_int8,
                                         save_int8_npz)


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.LayerNorm(32), nn.Linear(32, 8))


def _pruned(seed: int = 0, sparsity: float = 0.9):
    model = _mlp(seed)
    pruner = sparsify_torch.prune(model, {"target_sparsity": sparsity, "start_step": 0, "end_step": 0})
    return model, pruner


def test_literal_weight_only_layer():
    lin = nn.Linear(4, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.0, 1.0, 0.0, -0.5], [2.0, 0.0, 0.001, 0.0]]))
        lin.bias.copy_(torch.tensor([0.5, -1.0]))
    model, report = quantize_model_int8(nn.Sequential(lin))
    layer = model[0]
    assert isinstance(layer, Int8Linear) and layer.qweight.dtype == torch.int8
    assert layer.qweight.tolist() == [[0, 127, 0, -64], [127, 0, 0, 0]]        # 0.001 * 63.5 -> 0: a new zero
    assert layer.scales.tolist() == pytest.approx([1 / 127, 2 / 127])
    r = report["0.weight"]
    assert (r.zeros_before, r.zeros_after, r.new_zeros, r.lost_zeros) == (4, 5, 1, 0)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    expected = x @ (layer.qweight.float() * layer.scales[:, None]).T + layer.bias
    assert torch.equal(model(x), expected)


@pytest.mark.parametrize("mode", ["weight_only", "dynamic"])
def test_pruned_zeros_stay_zero_and_outputs_stay_close(mode):
    model, pruner = _pruned()
    masks = pruner.masks()
    x = torch.randn(64, 16)
    with torch.no_grad():
        ref = model(x)
    _, report = quantize_model_int8(model, mode=mode)       # the masks still attached: read through them
    assert set(report) == {"0.weight", "3.weight"}
    w8 = int8_weights(model)
    for name, mask in masks.items():
        q, _ = w8[name]
        assert not np.any(q[~mask.numpy()])                     # every pruned zero is a zero
        assert report[name].zeros_before == int((~mask).sum()) and report[name].lost_zeros == 0
        assert report[name].zeros_after == report[name].zeros_before + report[name].new_zeros
    with torch.no_grad():
        out = model(x)
    assert (out - ref).abs().max() < 0.05 * ref.abs().max()


def test_dynamic_and_weight_only_hold_the_same_int8_values():
    a, _ = _pruned(seed=1)
    b = copy.deepcopy(a)
    quantize_model_int8(a, "weight_only")
    quantize_model_int8(b, "dynamic")
    wa, wb = int8_weights(a), int8_weights(b)
    for name in wa:
        assert np.array_equal(wa[name][0], wb[name][0]) and np.allclose(wa[name][1], wb[name][1], rtol=1e-7)


def test_weights_equal_the_core_quantization_after_remove():
    model, pruner = _pruned(seed=2)
    pruner.remove()
    ref = {n: m.weight.detach().numpy().copy() for n, m in quantizable_layers(model).items()}
    quantize_model_int8(model)
    for n, w in ref.items():
        q, s = quantize_int8(w)
        assert np.array_equal(int8_weights(model)[f"{n}.weight"][0], q)


@pytest.mark.slow
def test_conv1d_is_quantized_per_output_channel_and_filed_in_its_layout(tmp_path):
    from transformers.pytorch_utils import Conv1D

    torch.manual_seed(0)
    model = nn.Sequential(Conv1D(12, 6), nn.ReLU(), Conv1D(3, 12))
    with torch.no_grad():
        model[0].weight[:, ::2] = 0                                  # (in, out): columns are output channels
    float_model = copy.deepcopy(model)
    x = torch.randn(5, 6)
    _, report = quantize_model_int8(model)
    assert isinstance(model[0], Int8Linear) and model[0].transposed and model[0].qweight.shape == (12, 6)
    assert report["0.weight"].zeros_before == 36 and report["0.weight"].lost_zeros == 0
    q, s = quantize_int8(np.ascontiguousarray(float_model[0].weight.detach().numpy().T))
    assert np.array_equal(model[0].qweight.numpy(), q)
    n = save_int8_npz(model, tmp_path / "m.npz")
    assert n == (tmp_path / "m.npz").stat().st_size
    q_file, _, axis = int8_tensors(load_int8_npz(tmp_path / "m.npz"))["0.weight"]
    assert axis == 1 and np.array_equal(q_file, q.T)
    float_model.load_state_dict(load_int8_state_dict(tmp_path / "m.npz"))
    with torch.no_grad():
        assert torch.allclose(float_model(x), model(x), atol=1e-6)


def test_file_round_trip_gives_exact_int8_values_and_the_same_outputs(tmp_path):
    model, pruner = _pruned(seed=3)
    pruner.remove()
    float_model = copy.deepcopy(model)
    quantize_model_int8(model)
    path = tmp_path / "mlp.int8.npz"
    save_int8_npz(model, path)
    doc = load_int8_npz(path)
    exact = int8_tensors(doc)
    for name, (q, s) in int8_weights(model).items():
        assert np.array_equal(exact[name][0], q) and np.array_equal(exact[name][1], s)
    state = load_int8_state_dict(path)
    assert set(state) == set(float_model.state_dict())
    assert torch.equal(state["2.weight"], float_model[2].weight.detach())        # LayerNorm kept exactly
    float_model.load_state_dict(state)
    x = torch.randn(7, 16)
    with torch.no_grad():
        assert torch.equal(float_model(x), model(x))
    assert set(int8_tensors(int8_document(model))) == {"0.weight", "3.weight"}


def test_int8_model_state_dict_survives_save_and_load():
    model, _ = _pruned(seed=4)
    quantize_model_int8(model)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    other, _ = _pruned(seed=5)
    quantize_model_int8(other)
    other.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    for name, (q, s) in int8_weights(model).items():
        assert np.array_equal(int8_weights(other)[name][0], q) and np.array_equal(int8_weights(other)[name][1], s)


@pytest.mark.slow
def test_qat_keeps_the_masks_and_exports_exactly_what_it_trained_with():
    model, pruner = _pruned(seed=6)
    masks = pruner.masks()
    assert add_fake_quant(model) == ["0.weight", "3.weight"]
    plist = model[0].parametrizations.weight
    assert type(plist[0]).__name__ == "MaskParametrization" and isinstance(plist[1], FakeQuantInt8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 16, generator=g), torch.randint(0, 8, (64,), generator=g)
    before = model[0].parametrizations.weight.original.detach().clone()
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        pruner.step()
    assert not torch.equal(before, model[0].parametrizations.weight.original)      # it trained
    for name, mask in masks.items():
        assert torch.equal(pruner.masks()[name], mask)                  # masks unchanged (end_step 0)
    with torch.no_grad():
        qat_out = model(x)
    _, report = quantize_model_int8(model)
    with torch.no_grad():
        assert torch.equal(model(x), qat_out)             # the exported int8 model is the model QAT trained
    for name, mask in masks.items():
        q, _ = int8_weights(model)[name]
        assert not np.any(q[~mask.numpy()]) and report[name].lost_zeros == 0
        assert report[name].zeros_before == int((~mask).sum())


def test_fake_quant_gradient_passes_straight_through_to_the_mask():
    model, pruner = _pruned(seed=7)
    add_fake_quant(model, op_names=r"^0\.")
    assert not hasattr(model[3], "parametrizations") or len(model[3].parametrizations.weight) == 1
    model(torch.randn(4, 16)).sum().backward()
    grad = model[0].parametrizations.weight.original.grad
    mask = pruner.masks()["0.weight"]
    assert torch.all(grad[~mask] == 0) and torch.any(grad[mask] != 0)


def test_bad_arguments_are_refused_before_any_change():
    model = _mlp()
    with pytest.raises(ValueError, match=r"mode must be one of \('weight_only', 'dynamic'\), got 'int4'"):
        quantize_model_int8(model, mode="int4")
    with pytest.raises(ValueError, match="'nope' matches no Linear / Conv1D / Conv weight"):
        quantize_model_int8(model, op_names="nope")
    with pytest.raises(ValueError, match="is not a valid regex"):
        add_fake_quant(model, op_names="(")
    assert isinstance(model[0], nn.Linear) and not hasattr(model[0], "parametrizations")
    add_fake_quant(model, op_names=r"^3\.")
    with pytest.raises(ValueError, match="layer '3' already has a FakeQuantInt8"):
        add_fake_quant(model)
    assert not hasattr(model[0], "parametrizations")
    with pytest.raises(ValueError, match="no int8 layer"):
        int8_document(model)
    with pytest.raises(TypeError, match="transposed must be True or False"):
        FakeQuantInt8(transposed=1)
    with pytest.raises(ValueError, match="qweight must be a 2-D int8 tensor"):
        Int8Linear(torch.zeros(2, 2), torch.ones(2))
    with pytest.raises(ValueError, match="scales must hold 2 positive floats"):
        Int8Linear(torch.zeros(2, 2, dtype=torch.int8), torch.zeros(2))


class _CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(1, 8, 5, stride=2, padding=1)
        self.c2 = nn.Conv2d(2, 4, 3, padding=1, groups=2, bias=False)
        self.fc = nn.Linear(4 * 4 * 19, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.c1(x))                                  # (n, 8, 19)
        h = self.c2(h.view(-1, 2, 4, 19)).reshape(h.shape[0], -1)   # grouped 2-D conv over the same values
        return self.fc(h)


def test_convolutions_become_weight_only_int8_and_keep_their_zeros():
    torch.manual_seed(0)
    model = _CNN()
    pruner = sparsify_torch.prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    masks = pruner.masks()
    x = torch.randn(6, 1, 40)
    with torch.no_grad():
        ref = model(x)
    _, report = quantize_model_int8(model, mode="dynamic")          # convs stay weight-only in dynamic mode
    assert type(model.c1).__name__ == "Int8Conv" and type(model.c2).__name__ == "Int8Conv"
    assert model.c2.groups == 2 and model.c2.bias is None and model.c1.stride == (2,)
    for name, mask in masks.items():
        assert not np.any(int8_weights(model)[name][0][~mask.numpy()]) and report[name].lost_zeros == 0
    with torch.no_grad():
        out = model(x)
        deq = model.c1.qweight.float() * model.c1.scales[:, None, None]
        assert torch.equal(model.c1(x), nn.functional.conv1d(x, deq, model.c1.bias, 2, 1))
    assert (out - ref).abs().max() < 0.05 * ref.abs().max()


def test_qat_on_convolutions_exports_the_trained_values():
    torch.manual_seed(1)
    model = _CNN()
    sparsify_torch.prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    add_fake_quant(model)
    x = torch.randn(6, 1, 40)
    with torch.no_grad():
        qat = model(x)
    quantize_model_int8(model)
    with torch.no_grad():
        assert torch.equal(model(x), qat)


def test_weight_only_outputs_are_closer_to_float_than_dynamic_ones():
    model, pruner = _pruned(seed=8, sparsity=0.5)
    pruner.remove()
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(x)
        errors = {}
        for mode in ("weight_only", "dynamic"):
            q, _ = quantize_model_int8(copy.deepcopy(model), mode)
            errors[mode] = float((q(x) - ref).abs().max())
    assert 0 < errors["weight_only"] < errors["dynamic"]


def _distilled_qat_run(mode: str, start: nn.Module, teacher: nn.Module):
    """Prune ``start`` (a copy) to 90% with QAT and, per ``mode``, no teacher / the trained ``teacher`` / the
    model itself at the pruning start (``dense_at_start``, at step 0 or deferred to step 2)."""
    model = copy.deepcopy(start)
    config = {"target_sparsity": 0.9, "start_step": 2 if mode == "deferred" else 0, "end_step": 6,
              "pruning_frequency": 2}
    if mode == "none":
        pruner = sparsify_torch.prune(model, config)
    elif mode == "user":
        pruner = sparsify_torch.prune(model, config, distillation={"temperature": 2.0, "weight": 1.0,
                                                                   "teacher": "user"}, teacher=teacher)
    else:
        pruner = sparsify_torch.prune(model, config, distillation={"temperature": 2.0, "weight": 1.0})
    add_fake_quant(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 16, generator=g), torch.randint(0, 8, (64,), generator=g)
    terms = []
    for _ in range(8):
        opt.zero_grad()
        out = model(x)
        kd = pruner.distill_loss(x, out) if mode != "none" else out.new_zeros(())
        (nn.functional.cross_entropy(out, y) + kd).backward()
        opt.step()
        pruner.step()
        terms.append(float(kd.detach()))
    masks = pruner.masks()
    with torch.no_grad():
        qat_out = model(x)
    teacher_used = pruner.distiller.teacher if mode != "none" else None
    _, report = quantize_model_int8(model)
    with torch.no_grad():
        same_out = torch.equal(model(x), qat_out)
    return model, masks, report, terms, teacher_used, same_out


@pytest.mark.slow
def test_qat_composes_with_distillation_and_keeps_exactly_the_pruned_zeros():
    teacher = _mlp(seed=9)
    g = torch.Generator().manual_seed(2)
    xt, yt = torch.randn(256, 16, generator=g), torch.randint(0, 8, (256,), generator=g)
    opt = torch.optim.Adam(teacher.parameters(), lr=0.01)
    for _ in range(20):                                  # a trained dense teacher
        opt.zero_grad()
        nn.functional.cross_entropy(teacher(xt), yt).backward()
        opt.step()
    teacher_state = copy.deepcopy(teacher.state_dict())
    start = copy.deepcopy(teacher)          # the student starts as the trained model (the teacher gets frozen)
    runs = {m: _distilled_qat_run(m, start, teacher) for m in ("none", "user", "dense_at_start", "deferred")}
    plain = int8_weights(runs["none"][0])
    for mode in ("user", "dense_at_start", "deferred"):
        model, masks, report, terms, used, same_out = runs[mode]
        assert max(terms) > 1e-3 and terms[-1] > 0                   # the distillation term is active
        assert all(t == 0.0 for t in terms[:2]) if mode == "deferred" else terms[1] > 0
        assert not np.array_equal(int8_weights(model)["0.weight"][0], plain["0.weight"][0])   # it changed training
        assert same_out                                              # int8 model = the model QAT trained
        for name, mask in masks.items():
            q, _ = int8_weights(model)[name]
            assert int(mask.sum()) == round(0.1 * mask.numel())      # 90% pruned
            assert not np.any(q[~mask.numpy()]) and report[name].lost_zeros == 0
            assert report[name].zeros_before == int((~mask).sum())
    assert runs["user"][4] is teacher and all(torch.equal(v, teacher_state[k])
                                              for k, v in teacher.state_dict().items())   # the teacher untouched
    # dense_at_start at step 0: taken in prune(), before add_fake_quant: a float, unmasked copy
    float_teacher = runs["dense_at_start"][4]
    assert not any(isinstance(m, FakeQuantInt8) for m in float_teacher.modules())
    assert all(torch.equal(float_teacher.state_dict()[k], v) for k, v in teacher_state.items())
    # deferred to step 2, after add_fake_quant: the copy leaves the student's QAT rounding out, the teacher is float
    late_teacher = runs["deferred"][4]
    assert not any(isinstance(m, FakeQuantInt8) for m in late_teacher.modules())
    assert not any(parametrize.is_parametrized(m) for m in late_teacher.modules())


def test_frozen_copy_of_a_fake_quantized_model_computes_in_float():
    model = _mlp(seed=3)
    pruner = sparsify_torch.prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    add_fake_quant(model)
    teacher = frozen_copy(model)
    for name, mask in pruner.masks().items():    # original * mask, not rounded to int8 steps
        layer, tensor = name.rsplit(".", 1)
        original = getattr(model.get_submodule(layer).parametrizations, tensor).original.detach()
        assert torch.equal(teacher.state_dict()[name], original * mask)
        assert not torch.equal(teacher.state_dict()[name], getattr(model.get_submodule(layer), tensor))
    assert not any(isinstance(m, FakeQuantInt8) for m in teacher.modules())
    assert any(isinstance(m, FakeQuantInt8) for m in model.modules())      # the student keeps its QAT
