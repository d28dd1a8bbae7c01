"""Tests for sparsify.channels.selection.labels (NumPy only: no torch, no tensorflow)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.channels.selection import (ChannelScores, check_pruning_counts, check_pruning_ratio, criterion_by_label,
                                        iter_group_scores, least_important_labels, max_prunable_per_group,
                                        n_channels_to_prune, split_labels_by_group, uniform_pruning_labels)


def two_groups():
    return ChannelScores([np.array([0, 1, 2, 3]), np.array([4, 5, 6])],
                         [np.array([3.0, 1.0, 2.0, 0.0]), np.array([0.5, 0.5, 0.1])])


@pytest.mark.parametrize("n,ratio,expected", [(10, 0.25, 2), (10, 0.26, 3), (4, 0.5, 2), (3, 0.99, 2), (1, 0.5, 0), (7, 0.0, 0),
                                              (8, 0.5, 4), (5, 0.5, 2)])
def test_n_channels_to_prune(n, ratio, expected):
    assert n_channels_to_prune(n, ratio) == expected


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5, float("nan"), "0.5", None, True])
def test_ratio_outside_range_is_value_error(ratio):
    with pytest.raises(ValueError, match="pruning_ratio must be a number in \\[0, 1\\)"):
        check_pruning_ratio(ratio)
    with pytest.raises(ValueError, match="pruning_ratio"):
        uniform_pruning_labels(two_groups(), ratio)


def test_uniform_labels_literal():
    info = two_groups()
    assert uniform_pruning_labels(info, 0.5) == [1, 3, 6]   # 3 channels: 1.5 -> 1 (halves round down)
    assert uniform_pruning_labels(info, 0.25) == [3, 6]
    assert uniform_pruning_labels(info, 0.0) == []
    assert uniform_pruning_labels(info, 0.99) == [1, 2, 3, 4, 6]


def test_config_literal():
    info = two_groups()
    assert least_important_labels(info, [2, 1]) == [1, 3, 6]
    assert least_important_labels(info, [0, 2]) == [4, 6]
    assert least_important_labels(info, [3, 0]) == [1, 2, 3]


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
def test_check_pruning_counts_errors(cfg, match):
    with pytest.raises(ValueError, match=match):
        check_pruning_counts(cfg, two_groups())
    with pytest.raises(ValueError, match=match):
        least_important_labels(two_groups(), cfg)


def test_check_pruning_counts_accepts_numpy_ints():
    assert check_pruning_counts(np.array([3, 2]), two_groups()) is None


def test_iterate_and_dict():
    info = two_groups()
    pairs = [(lab.tolist(), crit.tolist()) for lab, crit in iter_group_scores(info)]
    assert pairs == [([0, 1, 2, 3], [3.0, 1.0, 2.0, 0.0]), ([4, 5, 6], [0.5, 0.5, 0.1])]
    assert criterion_by_label(info) == {0: 3.0, 1: 1.0, 2: 2.0, 3: 0.0, 4: 0.5, 5: 0.5, 6: 0.1}


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
    labels = uniform_pruning_labels(info, ratio)
    assert labels == sorted(set(labels))
    for lab, crit in iter_group_scores(info):
        chosen = [x for x in labels if lab[0] <= x <= lab[-1]]
        assert len(chosen) == min(int(np.ceil(ratio * lab.size - 0.5)), lab.size - 1)
        kept = sorted(set(lab.tolist()) - set(chosen))
        assert kept  # one channel always survives
        if chosen:  # everything pruned is at most as important as everything kept
            assert crit[np.array(chosen) - lab[0]].max() <= crit[np.array(kept) - lab[0]].min()


@settings(max_examples=60, deadline=None)
@given(groups_strategy, st.data())
def test_config_properties(raw, data):
    info = _info(raw)
    cfg = [data.draw(st.integers(0, len(g) - 1)) for g in raw]
    labels = least_important_labels(info, cfg)
    assert len(labels) == sum(cfg)
    offsets = np.cumsum([0] + [len(g) for g in raw])[:-1].tolist()
    split = split_labels_by_group(labels, offsets, [len(g) for g in raw], [True] * len(raw))
    assert {g: v.size for g, v in split.items()} == {g: k for g, k in enumerate(cfg) if k}
    # the pruned criteria total is minimal among configs with the same counts
    for (lab, crit), k in zip(iter_group_scores(info), cfg):
        chosen = [x - lab[0] for x in labels if lab[0] <= x <= lab[-1]]
        assert np.isclose(crit[chosen].sum() if chosen else 0.0, np.sort(crit)[:k].sum())


def concat_groups():
    """Group 0: a concat of a 6-channel layer (labels 0..5) and a 2-channel layer (labels 6, 7) whose channels are
    the least important; group 1: a plain 3-channel group (labels 8..10)."""
    return ChannelScores([np.arange(8), np.arange(8, 11)],
                         [np.array([5.0, 3.0, 6.0, 2.0, 7.0, 4.0, 0.5, 0.1]), np.array([1.0, 0.0, 2.0])],
                         [np.array([0, 0, 0, 0, 0, 0, 1, 1]), np.zeros(3, dtype=int)])


def test_concat_uniform_never_empties_a_source_layer_literal():
    info = concat_groups()
    naive = ChannelScores(info.group_labels, info.group_criteria)  # same scores, segments unknown
    assert uniform_pruning_labels(naive, 0.5) == [1, 3, 6, 7, 9]  # empties the 2-channel layer
    # aware: 7 (0.1) goes, 6 (0.5) must stay, so the next cheapest of the big layer, 1 (3.0), goes instead;
    # the group still loses exactly round(0.5 * 8) = 4 channels
    assert uniform_pruning_labels(info, 0.5) == [1, 3, 5, 7, 9]   # group 1: 1.5 -> 1
    assert uniform_pruning_labels(info, 0.25) == [3, 7, 9]
    # 0.9 asks for 7 of 8 but each layer keeps one: 6 is the most that can go
    assert uniform_pruning_labels(info, 0.9) == [0, 1, 2, 3, 5, 7, 8, 9]
    # at least 2 per segment: the 2-channel layer keeps both, the big one loses 4, group 1 loses 1
    assert uniform_pruning_labels(info, 0.9, min_channels=2) == [0, 1, 3, 5, 9]


def test_concat_config_literal_and_limits():
    info = concat_groups()
    assert least_important_labels(info, [2, 0]) == [3, 7]
    assert least_important_labels(info, [3, 1]) == [1, 3, 7, 9]
    assert least_important_labels(info, [6, 2]) == [0, 1, 2, 3, 5, 7, 8, 9]
    assert max_prunable_per_group(info) == [6, 2]
    assert max_prunable_per_group(info, lambda n: 2) == [4, 1]
    with pytest.raises(ValueError, match=r"pruning_cfg\[0\] = 7 is not allowed: group 0 has 8 channels, so at most "
                                         r"6 can be pruned \(its 2 segments, the source layers of a concatenation, "
                                         r"keep at least \[1, 1\] channels\)"):
        least_important_labels(info, [7, 0])
    with pytest.raises(ValueError, match=r"pruning_cfg\[1\] = 2 is not allowed: group 1 has 3 channels, so at most "
                                         r"1 can be pruned \(it keeps at least 2\)"):
        check_pruning_counts([0, 2], info, min_channels=2)


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
    chosen = uniform_pruning_labels(info, ratio)
    offsets = [int(lab[0]) for lab in labels]
    split = split_labels_by_group(chosen, offsets, [len(g) for g in raw], [True] * len(raw), segments)  # valid
    for g, (lab, seg) in enumerate(zip(labels, segments)):
        n_segments = np.unique(seg).size
        wanted = min(int(np.ceil(ratio * lab.size - 0.5)), lab.size - 1)
        assert split.get(g, np.zeros(0)).size == min(wanted, lab.size - n_segments)  # exact where possible
