"""Tests for sparsify.channel_selection (NumPy only: this file must not import torch)."""
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.channel_selection import (ChannelScores, check_pruning_config, check_pruning_ratio,
                                        default_architecture_optimization_strategy, get_criteria_label_dict,
                                        get_labels_for_uniform_pruning, get_least_important_labels_by_config,
                                        iterate_over_gate_criteria, least_important_indices, n_channels_to_prune,
                                        split_labels_by_group)


def two_groups():
    return ChannelScores([np.array([0, 1, 2, 3]), np.array([4, 5, 6])],
                         [np.array([3.0, 1.0, 2.0, 0.0]), np.array([0.5, 0.5, 0.1])])


def test_module_does_not_import_torch_or_tensorflow():
    import sparsify.channel_selection as mod
    source = open(mod.__file__).read()
    assert "import torch" not in source and "tensorflow" not in source.replace("tensorflow.", "")


def test_least_important_indices_literal_and_ties():
    assert least_important_indices(np.array([2.0, 1.0, 1.0, 0.0]), 2).tolist() == [1, 3]
    assert least_important_indices(np.array([1.0, 1.0, 1.0]), 2).tolist() == [0, 1]
    assert least_important_indices(np.array([5.0]), 0).tolist() == []


@pytest.mark.parametrize("k", [-1, 4, 1.5, True])
def test_least_important_indices_bad_k(k):
    with pytest.raises(ValueError, match="k must be an integer"):
        least_important_indices(np.zeros(3), k)


def test_least_important_indices_nan():
    with pytest.raises(ValueError, match="NaN"):
        least_important_indices(np.array([0.0, np.nan]), 1)


@pytest.mark.parametrize("n,ratio,expected", [(10, 0.25, 3), (4, 0.5, 2), (3, 0.99, 2), (1, 0.5, 0), (7, 0.0, 0),
                                              (8, 0.5, 4), (5, 0.5, 3)])
def test_n_channels_to_prune(n, ratio, expected):
    assert n_channels_to_prune(n, ratio) == expected


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5, float("nan"), "0.5", None, True])
def test_ratio_outside_range_is_value_error(ratio):
    with pytest.raises(ValueError, match="pruning_ratio must be a number in \\[0, 1\\)"):
        check_pruning_ratio(ratio)
    with pytest.raises(ValueError, match="pruning_ratio"):
        get_labels_for_uniform_pruning(two_groups(), ratio)


def test_uniform_labels_literal():
    info = two_groups()
    assert get_labels_for_uniform_pruning(info, 0.5) == [1, 3, 4, 6]
    assert get_labels_for_uniform_pruning(info, 0.25) == [3, 6]
    assert get_labels_for_uniform_pruning(info, 0.0) == []
    assert get_labels_for_uniform_pruning(info, 0.99) == [1, 2, 3, 4, 6]


def test_config_literal():
    info = two_groups()
    assert get_least_important_labels_by_config(info, [2, 1]) == [1, 3, 6]
    assert get_least_important_labels_by_config(info, [0, 2]) == [4, 6]
    assert get_least_important_labels_by_config(info, [3, 0]) == [1, 2, 3]


@pytest.mark.parametrize("cfg,match", [
    ([1], "has 1 entries but there are 2 prunable groups"),
    ([1, 2, 3], "has 3 entries"),
    ([4, 0], "pruning_cfg\\[0\\] = 4 is not allowed: group 0 has 4 channels, so at most 3 can be pruned"),
    ([0, -1], "pruning_cfg\\[1\\] = -1 is not allowed"),
    ([1.0, 0], "pruning_cfg\\[0\\] must be an integer, got 1.0"),
    ([True, 0], "must be an integer, got True"),
    ("12", "must be a sequence of 2 integers"),
    (5, "must be a sequence of 2 integers"),
    ({0: 1, 1: 1}, "must be a sequence"),
])
def test_check_pruning_config_errors(cfg, match):
    with pytest.raises(ValueError, match=match):
        check_pruning_config(cfg, two_groups())
    with pytest.raises(ValueError, match=match):
        get_least_important_labels_by_config(two_groups(), cfg)


def test_check_pruning_config_accepts_numpy_ints():
    assert check_pruning_config(np.array([3, 2]), two_groups()) is None


def test_iterate_and_dict():
    info = two_groups()
    pairs = [(lab.tolist(), crit.tolist()) for lab, crit in iterate_over_gate_criteria(info)]
    assert pairs == [([0, 1, 2, 3], [3.0, 1.0, 2.0, 0.0]), ([4, 5, 6], [0.5, 0.5, 0.1])]
    assert get_criteria_label_dict(info) == {0: 3.0, 1: 1.0, 2: 2.0, 3: 0.0, 4: 0.5, 5: 0.5, 6: 0.1}


