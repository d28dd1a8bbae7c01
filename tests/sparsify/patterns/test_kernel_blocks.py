"""OxIxK patterns: units of outputs x inputs at one kernel tap or over the whole kernel."""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.patterns import PatternKernelBlocks, get_pattern, registered_patterns
from sparsify.selection.lowest_k import exact_prune_count


def conv(out, inp, kh, kw, seed=0):
    """A canonical conv weight (out, in, kh, kw) with distinct magnitudes."""
    rng = np.random.default_rng(seed)
    return rng.permutation(out * inp * kh * kw).reshape(out, inp, kh, kw).astype(np.float64) + 1.0


def test_registered_after_the_other_families():
    assert registered_patterns()[-1] == "OxIxK"
    assert isinstance(get_pattern("channelx1xkernel"), PatternKernelBlocks)
    assert get_pattern("4x1").family == "NxM"      # two parts stay NxM


def test_input_channel_literal_mask():
    # (out 2, in 3, 1x2 taps): input channel c scores the sum over outputs and taps
    w = np.array([[[[1.0, 1.0]], [[5.0, 5.0]], [[2.0, 2.0]]],
                  [[[1.0, 0.0]], [[5.0, 5.0]], [[3.0, 2.0]]]])
    keep = get_pattern("channelx1xkernel").get_mask_single(w, 0.34)      # 1 of 3 units
    assert keep[:, 0].sum() == 0 and keep[:, 1:].all()


def test_kernel_of_one_pair_literal_mask():
    # (out 2, in 2, 2 taps): the pair (0, 1) has the smallest kernel sum
    w = np.array([[[4.0, 4.0], [1.0, 0.5]],
                  [[3.0, 3.0], [2.0, 2.0]]])
    keep = get_pattern("1x1xkernel").get_mask_single(w, 0.25)
    assert keep.astype(int).tolist() == [[[1, 1], [0, 0]], [[1, 1], [1, 1]]]


def test_inputs_of_one_tap_literal_mask():
    # (out 1, in 4, 2 taps): "1x2x1" = two consecutive inputs of one output at one tap
    w = np.array([[[9.0, 1.0], [9.0, 1.0], [1.0, 9.0], [2.0, 9.0]]])
    keep = get_pattern("1x2x1").get_mask_single(w, 0.5)
    assert keep.astype(int).tolist() == [[[1, 0], [1, 0], [0, 1], [0, 1]]]
    keep = get_pattern("1xchannelx1").get_mask_single(w, 0.5)            # all inputs at one tap
    assert keep.astype(int).tolist() == [[[1, 0], [1, 0], [1, 0], [1, 0]]]


def test_dense_weight_blocks_equal_nxm():
    w = np.random.default_rng(3).random((8, 12))
    for oxi, nxm in (("4x1x1", "4x1"), ("1x4xkernel", "1x4"), ("channelx1x1", "channelx1"), ("2x2x1", "2x2")):
        np.testing.assert_array_equal(get_pattern(oxi).get_mask_single(w, 0.5),
                                      get_pattern(nxm).get_mask_single(w, 0.5))


@pytest.mark.parametrize("name", ["channelx1xkernel", "1x1xkernel", "1x4x1", "2x2x1", "1xchannelx1",
                                  "channelxchannelx1", "2x1xkernel", "channelx2x1", "4xchannelx1"])
@settings(max_examples=15, deadline=None)
@given(ratio=st.floats(0.0, 0.999), seed=st.integers(0, 50))
def test_exact_unit_count_and_whole_units(name, ratio, seed):
    p = get_pattern(name)
    w = conv(8, 8, 3, 3, seed)
    keep = p.get_mask_single(w, ratio)
    kept = p.unit_values(keep.astype(float))             # per unit: how many of its weights are kept
    size = keep.size // kept.size
    assert set(np.unique(kept)) <= {0.0, float(size)}     # whole units only
    assert (kept == 0).sum() == exact_prune_count(ratio, kept.size)


def test_arrange_round_trips():
    w = conv(4, 6, 2, 3)
    for name in PatternKernelBlocks.examples + ("2x1xkernel", "channelx2x1", "channelxchannelx1"):
        p = get_pattern(name)
        assert p.arrange(w).shape == p.arranged_shape(w.shape)
        np.testing.assert_array_equal(p.unarrange(p.arrange(w), w.shape), w)


