import copy
import os

import numpy as np
import pytest
import torch
from torch import nn

import sparsify_torch
from sparsify import nm_kept_magnitude
from sparsify_torch import PermutationReport, permute_for_nm

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def conv_bn_linear(seed: int = 0) -> nn.Module:
    """Conv + BN + ReLU twice, pooled, then two Linear layers; BN statistics are not the identity."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 10))
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
                m.weight.normal_()
                m.bias.normal_()
    return net.eval()


class TwoReaders(nn.Module):
    """conv1's channels are read by a conv (one column each) and, flattened, by a Linear (4 columns each)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(2, 8, 1)
        self.conv2 = nn.Conv2d(8, 4, 2)
        self.fc = nn.Linear(8 * 2 * 2, 4)

    def forward(self, x):
        h = torch.relu(self.conv1(x))
        return self.conv2(h).flatten(1) + self.fc(h.flatten(1))


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def test_exported():
    assert sparsify_torch.permute_for_nm is permute_for_nm
    assert "permute_for_nm" in sparsify_torch.__all__


def test_conv_bn_linear_keeps_outputs_and_raises_kept_magnitude():
    net = conv_bn_linear()
    before = copy.deepcopy(net)
    x = torch.randn(4, 3, 8, 8)
    report = permute_for_nm(net, (x,), "2:4", rounds=20)
    assert isinstance(report, PermutationReport)
    with torch.no_grad():
        assert rel_diff(net(x), before(x)) <= 1e-5
        assert rel_diff(net(torch.randn(2, 3, 8, 8) * 3), before(torch.randn(2, 3, 8, 8) * 3)) > 0  # other data
    assert report.max_rel_diff <= 1e-5
    assert report.permuted == ["0", "3", "8"]
    assert report.skipped == {"10": "not prunable: channels reach the traced output"}
    assert sorted(report.layers) == ["10.weight", "3.weight", "8.weight"]
    for name, (kept_before, kept_after) in report.layers.items():
        module = name.rsplit(".", 1)[0]
        old = before.get_submodule(module).weight.detach().numpy()
        new = net.get_submodule(module).weight.detach().numpy()
        assert kept_before == pytest.approx(nm_kept_magnitude(old, "2:4"))
        assert kept_after == pytest.approx(nm_kept_magnitude(new, "2:4"))
        assert kept_after >= kept_before
    assert report.total_after > report.total_before
    # the producer's output rows moved with its consumer's columns: the same set of rows, reordered
    rows_old = before[0].weight.detach().reshape(16, -1).numpy()
    rows_new = net[0].weight.detach().reshape(16, -1).numpy()
    order = [int(np.flatnonzero((rows_old == r).all(axis=1))[0]) for r in rows_new]
    assert sorted(order) == list(range(16)) and order != list(range(16))
    assert torch.equal(net[1].running_mean, before[1].running_mean[order])


def test_flattened_reader_moves_with_the_group():
    torch.manual_seed(1)
    net = TwoReaders()
    before = copy.deepcopy(net)
    x = torch.randn(3, 2, 2, 2)
    report = permute_for_nm(net, (x,), "2:4", rounds=10)
    assert report.permuted == ["conv1"]
    assert list(report.layers) == ["conv2.weight"]          # the Linear reads 4 columns per channel: not scored
    with torch.no_grad():
        assert rel_diff(net(x), before(x)) <= 1e-5
    assert not torch.equal(net.fc.weight, before.fc.weight)


@pytest.mark.slow
def test_resnet18_outputs_unchanged_and_more_magnitude_kept():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None).eval()
    before = copy.deepcopy(net)
    x = torch.randn(2, 3, 64, 64)
    report = permute_for_nm(net, (x,), "2:4", rounds=0, max_rows=256)      # no time limit: the same on any machine
    with torch.no_grad():
        assert rel_diff(net(x), before(x)) <= 1e-5
    assert "conv1" in report.permuted and "layer4.0.conv1" in report.permuted
    assert report.skipped["fc"] == "not prunable: channels reach the traced output"
    assert report.total_after > report.total_before
    assert {"layer1.0.conv1.weight", "layer4.1.conv2.weight", "fc.weight"} <= set(report.layers)


def test_train_mode_model_with_dropout_keeps_mode_and_statistics():
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4)).train()
    stats = net[1].running_mean.clone()
    x = torch.randn(6, 8)
    report = permute_for_nm(net, (x,), "2:4", rounds=5)
    assert report.permuted == ["0"] and net.training and net[3].training
    order = torch.as_tensor(report.permutations["0"])
    assert torch.equal(net[1].running_mean, stats[order])
    assert sorted(report.permutations["0"].tolist()) == list(range(16))


