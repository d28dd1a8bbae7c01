"""PruningCalibrator and calibrate_model_for_pruning."""
import copy
import io
import sys

import numpy as np
import pytest
import torch
from torch import nn

from conftest import ResidualNet, Wrapper, mse_loss
from sparsify_torch.channels import PruningCalibrator, calibrate_model_for_pruning


def tiny_net():
    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    with torch.no_grad():
        net[0].weight.copy_(torch.eye(2))
        net[0].bias.zero_()
        net[2].weight.copy_(torch.tensor([[0.5, -1.0]]))
        net[2].bias.fill_(0.25)
    return net


TINY_DATA = [torch.tensor([[1.0, 2.0], [3.0, -1.0]]), torch.tensor([[1.0, 1.0]])]


def test_taylor_importance_literal():
    # loss = sum(out) => dL/dg_c = w2[c] * sum_n relu(x)[n, c]; importance = sum over batches of its square
    net = tiny_net()
    with PruningCalibrator(net) as calibrator:
        for x in TINY_DATA:
            net(x).sum().backward()
    info = calibrator.pruning_info
    assert info.n_prunable_groups == 1 and info.n_steps == 2
    np.testing.assert_allclose(info.group_criteria[0], [4.0 + 0.25, 4.0 + 1.0])
    assert info.group_labels[0].tolist() == [0, 1]


def test_calibrate_model_for_pruning_literal_and_steps():
    info = calibrate_model_for_pruning(tiny_net(), TINY_DATA, lambda out, x: out.sum())
    np.testing.assert_allclose(info.group_criteria[0], [4.25, 5.0])
    with pytest.warns(RuntimeWarning, match="same for every channel of 1 group\\(s\\) '0' \\(2 channels, all 4\\)"):
        info = calibrate_model_for_pruning(tiny_net(), TINY_DATA, lambda out, x: out.sum(), n_steps=1)
    assert info.n_steps == 1
    np.testing.assert_allclose(info.group_criteria[0], [4.0, 4.0])
    info = calibrate_model_for_pruning(tiny_net(), TINY_DATA, lambda out, x: out.sum(), epochs=2)
    assert info.n_steps == 4
    np.testing.assert_allclose(info.group_criteria[0], [8.5, 10.0])
    info = calibrate_model_for_pruning(tiny_net(), TINY_DATA, lambda out, x: out.sum(), n_steps=3)
    assert info.n_steps == 3  # n_steps cycles over the dataloader
    np.testing.assert_allclose(info.group_criteria[0], [8.25, 9.0])


def test_zero_output_channel_has_zero_importance(residual_net, batches):
    with torch.no_grad():
        residual_net.conv1.weight[2].zero_()
        residual_net.conv1.bias[2] = -1.0  # relu(bn(...)) with beta=0 and running_mean=0 stays 0
        residual_net.bn1.bias.zero_()
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    crit = info.group_criteria[0]
    assert crit[2] == 0.0 and (np.delete(crit, 2) > 0).all()


def module_state(model):
    """Everything on the modules besides tensors' values: flags, own attributes (container contents by identity),
    hook dictionaries, parameter/buffer objects."""
    out = {}
    for name, m in model.named_modules():
        entries = {}
        for key, value in m.__dict__.items():
            if isinstance(value, dict):
                entries[key] = (id(value), [(k, id(v)) for k, v in value.items()])
            elif isinstance(value, (list, set)):
                entries[key] = (id(value), sorted(id(v) for v in value))
            else:
                entries[key] = (id(value), value if isinstance(value, (bool, int, float, str, type(None))) else None)
        out[name] = entries
    return out


def snapshot(model):
    return ({k: v.clone() for k, v in model.state_dict().items()}, {m: m.training for m in model.modules()},
            [(p.grad.clone() if p.grad is not None else None) for p in model.parameters()],
            [p.requires_grad for p in model.parameters()], module_state(model))


def assert_unchanged(model, snap, x, expected_out):
    state, modes, grads, flags, modules = snap
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert {m: m.training for m in model.modules()} == modes
    for p, g in zip(model.parameters(), grads):
        assert (p.grad is None and g is None) or torch.equal(p.grad, g)
    assert [p.requires_grad for p in model.parameters()] == flags
    assert module_state(model) == modules  # hooks, flags, attributes, caches: all as before
    for m in model.modules():
        assert not m._forward_pre_hooks and not m._forward_hooks and "forward" not in m.__dict__
    was_training = model.training
    with torch.no_grad():
        assert torch.equal(model.eval()(x), expected_out)
    model.train(was_training)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("how", ["function", "context"])
