"""tfmot's schedule and mask arithmetic (sparsify_tf.compat.tfmot_arithmetic), literal cases and invariants."""
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify_tf.compat.tfmot_arithmetic import (ConstantSparsity, PolynomialDecay, block_mask, check_m_by_n,
                                                 m_by_n_mask, magnitude_mask, schedule_from_config,
                                                 should_update_masks)


def test_constant_schedule_turns_and_value():
    s = ConstantSparsity(0.6, begin_step=3, end_step=9, frequency=3)
    assert [bool(s(t)[0]) for t in range(0, 13)] == [t in (3, 6, 9) for t in range(0, 13)]
    assert s(3)[1].dtype == tf.float32 and float(s(3)[1]) == np.float32(0.6)
    forever = ConstantSparsity(0.5, begin_step=0, frequency=1000)
    assert bool(forever(10 ** 9)[0]) and not bool(forever(10 ** 9 + 1)[0])


def test_polynomial_decay_is_float32_and_clipped():
    s = PolynomialDecay(0.2, 0.8, begin_step=10, end_step=20, power=3, frequency=5)
    p = np.float32(5) / np.float32(10)
    expected = np.float32(np.float32(0.2 - 0.8) * (np.float32(1) - p) ** 3 + np.float32(0.8))
    assert s(15)[1].numpy() == expected
    assert float(s(0)[1]) == pytest.approx(0.2) and float(s(100)[1]) == pytest.approx(0.8)
    assert [bool(s(t)[0]) for t in (5, 10, 15, 20, 25)] == [False, True, True, True, False]


