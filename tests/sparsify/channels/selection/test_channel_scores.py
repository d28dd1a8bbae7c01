"""Tests for sparsify.channels.selection.scores (NumPy only: no torch, no tensorflow)."""
import numpy as np
import pytest

from pathlib import Path

from sparsify.channels.selection import ChannelScores, group_segments, group_sizes, pruning_order


def test_package_does_not_import_torch_or_tensorflow():
    import sparsify.channels.selection as pkg
    files = sorted(Path(pkg.__file__).parent.glob("*.py"))
    assert {f.name for f in files} >= {"__init__.py", "scores.py", "order.py", "labels.py", "search_space.py",
                                       "segments.py"}
    for f in files:
        source = f.read_text()
        assert "import torch" not in source and "tensorflow" not in source.replace("tensorflow.", ""), f.name


class _Duck:
    """A GroupedScores without segments (like an adapter's info object)."""
    group_labels = [np.array([0, 1, 2]), np.array([3])]
    group_criteria = [np.zeros(3), np.ones(1)]


def test_group_sizes_and_segments():
    info = ChannelScores([np.array([0, 1, 2]), np.array([3, 4])], [np.zeros(3), np.ones(2)],
                         [np.array([0, 0, 1]), np.array([5, 5])])
    assert group_sizes(info) == [3, 2]
    assert [s.tolist() for s in group_segments(info)] == [[0, 0, 1], [5, 5]]
    assert group_sizes(_Duck()) == [3, 1]
    assert [s.tolist() for s in group_segments(_Duck())] == [[0, 0, 0], [0]]


def test_infinite_criteria_are_legal():
    info = ChannelScores([np.array([0, 1, 2])], [np.array([np.inf, 1.0, -np.inf])])
    assert info.group_criteria[0].tolist() == [np.inf, 1.0, -np.inf]


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
