"""Layer kinds and user-registered layers: a layer the tracer cannot follow becomes prunable once registered."""
import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from sparsify_torch.channels import calibrate_model_for_pruning, get_labels_for_uniform_pruning, prune_model
from sparsify_torch.channels.serialization import load_pruned_model, save_pruned_model
from sparsify_torch.channels.tracing import (LayerKind, custom_layer, input_channel_dim, layer_kind,
                                             register_layer_kind, unregister_layer_kind)


def mse_loss(out, sample):
    return out.float().pow(2).mean()


class Scale(nn.Module):
    """One factor per channel, applied with an einsum (a batched matmul inside: the tracer fixes its inputs)."""

    def __init__(self, channels):
        super().__init__()
        self.factor = nn.Parameter(torch.linspace(0.5, 1.5, channels))

    def forward(self, x):
        return torch.einsum("nchw,c->nchw", x, self.factor)


class PointConv(nn.Module):
    """A 1x1 convolution written as an einsum, channels first; the output channel count lives in ``width``."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.width = n_out
        self.weight = nn.Parameter(torch.randn(n_out, n_in, generator=torch.Generator().manual_seed(n_in)))
        self.bias = nn.Parameter(torch.linspace(-1, 1, n_out))

    def forward(self, x):
        return torch.einsum("oc,nchw->nohw", self.weight, x) + self.bias.view(1, -1, 1, 1)


class Dense(nn.Module):
    """A linear layer written with a matmul, channels last, sizes in ``n_in``/``n_out``."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.n_in, self.n_out = n_in, n_out
        self.weight = nn.Parameter(torch.randn(n_out, n_in, generator=torch.Generator().manual_seed(n_out)))

    def forward(self, x):
        return x @ self.weight.t()


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.scale = Scale(8)
        self.mid = PointConv(8, 6)
        self.head = nn.Conv2d(6, 2, 1)

    def forward(self, x):
        return self.head(torch.relu(self.mid(torch.relu(self.scale(self.stem(x))))))


class TokenNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Dense(4, 8)
        self.b = Dense(8, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, x):
        return self.out(torch.relu(self.b(torch.relu(self.a(x)))))


@pytest.fixture
def registered():
    register_layer_kind(Scale, LayerKind.PER_CHANNEL, in_dims={"factor": 0})
    register_layer_kind(PointConv, LayerKind.CONV, in_dims={"weight": 1}, out_dims={"weight": 0, "bias": 0},
                        out_channels="width")
    register_layer_kind(Dense, "linear", channel_dim=-1, in_dims={"weight": 1}, out_dims={"weight": 0},
                        in_channels="n_in", out_channels="n_out")
    yield
    for cls in (Scale, PointConv, Dense):
        unregister_layer_kind(cls)


def prune_half(net, x):
    info = calibrate_model_for_pruning(net, [x], mse_loss)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return prune_model(net, info, get_labels_for_uniform_pruning(info, 0.5), inplace=False), info


def roots(info):
    return {g.root_name: g for g in info.groups}


def test_unregistered_custom_layers_stay_unpruned():
    x = torch.randn(2, 3, 6, 6)
    groups = roots(calibrate_model_for_pruning(ConvNet(), [x], mse_loss))
    assert not groups["stem"].prunable and "may mix channels" in groups["stem"].reason
    assert "mid" not in groups  # an einsum is no producer: its channels are data
    assert layer_kind(Scale(2)) is LayerKind.TRACED and custom_layer(Scale(2)) is None


def test_registered_per_channel_and_conv_like_layers_prune_exactly(registered):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6)
    net = ConvNet().eval()
    pruned, info = prune_half(net, x)  # prune_model checks the result against the original with readers zeroed
    groups = roots(info)
    assert groups["stem"].prunable and groups["mid"].prunable
    assert sorted(groups["stem"].members) == ["mid:in", "scale:through", "stem:out"]
    assert sorted(groups["mid"].members) == ["head:in", "mid:out"]
    assert (pruned.stem.out_channels, pruned.scale.factor.shape, pruned.mid.weight.shape, pruned.mid.width,
            pruned.mid.bias.shape, pruned.head.in_channels) == (4, (4,), (3, 4), 3, (3,), 3)
    kept = [i for i in range(8) if i not in set(info.pruned_labels[:4])]
    assert torch.equal(pruned.scale.factor, net.scale.factor[kept])
    assert pruned(x).shape == (2, 2, 6, 6)


def test_registered_channels_last_linear_prunes_and_saves(registered, tmp_path):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 4)
    pruned, info = prune_half(TokenNet().eval(), x)
    groups = roots(info)
    assert [(g.root_name, g.n_labels, g.prunable) for g in info.groups] == [("a", 8, True), ("b", 6, True),
                                                                         ("out", 3, False)]
    assert (pruned.a.n_out, pruned.a.weight.shape, pruned.b.n_in, pruned.b.n_out, pruned.out.in_features) == \
        (4, (4, 4), 4, 3, 3)
    b_reads = next(s for s in groups["a"].slots if s.name == "b" and s.role == "in")
    assert b_reads.dim == -1 and input_channel_dim(pruned.b) == -1  # where calibration puts its gates
    path = tmp_path / "small.pt"
    save_pruned_model(pruned, path)  # the registered counts n_in/n_out are saved with the widths
    again = load_pruned_model(path, TokenNet)
    assert (again.a.n_out, again.b.n_in, again.b.n_out) == (4, 4, 3) and torch.equal(again(x), pruned(x))


