"""Tests for sparsify.patterns.nxm: NxM blocks and the INC channel names."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pattern_cases import A, SHAPES, as_int
from sparsify.layout import to_2d
from sparsify.patterns import PatternNxM, get_pattern
from sparsify.selection.lowest_k import exact_prune_count


def test_block_4x1_literal_and_reduce():
    # column sums: 2.05, 1.75, 1.45, 1.5 -> prune the two lowest columns (2 and 3)
    m = get_pattern("4x1").get_masks({"a": A}, 0.5)["a"]
    assert as_int(m) == [[1, 1, 0, 0]] * 4
    # max-reduce: column maxima 0.9, 0.8, 0.7, 1.0 -> prune columns 1 and 2
    m = get_pattern({"pattern": "4x1", "block_score_reduce": "max"}).get_masks({"a": A}, 0.5)["a"]
    assert as_int(m) == [[1, 0, 0, 1]] * 4


def test_block_1x2_and_2x2_literal():
    m = get_pattern("1x2").get_masks({"a": A}, 0.5)["a"]
    # pair sums per row: [1.0, 0.8], [1.0, 0.75], [1.0, 1.0], [0.8, 0.4]
    # 4 lowest pairs: 0.4 (r3b1), 0.75 (r1b1), then 0.8 ties: r0b1 before r3b0
    assert as_int(m) == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    m = get_pattern("2x2").get_masks({"a": A}, 0.25)["a"]
    # 2x2 block sums: 2.0, 1.55, 1.8, 1.4 -> prune the lower-right block
    assert as_int(m) == [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]


def test_explicit_keyword_constructors():
    assert PatternNxM(block_rows=4, block_cols=1).block_size == (4, 1)
    assert PatternNxM(block_rows=None, block_cols=1).pattern == "channelx1"     # all rows by 1 column
    assert PatternNxM(block_rows=1, block_cols=None).pattern == "1xchannel"     # 1 row by all columns
    assert PatternNxM(block_rows=None, block_cols=4).pattern == "channelx4"
    assert PatternNxM(block_rows=2, block_cols=None).block_size == (2, None)
    assert PatternNxM(block_rows=1, block_cols=None).get_block_size_dict({"w": A}) == {"w": [1, 4]}
    assert PatternNxM(block_rows=None, block_cols=1).get_block_size_dict({"w": A}) == {"w": [4, 1]}
    with pytest.raises(ValueError, match="cannot both be None"):
        PatternNxM(block_rows=None, block_cols=None)


W46 = np.array([[0.1, 5.0, 0.2, 6.0, 0.3, 7.0],
                [0.4, 5.0, 0.5, 6.0, 0.6, 7.0],
                [0.7, 5.0, 0.8, 6.0, 0.9, 7.0],
                [9.0, 9.0, 9.0, 9.0, 9.0, 9.0]])


def test_channel_names_follow_inc_on_a_4x6_weight():
    """issue 11: "channelx1" is all rows by one column (an input column), "1xchannel" one row (an output channel)."""
    cols = get_pattern("channelx1").get_mask_single(W46, 0.5)      # column sums 10.2, 24, 10.5, 27, 10.8, 30
    assert as_int(cols) == [[0, 1, 0, 1, 0, 1]] * 4
    rows = get_pattern("1xchannel").get_mask_single(W46, 0.5)      # row sums 18.6, 19.5, 20.4, 54
    assert as_int(rows) == [[0] * 6, [0] * 6, [1] * 6, [1] * 6]
    assert get_pattern("channelx1").get_block_size_dict({"w": W46}) == {"w": [4, 1]}
    assert get_pattern("1xchannel").get_block_size_dict({"w": W46}) == {"w": [1, 6]}
    assert get_pattern("channelx1").block_size == (None, 1) and get_pattern("1xchannel").block_size == (1, None)


def test_channel_names_honour_any_block_width_and_height():
    """issue 11: "channelx2"/"2xchannel" were silently run as channelx1/1xchannel."""
    pairs = get_pattern("channelx2").get_mask_single(W46, 0.34)    # column-pair sums 34.2, 37.5, 40.8
    assert as_int(pairs) == [[0, 0, 1, 1, 1, 1]] * 4
    two_rows = get_pattern("2xchannel").get_mask_single(W46, 0.5)  # row-pair sums 38.1, 74.4
    assert as_int(two_rows) == [[0] * 6, [0] * 6, [1] * 6, [1] * 6]
    assert get_pattern("channelx3").get_block_size_dict({"w": W46}) == {"w": [4, 3]}
    assert get_pattern("4xchannel").get_block_size_dict({"w": W46}) == {"w": [4, 6]}
    with pytest.raises(ValueError, match=r"layer 'w' with 2-D view \(4, 6\) does not fit pattern 'channelx4': "
                                         "block 4x4 does not divide it"):
        get_pattern("channelx4").get_masks({"w": W46}, 0.5)
    with pytest.raises(ValueError, match="does not fit pattern '3xchannel': block 3x6"):
        get_pattern("3xchannel").get_masks({"w": W46}, 0.5)
    with pytest.raises(ValueError, match="at most one block dimension may be 'channel'"):
        get_pattern("channelxchannel")
    with pytest.raises(ValueError, match="block dimensions must be positive integers, got channelx0"):
        get_pattern("channelx0")


def test_conv_channel_patterns_use_the_2d_view():
    # (out=2, in=2, kh=1, kw=2): 2-D view columns (kw0,in0), (kw0,in1), (kw1,in0), (kw1,in1)
    w = np.array([[[[1.0, 5.0]], [[2.0, 6.0]]],
                  [[[7.0, 3.0]], [[8.0, 0.5]]]])
    m = get_pattern("channelx1").get_mask_single(w, 0.25)          # column sums 8, 10, 8, 6.5: (kw1, in1) goes
    assert to_2d(m).astype(int).tolist() == [[1, 1, 1, 0], [1, 1, 1, 0]]
    assert m[:, 1, 0, 1].tolist() == [False, False] and m.sum() == 6
    m = get_pattern("1xchannel").get_mask_single(w, 0.5)           # output channel 0 (sum 14) goes
    assert not m[0].any() and m[1].all()


def test_infinite_scores_in_blocks():
    s = np.array([[np.inf, 0.0, 1.0, 2.0], [np.inf, 3.0, 4.0, 5.0]])
    for reduce in ("sum", "mean", "max"):
        m = get_pattern({"pattern": "2x1", "block_score_reduce": reduce}).get_mask_single(s, 0.5)
        assert as_int(m) == [[1, 0, 0, 1]] * 2                    # column 0 (score inf) stays
    g = get_pattern({"pattern": "channelx1", "pruning_scope": "global"})
    m = g.get_masks({"a": s, "b": np.full((2, 4), 100.0)}, 0.5)    # a: inf, 3, 5, 7; b: 200 each
    assert as_int(m["a"]) == [[1, 0, 0, 0]] * 2 and as_int(m["b"]) == [[0, 1, 1, 1]] * 2


def test_plus_and_minus_inf_in_one_block_is_named():
    s = np.array([[np.inf, 0.0], [-np.inf, 1.0]])
    for scope in ("local", "global"):
        p = get_pattern({"pattern": "2x1", "pruning_scope": scope})
        with pytest.raises(ValueError, match=r"layer 'fc': a unit of pattern '2x1' holds both \+inf and -inf"):
            p.get_masks({"fc": s}, 0.5)
    assert as_int(get_pattern("1x2").get_mask_single(s, 0.5, name="fc")) == [[1, 1], [0, 0]]   # -inf goes first


def test_conv_weight_uses_2d_view():
    # (out=2, in=2, kh=1, kw=2); 2-D view columns: (kw0,in0), (kw0,in1), (kw1,in0), (kw1,in1)
    w = np.array([[[[1.0, 5.0]], [[2.0, 6.0]]],
                  [[[7.0, 3.0]], [[8.0, 0.5]]]])
    assert to_2d(w).tolist() == [[1.0, 2.0, 5.0, 6.0], [7.0, 8.0, 3.0, 0.5]]
    m = get_pattern("1x2").get_mask_single(w, 0.5)
    # pairs: row0 (1,2)=3 (5,6)=11, row1 (7,8)=15 (3,0.5)=3.5 -> prune row0 pair0 and row1 pair1
    assert m.shape == w.shape
    assert to_2d(m).astype(int).tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]]
    m24 = get_pattern("2:4").get_mask_single(w, 0.5)
    assert to_2d(m24).astype(int).tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]]


@settings(max_examples=120, deadline=None)
@given(SHAPES, st.sampled_from(["1x1", "2x2", "4x1", "1x4", "channelx1", "1xchannel", "channelx2", "2xchannel"]),
       st.floats(0, 0.99),
       st.integers(0, 2 ** 31 - 1))
def test_property_block_exact_counts_and_uniformity(shape, name, ratio, seed):
    p = get_pattern(name)
    if p.fits(to_2d(np.zeros(shape)).shape) is not None:
        return
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 4, size=shape).astype(np.float32)   # many ties
    m = p.get_mask_single(w, ratio)
    v2 = to_2d(m)
    br, bc = p.block_shape(v2.shape)
    blocks = v2.reshape(v2.shape[0] // br, br, v2.shape[1] // bc, bc)
    assert (blocks.all(axis=(1, 3)) | ~blocks.any(axis=(1, 3))).all()     # each block all kept or all pruned
    n_blocks = blocks.shape[0] * blocks.shape[2]
    assert (~blocks.any(axis=(1, 3))).sum() == exact_prune_count(ratio, n_blocks)


def test_conformity_of_a_zero_structure():
    nonzero = np.ones((4, 6), dtype=bool)
    nonzero[:, 2] = False                                        # one whole column
    assert get_pattern("channelx1").conformity(nonzero) == (6, 0)
    assert get_pattern("1xchannel").conformity(nonzero) == (4, 4)   # every row holds a stray zero
    assert get_pattern("1x1").conformity(nonzero) == (24, 0)
    nonzero[0, 0] = False
    assert get_pattern("channelx1").conformity(nonzero) == (6, 1)
