"""Label selectors and the selection utilities, as ENOT's pruning documentation defines them."""
import inspect
from typing import List

import numpy as np
import pytest

import sparsify_torch.channels as channels
from conftest import mse_loss
from sparsify.channels.selection import ChannelScores
from sparsify_torch.channels import (ModelPruningInfo, OptimalPruningLabelSelector, PruningLabelSelector,
                                     TopKPruningLabelSelector, UniformPruningLabelSelector, calibrate_and_prune_model,
                                     calibrate_model_for_pruning, check_pruning_config,
                                     default_architecture_optimization_strategy, get_criteria_label_dict,
                                     get_labels_for_uniform_pruning, get_least_important_labels_by_config,
                                     iterate_over_gate_criteria, prune_model)


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


# --- the documented class hierarchy and signatures ---------------------------------------------------------
def test_class_hierarchy_and_constructors_follow_the_document():
    assert issubclass(TopKPruningLabelSelector, PruningLabelSelector)
    assert issubclass(UniformPruningLabelSelector, TopKPruningLabelSelector)  # "Bases: TopKPruningLabelSelector"
    assert issubclass(OptimalPruningLabelSelector, TopKPruningLabelSelector)
    assert list(inspect.signature(UniformPruningLabelSelector).parameters) == ["pruning_ratio"]
    params = inspect.signature(OptimalPruningLabelSelector).parameters
    assert list(params) == ["model", "latency_calculation_function", "target_latency",
                            "architecture_optimization_strategy", "n_search_steps", "kwargs"]
    assert params["architecture_optimization_strategy"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["architecture_optimization_strategy"].default is default_architecture_optimization_strategy
    assert params["n_search_steps"].default == 200
    for cls in (TopKPruningLabelSelector, UniformPruningLabelSelector, OptimalPruningLabelSelector):
        assert callable(cls.get_config_for_pruning) and callable(cls.get_labels_by_config)
    assert isinstance(inspect.getattr_static(TopKPruningLabelSelector, "get_labels_by_config"), staticmethod)
    assert isinstance(inspect.getattr_static(TopKPruningLabelSelector, "pruning_cfg"), property)
    with pytest.raises(TypeError):
        PruningLabelSelector()  # abstract select


def test_documented_custom_selector_runs_as_written(residual_net, batches):
    """The example of calibrate_and_prune_model's documentation, verbatim (imports adapted)."""
    class CustomPruningSelector(PruningLabelSelector):

        def __init__(self, pruning_ratio: float):
            self.pruning_ratio: float = pruning_ratio
            super().__init__()

        def select(self, pruning_info: ModelPruningInfo) -> List[int]:
            labels_to_prune: List[int] = []
            for _, labels, criteria in iterate_over_gate_criteria(pruning_info):
                criteria: np.ndarray = np.array(criteria)
                prune_channels_num = int(len(criteria) * self.pruning_ratio)
                index_for_pruning = np.argsort(criteria)[:prune_channels_num]
                labels_to_prune += np.array(labels)[index_for_pruning].tolist()
            return labels_to_prune

    selector = CustomPruningSelector(0.5)
    assert selector.select(info()) == [3, 1, 6]  # int(4 * .5) = 2 and int(3 * .5) = 1 least important
    assert selector.labels_for_pruning == [3, 1, 6]
    pruned = calibrate_and_prune_model(CustomPruningSelector(0.5), residual_net, batches, mse_loss)
    assert (pruned.conv1.out_channels, pruned.head.out_channels) == (3, 3)


def test_labels_for_pruning_before_select():
    with pytest.raises(RuntimeError, match="labels_for_pruning is available only after select"):
        UniformPruningLabelSelector(0.5).labels_for_pruning


# --- TopK ------------------------------------------------------------------------------------------------
def test_topk_subclass_overriding_get_config_for_pruning():
    class KeepHalfOfTheFirstGroup(TopKPruningLabelSelector):
        def __init__(self):
            super().__init__()

        def get_config_for_pruning(self, pruning_info):
            return [len(pruning_info.group_labels[0]) // 2, 0]

    selector = KeepHalfOfTheFirstGroup()
    assert selector.pruning_cfg is None
    assert selector.select(info()) == [1, 3]
    assert selector.pruning_cfg == [2, 0] and selector.labels_for_pruning == [1, 3]


def test_topk_subclass_returning_fractions():
    class Fractions(TopKPruningLabelSelector):
        def get_config_for_pruning(self, pruning_info):
            return [0.25, 0.5]

    selector = Fractions()
    assert selector.select(info()) == [3, 6]  # 1 of 4, 1.5 -> 1 of 3 (halves round down)
    assert selector.pruning_cfg == [0.25, 0.5]


def test_topk_without_config_says_what_to_do():
    with pytest.raises(NotImplementedError, match="must implement get_config_for_pruning"):
        TopKPruningLabelSelector().select(info())


def test_topk_with_a_fixed_config():
    selector = TopKPruningLabelSelector([1, 2])
    assert selector.pruning_cfg == [1, 2]
    assert selector.select(info()) == [3, 4, 6]
    assert selector.labels_for_pruning == [3, 4, 6]
    with pytest.raises(ValueError, match="pruning_cfg\\[1\\] = 3 is not allowed"):
        TopKPruningLabelSelector([0, 3]).select(info())
    with pytest.raises(TypeError, match="pruning_cfg must be a sequence"):
        TopKPruningLabelSelector(3)
    with pytest.raises(ValueError, match="a mix"):
        TopKPruningLabelSelector([1, 0.5])


def test_get_labels_by_config_is_static_and_takes_counts_or_fractions():
    assert TopKPruningLabelSelector.get_labels_by_config(info(), [1, 2]) == [3, 4, 6]
    assert UniformPruningLabelSelector.get_labels_by_config(info(), [0.5, 0.0]) == [1, 3]
    assert OptimalPruningLabelSelector.get_labels_by_config(info(), [0, 1]) == [6]
    with pytest.raises(ValueError, match="pruning_config has 1 entries but there are 2 prunable groups"):
        TopKPruningLabelSelector.get_labels_by_config(info(), [1])


# --- Uniform ---------------------------------------------------------------------------------------------
def test_uniform_selector():
    selector = UniformPruningLabelSelector(0.5)
    assert selector.get_config_for_pruning(info()) == [2, 1]     # 1.5 -> 1: halves round down
    assert selector.select(info()) == [1, 3, 6]
    assert selector.labels_for_pruning == [1, 3, 6] and selector.pruning_cfg == [2, 1]
    assert isinstance(selector, TopKPruningLabelSelector)


@pytest.mark.parametrize("ratio", [1.0, -0.5, 2, "half"])
def test_uniform_selector_bad_ratio(ratio):
    with pytest.raises(ValueError, match="pruning_ratio must be a number in \\[0, 1\\)"):
        UniformPruningLabelSelector(ratio)


# --- utilities ---------------------------------------------------------------------------------------------
def test_iterate_over_gate_criteria_yields_group_id_labels_criteria(residual_net, batches):
    items = list(iterate_over_gate_criteria(info()))
    assert items == [(0, [0, 1, 2, 3], [3.0, 1.0, 2.0, 0.0]), (1, [4, 5, 6], [0.5, 0.5, 0.1])]
    model_info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    items = list(iterate_over_gate_criteria(model_info))
    assert [group_id for group_id, _, _ in items] == model_info.prunable_group_indices
    for (group_id, labels, criteria), expected in zip(items, model_info.group_criteria):
        assert labels == (model_info.group_offsets[group_id] + np.arange(len(labels))).tolist()
        assert criteria == expected.tolist() and all(isinstance(c, float) for c in criteria)


def test_get_criteria_label_dict_maps_group_names_to_labels_and_criteria(residual_net, batches):
    model_info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    d = get_criteria_label_dict(model_info)
    assert list(d) == ["conv1", "dw", "head"]  # the layers whose output channels define the groups
    for (name, entry), labels, criteria in zip(d.items(), model_info.group_labels, model_info.group_criteria):
        assert sorted(entry) == ["criteria", "labels"]
        assert isinstance(entry["labels"], np.ndarray) and isinstance(entry["criteria"], np.ndarray)
        np.testing.assert_array_equal(entry["labels"], labels)
        np.testing.assert_array_equal(entry["criteria"], criteria)
    plain = get_criteria_label_dict(info())
    assert list(plain) == ["group0", "group1"] and plain["group1"]["labels"].tolist() == [4, 5, 6]


def test_check_pruning_config_takes_the_config_alone():
    check_pruning_config([1, 0, 4])
    check_pruning_config([0.5, 0.0, 0.25])
    check_pruning_config((np.int64(2), 3))
    for bad, match in [([1, -1], "pruning_config\\[1\\] = -1 is negative"),
                       ([0.5, 1.0], "pruning_config\\[1\\] = 1.0 is not a fraction in \\[0, 1\\)"),
                       ([1, 0.5], "a mix"), ("12", "must be a sequence"), ([True], "integer or a float")]:
        with pytest.raises(ValueError, match=match):
            check_pruning_config(bad)
    check_pruning_config([3, 2], info())
    with pytest.raises(ValueError, match="pruning_cfg\\[0\\] = 4 is not allowed"):
        check_pruning_config([4, 0], info())


def test_get_least_important_labels_by_config_and_uniform_default():
    assert get_least_important_labels_by_config(info(), [2, 1]) == [1, 3, 6]
    assert get_least_important_labels_by_config(info(), [0.5, 0.3]) == [1, 3, 6]
    assert get_labels_for_uniform_pruning(info()) == get_labels_for_uniform_pruning(info(), 0.5) == [1, 3, 6]
    assert list(inspect.signature(get_labels_for_uniform_pruning).parameters.values())[1].default == 0.5


def test_default_architecture_optimization_strategy_documented_values():
    assert default_architecture_optimization_strategy(256) == (64, 4)  # max(16, 25%), step 4 above 64
    assert default_architecture_optimization_strategy(64) == (16, 1)
    assert default_architecture_optimization_strategy(10) == (10, 1)  # absolute bound above the size: all kept
    assert default_architecture_optimization_strategy(100, absolute_min_channels=8, relative_min_channels=0.5) \
        == (50, 4)


def test_selectors_on_model_pruning_info(residual_net, batches):
    model_info = calibrate_model_for_pruning(residual_net, batches, mse_loss)
    labels = UniformPruningLabelSelector(0.5).select(model_info)
    by_group = model_info.split_labels(labels)
    assert {g: v.size for g, v in by_group.items()} == {0: 3, 1: 6, 2: 2}
    for (group_id, _, criteria), (g, local) in zip(iterate_over_gate_criteria(model_info), by_group.items()):
        c = np.array(criteria)
        assert group_id == g and c[local].max() <= np.delete(c, local).min()
    small = prune_model(residual_net, model_info, labels, inplace=False)
    assert small.conv1.out_channels == 3