@pytest.mark.parametrize("labels,criteria,match", [
    ([np.array([0, 1])], [np.array([1.0])], "equal 1-D shapes"),
    ([np.array([0, 1])], [], "same number of groups"),
    ([np.array([0, 1]), np.array([1])], [np.zeros(2), np.zeros(1)], "unique across groups"),
    ([np.array([0.5, 1.0])], [np.zeros(2)], "labels must be integers"),
    ([np.array([0, 1])], [np.array([0.0, np.nan])], "NaN"),
])
def test_channel_scores_validation(labels, criteria, match):
    with pytest.raises(ValueError, match=match):
        ChannelScores(labels, criteria)


@pytest.mark.parametrize("n,expected", [(256, (64, 4)), (32, (16, 1)), (8, (8, 1)), (64, (16, 1)), (65, (17, 4)),
                                        (1000, (250, 4)), (1, (1, 1))])
def test_default_architecture_optimization_strategy(n, expected):
    assert default_architecture_optimization_strategy(n) == expected


def test_default_architecture_optimization_strategy_arguments():
    assert default_architecture_optimization_strategy(100, absolute_min_channels=4, relative_min_channels=0.1) == \
        (10, 4)
    assert default_architecture_optimization_strategy(100, absolute_min_channels=1, relative_min_channels=0.0) == \
        (1, 4)
    for bad in [dict(current_layer_channels=0), dict(current_layer_channels=2.0),
                dict(current_layer_channels=8, absolute_min_channels=0),
                dict(current_layer_channels=8, relative_min_channels=1.5)]:
        with pytest.raises(ValueError, match=list(bad)[-1]):
            default_architecture_optimization_strategy(**bad)


def test_split_labels_by_group_literal_and_errors():
    got = split_labels_by_group([4, 0, 5], [0, 3], [3, 4], [True, True])
    assert {k: v.tolist() for k, v in got.items()} == {0: [0], 1: [1, 2]}
    assert split_labels_by_group([], [0, 3], [3, 4], [True, True]) == {}
    with pytest.raises(ValueError, match="label 7 does not exist: labels are 0..6"):
        split_labels_by_group([7], [0, 3], [3, 4], [True, True])
    with pytest.raises(ValueError, match="label -1 does not exist"):
        split_labels_by_group([-1], [0, 3], [3, 4], [True, True])
    with pytest.raises(ValueError, match="belong to group 1, which is not prunable"):
        split_labels_by_group([3], [0, 3], [3, 4], [True, False])
    with pytest.raises(ValueError, match="would prune all 3 channels of group 0"):
        split_labels_by_group([0, 1, 2], [0, 3], [3, 4], [True, True])
    with pytest.raises(ValueError, match="repeated: \\[1\\]"):
        split_labels_by_group([1, 1], [0, 3], [3, 4], [True, True])
    with pytest.raises(ValueError, match="labels must be integers, got 1.5"):
        split_labels_by_group([1.5], [0, 3], [3, 4], [True, True])


groups_strategy = st.lists(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=12),
                           min_size=1, max_size=6)


def _info(raw):
    labels, criteria, start = [], [], 0
    for g in raw:
        labels.append(np.arange(start, start + len(g)))
        criteria.append(np.array(g))
        start += len(g)
    return ChannelScores(labels, criteria)


@settings(max_examples=60, deadline=None)
@given(groups_strategy, st.floats(0.0, 0.999))
def test_uniform_properties(raw, ratio):
    info = _info(raw)
    labels = get_labels_for_uniform_pruning(info, ratio)
    assert labels == sorted(set(labels))
    for lab, crit in iterate_over_gate_criteria(info):
        chosen = [x for x in labels if lab[0] <= x <= lab[-1]]
        assert len(chosen) == min(int(np.floor(ratio * lab.size + 0.5)), lab.size - 1)
        kept = sorted(set(lab.tolist()) - set(chosen))
        assert kept  # one channel always survives
        if chosen:  # everything pruned is at most as important as everything kept
            assert crit[np.array(chosen) - lab[0]].max() <= crit[np.array(kept) - lab[0]].min()


@settings(max_examples=60, deadline=None)
@given(groups_strategy, st.data())
def test_config_properties(raw, data):
    info = _info(raw)
    cfg = [data.draw(st.integers(0, len(g) - 1)) for g in raw]
    labels = get_least_important_labels_by_config(info, cfg)
    assert len(labels) == sum(cfg)
    offsets = np.cumsum([0] + [len(g) for g in raw])[:-1].tolist()
    split = split_labels_by_group(labels, offsets, [len(g) for g in raw], [True] * len(raw))
    assert {g: v.size for g, v in split.items()} == {g: k for g, k in enumerate(cfg) if k}
    # the pruned criteria total is minimal among configs with the same counts
    for (lab, crit), k in zip(iterate_over_gate_criteria(info), cfg):
        chosen = [x - lab[0] for x in labels if lab[0] <= x <= lab[-1]]
        assert np.isclose(crit[chosen].sum() if chosen else 0.0, np.sort(crit)[:k].sum())
