"""SparseML's mask creator classes: names, round trips, masks from the core, use in the seed API."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsify_tf
from sparsify.selection.lowest_k import exact_prune_count
from sparsify_tf.seed.mask_creator import CoreMaskCreator
from sparsify_tf.seed.mask_creator_pruning import (
    BlockPruningMaskCreator, DimensionPruningMaskCreator, GroupedPruningMaskCreator, PruningMaskCreator,
    UnstructuredPruningMaskCreator, UserMaskCreator, load_mask_creator,
)
from sparsify_tf.seed.utils import eval_tensor_sparsity

tf1 = tf.compat.v1


def distinct(shape, seed=0):
    """Weights with distinct non-zero magnitudes and random signs."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    return ((rng.permutation(size) + 1.0) * rng.choice([-1.0, 1.0], size)).reshape(shape).astype(np.float32)


def run(fn):
    """Build ``fn()`` in a fresh graph and evaluate it after initialising the variables."""
    g = tf.Graph()
    with g.as_default():
        out = fn()
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        return sess.run(out)


# ----- names ----------------------------------------------------------------------------
@pytest.mark.parametrize("text, cls", [
    ("unstructured", UnstructuredPruningMaskCreator), ("channel", DimensionPruningMaskCreator),
    ("filter", DimensionPruningMaskCreator), ("[4, 1]", BlockPruningMaskCreator),
    ("[-1, 1]", BlockPruningMaskCreator), ("DimensionPruningMaskCreator:[2, 3]", DimensionPruningMaskCreator),
    ("DimensionPruningMaskCreator:[0]", DimensionPruningMaskCreator),
])
def test_str_and_load_round_trip(text, cls):
    creator = load_mask_creator(text)
    assert type(creator) is cls and str(creator) == text and repr(creator) == text
    assert str(load_mask_creator(str(creator))) == text


def test_load_other_spellings_and_refusals():
    assert load_mask_creator([2, 2]).block_shape == [2, 2]
    assert load_mask_creator((4, 1)).block_shape == [4, 1] and str(load_mask_creator("(4, 1)")) == "[4, 1]"
    assert str(DimensionPruningMaskCreator(2)) == "DimensionPruningMaskCreator:[2]"
    mine = BlockPruningMaskCreator([2, 1])
    assert load_mask_creator(mine) is mine
    with pytest.raises(ValueError, match="mask type must be 'unstructured'.*got 'diagonal'"):
        load_mask_creator("diagonal")


def test_constructor_checks():
    with pytest.raises(ValueError, match=r"dim must be an axis.*\('channel', 'filter'\), got 'row'"):
        DimensionPruningMaskCreator("row")
    with pytest.raises(TypeError, match="dim must be an int"):
        DimensionPruningMaskCreator(True)
    with pytest.raises(TypeError, match="dim must be an int"):
        DimensionPruningMaskCreator([])
    with pytest.raises(ValueError, match="block_shape must have 2 elements"):
        BlockPruningMaskCreator([4])
    with pytest.raises(ValueError, match="positive ints or -1"):
        BlockPruningMaskCreator([0, 1])
    with pytest.raises(ValueError, match=r"grouping_op_name must be one of \('mean', 'max', 'min'\)"):
        BlockPruningMaskCreator([4, 1], "median")
    assert GroupedPruningMaskCreator.get_grouping_op("max") is tf.reduce_max
    with pytest.raises(TypeError, match="abstract"):
        GroupedPruningMaskCreator()
    with pytest.raises(TypeError, match="abstract"):
        PruningMaskCreator()


@pytest.mark.parametrize("creator, shape, kind, name", [
    (DimensionPruningMaskCreator("channel"), (16, 8), "dense", "channelx1x1"),
    (DimensionPruningMaskCreator("channel"), (3, 3, 16, 8), "conv", "channelx1xkernel"),
    (DimensionPruningMaskCreator("filter"), (3, 3, 16, 8), "conv", "1x1xkernel"),
    (DimensionPruningMaskCreator(3), (3, 3, 16, 8), "conv", "1xchannelxkernel"),
    (DimensionPruningMaskCreator(1), (16, 8), "dense", "1xchannelx1"),
    (DimensionPruningMaskCreator([0, 1, 3]), (3, 3, 16, 8), "conv", "1xchannelx1"),
    (DimensionPruningMaskCreator("channel"), (3, 3, 8, 16), "conv_transpose", "1xchannelxkernel"),
    (BlockPruningMaskCreator([4, 1]), (3, 3, 16, 8), "conv", "1x4x1"),
    (BlockPruningMaskCreator([2, 2]), (16, 8), "dense", "2x2x1"),
    (BlockPruningMaskCreator([-1, 1]), (3, 3, 16, 8), "conv", "1xchannelx1"),
    (BlockPruningMaskCreator([1, -1]), (16, 8), "embedding", "channelx1x1"),
])
def test_which_core_pattern_a_weight_gets(creator, shape, kind, name):
    assert creator.core_pattern_name(shape, kind) == name
    assert creator.pattern_for(shape, kind).pattern == name


