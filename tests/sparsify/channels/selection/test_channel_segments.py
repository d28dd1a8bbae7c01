"""Tests for sparsify.channels.selection.segments (NumPy only: no torch, no tensorflow)."""
import numpy as np
import pytest

from sparsify.channels.selection import (segments_from_layer_channels, split_labels_by_group)


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


def test_split_labels_by_group_keeps_a_channel_per_segment():
    segments = [np.array([0, 0, 0, 1, 1]), np.zeros(2, dtype=int)]
    got = split_labels_by_group([0, 1, 3], [0, 5], [5, 2], [True, True], segments)
    assert {k: v.tolist() for k, v in got.items()} == {0: [0, 1, 3]}
    with pytest.raises(ValueError, match=r"labels would prune all 2 channels of segment 1 \(labels 3..4\) of group 0; "
                                         "at least one channel of each segment"):
        split_labels_by_group([3, 4], [0, 5], [5, 2], [True, True], segments)
    with pytest.raises(ValueError, match=r"segment 0 \(labels \[0, 2\]\)"):  # a segment need not be contiguous
        split_labels_by_group([0, 2], [0], [3], [True], [np.array([0, 1, 0])])


def test_segments_from_layer_channels_literal():
    # DenseNet-like: a group of 7 channels = concat(init 3, layer1 2, layer2 2); whole-group readers add nothing
    assert segments_from_layer_channels(7, [[0, 1, 2], [3, 4], [5, 6], range(7)]).tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert segments_from_layer_channels(4, [[0, 1], [1, 2, 3]]).tolist() == [0, 1, 2, 2]  # overlapping: atoms
    assert segments_from_layer_channels(3, []).tolist() == [0, 0, 0]
    assert segments_from_layer_channels(3, [[2, 0]]).tolist() == [0, 1, 0]  # ids by first channel
