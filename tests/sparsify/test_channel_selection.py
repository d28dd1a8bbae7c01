"""Tests for sparsify.channel_selection (NumPy only: this file must not import torch)."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.channel_selection import (ChannelScores, check_pruning_config, check_pruning_ratio,
                                        cumulative_pruning_cost, default_architecture_optimization_strategy,
                                        get_criteria_label_dict, get_labels_for_uniform_pruning,
                                        get_least_important_labels_by_config, iterate_over_gate_criteria,
                                        least_important_indices, max_channels_to_prune, max_prunable_per_group,
                                        n_channels_to_prune, pruning_order, segment_min_channels,
                                        segments_from_layer_channels, split_labels_by_group,
                                        architecture_search_space, strategy_min_channels)


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


# --- concatenation-aware selection: a group whose channels come from several source layers (segments) ---------

def concat_groups():
    """Group 0: a concat of a 6-channel layer (labels 0..5) and a 2-channel layer (labels 6, 7) whose channels are
    the least important; group 1: a plain 3-channel group (labels 8..10)."""
    return ChannelScores([np.arange(8), np.arange(8, 11)],
                         [np.array([5.0, 3.0, 6.0, 2.0, 7.0, 4.0, 0.5, 0.1]), np.array([1.0, 0.0, 2.0])],
                         [np.array([0, 0, 0, 0, 0, 0, 1, 1]), np.zeros(3, dtype=int)])


def test_concat_uniform_never_empties_a_source_layer_literal():
    info = concat_groups()
    naive = ChannelScores(info.group_labels, info.group_criteria)  # same scores, segments unknown
    assert get_labels_for_uniform_pruning(naive, 0.5) == [1, 3, 6, 7, 8, 9]  # empties the 2-channel layer
    # aware: 7 (0.1) goes, 6 (0.5) must stay, so the next cheapest of the big layer, 1 (3.0), goes instead;
    # the group still loses exactly round(0.5 * 8) = 4 channels
    assert get_labels_for_uniform_pruning(info, 0.5) == [1, 3, 5, 7, 8, 9]
    assert get_labels_for_uniform_pruning(info, 0.25) == [3, 7, 9]
    # 0.9 asks for 7 of 8 but each layer keeps one: 6 is the most that can go
    assert get_labels_for_uniform_pruning(info, 0.9) == [0, 1, 2, 3, 5, 7, 8, 9]
    # at least 2 per segment: the 2-channel layer keeps both, the big one loses 4, group 1 loses 1
    assert get_labels_for_uniform_pruning(info, 0.9, min_channels=2) == [0, 1, 3, 5, 9]


def test_concat_config_literal_and_limits():
    info = concat_groups()
    assert get_least_important_labels_by_config(info, [2, 0]) == [3, 7]
    assert get_least_important_labels_by_config(info, [3, 1]) == [1, 3, 7, 9]
    assert get_least_important_labels_by_config(info, [6, 2]) == [0, 1, 2, 3, 5, 7, 8, 9]
    assert max_prunable_per_group(info) == [6, 2]
    assert max_prunable_per_group(info, lambda n: 2) == [4, 1]
    with pytest.raises(ValueError, match=r"pruning_cfg\[0\] = 7 is not allowed: group 0 has 8 channels, so at most "
                                         r"6 can be pruned \(its 2 segments, the source layers of a concatenation, "
                                         r"keep at least \[1, 1\] channels\)"):
        get_least_important_labels_by_config(info, [7, 0])
    with pytest.raises(ValueError, match=r"pruning_cfg\[1\] = 2 is not allowed: group 1 has 3 channels, so at most "
                                         r"1 can be pruned \(it keeps at least 2\)"):
        check_pruning_config([0, 2], info, min_channels=2)


def test_pruning_order_and_cumulative_cost_literal():
    scores, seg = np.array([5.0, 3.0, 6.0, 2.0, 7.0, 4.0, 0.5, 0.1]), np.array([0, 0, 0, 0, 0, 0, 1, 1])
    assert pruning_order(scores, seg).tolist() == [7, 3, 1, 5, 0, 2]
    assert pruning_order(scores).tolist() == [7, 6, 3, 1, 5, 0, 2]  # one segment: all but the last channel
    assert pruning_order(scores, seg, min_channels=3).tolist() == [3, 1, 5]  # the 2-channel layer keeps both
    assert cumulative_pruning_cost(scores, seg).tolist() == [0.0, 0.1, 2.1, 5.1, 9.1, 14.1, 20.1]
    assert cumulative_pruning_cost(np.array([2.0, 1.0])).tolist() == [0.0, 1.0]
    assert pruning_order(np.zeros(0)).tolist() == [] and cumulative_pruning_cost(np.zeros(0)).tolist() == [0.0]
    assert max_channels_to_prune(seg) == 6 and max_channels_to_prune(seg, lambda n: n // 2) == 4
    sizes, keep = segment_min_channels(np.array([3, 3, 1, 3]), 2)  # ids need not be contiguous or ordered
    assert sizes.tolist() == [1, 3] and keep.tolist() == [1, 2]
    assert least_important_indices(scores, 3, seg).tolist() == [1, 3, 7]
    with pytest.raises(ValueError, match="k = 7 is too large: the segments must keep 2 of 8 channels, so at most 6"):
        least_important_indices(scores, 7, seg)


@pytest.mark.parametrize("min_channels,match", [(0, "got 0"), (1.5, "got 1.5"), (True, "got True"),
                                                (lambda n: 0, "got 0 for a segment of 2 channels")])
def test_min_channels_validation(min_channels, match):
    with pytest.raises(ValueError, match="min_channels must be an integer >= 1 or a function returning one, " + match):
        pruning_order(np.zeros(2), np.zeros(2, dtype=int), min_channels)


def test_segments_validation():
    with pytest.raises(ValueError, match=r"group 0: segments shape \(1,\) must equal labels shape \(2,\)"):
        ChannelScores([np.arange(2)], [np.zeros(2)], [np.zeros(1, dtype=int)])
    with pytest.raises(ValueError, match="group_segments has 2 groups but group_labels has 1"):
        ChannelScores([np.arange(2)], [np.zeros(2)], [np.zeros(2, dtype=int)] * 2)
    with pytest.raises(ValueError, match="segments must be integers, got dtype float64"):
        ChannelScores([np.arange(2)], [np.zeros(2)], [np.zeros(2)])
    with pytest.raises(ValueError, match="segments must be integers with the shape of scores"):
        pruning_order(np.zeros(3), np.zeros(2, dtype=int))
    assert [s.tolist() for s in ChannelScores([np.arange(2)], [np.zeros(2)]).group_segments] == [[0, 0]]


def test_split_labels_by_group_keeps_a_channel_per_segment():
    segments = [np.array([0, 0, 0, 1, 1]), np.zeros(2, dtype=int)]
    got = split_labels_by_group([0, 1, 3], [0, 5], [5, 2], [True, True], segments)
    assert {k: v.tolist() for k, v in got.items()} == {0: [0, 1, 3]}
    with pytest.raises(ValueError, match=r"labels would prune all 2 channels of segment 1 \(labels 3..4\) of group 0; "
                                         "at least one channel of each segment"):
        split_labels_by_group([3, 4], [0, 5], [5, 2], [True, True], segments)
    with pytest.raises(ValueError, match=r"segment 0 \(labels \[0, 2\]\)"):  # a segment need not be contiguous
        split_labels_by_group([0, 2], [0], [3], [True], [np.array([0, 1, 0])])


segmented_strategy = st.lists(st.tuples(st.floats(-10, 10, allow_nan=False), st.integers(0, 2)), min_size=1,
                              max_size=8)


@settings(max_examples=80, deadline=None)
@given(segmented_strategy, st.integers(1, 3), st.data())
def test_segmented_choice_is_the_cheapest_valid_one(channels, min_keep, data):
    """Brute force: among all k-subsets leaving min(min_keep, size) channels per segment, none is cheaper."""
    scores = np.array([c for c, _ in channels])
    seg = np.array([s for _, s in channels])
    most = max_channels_to_prune(seg, min_keep)
    k = data.draw(st.integers(0, most))
    chosen = least_important_indices(scores, k, seg, min_keep)
    assert chosen.size == k and chosen.tolist() == sorted(set(chosen.tolist()))
    ids, sizes = np.unique(seg, return_counts=True)
    for s, size in zip(ids, sizes):  # every segment keeps its minimum
        assert size - np.isin(np.flatnonzero(seg == s), chosen).sum() >= min(min_keep, size)
    best = min(scores[list(c)].sum() for c in itertools.combinations(range(scores.size), k)
               if all(size - sum(seg[i] == s for i in c) >= min(min_keep, size) for s, size in zip(ids, sizes)))
    assert np.isclose(scores[chosen].sum(), best)
    assert np.isclose(cumulative_pruning_cost(scores, seg, min_keep)[k], best)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.floats(-1e3, 1e3, allow_nan=False), st.integers(0, 3)), min_size=1,
                         max_size=12), min_size=1, max_size=5), st.floats(0.0, 0.999))
def test_segmented_uniform_properties(raw, ratio):
    labels, criteria, segments, start = [], [], [], 0
    for g in raw:
        labels.append(np.arange(start, start + len(g)))
        criteria.append(np.array([c for c, _ in g]))
        segments.append(np.array([s for _, s in g]))
        start += len(g)
    info = ChannelScores(labels, criteria, segments)
    chosen = get_labels_for_uniform_pruning(info, ratio)
    offsets = [int(lab[0]) for lab in labels]
    split = split_labels_by_group(chosen, offsets, [len(g) for g in raw], [True] * len(raw), segments)  # valid
    for g, (lab, seg) in enumerate(zip(labels, segments)):
        n_segments = np.unique(seg).size
        wanted = min(int(np.floor(ratio * lab.size + 0.5)), lab.size - 1)
        assert split.get(g, np.zeros(0)).size == min(wanted, lab.size - n_segments)  # exact where possible


def test_segments_from_layer_channels_literal():
    # DenseNet-like: a group of 7 channels = concat(init 3, layer1 2, layer2 2); whole-group readers add nothing
    assert segments_from_layer_channels(7, [[0, 1, 2], [3, 4], [5, 6], range(7)]).tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert segments_from_layer_channels(4, [[0, 1], [1, 2, 3]]).tolist() == [0, 1, 2, 2]  # overlapping: atoms
    assert segments_from_layer_channels(3, []).tolist() == [0, 0, 0]
    assert segments_from_layer_channels(3, [[2, 0]]).tolist() == [0, 1, 0]  # ids by first channel


def test_architecture_search_space_respects_segments():
    info = concat_groups()  # 8 channels = 6 + 2, and a plain 3-channel group
    assert architecture_search_space(info, lambda n: (1, 1)) == [[2, 3, 4, 5, 6, 7, 8], [1, 2, 3]]
    assert architecture_search_space(info, lambda n: (min(n, 2), 3)) == [[4, 7, 8], [2, 3]]
    assert architecture_search_space(info) == [[8], [3]]  # the default keeps >= 16: nothing to search
    assert strategy_min_channels(lambda n: (n // 2 or 1, 1))(6) == 3
    with pytest.raises(ValueError, match="architecture_optimization_strategy\\(8\\) returned \\(9, 1\\); "
                                         "need 1 <= min_channels <= 8 and step >= 1"):
        architecture_search_space(info, lambda n: (n + 1, 1))
    with pytest.raises(ValueError, match="returned \\(1, 0\\)"):
        architecture_search_space(info, lambda n: (1, 0))
    with pytest.raises(ValueError, match="returned 5"):
        architecture_search_space(info, lambda n: 5)
