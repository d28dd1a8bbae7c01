"""Label selectors and the re-exported selection utilities."""
import numpy as np
import pytest

import sparsify.channel_selection as core
import sparsify_torch.channels as channels
from sparsify.channel_selection import ChannelScores
from sparsify_torch.channels import (PruningLabelSelector, TopKPruningLabelSelector, UniformPruningLabelSelector,
                                     calibrate_model_for_pruning, get_criteria_label_dict)
from conftest import mse_loss


def info():
    return ChannelScores([np.arange(4), np.arange(4, 7)], [np.array([3.0, 1.0, 2.0, 0.0]), np.array([0.5, 0.5, 0.1])])


def test_public_names():
    assert sorted(channels.__all__) == sorted([
        "calibrate_and_prune_model_equal", "calibrate_and_prune_model_optimal", "calibrate_and_prune_model",
        "PruningCalibrator", "calibrate_model_for_pruning", "ModelPruningInfo", "prune_model",
        "PruningLabelSelector", "TopKPruningLabelSelector", "UniformPruningLabelSelector",
        "OptimalPruningLabelSelector", "iterate_over_gate_criteria", "get_criteria_label_dict",
        "get_labels_for_uniform_pruning", "check_pruning_config", "get_least_important_labels_by_config",
        "default_architecture_optimization_strategy", "default_sample_to_n_samples",
        "default_sample_to_model_inputs"])
    for name in ["iterate_over_gate_criteria", "get_criteria_label_dict", "get_labels_for_uniform_pruning",
                 "check_pruning_config", "get_least_important_labels_by_config",
                 "default_architecture_optimization_strategy"]:
        assert getattr(channels, name) is getattr(core, name)


def test_uniform_selector():
    selector = UniformPruningLabelSelector(0.5)
    with pytest.raises(RuntimeError, match="labels_for_pruning is available only after select"):
        selector.labels_for_pruning
    assert selector.select(info()) == [1, 3, 4, 6]
    assert selector.labels_for_pruning == [1, 3, 4, 6]


@pytest.mark.parametrize("ratio", [1.0, -0.5, 2, "half"])
def test_uniform_selector_bad_ratio(ratio):
    with pytest.raises(ValueError, match="pruning_ratio must be a number in \\[0, 1\\)"):
        UniformPruningLabelSelector(ratio)


def test_topk_selector():
    selector = TopKPruningLabelSelector([1, 2])
    assert selector.select(info()) == [3, 4, 6]
    assert selector.labels_for_pruning == [3, 4, 6]
    with pytest.raises(ValueError, match="pruning_cfg\\[1\\] = 3 is not allowed"):
        TopKPruningLabelSelector([0, 3]).select(info())
    with pytest.raises(TypeError, match="pruning_cfg must be a sequence of integers"):
        TopKPruningLabelSelector(3)


def test_abstract_base():
    with pytest.raises(TypeError):
        PruningLabelSelector()

    class Everything(PruningLabelSelector):
        def _select(self, pruning_info):
            return [6, 2]

    assert Everything().select(info()) == [2, 6]


def test_selectors_on_model_pruning_info(residual_net, batches):
    model_info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    crit = get_criteria_label_dict(model_info)
    assert sorted(crit) == list(range(23))  # labels of the three prunable groups; fc (23..25) is unprunable
    labels = UniformPruningLabelSelector(0.5).select(model_info)
    by_group = model_info.split_labels(labels)
    assert {g: v.size for g, v in by_group.items()} == {0: 3, 1: 6, 2: 3}
    for g, local in by_group.items():
        c = model_info._criteria[g]
        assert c[local].max() <= np.delete(c, local).min()