def test_dims_a_kernel_cannot_take():
    with pytest.raises(ValueError, match="dim='filter' prunes convolution kernels"):
        DimensionPruningMaskCreator("filter").core_pattern_name((16, 8), "dense")
    with pytest.raises(ValueError, match=r"axes \[2\] are not axes of a kernel of shape \(16, 8\)"):
        DimensionPruningMaskCreator(2).core_pattern_name((16, 8), "dense")
    with pytest.raises(ValueError, match="keeps some kernel axes but not all"):
        DimensionPruningMaskCreator([0, 2]).core_pattern_name((3, 3, 16, 8), "conv")
    with pytest.raises(ValueError, match="grouped mask creators prune MatMul"):
        BlockPruningMaskCreator([4, 1]).core_pattern_name((3, 3, 16, 2), "depthwise")


# ----- masks --------------------------------------------------------------------------------
def test_input_channel_mask_literal():
    # dense (in 3, out 2): input rows score the mean magnitude 1.5, 6, 3 -> the first input goes
    k = np.array([[1.0, -2.0], [6.0, 6.0], [-3.0, 3.0]], np.float32)
    mask = run(lambda: DimensionPruningMaskCreator("channel").create_sparsity_mask(tf.constant(k), tf.constant(0.34)))
    assert mask.tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]


def test_block_of_a_conv_tap_literal():
    # (kh 1, kw 2, in 2, out 1): "[2, 1]" = both inputs of the one output at a tap; tap 1 is smaller
    k = np.array([[[[5.0], [4.0]], [[1.0], [-2.0]]]], np.float32)
    mask = run(lambda: BlockPruningMaskCreator([2, 1]).create_sparsity_mask(tf.constant(k), tf.constant(0.5)))
    assert mask.ravel().tolist() == [1.0, 1.0, 0.0, 0.0]
    # "max" ranks the taps by their largest magnitude, "min" by their smallest
    k2 = np.array([[[[5.0], [0.5]], [[3.0], [3.0]]]], np.float32)
    by = {op: run(lambda op=op: BlockPruningMaskCreator([2, 1], op).create_sparsity_mask(
        tf.constant(k2), tf.constant(0.5))).ravel().tolist() for op in ("mean", "max", "min")}
    assert by == {"mean": [0.0, 0.0, 1.0, 1.0], "max": [1.0, 1.0, 0.0, 0.0], "min": [0.0, 0.0, 1.0, 1.0]}


CREATORS = [
    ((16, 8), UnstructuredPruningMaskCreator()),
    ((3, 3, 8, 8), UnstructuredPruningMaskCreator()),
    ((16, 8), DimensionPruningMaskCreator("channel")),
    ((3, 3, 16, 8), DimensionPruningMaskCreator("channel")),
    ((3, 3, 8, 8), DimensionPruningMaskCreator("filter")),
    ((3, 3, 8, 8), DimensionPruningMaskCreator([2, 3])),
    ((16, 8), BlockPruningMaskCreator([4, 1])),
    ((3, 3, 16, 8), BlockPruningMaskCreator([4, 1])),
    ((3, 3, 8, 8), BlockPruningMaskCreator([2, 2])),
    ((3, 3, 8, 8), BlockPruningMaskCreator([-1, 1])),
]


@pytest.mark.parametrize("shape, creator", CREATORS, ids=[f"{c}-{s}" for s, c in CREATORS])
def test_masks_prune_exact_whole_units_up_to_everything(shape, creator):
    w = distinct(shape)
    levels = [0.0, 0.4, 0.9, 0.99, 1.0]

    def build():
        v = tf1.Variable(w)
        init = tf1.get_variable("mask", shape, initializer=creator.get_mask_initializer(v), dtype=tf.float32)
        masks = [creator.create_sparsity_mask(v, tf.constant(s)) for s in levels]
        groups = [creator.group_tensor(m) for m in masks] if isinstance(creator, GroupedPruningMaskCreator) else []
        return init, masks, groups

    init, masks, groups = run(build)
    assert init.shape == shape and init.all()                    # every weight non-zero: every unit kept
    kinds = "dense" if len(shape) == 2 else "conv"
    n_units = int(np.prod(shape)) if not groups else groups[0].size
    for s, mask, group in zip(levels, masks, groups or [None] * len(levels)):
        assert mask.shape == shape
        pruned_units = (mask == 0).sum() * n_units // mask.size
        assert pruned_units == exact_prune_count(float(np.float32(s)), n_units, keep_one=False), (s, kinds)
        if group is not None:
            assert set(np.unique(group)) <= {0.0, 1.0}             # a unit's mask is all 0 or all 1