def test_model_left_exactly_unchanged(residual_net, batches, train, how):
    with torch.no_grad():
        expected = residual_net.eval()(batches[0]).clone()
    residual_net.train(train)
    residual_net.conv1.weight.grad = torch.ones_like(residual_net.conv1.weight)  # a user's gradient survives
    residual_net.fc.weight.requires_grad_(False)
    snap = snapshot(residual_net)
    if how == "function":
        calibrate_model_for_pruning(residual_net, batches, mse_loss)
    else:
        with PruningCalibrator(residual_net):
            for x in batches:
                mse_loss(residual_net(x), x).backward()
    assert residual_net.training == train
    assert_unchanged(residual_net, snap, batches[0], expected)


class CachingAttention(nn.Module):
    """Caches a tensor computed from a parameter in eval mode, like timm's LeViT/EfficientFormer attention biases."""

    def __init__(self, channels):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels))
        self.register_buffer("idx", torch.arange(channels).flip(0))
        self.cache = {}

    def biases(self):
        if self.training:
            return self.bias[self.idx]
        if "b" not in self.cache:
            self.cache["b"] = self.bias[self.idx]
        return self.cache["b"]

    def forward(self, x):
        return x + self.biases().view(1, -1, 1, 1)


class CachingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.attn = CachingAttention(6)
        self.conv2 = nn.Conv2d(6, 2, 1)

    def forward(self, x):
        return self.conv2(torch.relu(self.attn(self.bn(self.conv1(x)))))


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_modules_caching_tensors_between_calls_calibrate_in_both_modes(batches, train):
    """Each step starts from the user's module attributes: an eval-mode cache filled by the tracing or the
    previous step is never reused (its graph is freed after the first backward), and it is empty afterwards."""
    torch.manual_seed(0)
    net = CachingNet().train(train)
    with torch.no_grad():
        expected = copy.deepcopy(net).eval()(batches[0])
    snap = snapshot(net)
    info = calibrate_model_for_pruning(net, batches * 2, mse_loss)
    assert info.n_steps == 4 and net.attn.cache == {}
    assert_unchanged(net, snap, batches[0], expected)


def test_cache_with_history_from_before_calibration_is_a_clear_error(batches):
    torch.manual_seed(0)
    net = CachingNet().eval()
    net(batches[0])  # the user ran the model with autograd on: the cache now holds a graph
    with pytest.raises(RuntimeError, match=r"calibration step 1: backward failed because the forward pass reused "
                                           r"tensors computed in an earlier pass.*call model.train\(\)"):
        calibrate_model_for_pruning(net, batches, mse_loss)
    assert list(net.attn.cache) == ["b"]  # the user's cache is left as it was


def timm_model(name, **kwargs):
    import timm
    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("name,size,batch,train", [("levit_128s", 64, 2, False), ("levit_128s", 64, 2, True),
                                                   ("efficientformer_l1", 224, 1, False)])
def test_timm_models_with_attention_bias_caches_calibrate(name, size, batch, train):
    """Issue 18: their cached attention biases made eval-mode calibration fail; both modes work and leave the
    model unchanged (efficientformer's attention needs 224x224; train mode is the same code path)."""
    model = timm_model(name, img_size=size) if name == "levit_128s" else timm_model(name)
    model.train(train)
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model.eval()(x)
    model.train(train)
    snap = snapshot(model)
    info = calibrate_model_for_pruning(model, [x, x], lambda out, s: out.pow(2).mean())
    assert info.n_steps == 2 and info.n_prunable_groups > 0
    assert all(np.isfinite(c).all() for c in info.group_criteria)
    assert_unchanged(model, snap, x, expected)


def test_gates_do_not_change_outputs(residual_net, batches):
    with torch.no_grad():
        expected = residual_net(batches[0])
    with PruningCalibrator(residual_net) as calibrator:
        out = residual_net(batches[0])
        assert torch.equal(out, expected)
        out.pow(2).mean().backward()
        assert torch.equal(residual_net(batches[0]), expected)
    assert calibrator.pruning_info.n_steps == 2


def test_entry_point_submodule():
    torch.manual_seed(0)
    net = Wrapper()
    info = calibrate_model_for_pruning(net, [torch.randn(2, 3, 8, 8)], mse_loss, entry_point="backbone.forward")
    assert info.entry_point == "backbone.forward" and info.n_prunable_groups == 1
    assert info.groups[0].root_name == "backbone.0"
    for m in net.modules():
        assert "forward" not in m.__dict__ and not m._forward_pre_hooks


def test_show_tqdm(capsys, residual_net, batches):
    calibrate_model_for_pruning(residual_net, batches, mse_loss, show_tqdm=True)
    err = capsys.readouterr().err
    assert "calibration" in err and "2/2" in err and "samples=4" in err


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("terminal,show_tqdm,shown", [(True, None, True), (False, None, False), (True, False, False),
                                                      (False, True, True)])
def test_progress_is_shown_by_default_on_a_terminal_only(monkeypatch, residual_net, batches, terminal, show_tqdm,
                                                         shown):
    stream = FakeTerminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    calibrate_model_for_pruning(residual_net, batches, mse_loss, show_tqdm=show_tqdm)
    assert ("calibration" in stream.getvalue()) == shown


