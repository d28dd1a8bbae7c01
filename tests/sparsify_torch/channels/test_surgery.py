"""prune_model: zero channels are selected and removing them changes nothing."""
import io

import numpy as np
import pytest
import torch
from torch import nn

from conftest import ResidualNet, mse_loss
from sparsify_torch.channels import (TopKPruningLabelSelector, calibrate_and_prune_model_equal,
                                     calibrate_model_for_pruning, get_labels_for_uniform_pruning, prune_model)
from sparsify_torch.channels.metrics import count_macs, count_params


def zeroed_net():
    """ResidualNet whose channels conv1[1, 4], stream[3, 9] and head[0] output exactly zero."""
    torch.manual_seed(0)
    net = ResidualNet().eval()
    with torch.no_grad():
        for conv, bn, chans in [(net.conv1, net.bn1, [1, 4]), (net.head, None, [0])]:
            conv.weight[chans] = 0.0
            conv.bias[chans] = 0.0 if bn is None else -1.0
            if bn is not None:
                bn.bias[chans] = 0.0
                bn.running_mean[chans] = 0.0
        # stream channel 3: stem output and the residual branch are zero -> x[:, 3] == 0
        for conv, bn in [(net.stem, net.stem_bn), (net.conv2, net.bn2)]:
            conv.weight[3] = 0.0
            conv.bias[3] = 0.0
            bn.bias[3] = 0.0
            bn.running_mean[3] = 0.0
        # concat channel 9 = side output 1
        net.side.weight[1] = 0.0
        net.side.bias[1] = -1.0
        net.dw.bias[[3, 9]] = 0.0  # the depthwise conv carries both channels on
    return net


