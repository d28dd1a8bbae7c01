"""ModelPruningInfo bookkeeping, summaries, achieved vs asked ratio, bad criteria."""
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from conftest import mse_loss
from sparsify_torch.channels import ModelPruningInfo, calibrate_and_prune_model_equal, calibrate_model_for_pruning
from sparsify_torch.channels.graph import analyze_channel_groups


def test_counts_labels_and_summary(residual_net, batches):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    assert isinstance(info, ModelPruningInfo)
    assert (info.n_groups, info.n_prunable_groups, info.n_labels, info.n_prunable_labels) == (4, 3, 26, 23)
    assert info.n_inner_labels == 23  # the classifier's outputs are not counted
    assert info.group_offsets.tolist() == [0, 6, 18, 23]
    assert [lab.tolist() for lab in info.group_labels] == [list(range(6)), list(range(6, 18)), list(range(18, 23))]
    assert info.prunable_group_indices == [0, 1, 2]
    s0 = info.summary(0)
    assert s0 == ("ModelPruningInfo(entry_point='forward'): 4 groups, 3 prunable, 26 labels, 23 prunable labels, "
                  "2 calibration steps")
    assert repr(info) == s0 and info.unpruned_summary() == ""
    s1 = info.summary(1).splitlines()
    assert len(s1) == 5 and "conv1" in s1[1] and "labels=0..5 prunable" in s1[1]
    assert "labels=23..25 unprunable: channels reach the traced output" in s1[4]
    s2 = info.summary(2).splitlines()
    assert len(s2) == 1 + 4 * 2 + 3 + 1  # + the segments of the concat group
    assert s2[2] == "      members: conv1:out, bn1:through, conv2:in" and s2[3].startswith("      criteria: min=")
    assert s2[6] == "      segments: 6..13 <- stem:out, conv2:out; 14..17 <- side:out"
    assert [seg.tolist() for seg in info.group_segments] == [[0] * 6, [0] * 8 + [1] * 4, [0] * 5]


@pytest.mark.parametrize("level", [3, -1, "1", True, None])
def test_summary_bad_level(residual_net, batches, level):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    with pytest.raises(ValueError, match="level must be 0, 1 or 2, got"):
        info.summary(level)


def test_nan_importance_names_the_group(residual_net, batches):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    criteria = {i: c for i, c in zip(info.prunable_group_indices, info.group_criteria)}
    criteria[1] = criteria[1].copy()
    criteria[1][[2, 5]] = np.nan
    with pytest.raises(ValueError, match=r"channel importance of group 1 \(root 'dw'\) is nan for 2 of its 12 labels "
                                         r"\(first: label 8\): the calibration loss or its gradient was not finite"):
        ModelPruningInfo(info.groups, criteria, info.entry_point, info.example_inputs)


def test_nan_loss_is_reported_with_the_group(residual_net, batches):
    with pytest.raises(ValueError, match="channel importance of group 0 \\(root 'conv1'\\) is nan"):
        calibrate_model_for_pruning(residual_net, batches, lambda out, s: out.sum() * float("nan"))


class ChannelMeanHead(nn.Module):
    """conv1 prunable; conv2's channels are averaged (a channel mean): unprunable, half of the labels."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x)))
        return self.conv3(y * y.mean(1, keepdim=True))


def test_achieved_ratio_is_reported_and_a_shortfall_warned():
    torch.manual_seed(0)
    net = ChannelMeanHead().eval()
    data = [torch.randn(1, 3, 6, 6)]
    with pytest.warns(UserWarning, match=r"pruning_ratio=0.5 cannot be reached: 0.250 of the 16 channel labels were "
                                         r"pruned \(1 of 3 groups prunable\); left unpruned: 1 groups \(8 labels\): "
                                         r"mean over channels \(dim \[1\]\) \(1 group\)"):
        pruned = calibrate_and_prune_model_equal(net, data, mse_loss, pruning_ratio=0.5)
    assert pruned.conv1.out_channels == 4 and pruned.conv2.out_channels == 8
    info = calibrate_model_for_pruning(net, data, mse_loss)  # the pruned model: its own info
    assert info.unpruned_summary() == "left unpruned: 1 groups (8 labels): mean over channels (dim [1]) (1 group)"


def test_record_pruning_and_mark_unprunable(residual_net, batches):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        info.record_pruning([0, 1, 2, 6, 7, 8], asked_ratio=0.25)  # 6 of 23: 0.26, no warning
    assert (info.achieved_ratio, info.asked_ratio) == (6 / 23, 0.25)
    assert "  pruned: 6 of 23 labels, ratio 0.261 (asked 0.25)" in info.summary().splitlines()
    info.mark_unprunable([2], "a reason")
    assert info.prunable_group_indices == [0, 1] and len(info.group_criteria) == 2
    assert info.unpruned_summary() == "left unpruned: 1 groups (5 labels): a reason (1 group)"
    with pytest.raises(ValueError, match="which is not prunable"):
        info.split_labels([18])


def test_groups_are_plain_data(residual_net):
    groups = analyze_channel_groups(residual_net, "forward", (torch.zeros(1, 3, 8, 8),), {})
    for g in groups:
        for s in g.slots:
            assert isinstance(s.positions, np.ndarray) and isinstance(s.labels, np.ndarray)
            assert s.positions.shape == s.labels.shape and s.labels.max() < g.n_labels
