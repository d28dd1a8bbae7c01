"""Channel removal per layer type: literal shapes and kept weights."""
import pytest
import torch
from torch import nn

from sparsify_torch.channels.removal import keep_indices, remove_channels, remove_from_tensor


def test_conv_linear_and_transposed():
    conv = nn.Conv2d(4, 6, 3)
    w = conv.weight.detach().clone()
    old = conv.weight
    remove_channels(conv, out_positions=[1, 5], in_positions=[0])
    assert (conv.in_channels, conv.out_channels) == (3, 4) and conv.weight is not old
    assert torch.equal(conv.weight, w[[0, 2, 3, 4]][:, [1, 2, 3]]) and torch.equal(old, w)  # the old tensor is intact
    lin = nn.Linear(5, 3)
    w = lin.weight.detach().clone()
    remove_channels(lin, out_positions=[2], in_positions=[0, 4])
    assert (lin.in_features, lin.out_features, tuple(lin.bias.shape)) == (3, 2, (2,))
    assert torch.equal(lin.weight, w[[0, 1]][:, [1, 2, 3]])
    t = nn.ConvTranspose2d(4, 6, 2)
    w = t.weight.detach().clone()
    remove_channels(t, out_positions=[0], in_positions=[3])
    assert (t.in_channels, t.out_channels) == (3, 5) and torch.equal(t.weight, w[[0, 1, 2]][:, 1:])


def test_grouped_and_depthwise_convolutions():
    g = nn.Conv2d(8, 6, 1, groups=2)  # 4 inputs and 3 outputs per group
    w = g.weight.detach().clone()
    remove_channels(g, in_positions=[1, 5], out_positions=[2, 5])
    assert (g.in_channels, g.out_channels, g.groups) == (6, 4, 2)
    assert torch.equal(g.weight, w[[0, 1, 3, 4]][:, [0, 2, 3]])
    with pytest.raises(ValueError, match="must lose the same positions in each of its 2 groups"):
        remove_channels(nn.Conv2d(8, 6, 1, groups=2), in_positions=[1, 6])
    dw = nn.Conv2d(3, 6, 3, groups=3)  # multiplier 2: outputs 2i, 2i + 1 read input i
    w = dw.weight.detach().clone()
    remove_channels(dw, through_positions=[1])
    assert (dw.in_channels, dw.out_channels, dw.groups) == (2, 4, 2) and torch.equal(dw.weight, w[[0, 1, 4, 5]])


def test_normalisations():
    bn = nn.BatchNorm2d(4)
    bn.running_mean += torch.arange(4.0)
    remove_channels(bn, through_positions=[0, 2])
    assert bn.num_features == 2 and bn.running_mean.tolist() == [1.0, 3.0] and tuple(bn.weight.shape) == (2,)
    ln = nn.LayerNorm(5)
    remove_channels(ln, through_positions=[4])
    assert ln.normalized_shape == (4,) and tuple(ln.bias.shape) == (4,)
    gn = nn.GroupNorm(2, 8)
    remove_channels(gn, through_positions=[0, 4])
    assert gn.num_channels == 6 and tuple(gn.weight.shape) == (6,)
    with pytest.raises(ValueError, match="GroupNorm with 2 groups cannot keep 7 channels"):
        remove_channels(nn.GroupNorm(2, 8), through_positions=[0])
    pr = nn.PReLU(3)
    remove_channels(pr, through_positions=[1])
    assert pr.num_parameters == 2 and tuple(pr.weight.shape) == (2,)
    with pytest.raises(TypeError, match="cannot remove channels from a ReLU"):
        remove_channels(nn.ReLU(), out_positions=[0])


def test_free_parameters_and_buffers_keep_their_kind():
    m = nn.Module()
    m.scale = nn.Parameter(torch.arange(6.0).view(1, 6), requires_grad=False)
    m.register_buffer("table", torch.arange(6.0))
    remove_from_tensor(m, "scale", 1, [0, 5])
    remove_from_tensor(m, "table", 0, [1])
    assert isinstance(m.scale, nn.Parameter) and not m.scale.requires_grad and m.scale.tolist() == [[1, 2, 3, 4]]
    assert "table" in m._buffers and m.table.tolist() == [0.0, 2.0, 3.0, 4.0, 5.0]
    assert keep_indices(4, [3, 0]).tolist() == [1, 2]
