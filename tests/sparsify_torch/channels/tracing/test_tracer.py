"""Channel tracing on the patterns that broke graph walks: shuffles, splits, duplicated channels, reshapes,
broadcasts, free parameters, attention. Every prune below is checked by ``prune_model`` against the original
with the pruned channels zeroed, so a passing prune is an exact one."""
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from sparsify_torch.channels import calibrate_model_for_pruning, get_labels_for_uniform_pruning, prune_model
from sparsify_torch.channels.graph import analyze_channel_groups, build_dependency_graph
from sparsify_torch.channels.tracing import FREE, LayerKind, layer_kind, op_rules


def mse_loss(out, sample):
    return out.float().pow(2).mean()


def info_of(net, x):
    return calibrate_model_for_pruning(net, [x], mse_loss)


def prune_half(net, x):
    info = info_of(net, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return prune_model(net, info, get_labels_for_uniform_pruning(info, 0.5), inplace=False), info


def group(info, root):
    return next(g for g in info.groups if g.root_name == root)


class Shuffle(nn.Module):
    """ShuffleNet-v2 style: chunk in two, transform one half, concatenate, shuffle the channels."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 1)
        self.branch = nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4), nn.ReLU())
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        a, b = x.chunk(2, dim=1)
        y = torch.cat([a, self.branch(b)], dim=1)
        n, c, h, w = y.shape
        y = y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        return self.head(y)


def test_channel_shuffle_prunes_exactly():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 5, 5)
    pruned, info = prune_half(Shuffle().eval(), x)
    stem = group(info, "stem")
    # chunk: channel i and i + 4 of the stem go together; the shuffle pairs the branch's channel i with them
    assert (stem.n_labels, stem.width) == (4, 2) and stem.prunable
    assert next(s for s in stem.slots if s.role == "out").labels.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert next(s for s in stem.slots if s.name == "branch.0" and s.role == "out").labels.tolist() == [0, 1, 2, 3]
    assert (pruned.stem.out_channels, pruned.branch[0].in_channels, pruned.head.in_channels) == (4, 2, 4)


class Splits(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how
        self.stem = nn.Conv2d(3, 8, 1)
        self.left, self.right = nn.Conv2d(4, 2, 1), nn.Conv2d(4, 2, 1)

    def forward(self, x):
        y = self.stem(x)
        a, b = y.chunk(2, 1) if self.how == "chunk" else y.split(4, 1) if self.how == "int" else y.split([4, 4], 1)
        return self.left(a) + self.right(b)


@pytest.mark.parametrize("how,reason", [
    ("chunk", ""),
    ("int", "split of channels with size 4 stored in the model"),
    ("list", "split of channels with sizes [4, 4] stored in the model"),
])
def test_split_sizes_written_in_the_model_are_not_pruned(how, reason):
    stem = analyze_channel_groups(Splits(how), "forward", (torch.zeros(1, 3, 2, 2),), {})[0]
    assert stem.reason == reason
    if how == "chunk":
        assert (stem.n_labels, stem.width) == (4, 2)


def test_mixed_conv_split_sizes_are_rewritten():
    timm = pytest.importorskip("timm")
    from timm.layers import MixedConv2d

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 10, 1)
            self.mix = MixedConv2d(10, 10, kernel_size=[3, 5], depthwise=True)
            self.head = nn.Conv2d(10, 2, 1)

        def forward(self, x):
            return self.head(torch.relu(self.mix(torch.relu(self.stem(x)))))

    torch.manual_seed(0)
    pruned, info = prune_half(Mixed().eval(), torch.randn(1, 3, 6, 6))
    assert group(info, "stem").split_owners == ["mix"]
    assert pruned.mix.splits == [pruned.mix["0"].in_channels, pruned.mix["1"].in_channels] and \
        sum(pruned.mix.splits) == pruned.stem.out_channels == 5


class Ghost(nn.Module):
    """GhostNet: a channel and its depthwise copy are concatenated, then a residual add."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 1)
        self.primary = nn.Conv2d(8, 4, 1)
        self.cheap = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        x = self.stem(x)
        x1 = torch.relu(self.primary(x))
        out = torch.cat([x1, self.cheap(x1)], dim=1)[:, :8]
        out += x  # in place on a (full) view, like timm's GhostBottleneck
        return self.head(out)


def test_duplicated_channels_share_one_label():
    torch.manual_seed(0)
    pruned, info = prune_half(Ghost().eval(), torch.randn(1, 3, 4, 4))
    stream = group(info, "stem")  # the residual ties the stem to the primary channels and their copies
    assert (stream.n_labels, stream.width, stream.prunable) == (4, 2, True)  # one label per primary channel
    head_in = next(s for s in stream.slots if s.name == "head")
    assert head_in.labels.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    # 2 of 4 labels go: 2 primary channels, their 2 copies, 4 of the 8 stream channels
    assert (pruned.primary.out_channels, pruned.cheap.out_channels, pruned.stem.out_channels,
            pruned.head.in_channels) == (2, 2, 4, 4)


class Merge(nn.Module):
    """Reshape that merges pairs of channels into one channel of twice the height (issue 15's reshape-merging)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 1)
        self.b = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        n, c, h, w = y.shape
        return self.b(y.reshape(n, c // 2, 2 * h, w))


def test_reshape_merging_channels_prunes_whole_merged_channels():
    torch.manual_seed(0)
    net = Merge().eval()
    with torch.no_grad():
        net.a.weight[[2, 3]] = 0.0  # channels 2 and 3 (merged channel 1) are all zero after the ReLU
        net.a.bias[[2, 3]] = -1.0
    x = torch.randn(1, 3, 3, 3)
    info = info_of(net, x)
    g = group(info, "a")
    assert (g.n_labels, g.width) == (4, 2)  # channel 2c and 2c + 1 become one merged channel
    assert np.flatnonzero(info.group_criteria[0] == 0).tolist() == [1]
    small = prune_model(net, info, [1], inplace=False)
    assert (small.a.out_channels, small.b.in_channels) == (6, 3)
    with torch.no_grad():
        torch.testing.assert_close(small(x), net(x))


class Redeal(nn.Module):
    """A flat reshape (channels, length) = (6, 5) -> (5, 6): elements are dealt out again, no channel survives."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(3, 6, 1)
        self.b = nn.Conv1d(5, 2, 1)

    def forward(self, x):
        y = self.a(x)
        return self.b(y.reshape(y.shape[0], 5, 6))


def test_reshape_that_redeals_channels_is_refused_naming_the_layer():
    g = analyze_channel_groups(Redeal(), "forward", (torch.zeros(1, 3, 5),), {})[0]
    assert g.reason == "reshape (1, 6, 5) -> (1, 5, 6) re-deals channels"


class Broadcasts(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 6, 1)
        self.gate = nn.Conv2d(6, 6, 1)
        self.spatial = nn.Conv2d(3, 1, 1)
        self.b = nn.Conv2d(6, 2, 1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        se = torch.sigmoid(self.gate(y.mean((2, 3), keepdim=True)))  # per channel: joined with y
        mask = torch.sigmoid(self.spatial(x))  # one map for every channel: does not tie y's channels
        return self.b(y * se * mask)


def test_broadcasts_tie_per_channel_gates_but_not_spatial_maps():
    torch.manual_seed(0)
    pruned, info = prune_half(Broadcasts().eval(), torch.randn(1, 3, 4, 4))
    a = group(info, "a")
    assert a.prunable and a.members == ["a:out", "gate:out", "gate:in", "b:in"]
    assert (pruned.a.out_channels, pruned.gate.out_channels, pruned.gate.in_channels) == (3, 3, 3)
    assert group(info, "spatial").reason == "mul: one operand is broadcast across channels"
    assert info.unpruned_summary() == ""  # a single channel is never prunable: not reported as left over


class TinyViT(nn.Module):
    """Class token, position embedding, LayerNorm and an MLP on the token stream (no attention)."""

    def __init__(self, dim=8):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 2, stride=2)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 5, dim))
        self.norm = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, 16), nn.Linear(16, dim)
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1) + self.pos
        t = t + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(t))))
        return self.head(t[:, 0])