@settings(max_examples=8, deadline=None)
@given(st.integers(2, 9), st.integers(2, 9), st.integers(1, 3), st.floats(0.1, 0.9))
def test_registered_layers_keep_their_sizes_consistent(hidden, width, tokens, ratio):
    register_layer_kind(Dense, LayerKind.LINEAR, channel_dim=-1, in_dims={"weight": 1}, out_dims={"weight": 0},
                        in_channels="n_in", out_channels="n_out")
    try:
        net = nn.Sequential(Dense(3, hidden), nn.GELU(), Dense(hidden, width), nn.Tanh(), nn.Linear(width, 2))
        x = torch.randn(2, tokens, 3, generator=torch.Generator().manual_seed(hidden * width))
        info = calibrate_model_for_pruning(net, [x], mse_loss)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            small = prune_model(net, info, get_labels_for_uniform_pruning(info, ratio), inplace=False)  # checked
    finally:
        unregister_layer_kind(Dense)
    assert small[0].n_out == small[0].weight.shape[0] == small[2].n_in == small[2].weight.shape[1]
    assert small[2].n_out == small[2].weight.shape[0] == small[4].in_features
    assert (small[0].n_out, small[2].n_out) == (hidden - min(math.ceil(ratio * hidden - 0.5), hidden - 1),
                                                width - min(math.ceil(ratio * width - 0.5), width - 1))


def test_registration_follows_subclasses_and_can_be_undone(registered):
    class Bigger(Scale):
        pass

    assert layer_kind(Bigger(3)) is LayerKind.PER_CHANNEL and custom_layer(Bigger(3)).n_in(Bigger(3)) == 3
    register_layer_kind(Bigger, LayerKind.OPAQUE)
    assert layer_kind(Bigger(3)) is LayerKind.OPAQUE and layer_kind(Scale(3)) is LayerKind.PER_CHANNEL
    unregister_layer_kind(Bigger)
    assert layer_kind(Bigger(3)) is LayerKind.PER_CHANNEL


def test_a_registration_that_does_not_fit_the_module_is_named(registered):
    class Wide(Dense):
        def __init__(self):
            super().__init__(4, 8)
            del self.n_out

    register_layer_kind(Scale, LayerKind.PER_CHANNEL, in_dims={"scale": 0})  # the tensor is called "factor"
    with pytest.raises(ValueError, match=r"Scale was registered with in_dims=\{'scale': 0\}, but its 'scale' is not a "
                                         r"tensor with a dimension 0 \(pass in_channels=...\)"):
        custom_layer(Scale(3)).n_in(Scale(3))
    with pytest.raises(ValueError, match="Wide was registered with out_channels='n_out', but its 'n_out' is None"):
        custom_layer(Wide()).n_out(Wide())


def test_a_built_in_base_class_can_be_traced_through():
    class Gate(nn.Linear):  # a Linear subclass whose forward is not a linear layer's
        def forward(self, x):
            return x * torch.sigmoid(self.bias)

    register_layer_kind(Gate, LayerKind.TRACED)
    try:
        assert layer_kind(Gate(3, 3)) is LayerKind.TRACED and layer_kind(nn.Linear(3, 3)) is LayerKind.LINEAR
    finally:
        unregister_layer_kind(Gate)


@pytest.mark.parametrize("call,error,match", [
    (lambda: register_layer_kind(Scale(2), LayerKind.PER_CHANNEL, in_dims={"factor": 0}), TypeError,
     "module_type must be an nn.Module subclass"),
    (lambda: register_layer_kind(int, LayerKind.OPAQUE), TypeError, "module_type must be an nn.Module subclass"),
    (lambda: register_layer_kind(Scale, LayerKind.DEPTHWISE), ValueError,
     r"kind must be one of LayerKind.CONV, LayerKind.LINEAR, LayerKind.PER_CHANNEL, LayerKind.OPAQUE, "
     r"LayerKind.TRACED for a registered layer, got <LayerKind.DEPTHWISE: 'dw'>"),
    (lambda: register_layer_kind(Scale, "scale"), ValueError, "kind must be one of .* got None"),
    (lambda: register_layer_kind(Scale, LayerKind.PER_CHANNEL), ValueError,
     "in_dims is required for kind LayerKind.PER_CHANNEL"),
    (lambda: register_layer_kind(Scale, LayerKind.PER_CHANNEL, in_dims={"factor": 0}, out_dims={"factor": 0}),
     ValueError, r"out_dims=\{'factor': 0\} is not allowed for kind LayerKind.PER_CHANNEL"),
    (lambda: register_layer_kind(Dense, LayerKind.LINEAR, in_dims={"weight": 1}), ValueError,
     "out_dims is required for kind LayerKind.LINEAR"),
    (lambda: register_layer_kind(Dense, LayerKind.LINEAR, in_dims={"weight": "1"}, out_dims={"weight": 0}),
     TypeError, r"in_dims must map attribute names \(str\) to dimensions \(int\), got 'weight': '1'"),
    (lambda: register_layer_kind(Dense, LayerKind.LINEAR, in_dims=[("weight", 1)], out_dims={"weight": 0}),
     TypeError, "in_dims must be a non-empty mapping"),
    (lambda: register_layer_kind(Dense, LayerKind.LINEAR, in_dims={"weight": 1}, out_dims={"weight": 0},
                                 in_channels=3), TypeError, "in_channels must be the name of an integer attribute"),
    (lambda: register_layer_kind(Scale, LayerKind.OPAQUE, in_channels="n"), ValueError,
     "in_channels='n' is not allowed for kind LayerKind.OPAQUE"),
    (lambda: register_layer_kind(Scale, LayerKind.PER_CHANNEL, channel_dim=1.0, in_dims={"factor": 0}), TypeError,
     "channel_dim must be an int"),
    (lambda: unregister_layer_kind(Scale), ValueError, "is not registered"),
])
def test_registration_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
    assert custom_layer(Scale(2)) is None and custom_layer(Dense(2, 2)) is None  # nothing was registered
