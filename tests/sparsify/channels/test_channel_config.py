"""Tests for sparsify.channels.config (NumPy only: this file must not import torch)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.channels.config import (is_ratio_config, pruning_config_counts, uniform_pruning_config,
                                     validate_pruning_config)
from sparsify.channels.selection import ChannelScores, n_channels_to_prune, uniform_pruning_labels


def test_module_does_not_import_torch_or_tensorflow():
    import sparsify.channels.config as mod
    source = open(mod.__file__).read()
    assert "import torch" not in source and "tensorflow" not in source


def scores(*sizes, segments=None):
    labels, start = [], 0
    for n in sizes:
        labels.append(np.arange(start, start + n))
        start += n
    return ChannelScores(labels, [np.zeros(n) for n in sizes], segments)


def test_is_ratio_config():
    assert is_ratio_config([0.5]) and is_ratio_config((np.float32(0.1), 0.0))
    assert not is_ratio_config([1, 2]) and not is_ratio_config([np.int64(1)]) and not is_ratio_config([])


@pytest.mark.parametrize("config, counts", [
    ([], []), ([0, 3], [0, 3]), ((1,), [1]), ([0.0, 0.999], [0, 3]), (np.array([0.5, 0.25]), [2, 1]),
    ([np.int32(2)], [2]),
])
def test_valid_forms(config, counts):
    assert validate_pruning_config(config) is None
    info = scores(*[4] * len(counts))                   # groups of 4: every count leaves a channel
    assert validate_pruning_config(config, info) is None
    assert pruning_config_counts(config, info) == counts   # 0.999 of 4 -> 4, capped at n - 1 = 3


@pytest.mark.parametrize("config,match", [
    (5, "must be a sequence"), ("ab", "must be a sequence"), ({"a": 1}, "must be a sequence"),
    ([1, 0.5], "a mix"), ([-1], "pruning_config\\[0\\] = -1 is negative"),
    ([1.0], "pruning_config\\[0\\] = 1.0 is not a fraction in \\[0, 1\\)"),
    ([float("nan")], "is not a fraction"), ([None], "pruning_config\\[0\\] must be an integer or a float, got None"),
    ([False], "must be an integer or a float, got False"),
])
def test_invalid_forms(config, match):
    with pytest.raises(ValueError, match=match):
        validate_pruning_config(config)


def test_counts_from_fractions_follow_the_exact_count_rule():
    info = scores(4, 10, 3)
    assert pruning_config_counts([0.5, 0.25, 0.9], info) == [2, 2, 2]  # 2.5 -> 2 (halves round down); 2.7 -> n - 1
    assert pruning_config_counts([1, 9, 0], info) == [1, 9, 0]
    with pytest.raises(ValueError, match="pruning_config has 2 entries but there are 3 prunable groups"):
        pruning_config_counts([0.5, 0.5], info)


def test_fractions_respect_segments_and_min_channels():
    info = scores(6, segments=[np.array([0, 0, 0, 0, 1, 1])])
    assert pruning_config_counts([0.9], info) == [4]  # 5 asked, each segment keeps one: 4
    assert pruning_config_counts([0.9], info, min_channels=2) == [2]


def test_validate_against_groups():
    info = scores(3, 2)
    validate_pruning_config([2, 1], info)
    validate_pruning_config([0.9, 0.9], info)  # fractions are clipped to what may be pruned
    with pytest.raises(ValueError, match="pruning_cfg\\[1\\] = 2 is not allowed: group 1 has 2 channels"):
        validate_pruning_config([0, 2], info)


def test_uniform_pruning_config():
    assert uniform_pruning_config(scores(4, 3), 0.5) == [2, 1]   # 1.5 -> 1: halves round down
    assert uniform_pruning_config(scores(), 0.5) == []
    with pytest.raises(ValueError, match="pruning_ratio must be a number in \\[0, 1\\), got 1.0"):
        uniform_pruning_config(scores(4), 1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=5), st.floats(0, 0.999))
def test_uniform_config_matches_uniform_labels(sizes, ratio):
    info = scores(*sizes)
    counts = uniform_pruning_config(info, ratio)
    assert counts == [n_channels_to_prune(n, ratio) for n in sizes]
    assert sum(counts) == len(uniform_pruning_labels(info, ratio))
