"""What a pruned model must compute: readers zeroed, multi-channel norms over the kept channels; output compare."""
import pytest
import torch
from torch import nn

from conftest import mse_loss
from sparsify_torch.channels import calibrate_model_for_pruning, prune_model
from sparsify_torch.channels.verify import compare_outputs, masked_reference, run_entry_point, tolerance


class Normed(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 1)
        self.norm = norm
        self.b = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        y = self.a(x)
        if isinstance(self.norm, (nn.LayerNorm, nn.RMSNorm)):  # channels last
            return self.b(self.norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))
        return self.b(self.norm(y))


@pytest.mark.parametrize("norm", [nn.LayerNorm(8), nn.GroupNorm(2, 8), nn.RMSNorm(8)], ids=lambda n: type(n).__name__)
def test_multi_channel_norms_are_compared_over_the_kept_channels(norm):
    torch.manual_seed(0)
    net = Normed(norm).eval()
    with torch.no_grad():
        for p in net.norm.parameters():
            p.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 4, 4)
    info = calibrate_model_for_pruning(net, [x], mse_loss)
    grouped = isinstance(norm, nn.GroupNorm)  # a label: the same position of both norm groups
    assert info.groups[0].width == (2 if grouped else 1)
    labels = [0] if grouped else [0, 1]
    reference = masked_reference(net, info, info.split_labels(labels))
    pruned = prune_model(net, info, labels, inplace=False)  # passes the check
    assert compare_outputs(reference, run_entry_point(pruned, info)) is None
    zeroed_only = run_entry_point(net, info)  # statistics over all channels: a different model
    assert compare_outputs(reference, zeroed_only) is not None


def test_compare_outputs_messages():
    a = {"x": torch.ones(2, 3), "n": 3}
    assert compare_outputs(a, {"x": torch.ones(2, 3) * (1 + 1e-6), "n": 3}) is None
    assert compare_outputs(a, {"x": torch.ones(2, 3), "n": 4}) == "output 1 is 4, expected 3"
    assert compare_outputs(a, {"y": torch.ones(2, 3), "n": 3}).startswith("the output structure changed")
    assert compare_outputs(torch.ones(3), torch.tensor([1.0, float("nan"), 1.0])) == \
        "output 0 has non-finite values where the original has none (or the other way round)"
    assert compare_outputs(torch.ones(3), torch.tensor([1.0, 1.1, 1.0])) == (
        "output 0 differs from the original with the pruned channels zeroed by 0.1 relative to its largest "
        "magnitude (tolerance 0.0001)")
    assert compare_outputs(torch.tensor([1, 2]), torch.tensor([1, 3])) == "output 0 (integer) differs"
    assert (tolerance(torch.float64), tolerance(torch.float32), tolerance(torch.float16)) == (1e-9, 1e-4, 2e-2)