def test_pruning_info_is_none_until_a_context_completed(residual_net, batches):
    calibrator = PruningCalibrator(residual_net)
    assert calibrator.pruning_info is None  # not used as a context manager yet (ENOT: None)
    with calibrator:
        assert calibrator.pruning_info is None
    assert calibrator.pruning_info is None  # the entry point was never called
    with calibrator:
        mse_loss(residual_net(batches[0]), None).backward()
    assert calibrator.pruning_info.n_steps == 1


def test_documented_calibrator_example_runs_as_written(residual_net, batches):
    baseline_model = model = residual_net
    dataloader = [(x, torch.zeros(2)) for x in batches]
    loss_function = lambda out, labels: (out - labels[:, None]).pow(2).mean()
    p_calibrator = PruningCalibrator(
        model=baseline_model,
    )
    with p_calibrator:
        for inputs, labels in dataloader:
            model_output = model(inputs)
            loss = loss_function(model_output, labels)
            loss.backward()
    assert p_calibrator.pruning_info.n_prunable_groups == 3
    assert all(p.grad is None for p in model.parameters())  # the model is left as it was


def test_exception_inside_context_restores_model(residual_net, batches):
    calibrator = PruningCalibrator(residual_net)
    with pytest.raises(KeyError):
        with calibrator:
            residual_net(batches[0])
            raise KeyError("user error")
    for m in residual_net.modules():
        assert not m._forward_pre_hooks and "forward" not in m.__dict__
    assert calibrator.pruning_info is None


def test_loss_unrelated_to_the_output_is_refused(residual_net, batches):
    """Issue 15: such a loss gave every channel importance 0, and pruning followed channel index order."""
    snap = snapshot(residual_net)
    with torch.no_grad():
        expected = residual_net(batches[0])
    with pytest.raises(ValueError, match="zero importance for all 23 prunable channels of 3 groups: the loss does "
                                         "not depend on them"):
        calibrate_model_for_pruning(residual_net, batches, lambda out, x: 0.0 * out.sum())
    with pytest.raises(ValueError, match="loss_function returned a tensor that does not require grad"):
        calibrate_model_for_pruning(residual_net, batches, lambda out, x: x.pow(2).mean())
    assert_unchanged(residual_net, snap, batches[0], expected)


def test_groups_whose_channels_tie_are_named_in_a_warning(residual_net, batches):
    with torch.no_grad():  # conv1's output never reaches the loss: bn1 scales it to zero
        residual_net.bn1.weight.zero_()
        residual_net.bn1.bias.zero_()
    with pytest.warns(RuntimeWarning, match="same for every channel of 1 group\\(s\\) 'conv1' \\(6 channels, all 0\\)"):
        info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    assert not info.group_criteria[0].any() and info.group_criteria[1].any()


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(n_steps=0), ValueError, "n_steps must be None or a positive integer, got 0"),
    (dict(n_steps=1.5), ValueError, "n_steps must be None or a positive integer, got 1.5"),
    (dict(epochs=0), ValueError, "epochs must be a positive integer, got 0"),
    (dict(entry_point="nope.forward"), ValueError, "the model has no submodule 'nope'"),
    (dict(entry_point=None), TypeError, "entry_point must be a non-empty string"),
    (dict(max_prunable_labels=1), ValueError, "max_prunable_labels must be an integer >= 2, got 1"),
    (dict(loss_function=3), TypeError, "loss_function must be callable, got int"),
])
def test_bad_arguments(residual_net, batches, kwargs, error, match):
    args = dict(model=residual_net, dataloader=batches, loss_function=mse_loss)
    args.update(kwargs)
    snap = snapshot(residual_net)
    with torch.no_grad():
        expected = residual_net(batches[0])
    with pytest.raises(error, match=match):
        calibrate_model_for_pruning(**args)
    assert_unchanged(residual_net, snap, batches[0], expected)


def test_empty_dataloader_and_bad_loss(residual_net, batches):
    snap = snapshot(residual_net)
    with torch.no_grad():
        expected = residual_net(batches[0])
    with pytest.raises(ValueError, match="dataloader yielded no samples"):
        calibrate_model_for_pruning(residual_net, [], mse_loss)
    with pytest.raises(ValueError, match="loss_function must return a scalar tensor"):
        calibrate_model_for_pruning(residual_net, batches, lambda out, x: out)
    assert_unchanged(residual_net, snap, batches[0], expected)


def test_not_a_module():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got list"):
        PruningCalibrator([])
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got str"):
        calibrate_model_for_pruning("model", [1], mse_loss)


def test_calibration_under_no_grad_is_a_clear_error(residual_net, batches):
    with pytest.raises(RuntimeError, match="needs autograd"):
        with PruningCalibrator(residual_net), torch.no_grad():
            residual_net(batches[0])