def test_zero_channels_are_selected_and_removal_is_exact():
    net = zeroed_net()
    data = [torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    info = calibrate_model_for_pruning(net, data, mse_loss)
    crit = info.group_criteria
    assert [c.size for c in crit] == [6, 12, 5]
    assert np.flatnonzero(crit[0] == 0).tolist() == [1, 4]
    assert np.flatnonzero(crit[1] == 0).tolist() == [3, 9]
    # head channel 3 is dead after its ReLU on this data even without zeroing: also exactly zero
    dead = []
    hook = net.head.register_forward_hook(lambda m, i, o: dead.append((torch.relu(o) == 0).all(dim=(0, 2, 3))))
    with torch.no_grad():
        for x in data:
            net(x)
    hook.remove()
    assert torch.nonzero(dead[0] & dead[1]).flatten().tolist() == [0, 3]
    assert np.flatnonzero(crit[2] == 0).tolist() == [0, 3]
    # uniform 2/6 of conv1, 2/12 of the stream, 2/5 of head are exactly the zero channels
    labels = [1, 4] + [6 + 3, 6 + 9] + [18 + 0, 18 + 3]
    assert get_labels_for_uniform_pruning(info, 0.2) == [1, 6 + 3, 6 + 9, 18]  # ties: lower index first
    assert TopKPruningLabelSelector([2, 2, 2]).select(info) == labels
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        expected = net(x)
    pruned = prune_model(net, info, labels, inplace=False)
    assert (pruned.conv1.out_channels, pruned.bn1.num_features, pruned.conv2.in_channels) == (4, 4, 4)
    assert (pruned.stem.out_channels, pruned.side.out_channels, pruned.dw.in_channels, pruned.head.in_channels,
            pruned.head.out_channels, pruned.fc.in_features) == (7, 3, 10, 10, 3, 48)
    with torch.no_grad():
        torch.testing.assert_close(pruned(x), expected, rtol=1e-5, atol=1e-6)
    assert net.conv1.out_channels == 6  # inplace=False kept the original


def test_prune_model_inplace_saves_and_loads(residual_net, batches):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    macs, params = count_macs(residual_net, batches[0]), count_params(residual_net)
    labels = get_labels_for_uniform_pruning(info, 0.5)
    assert len(labels) == 3 + 6 + 2     # the 5-channel group: 2.5 -> 2 (halves round down)
    pruned = prune_model(residual_net, info, labels)
    assert pruned is residual_net and type(pruned) is ResidualNet
    assert (count_macs(pruned, batches[0]), count_params(pruned)) < (macs, params)
    assert (count_params(pruned), count_macs(pruned, batches[0])) == (499, 39712)   # head keeps 3 of 5
    buf = io.BytesIO()
    torch.save(pruned, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    state = io.BytesIO()
    torch.save(pruned.state_dict(), state)
    state.seek(0)
    with torch.no_grad():
        assert torch.equal(loaded(batches[0]), pruned(batches[0]))
    for m in loaded.modules():
        assert not m._forward_pre_hooks and not m._forward_hooks


def test_no_labels_is_identity(residual_net, batches):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    assert prune_model(residual_net, info, []).conv1.out_channels == 6


def model_state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("labels,error,match", [
    ([26], ValueError, "label 26 does not exist: labels are 0..25"),
    ([-1], ValueError, "label -1 does not exist"),
    ([23], ValueError, "labels \\[23\\] belong to group 3, which is not prunable"),
    ([0, 1, 2, 3, 4, 5], ValueError, "would prune all 6 channels of group 0"),
    ([2, 2], ValueError, "labels are repeated: \\[2\\]"),
    ([0.0], ValueError, "labels must be integers, got 0.0"),
    ("12", TypeError, "prune_labels must be a sequence of integer labels"),
    (5, TypeError, "prune_labels must be a sequence of integer labels"),
])
def test_bad_labels_leave_model_unchanged(residual_net, batches, labels, error, match):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    before = model_state(residual_net)
    with pytest.raises(error, match=match):
        prune_model(residual_net, info, labels)
    after = residual_net.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_model_that_does_not_match_info(residual_net, batches):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    other = nn.Sequential(nn.Conv2d(3, 4, 1))
    with pytest.raises(ValueError, match="model does not match pruning_info: group 0 root 'conv1'"):
        prune_model(other, info, [0])
    with pytest.raises(TypeError, match="pruning_info must be a ModelPruningInfo, got dict"):
        prune_model(residual_net, {}, [0])
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got NoneType"):
        prune_model(None, info, [0])


# --- transactional surgery ---------------------------------------------------------------------------------
def full_state(model):
    """Everything a restore must bring back: tensors (values and identity) and size attributes."""
    sizes = {name: tuple(getattr(m, a) for a in ("in_channels", "out_channels", "groups", "num_features",
                                                  "in_features", "out_features") if hasattr(m, a))
             for name, m in model.named_modules()}
    tensors = {k: (v, v.detach().clone()) for k, v in list(model.named_parameters()) + list(model.named_buffers())}
    return sizes, tensors


def assert_restored(model, saved):
    sizes, tensors = saved
    now_sizes, now = full_state(model)
    assert now_sizes == sizes and now.keys() == tensors.keys()
    for k, (obj, value) in tensors.items():
        assert now[k][0] is obj and torch.equal(now[k][1], value), k


def test_a_failure_inside_surgery_leaves_the_model_bit_identical(residual_net, batches, monkeypatch):
    import sparsify_torch.channels.surgery as surgery

    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    labels = get_labels_for_uniform_pruning(info, 0.5)
    saved = full_state(residual_net)
    calls = []
    real = surgery.remove_channels

    def failing(module, **kwargs):
        calls.append(module)
        if len(calls) == 4:  # three layers are already cut
            raise RuntimeError("planted failure")
        return real(module, **kwargs)

    monkeypatch.setattr(surgery, "remove_channels", failing)
    with pytest.raises(RuntimeError, match="planted failure"):
        prune_model(residual_net, info, labels)
    assert len(calls) == 4
    assert_restored(residual_net, saved)
    monkeypatch.setattr(surgery, "remove_channels", real)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        expected = residual_net(x)
    pruned = prune_model(residual_net, info, labels)  # the restored model prunes normally
    assert pruned.conv1.out_channels == 3 and pruned(x).shape == expected.shape


class HardCoded(nn.Module):
    """A block that writes its channel count into a reshape: pruning ``a`` breaks it."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        b, _, height, width = h.shape
        return h.reshape(b, 8, -1).reshape(b, 8, height, width)


class WithHardCoded(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = HardCoded()
        self.b = nn.Conv2d(8, 4, 1)
        self.c = nn.Conv2d(3, 6, 1)
        self.d = nn.Conv2d(6, 4, 1)

    def forward(self, x):
        return self.b(self.block(x)) + self.d(torch.relu(self.c(x)))


def test_a_broken_pruned_model_is_restored_and_named():
    from sparsify_torch.channels import PruningCheckError

    torch.manual_seed(0)
    net = WithHardCoded().eval()
    data = [torch.randn(1, 3, 4, 4)]
    info = calibrate_model_for_pruning(net, data, mse_loss)
    assert [(g.root_name, g.prunable) for g in info.groups] == [("block.a", True), ("b", False), ("c", True)]
    saved = full_state(net)
    with pytest.raises(PruningCheckError, match=r"the pruned model fails in 'block' \(RuntimeError: .*\) after "
                                                r"pruning channel group 0 \(root 'block.a'\); the model was restored "
                                                r"unchanged"):
        prune_model(net, info, get_labels_for_uniform_pruning(info, 0.5))
    assert_restored(net, saved)
    copy_of = prune_model(net, info, [12, 13], inplace=False)  # group "c" alone is fine
    assert copy_of.c.out_channels == 4 and net.c.out_channels == 6


def test_the_one_call_api_leaves_a_breaking_group_out_and_says_so():
    torch.manual_seed(0)
    net = WithHardCoded().eval()
    with pytest.warns(UserWarning, match=r"channel group 0 \(root 'block.a'\) left unpruned, pruning it breaks the "
                                         r"model in 'block': RuntimeError"):
        pruned = calibrate_and_prune_model_equal(net, [torch.randn(1, 3, 4, 4)], mse_loss, pruning_ratio=0.5)
    assert (pruned.block.a.out_channels, pruned.c.out_channels) == (8, 3)


def test_a_wrong_channel_map_is_caught_by_the_output_check(residual_net, batches):
    """Corrupt what calibration learned (conv2 reads two channels swapped): the numbers differ, nothing is kept."""
    import dataclasses

    from sparsify_torch.channels import PruningCheckError

    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    group = info.groups[0]
    slots = list(group.slots)
    i = next(k for k, s in enumerate(slots) if s.name == "conv2" and s.role == "in")
    wrong = slots[i].labels.copy()
    wrong[[0, 5]] = wrong[[5, 0]]
    slots[i] = dataclasses.replace(slots[i], labels=wrong)
    group.slots = slots
    saved = full_state(residual_net)
    with pytest.raises(PruningCheckError, match=r"not equivalent to the original with the pruned channels zeroed: "
                                                r"output 0 differs .* the first layer that differs is 'conv2', holding "
                                                r"channel group 0 \(root 'conv1'\)"):
        prune_model(residual_net, info, [0])
    assert_restored(residual_net, saved)


def test_inplace_and_copy(residual_net, batches):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    labels = get_labels_for_uniform_pruning(info, 0.5)
    saved = full_state(residual_net)
    copy_of = prune_model(residual_net, info, labels, inplace=False)
    assert copy_of is not residual_net and copy_of.conv1.out_channels == 3
    assert_restored(residual_net, saved)
    assert prune_model(residual_net, info, labels, inplace=True) is residual_net
    assert residual_net.conv1.out_channels == 3
    with pytest.raises(TypeError, match="check must be a bool, got 1"):
        prune_model(residual_net, info, [], check=1)
