"""PruningCalibrator and calibrate_model_for_pruning."""
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


def snapshot(model):
    return ({k: v.clone() for k, v in model.state_dict().items()}, {m: m.training for m in model.modules()},
            [(p.grad.clone() if p.grad is not None else None) for p in model.parameters()],
            [p.requires_grad for p in model.parameters()])


def assert_unchanged(model, snap, x, expected_out):
    state, modes, grads, flags = snap
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert {m: m.training for m in model.modules()} == modes
    for p, g in zip(model.parameters(), grads):
        assert (p.grad is None and g is None) or torch.equal(p.grad, g)
    assert [p.requires_grad for p in model.parameters()] == flags
    for m in model.modules():
        assert not m._forward_pre_hooks and not m._forward_hooks and "forward" not in m.__dict__
    with torch.no_grad():
        assert torch.equal(model(x), expected_out)


@pytest.mark.parametrize("train", [False, True])
def test_model_left_exactly_unchanged(residual_net, batches, train):
    residual_net.train(train)
    with torch.no_grad():
        expected = residual_net.eval()(batches[0]).clone()
    residual_net.train(train)
    snap = snapshot(residual_net)
    calibrate_model_for_pruning(residual_net, batches, mse_loss)
    residual_net.train(train)
    residual_net.eval()
    assert_unchanged(residual_net, (snap[0], {m: False for m in residual_net.modules()}, snap[2], snap[3]),
                     batches[0], expected)


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


def test_pruning_info_before_and_during_context(residual_net, batches):
    calibrator = PruningCalibrator(residual_net)
    with pytest.raises(RuntimeError, match="entry point 'forward' was never called"):
        calibrator.pruning_info
    with calibrator:
        with pytest.raises(RuntimeError, match="available after the PruningCalibrator context exits"):
            calibrator.pruning_info
    with pytest.raises(RuntimeError, match="was never called"):
        calibrator.pruning_info


def test_exception_inside_context_restores_model(residual_net, batches):
    with pytest.raises(KeyError):
        with PruningCalibrator(residual_net):
            residual_net(batches[0])
            raise KeyError("user error")
    for m in residual_net.modules():
        assert not m._forward_pre_hooks and "forward" not in m.__dict__


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