@pytest.mark.parametrize("kwargs, match", [
    ({"begin_step": -1}, "begin_step must be >= 0"),
    ({"end_step": 2, "begin_step": 5}, "end_step must be -1 or >= begin_step"),
    ({"frequency": 0}, "frequency must be > 0"),
    ({"target_sparsity": 1.0}, r"target_sparsity must be a number in \[0, 1\)"),
])
def test_constant_schedule_refuses_bad_arguments(kwargs, match):
    args = {"target_sparsity": 0.5, "begin_step": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        ConstantSparsity(**args)


def test_polynomial_decay_needs_an_end():
    with pytest.raises(ValueError, match="cannot be -1"):
        PolynomialDecay(0.0, 0.5, begin_step=0, end_step=-1)
    with pytest.raises(TypeError, match="begin_step must be an int"):
        PolynomialDecay(0.0, 0.5, begin_step=0.5, end_step=10)


def test_schedule_config_round_trip():
    s = PolynomialDecay(0.1, 0.7, begin_step=2, end_step=40, power=2, frequency=4)
    back = schedule_from_config(s.get_config())
    assert back.get_config() == s.get_config()
    with pytest.raises(ValueError, match="unknown schedule class 'Nope'"):
        schedule_from_config({"class_name": "Nope", "config": {}})


def test_mask_keeps_round_half_even_count_and_all_ties():
    # 6 weights at sparsity 0.25: keep round(4.5) = 4 (half to even), not 5
    w = tf.constant([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    threshold, mask = magnitude_mask(w, tf.constant(0.25))
    assert float(threshold) == 3.0 and mask.numpy().tolist() == [1, 1, 1, 1, 0, 0]
    # ties at the threshold are all kept: 3 kept although the count says 2
    _, mask = magnitude_mask(tf.constant([2.0, -2.0, 2.0, 0.5]), tf.constant(0.5))
    assert mask.numpy().tolist() == [1, 1, 1, 0]
    # at least one weight is kept
    _, mask = magnitude_mask(tf.constant([0.1, 0.3, 0.2]), tf.constant(0.99))
    assert mask.numpy().tolist() == [0, 1, 0]


def test_block_mask_avg_and_max():
    w = tf.constant([[1.0, 1.0, 0.0, 4.0],
                     [1.0, 1.0, 0.0, 0.0]])
    _, avg = block_mask(w, tf.constant(0.5), (2, 2), "AVG")      # block means 1.0 and 1.0 -> tie, both kept
    assert avg.numpy().tolist() == [[1, 1, 1, 1], [1, 1, 1, 1]]
    w = tf.constant([[1.0, 1.0, 0.0, 3.0],
                     [1.0, 1.0, 0.0, 0.0]])
    _, avg = block_mask(w, tf.constant(0.5), (2, 2), "AVG")      # means 1.0 and 0.75
    assert avg.numpy().tolist() == [[1, 1, 0, 0], [1, 1, 0, 0]]
    _, mx = block_mask(w, tf.constant(0.5), (2, 2), "MAX")       # maxima 1.0 and 3.0
    assert mx.numpy().tolist() == [[0, 0, 1, 1], [0, 0, 1, 1]]
    # a partial last block (3 columns with width 2) is pooled over what exists
    _, part = block_mask(tf.constant([[1.0, 2.0, 9.0]]), tf.constant(0.5), (1, 2), "AVG")
    assert part.numpy().tolist() == [[0, 0, 1]]


def test_m_by_n_dense_groups_run_along_the_input_dimension():
    # Dense kernel (in=4, out=2): column j holds output j's 4 inputs
    w = tf.constant([[0.1, 4.0], [0.4, 3.0], [0.3, 1.0], [0.2, 2.0]])
    mask = m_by_n_mask(w, (2, 4)).numpy()
    assert mask.tolist() == [[0, 1], [1, 1], [1, 0], [0, 0]]


def test_m_by_n_ties_keep_the_lower_index_and_pad_partial_groups():
    w = tf.ones((6, 1))                                   # 6 inputs: one full group of 4 and 2 padded
    assert m_by_n_mask(w, (2, 4)).numpy().ravel().tolist() == [1, 1, 0, 0, 1, 1]


def test_m_by_n_conv_kernel():
    w = np.zeros((1, 1, 4, 2), np.float32)
    w[0, 0, :, 0] = [1, 2, 3, 4]
    w[0, 0, :, 1] = [4, 3, 2, 1]
    mask = m_by_n_mask(tf.constant(w), (1, 4)).numpy()
    assert mask[0, 0, :, 0].tolist() == [0, 1, 1, 1] and mask[0, 0, :, 1].tolist() == [1, 1, 1, 0]


def test_m_by_n_masks_are_made_at_step_one_only():
    sched = ConstantSparsity(0.5, 0, frequency=1)
    assert [bool(should_update_masks(sched, (2, 4), t)) for t in (0, 1, 2, 3)] == [False, True, False, False]
    assert [bool(should_update_masks(sched, None, t)) for t in (0, 1, 2)] == [True, True, True]


@pytest.mark.parametrize("bad", [(4, 2), (2,), "2:4", (2.0, 4), (0, 4)])
def test_check_m_by_n_refuses(bad):
    with pytest.raises(ValueError, match="sparsity_m_by_n must be"):
        check_m_by_n(bad)


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 9), seed=st.integers(0, 10 ** 6))
def test_m_by_n_keeps_two_of_every_four(rows, cols, seed):
    w = np.random.default_rng(seed).normal(size=(cols, rows)).astype(np.float32)   # (in, out)
    mask = m_by_n_mask(tf.constant(w), (2, 4)).numpy().T                              # (out, in)
    for start in range(0, cols, 4):
        group = mask[:, start:start + 4]
        assert (group.sum(axis=1) == min(2, group.shape[1])).all()
        kept_min = np.where(group > 0, np.abs(w.T[:, start:start + 4]), np.inf).min(axis=1)
        dropped_max = np.where(group == 0, np.abs(w.T[:, start:start + 4]), -np.inf).max(axis=1)
        assert (kept_min >= dropped_max).all()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 60), s=st.floats(0.0, 0.99), seed=st.integers(0, 10 ** 6))
def test_magnitude_mask_count_rule(n, s, seed):
    w = np.random.default_rng(seed).normal(size=n).astype(np.float32)
    _, mask = magnitude_mask(tf.constant(w), tf.constant(s, tf.float32))
    k = max(int(np.round(np.float32(n) * (np.float32(1) - np.float32(s)))), 1)   # numpy rounds half to even too
    assert int(mask.numpy().sum()) == k                                           # distinct magnitudes: exact
    assert np.abs(w[mask.numpy() == 1]).min() >= np.abs(w[mask.numpy() == 0]).max(initial=0)
