"""Groups that span a concatenation: selection never empties one of its source layers."""
import numpy as np
import pytest
import torch
from torch import nn

from conftest import mse_loss
from sparsify.channels.selection import ChannelScores, uniform_pruning_labels
from sparsify_torch.channels import (OptimalPruningLabelSelector, TopKPruningLabelSelector,
                                     UniformPruningLabelSelector,
                                     calibrate_and_prune_model_equal, calibrate_model_for_pruning, prune_model)
from sparsify_torch.channels.metrics import count_macs


class ConcatNet(nn.Module):
    """cat(big: 6 channels, small: 2 channels) -> depthwise -> head: one group of 8 channels from two layers."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.big = nn.Conv2d(4, 6, 3, padding=1)
        self.small = nn.Conv2d(4, 2, 1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)  # ties the concatenated channels into one group
        self.head = nn.Conv2d(8, 4, 1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = torch.cat([torch.relu(self.big(x)), torch.relu(self.small(x))], dim=1)
        y = torch.relu(self.head(self.dw(y)))
        return self.fc(y.mean(dim=(2, 3)))


def weak_small_branch_net():
    """The small branch (and its depthwise channels) is scaled by 1e-3: its two channels are the least important."""
    torch.manual_seed(0)
    net = ConcatNet().eval()
    with torch.no_grad():
        for p in (net.small.weight, net.small.bias, net.dw.weight[6:], net.dw.bias[6:]):
            p.mul_(1e-3)
    return net


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, 8, 8, generator=g)]


def test_uniform_keeps_a_channel_in_both_branches(data):
    net = weak_small_branch_net()
    info = calibrate_model_for_pruning(net, data, mse_loss)
    concat = info.groups[1]
    assert (concat.root_name, concat.n_channels, concat.segment_sources) == ("dw", 8, ["big:out", "small:out"])
    assert [seg.tolist() for seg in info.group_segments] == [[0] * 4, [0] * 6 + [1] * 2, [0] * 4]
    crit = info.group_criteria[1]
    assert crit[6:].max() < crit[:6].min()  # the small branch is the least important
    # the naive choice (segments ignored) takes both small channels: labels 4 + 6, 4 + 7
    naive = uniform_pruning_labels(ChannelScores(info.group_labels, info.group_criteria), 0.5)
    assert {10, 11} <= set(naive)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(ValueError, match="would prune all 2 channels of segment 1 \\(labels 10..11\\) of group 1"):
        prune_model(net, info, naive)
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())
    # segment-aware: still exactly 4 of the 8 concat channels, one of them from the small branch
    labels = UniformPruningLabelSelector(0.5).select(info)
    by_group = info.split_labels(labels)
    assert {g: v.size for g, v in by_group.items()} == {0: 2, 1: 4, 2: 2}
    big_order = np.argsort(crit[:6], kind="stable")
    assert sorted(by_group[1].tolist()) == sorted(big_order[:3].tolist() + [6 + int(np.argmin(crit[6:]))])
    x = torch.randn(3, 3, 8, 8)
    pruned = prune_model(net, info, labels, inplace=False)
    assert (pruned.big.out_channels, pruned.small.out_channels, pruned.dw.in_channels, pruned.dw.out_channels,
            pruned.head.in_channels) == (3, 1, 4, 4, 4)
    with torch.no_grad():
        assert pruned(x).shape == (3, 3) and torch.isfinite(pruned(x)).all()


def test_equal_one_call_on_concat(data):
    pruned = calibrate_and_prune_model_equal(weak_small_branch_net(), data, mse_loss, pruning_ratio=0.5)
    assert (pruned.stem.out_channels, pruned.big.out_channels, pruned.small.out_channels) == (2, 3, 1)
    with torch.no_grad():
        assert pruned(data[0]).shape == (2, 3)


def test_optimal_search_space_keeps_every_branch(data):
    net = weak_small_branch_net()
    info = calibrate_model_for_pruning(net, data, mse_loss)
    latency = lambda m: float(count_macs(m, data[0][:1]))
    selector = OptimalPruningLabelSelector(net, latency, 0.5 * latency(net), n_search_steps=20,
                                           architecture_optimization_strategy=lambda n: (1, 1))
    labels = selector.select(info)
    # the smallest network keeps 1 stem, 1 + 1 concat (one per branch: no back-off, no failed trial), 1 head
    # channel; MACs on 8x8: stem 64*1*27 + big 64*1*9 + small 64*1 + dw 64*2*9 + head 64*2 + fc 3*1
    assert selector.minimal_network_latency == 1728 + 576 + 64 + 1152 + 128 + 3
    assert selector.pruning_cfg[1] <= 6
    pruned = prune_model(net, info, labels, inplace=False)
    assert latency(pruned) <= 0.5 * latency(net)
    assert pruned.big.out_channels >= 1 and pruned.small.out_channels >= 1
    # a layer-emptying config is rejected up front by the same rule the search uses
    with pytest.raises(ValueError, match="pruning_cfg\\[1\\] = 7 is not allowed: group 1 has 8 channels, so at most 6"):
        TopKPruningLabelSelector([0, 7, 0]).select(info)