def test_initializer_keeps_units_holding_a_non_zero():
    k = np.zeros((4, 2), np.float32)
    k[1, 0] = 2.0                                                # only input 1 has a non-zero weight
    got = run(lambda: {
        "channel": DimensionPruningMaskCreator("channel").get_mask_initializer(tf.constant(k))((4, 2)),
        "single": UnstructuredPruningMaskCreator().get_mask_initializer(tf.constant(k))((4, 2), dtype=tf.int32)})
    assert got["channel"].tolist() == [[0, 0], [1, 1], [0, 0], [0, 0]]
    assert got["single"].dtype == np.int32 and got["single"].sum() == 1
    with pytest.raises(ValueError, match="dtype of a mask must be numeric or boolean"):
        run(lambda: UnstructuredPruningMaskCreator().get_mask_initializer(tf.constant(k))((4, 2), dtype=tf.string))


@settings(max_examples=20, deadline=None)
@given(n_in=st.sampled_from([4, 8, 12]), n_out=st.sampled_from([2, 4, 6]),
       taps=st.sampled_from([(1, 1), (3, 3), (1, 2)]), s=st.floats(0.0, 1.0), seed=st.integers(0, 20))
def test_units_and_counts_hold_for_any_conv(n_in, n_out, taps, s, seed):
    shape = (*taps, n_in, n_out)
    w = distinct(shape, seed)
    for creator, unit_axes in ((DimensionPruningMaskCreator("channel"), (2,)),
                               (DimensionPruningMaskCreator("filter"), (2, 3)),
                               (BlockPruningMaskCreator([2, 1]), None)):
        mask = creator.masks_numpy({"k": w}, {"k": "conv"}, s)["k"]
        if unit_axes is not None:                                 # constant over the axes a unit groups
            other = tuple(a for a in range(4) if a not in unit_axes)
            assert (mask.min(axis=other) == mask.max(axis=other)).all()
            n_units = int(np.prod([shape[a] for a in unit_axes]))
        else:                                                     # pairs of inputs at one tap
            pairs = mask.reshape(*taps, n_in // 2, 2, n_out)
            assert (pairs.min(axis=3) == pairs.max(axis=3)).all()
            n_units = mask.size // 2
        assert (mask == 0).sum() * n_units // mask.size == exact_prune_count(s, n_units, keep_one=False)


# ----- in the seed API ---------------------------------------------------------------------
def test_seed_api_prunes_whole_input_channels_of_a_conv():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 5, 5, 4])
        k = tf1.get_variable("conv/kernel", initializer=distinct((3, 3, 4, 6)))
        y = tf.nn.conv2d(x, k, strides=1, padding="SAME")
        s = tf1.placeholder(tf.float32, [])
        ready = tf1.placeholder(tf.bool, [])
        op_vars = sparsify_tf.create_op_pruning(y.op, None, s, ready, True, None, "g",
                                                DimensionPruningMaskCreator("channel"))
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(op_vars.update, {s: 0.5, ready: True})
        mask, weight = sess.run([op_vars.mask, k])
        assert eval_tensor_sparsity(op_vars.masked, sess) == 0.5
        sess.run(op_vars.update, {s: 1.0, ready: True})
        assert eval_tensor_sparsity(op_vars.mask, sess) == 1.0 and not sess.run(k).any()
    per_input = mask.max(axis=(0, 1, 3))
    assert per_input.sum() == 2 and (mask.min(axis=(0, 1, 3)) == per_input).all()
    assert (weight[..., per_input == 0, :] == 0).all()


def test_seed_api_blocks_on_a_graph_and_sparseml_names():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 8])
        h = tf.matmul(x, tf1.get_variable("fc1/kernel", initializer=distinct((8, 4), 1)))
        tf.matmul(h, tf1.get_variable("fc2/kernel", initializer=distinct((4, 4), 2)))
        s = tf.constant(0.5)
        op_vars = sparsify_tf.get_or_create_graph_ops_pruning(g, ["re:fc.*"], s, tf.constant(True), True, None, "g",
                                                               "[2, 1]")
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run([v.update for v in op_vars])
        masks = sess.run([v.mask for v in op_vars])
    for m in masks:                                               # pairs of inputs of one output
        pairs = m.reshape(m.shape[0] // 2, 2, m.shape[1])
        assert (pairs.min(axis=1) == pairs.max(axis=1)).all() and (m == 0).mean() == 0.5


def test_a_users_own_mask_creator_makes_the_masks():
    class FirstInputOff(PruningMaskCreator):
        def get_mask_initializer(self, tensor):
            return lambda shape, dtype=tf.float32, partition_info=None: tf.ones(shape, dtype)

        def create_sparsity_mask(self, tensor, sparsity):
            keep = tf.concat([tf.zeros_like(tensor[:1]), tf.ones_like(tensor[1:])], axis=0)
            return keep * tf.cast(sparsity > 0, tensor.dtype) + tf.cast(sparsity <= 0, tensor.dtype)

    mine = FirstInputOff()
    assert isinstance(sparsify_tf.get_mask_creator(mine), UserMaskCreator)
    assert not isinstance(mine, CoreMaskCreator)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 3])
        y = tf.matmul(x, tf1.get_variable("w", initializer=np.ones((3, 2), np.float32)))
        op_vars = sparsify_tf.create_op_pruning(y.op, None, tf.constant(0.3), tf.constant(True), True, None, "g",
                                                mine)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(op_vars.update)
        assert sess.run(op_vars.mask).tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
