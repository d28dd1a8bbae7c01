"""Tests for sparsify.schedules.constant."""
import pytest

from sparsify.schedules import ConstantSchedule


def test_constant_values_and_update_points():
    c = ConstantSchedule(0.5, begin_step=2, end_step=-1, update_frequency=3)
    assert c.sparsity([0, 2, 99]).tolist() == [0.0, 0.5, 0.5]
    assert [t for t in range(10) if c.update_ready(t)] == [2, 5, 8]
    assert isinstance(c.sparsity(4), float)
    bounded = ConstantSchedule(0.25, begin_step=0, end_step=6, update_frequency=4)
    assert [t for t in range(10) if bounded.update_ready(t)] == [0, 4, 6]


def test_constant_validation():
    with pytest.raises(ValueError, match=r"sparsity must be in \[0, 1\), got 1.5"):
        ConstantSchedule(1.5)
    with pytest.raises(ValueError, match="end_step must be >= begin_step \\(5\\) or -1"):
        ConstantSchedule(0.5, begin_step=5, end_step=2)