def test_min_reduction_and_unit_values():
    w = np.array([[1.0, 8.0], [3.0, 2.0]])                 # dense (out 2, in 2): inputs are columns
    p = get_pattern({"pattern": "channelx1xkernel", "block_score_reduce": "min"})
    assert p.unit_values(w).ravel().tolist() == [1.0, 2.0]
    assert p.get_mask_single(w, 0.5).astype(int).tolist() == [[0, 1], [0, 1]]
    assert get_pattern({"pattern": "channelx1xkernel", "block_score_reduce": "mean"}).unit_values(w).ravel().tolist() \
        == [2.0, 5.0]
    with pytest.raises(ValueError, match="block_score_reduce must be one of"):
        get_pattern({"pattern": "1x1xkernel", "block_score_reduce": "median"})


def test_unit_lock_mask_keeps_units_with_a_non_zero():
    w = np.zeros((2, 2, 1, 2))
    w[1, 0, 0, 1] = 3.0                                   # pair (1, 0) has one non-zero tap
    lock = get_pattern("1x1xkernel").unit_lock_mask(w)
    assert lock[1, 0].all() and lock.sum() == 2


def test_monotone_and_global_scope():
    w = conv(4, 4, 1, 1)
    p = get_pattern("channelx1xkernel")
    first = p.get_mask_single(w, 0.25)
    second = p.get_mask_single(w[::-1, ::-1].copy(), 0.5, pre_mask=first)
    assert not (second & ~first).any() and (~second).sum() == 8
    g = get_pattern({"pattern": "channelx1xkernel", "pruning_scope": "global"})
    masks = g.get_masks({"a": w, "b": w * 100.0}, 0.5)
    # one threshold over 8 units, 4 pruned: the small layer first, up to its core cap (one of its 4 units kept)
    assert (~masks["a"]).sum() == 3 * 4 and (~masks["b"]).sum() == 1 * 4


def test_seed_rule_prunes_everything_at_one():
    p = copy.copy(get_pattern("1x4x1"))
    with pytest.raises(ValueError, match=r"must be in \[0, 1\)"):
        p.get_mask_single(conv(2, 4, 1, 1), 1.0)
    p.keep_one_unit = False
    assert not p.get_mask_single(conv(2, 4, 1, 1), 1.0).any()


def test_errors_name_the_layer_and_the_rule():
    with pytest.raises(ValueError, match="one of O and I must be 1 or 'channel'"):
        get_pattern("2x2xkernel")
    with pytest.raises(ValueError, match="whole weight"):
        get_pattern("channelxchannelxkernel")
    with pytest.raises(ValueError, match="positive integers"):
        get_pattern("0x1x1")
    with pytest.raises(ValueError, match=r"layer 'c' of shape \(8, 6, 3, 3\) does not fit pattern '1x4x1': block 1x4"):
        get_pattern("1x4x1").get_mask_single(conv(8, 6, 3, 3), 0.5, name="c")
    with pytest.raises(ValueError, match=r"layer 'c'.*'3x1x1': 3 outputs per unit do not divide its 8 outputs"):
        get_pattern("3x1x1").check_shape("c", (8, 6, 3, 3))
    skip = get_pattern({"pattern": "1x4x1", "skip_incompatible_layers": True})
    assert skip.check_shape("c", (8, 6, 3, 3)) is False and skip.get_masks({"c": conv(8, 6, 3, 3)}, 0.5)["c"].all()
    with pytest.raises(ValueError, match="selection over shards"):
        get_pattern("1x1xkernel").prepare_units("c", conv(2, 2, 1, 1))


def test_report_conformity_sees_the_units():
    from sparsify.cli.report.tensor_measures import pattern_conformity

    w = conv(4, 4, 3, 3)
    w[:, 1] = 0.0                                           # input channel 1 removed
    got = pattern_conformity(w, "channelx1xkernel")
    assert got == {"fits": True, "conforms": True, "units": 4, "violations": 0, "reason": None}
    w[0, 2, 0, 0] = 0.0                                     # one more zero inside input channel 2
    assert pattern_conformity(w, "channelx1xkernel")["violations"] == 1
    assert pattern_conformity(w, "3x1x1")["reason"] == "3 outputs per unit do not divide its 4 outputs"
