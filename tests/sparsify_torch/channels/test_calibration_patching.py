"""PruningCalibrator wraps its entry point through sparsify.patching and gives back exactly what was there:
the class's method, a module's own ``forward`` attribute, or another calibrator's wrapper (nested)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from sparsify_torch.channels import PruningCalibrator


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))


def test_an_own_forward_attribute_is_wrapped_and_given_back():
    net = _net()
    calls = []
    own = net.forward

    def forward(x):
        calls.append(1)
        return own(x)

    net.forward = forward
    with PruningCalibrator(net) as calibrator:
        assert net.forward is not forward
        net(torch.randn(4, 3)).pow(2).mean().backward()
    assert net.__dict__["forward"] is forward and calls and calibrator.pruning_info.n_prunable_groups == 1


def test_a_nested_calibrator_wraps_the_outer_one_and_each_gives_back_its_layer():
    """As before the helper: the inner entry calls the outer's (whose tracing then refuses to run inside the
    inner's), and each exit restores what its enter found."""
    net = _net()
    with pytest.raises(RuntimeError, match="channel-group tracing needs autograd"):
        with PruningCalibrator(net):
            wrapped = net.forward
            try:
                with PruningCalibrator(net):
                    assert net.forward is not wrapped
                    net(torch.randn(4, 3)).pow(2).mean().backward()
            finally:
                assert net.forward is wrapped
    assert "forward" not in net.__dict__
