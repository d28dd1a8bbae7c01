"""Channel-group analysis over torch-pruning's dependency graph."""
import pytest
import torch
from torch import nn

from conftest import ResidualNet, Wrapper
from sparsify_torch.channels.graph import analyze_channel_groups, resolve_entry_point


def groups_of(model, entry="forward", x=None):
    x = torch.zeros(2, 3, 8, 8) if x is None else x
    return analyze_channel_groups(model, entry, (x,), {})


def test_residual_concat_depthwise_flatten_groups():
    groups = groups_of(ResidualNet().eval())
    assert [(g.root_name, g.n_channels, g.prunable) for g in groups] == [
        ("conv1", 6, True), ("dw", 12, True), ("head", 5, True), ("fc", 3, False)]
    stream = groups[1]  # stem + residual add + concat + depthwise: one group
    assert sorted(stream.members) == sorted(["dw:out", "head:in", "side:out", "side:in", "bn2:out", "conv2:out",
                                             "stem_bn:out", "conv1:in", "stem:out"])
    side = [c for c in stream.consumers if c.module_name == "head"][0]
    assert side.input_idxs.tolist() == list(range(12)) and side.root_idxs.tolist() == list(range(12))
    fc = groups[2].consumers[0]  # Linear after flatten: 16 features per channel
    assert fc.module_name == "fc" and fc.input_idxs.tolist() == list(range(80))
    assert fc.root_idxs.tolist() == [c for c in range(5) for _ in range(16)]
    assert groups[3].reason == "channels reach the traced output (fc)"


def test_entry_point_limits_the_traced_part():
    groups = groups_of(Wrapper(), "backbone.forward")
    assert [(g.root_name, g.prunable, g.reason) for g in groups] == [
        ("backbone.0", True, ""), ("backbone.2", False, "channels reach the traced output (backbone.2)")]


class Grouped(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 1)
        self.g = nn.Conv2d(8, 8, 3, groups=2)
        self.b = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        return self.b(self.g(self.a(x)))


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.a(x).permute(0, 1, 3, 2)
        return self.b(y).sum(dim=(2, 3))


class UnwrappedParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.scale = nn.Parameter(torch.ones(1, 4, 1, 1))
        self.b = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.b(self.a(x) * self.scale)


def test_unsafe_groups_are_marked_unprunable():
    reasons = {g.root_name: g.reason for g in groups_of(Grouped())}
    assert reasons["a"] == "grouped convolution g (groups=2)"
    assert reasons["g"] == "grouped convolution g (groups=2)"
    reasons = {g.root_name: g.reason for g in groups_of(Transposed())}
    assert reasons["a"] == "op PermuteBackward0 may mix channels"
    reasons = {g.root_name: g.reason for g in groups_of(UnwrappedParam())}
    assert reasons["a"].startswith("unsupported layer UnwrappedParameter")


def test_max_prunable_labels_and_single_channel():
    net = nn.Sequential(nn.Conv2d(3, 1, 1), nn.Conv2d(1, 6, 1), nn.Conv2d(6, 2, 1))
    groups = analyze_channel_groups(net, "forward", (torch.zeros(1, 3, 4, 4),), {}, max_prunable_labels=5)
    assert [(g.root_name, g.reason) for g in groups] == [
        ("0", "only 1 channel"), ("1", "6 channels > max_prunable_labels=5"),
        ("2", "channels reach the traced output (2)")]


def test_analysis_leaves_model_unchanged():
    net = ResidualNet().train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    groups_of(net)
    assert net.training and all(m.training for m in net.modules())
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


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
