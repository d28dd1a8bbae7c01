"""Channel groups from the channel trace: labels, members, consumers, segments, reasons."""
import numpy as np
import pytest
import torch
from torch import nn

from conftest import ResidualNet, Wrapper
from sparsify_torch.channels.graph import analyze_channel_groups, resolve_entry_point


def groups_of(model, entry="forward", x=None, **kwargs):
    x = torch.zeros(2, 3, 8, 8) if x is None else x
    return analyze_channel_groups(model, entry, (x,), {}, **kwargs)


def slot(group, name, role):
    return next(s for s in group.slots if s.name == name and s.role == role)


def test_residual_concat_depthwise_flatten_groups():
    groups = groups_of(ResidualNet().eval())
    assert [(g.root_name, g.n_labels, g.n_channels, g.width, g.prunable) for g in groups] == [
        ("conv1", 6, 6, 1, True), ("dw", 12, 12, 1, True), ("head", 5, 5, 1, True), ("fc", 3, 3, 1, False)]
    stream = groups[1]  # stem + residual add + concat + depthwise: one group, two segments
    assert stream.members == ["stem:out", "stem_bn:through", "conv1:in", "conv2:out", "bn2:through", "side:out",
                              "side:in", "dw:through", "head:in"]
    assert stream.segments.tolist() == [0] * 8 + [1] * 4
    assert stream.segment_sources == ["stem:out, conv2:out", "side:out"]
    head_in = [c for c in stream.consumers if c.module_name == "head"][0]
    assert head_in.input_idxs.tolist() == list(range(12)) and head_in.root_idxs.tolist() == list(range(12))
    fc = groups[2].consumers[0]  # Linear after flatten: 16 features per channel
    assert fc.module_name == "fc" and fc.input_idxs.tolist() == list(range(80))
    assert fc.root_idxs.tolist() == [c for c in range(5) for _ in range(16)]
    assert groups[3].reason == "channels reach the traced output"


def test_entry_point_limits_the_traced_part():
    groups = groups_of(Wrapper(), "backbone.forward")
    assert [(g.root_name, g.prunable, g.reason) for g in groups] == [
        ("backbone.0", True, ""), ("backbone.2", False, "channels reach the traced output")]


class Grouped(nn.Module):
    def __init__(self, groups=2):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 1)
        self.g = nn.Conv2d(8, 12, 3, groups=groups)
        self.b = nn.Conv2d(12, 2, 1)

    def forward(self, x):
        return self.b(self.g(self.a(x)))


def test_grouped_convolution_ties_the_same_position_of_every_block():
    a, g, b = groups_of(Grouped())
    assert (a.root_name, a.n_labels, a.width, a.prunable) == ("a", 4, 2, True)
    assert slot(a, "a", "out").labels.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]  # channel i and i + 4 go together
    assert slot(a, "g", "in").labels.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert (g.n_labels, g.width, slot(g, "g", "out").labels.tolist()) == (6, 2, [0, 1, 2, 3, 4, 5] * 2)
    assert b.reason == "channels reach the traced output"


def test_depthwise_with_multiplier_passes_channels_through():
    net = nn.Sequential(nn.Conv2d(3, 4, 1), nn.Conv2d(4, 8, 3, groups=4), nn.Conv2d(8, 2, 1))
    first = groups_of(net)[0]
    assert first.members == ["0:out", "1:through", "2:in"]
    assert slot(first, "2", "in").labels.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]  # output 2i, 2i + 1 read input i


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.a(x).permute(0, 1, 3, 2)  # swaps height and width: channels stay put
        return self.b(y).sum(dim=(2, 3))


class ChannelMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.a(x)
        return self.b(y * y.mean(dim=1, keepdim=True))


class LayerScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.scale = nn.Parameter(torch.ones(4, 1, 1))
        self.b = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.b(self.a(x) * self.scale)


class StoredSlice(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 6, 1)
        self.b = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.b(self.a(x)[:, :4])


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x):
        y = self.a(x)
        return self.b(torch.softmax(y @ y.transpose(1, 2), -1) @ y)


def test_what_mixes_channels_is_marked_unprunable():
    assert groups_of(Transposed())[0].prunable
    assert groups_of(ChannelMean())[0].reason == "mean over channels (dim [1])"
    scaled = groups_of(LayerScale())[0]
    assert scaled.prunable and scaled.members == ["a:out", "b:in", "scale:param"]
    assert (slot(scaled, "scale", "param").dim, slot(scaled, "scale", "param").positions.tolist()) == (0, [0, 1, 2, 3])
    assert groups_of(StoredSlice())[0].reason == "slice [0:4:1] of channels (dim 1)"
    assert groups_of(Attention(), x=torch.zeros(2, 5, 3))[0].reason.startswith("op bmm may mix channels")


def test_max_prunable_labels_and_single_channel():
    net = nn.Sequential(nn.Conv2d(3, 1, 1), nn.Conv2d(1, 6, 1), nn.Conv2d(6, 2, 1))
    groups = analyze_channel_groups(net, "forward", (torch.zeros(1, 3, 4, 4),), {}, max_prunable_labels=5)
    assert [(g.root_name, g.reason) for g in groups] == [
        ("0", "only 1 channel"), ("1", "6 labels > max_prunable_labels=5"),
        ("2", "channels reach the traced output")]


def test_analysis_leaves_model_unchanged():
    net = ResidualNet().train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    rng = torch.get_rng_state()
    groups_of(net)
    assert net.training and all(m.training for m in net.modules())
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in net.modules())


def test_tracing_needs_autograd_enabled():
    with torch.no_grad(), pytest.raises(RuntimeError, match="needs autograd"):
        groups_of(ResidualNet())


@pytest.mark.parametrize("entry,error,match", [
    ("nothing.forward", ValueError, "entry_point='nothing.forward': the model has no submodule 'nothing'"),
    ("backbone.missing", ValueError, "entry_point='backbone.missing': Sequential has no callable method 'missing'"),
    ("training", ValueError, "has no callable method 'training'"),
    ("", TypeError, "entry_point must be a non-empty string"),
    (3, TypeError, "entry_point must be a non-empty string"),
])
def test_bad_entry_point(entry, error, match):
    with pytest.raises(error, match=match):
        resolve_entry_point(Wrapper(), entry)


def test_labels_order_follows_the_root_channels():
    groups = groups_of(Grouped(groups=4))
    a = groups[0]
    assert a.n_labels == 2 and a.width == 4
    root = slot(a, "a", "out")
    assert np.array_equal(root.positions, np.arange(8)) and root.labels.tolist() == [0, 1] * 4


def test_elementwise_activations_keep_channels_prunable():
    acts = [nn.PReLU(), nn.LogSigmoid(), nn.Hardswish(), nn.ELU(), nn.Mish(), nn.ReLU6(), nn.GELU(), nn.SiLU(),
            nn.Hardsigmoid(), nn.LeakyReLU(), nn.Softplus(), nn.Tanh(), nn.Dropout(0.5)]
    net = nn.Sequential(nn.Conv2d(3, 4, 1), *acts, nn.Conv2d(4, 2, 1)).train()
    assert groups_of(net)[0].reason == ""
