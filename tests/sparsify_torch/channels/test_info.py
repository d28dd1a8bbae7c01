"""ModelPruningInfo bookkeeping and summaries."""
import pytest

from sparsify_torch.channels import ModelPruningInfo, calibrate_model_for_pruning
from conftest import mse_loss


def test_counts_labels_and_summary(residual_net, batches):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    assert isinstance(info, ModelPruningInfo)
    assert (info.n_groups, info.n_prunable_groups, info.n_labels, info.n_prunable_labels) == (4, 3, 26, 23)
    assert info.group_offsets.tolist() == [0, 6, 18, 23]
    assert [lab.tolist() for lab in info.group_labels] == [list(range(6)), list(range(6, 18)), list(range(18, 23))]
    assert info.prunable_group_indices == [0, 1, 2]
    s0 = info.summary(0)
    assert s0 == ("ModelPruningInfo(entry_point='forward'): 4 groups, 3 prunable, 26 labels, 23 prunable labels, "
                  "2 calibration steps")
    assert repr(info) == s0
    s1 = info.summary(1).splitlines()
    assert len(s1) == 5 and "conv1" in s1[1] and "labels=0..5 prunable" in s1[1]
    assert "labels=23..25 unprunable: channels reach the traced output (fc)" in s1[4]
    s2 = info.summary(2).splitlines()
    assert len(s2) == 1 + 4 * 2 + 3 + 1  # + the segments of the concat group
    assert s2[2] == "      members: conv1:out, bn1:out, conv2:in" and s2[3].startswith("      criteria: min=")
    assert s2[6] == "      segments: 6..13 <- bn2:out, conv2:out, stem_bn:out, stem:out; 14..17 <- side:out"
    assert [seg.tolist() for seg in info.group_segments] == [[0] * 6, [0] * 8 + [1] * 4, [0] * 5]


@pytest.mark.parametrize("level", [3, -1, "1", True, None])
def test_summary_bad_level(residual_net, batches, level):
    info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    with pytest.raises(ValueError, match="level must be 0, 1 or 2, got"):
        info.summary(level)
