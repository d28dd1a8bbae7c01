"""Tests for sparsify.channels.selection.search_space (NumPy only: no torch, no tensorflow)."""
import numpy as np
import pytest

from sparsify.channels.selection import (ChannelScores, architecture_search_space, default_architecture_optimization_strategy, strategy_min_channels)


def concat_groups():
    """Group 0: a concat of a 6-channel layer (labels 0..5) and a 2-channel layer (labels 6, 7) whose channels are
    the least important; group 1: a plain 3-channel group (labels 8..10)."""
    return ChannelScores([np.arange(8), np.arange(8, 11)],
                         [np.array([5.0, 3.0, 6.0, 2.0, 7.0, 4.0, 0.5, 0.1]), np.array([1.0, 0.0, 2.0])],
                         [np.array([0, 0, 0, 0, 0, 0, 1, 1]), np.zeros(3, dtype=int)])


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
