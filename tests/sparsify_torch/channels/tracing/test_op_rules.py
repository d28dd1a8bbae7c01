"""The op table: which rule each aten op gets, and that every op gets one."""
import pytest
import torch

from sparsify_torch.channels.tracing import op_rules
from sparsify_torch.channels.tracing.op_rules import NO_READ, OP_RULES, rule_for


def packets():
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if isinstance(packet, torch._ops.OpOverloadPacket):
            yield name, packet


@pytest.mark.parametrize("name,tags,rule", [
    ("view", (), "reshape"),              # a reshape before a plain replay
    ("permute", (), "replay"),
    ("cat", (), "replay"),
    ("chunk", (), "select"),
    ("split_with_sizes", (), "select"),
    ("channel_shuffle", (), "shuffle"),
    ("zeros_like", (), "make_free"),
    ("arange", (), "make_data"),
    ("fill_", (), "fill"),
    ("copy_", (), "copy_"),
    ("as_strided_", (), "restride"),
    ("clone", (), "identity"),
    ("constant_pad_nd", (), "constant_pad"),
    ("max_pool2d_with_indices", (), "spatial"),   # by prefix
    ("upsample_nearest2d", (), "spatial"),
    ("softmax", (), "reduction"),
    ("sum", (), "reduction"),
    ("add", (torch.Tag.pointwise,), "pointwise"),  # by tag
    ("hardswish", (), "pointwise"),                 # listed: not tagged pointwise
    ("mm", (), "mixes_channels"),                   # no rule: fixes what it reads
    ("my_custom_op", (), "mixes_channels"),
])
def test_rule_for(name, tags, rule):
    assert rule_for(name, tags).__name__ == rule


def test_every_aten_op_has_a_rule_and_the_table_is_consistent():
    counts = {}
    for name, packet in packets():
        for overload in packet.overloads():
            tags = getattr(packet, overload).tags
            rule = rule_for(name, tags)
            assert callable(rule)
            counts[rule.__name__] = counts.get(rule.__name__, 0) + 1
    assert {"replay", "reshape", "select", "pointwise", "reduction", "spatial", "mixes_channels"} <= set(counts)
    assert not set(OP_RULES) & NO_READ  # shape queries never reach a rule
    assert all(callable(rule) for rule in OP_RULES.values())


def test_an_op_missing_from_the_table_is_fixed_with_its_name(monkeypatch):
    from sparsify_torch.channels.graph import analyze_channel_groups

    net = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 1), torch.nn.Tanh(), torch.nn.Conv2d(4, 1, 1))
    x = torch.zeros(1, 2, 3, 3)
    assert analyze_channel_groups(net, "forward", (x,), {})[0].prunable
    monkeypatch.setitem(OP_RULES, "tanh", op_rules.mixes_channels)
    assert analyze_channel_groups(net, "forward", (x,), {})[0].reason == "op tanh may mix channels in '1'"