def test_bad_arguments_leave_the_model_alone():
    net = conv_bn_linear()
    state = copy.deepcopy(net.state_dict())
    x = (torch.randn(1, 3, 8, 8),)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        permute_for_nm("net", x)
    with pytest.raises(ValueError, match="N:M pattern"):
        permute_for_nm(net, x, "1x2")
    with pytest.raises(ValueError, match="tolerance"):
        permute_for_nm(net, x, tolerance=-1)
    pruned = sparsify_torch.prune(conv_bn_linear(), {"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0,
                                                     "end_step": 0, "skip_incompatible_layers": True})
    with pytest.raises(ValueError, match="parametrizations"):
        permute_for_nm(pruned.model, x)
    assert all(torch.equal(v, state[k]) for k, v in net.state_dict().items())


class Drifting(nn.Module):
    """Its output depends on how often it was called: the output check must fail."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc2(torch.relu(self.fc1(x))) * self.calls


def test_changed_outputs_restore_the_model():
    torch.manual_seed(0)
    net = Drifting()
    state = copy.deepcopy(net.state_dict())
    with pytest.raises(RuntimeError, match="restored"):
        permute_for_nm(net, (torch.randn(3, 4),), rounds=2)
    assert all(torch.equal(v, state[k]) for k, v in net.state_dict().items())


def test_transformers_conv1d_is_permuted_as_the_linear_holding_its_transpose():
    pytest.importorskip("transformers")
    from transformers.pytorch_utils import Conv1D       # weight stored (in, out)

    torch.manual_seed(0)
    conv = nn.Sequential(Conv1D(16, 8), nn.GELU(), Conv1D(8, 16))
    lin = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    with torch.no_grad():
        for c, l in ((conv[0], lin[0]), (conv[2], lin[2])):
            c.weight.normal_()
            c.bias.normal_()
            l.weight.copy_(c.weight.T)
            l.bias.copy_(c.bias)
    x = torch.randn(3, 8)
    with torch.no_grad():
        before = conv(x)
    got = permute_for_nm(conv, (x,), "2:4", rounds=5)
    want = permute_for_nm(lin, (x,), "2:4", rounds=5)
    assert got.permuted == want.permuted == ["0"] and got.skipped == want.skipped
    assert np.array_equal(got.permutations["0"], want.permutations["0"])
    assert got.layers == want.layers and list(got.layers) == ["2.weight"]
    assert got.total_after > got.total_before
    for c, l in ((conv[0], lin[0]), (conv[2], lin[2])):      # the same permuted weights, transposed
        assert torch.equal(c.weight.T, l.weight) and torch.equal(c.bias, l.bias)
    with torch.no_grad():
        assert rel_diff(conv(x), before) < 1e-5


@pytest.mark.slow
def test_gpt2_mlp_channels_are_permuted_for_2_of_4():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=16, bos_token_id=0, eos_token_id=0)).eval()
    ids = torch.randint(0, 32, (2, 6))
    with torch.no_grad():
        before = model(ids).logits
    c_proj = model.transformer.h[0].mlp.c_proj.weight.detach().T.numpy().copy()      # (out, in) = (16, 64)
    report = permute_for_nm(model, (ids,), "2:4", rounds=5)
    assert "transformer.h.0.mlp.c_fc" in report.permuted
    perm = report.permutations["transformer.h.0.mlp.c_fc"]
    assert np.array_equal(model.transformer.h[0].mlp.c_proj.weight.detach().T.numpy(), c_proj[:, perm])
    assert report.layers["transformer.h.0.mlp.c_proj.weight"][1] > report.layers["transformer.h.0.mlp.c_proj.weight"][0]
    with torch.no_grad():
        assert rel_diff(model(ids).logits, before) < 1e-5


class Dense(nn.Module):
    """A user's linear layer storing its kernel (in, out), with no bias."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(n_in, n_out))
        self.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.kernel


def test_a_registered_linear_layer_kind_is_permuted_by_its_own_dims():
    from sparsify_torch.channels.tracing import LayerKind, register_layer_kind, unregister_layer_kind

    register_layer_kind(Dense, LayerKind.LINEAR, channel_dim=-1, in_dims={"kernel": 0},
                        out_dims={"kernel": 1, "bias": 0})
    try:
        torch.manual_seed(0)
        model = nn.Sequential(Dense(8, 16), nn.ReLU(), Dense(16, 4))
        twin = nn.Sequential(nn.Linear(8, 16, bias=False), nn.ReLU(), nn.Linear(16, 4, bias=False))
        with torch.no_grad():
            twin[0].weight.copy_(model[0].kernel.T)
            twin[2].weight.copy_(model[2].kernel.T)
        x = torch.randn(3, 8)
        got = permute_for_nm(model, (x,), "2:4", rounds=5)
        want = permute_for_nm(twin, (x,), "2:4", rounds=5)
        assert got.permuted == want.permuted == ["0"]
        assert np.array_equal(got.permutations["0"], want.permutations["0"])
        assert list(got.layers) == ["2.kernel"] and got.layers["2.kernel"] == want.layers["2.weight"]
        assert torch.equal(model[2].kernel.T, twin[2].weight) and torch.equal(model[0].kernel.T, twin[0].weight)
    finally:
        unregister_layer_kind(Dense)