def test_token_stream_with_free_parameters_and_layer_norm_prunes_exactly():
    torch.manual_seed(0)
    pruned, info = prune_half(TinyViT().eval(), torch.randn(2, 3, 4, 4))
    stream = group(info, "patch")
    assert stream.prunable and {"cls:param", "pos:param", "norm:through"} <= set(stream.members)
    assert (pruned.patch.out_channels, pruned.cls.shape, pruned.pos.shape, pruned.norm.normalized_shape) == \
        (4, (1, 1, 4), (1, 5, 4), (4,))


def test_attention_modules_fix_their_inputs():
    class WithMHA(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 8)
            self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
            self.mlp = nn.Linear(8, 16)
            self.out = nn.Linear(16, 2)

        def forward(self, x):
            y = self.a(x)
            y = y + self.mha(y, y, y, need_weights=False)[0]
            return self.out(torch.relu(self.mlp(y)))

    groups = {g.root_name: g for g in analyze_channel_groups(WithMHA(), "forward", (torch.zeros(2, 4, 3),), {})}
    assert groups["a"].reason == "inputs of MultiheadAttention 'mha' (its channels are not followed inside it)"
    assert groups["mlp"].prunable


def test_trace_budget_and_internal_errors(monkeypatch):
    net = Broadcasts().eval()
    x = torch.zeros(1, 3, 4, 4)
    with pytest.raises(RuntimeError, match="tracing stopped after 3 aten ops"):
        build_dependency_graph(net, "forward", (x,), {}, max_ops=3)

    def broken(*args):
        raise KeyError("boom")

    monkeypatch.setattr(op_rules, "pointwise", broken)  # the rule the table gives pointwise ops
    trace = build_dependency_graph(net, "forward", (x,), {})
    assert trace.errors and "could not be followed (KeyError: 'boom')" in trace.errors[0]
    with torch.no_grad():
        assert net(x).shape == (1, 2, 4, 4)  # the forward itself was not disturbed
    a = next(g for g in analyze_channel_groups(net, "forward", (x,), {}, graph_and_outputs=trace)
             if g.root_name == "a")
    assert not a.prunable and "could not be followed" in a.reason


def test_layer_kinds():
    assert [layer_kind(m) for m in (nn.Conv2d(2, 2, 1), nn.Conv2d(4, 8, 1, groups=4), nn.Conv2d(4, 8, 1, groups=2),
                                   nn.ConvTranspose2d(2, 3, 2), nn.Linear(2, 2), nn.BatchNorm2d(2), nn.LayerNorm(2),
                                   nn.GroupNorm(2, 4), nn.PReLU(3), nn.PReLU(), nn.MultiheadAttention(4, 2),
                                   nn.Sequential())] == \
        ["conv", "dw", "gconv", "convt", "linear", "norm", "lnorm", "gnorm", "norm", "", "opaque", ""]
    assert layer_kind(nn.Conv2d(4, 8, 1, groups=4)) is LayerKind.DEPTHWISE and str(LayerKind.DEPTHWISE) == "dw"
    assert FREE == -1
