"""CoreMaskCreator: mask values from the core, build-time sparsity checks, one core call for a global group."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import sparsify
from sparsify_tf.mask_creator import CoreMaskCreator, get_mask_creator

tf1 = tf.compat.v1


def test_literal_2_in_4_mask_in_tf_layout():
    # dense kernel (in=4, out=1): canonical row [4, 1, 3, 2]; "2:4" prunes the 2 smallest of the group
    mc = get_mask_creator("2:4")
    got = mc.masks_numpy({"w": np.array([[4.0], [1.0], [3.0], [2.0]], np.float32)}, {"w": "dense"}, 0.5)["w"]
    assert got.dtype == np.float32 and got.ravel().tolist() == [1.0, 0.0, 1.0, 0.0]


def test_check_sparsity_names_the_parameter():
    assert CoreMaskCreator("2:4").check_sparsity(0.5, "final_sparsity") == 0.5
    assert CoreMaskCreator("4x1").check_sparsity(0.95) == 0.95
    with pytest.raises(ValueError, match=r"final_sparsity=0.6 cannot be reached with mask_creator '2:4'"):
        CoreMaskCreator("2:4").check_sparsity(0.6, "final_sparsity")
    with pytest.raises(ValueError, match=r"sparsity=1.0 cannot be reached with mask_creator '1x1'"):
        CoreMaskCreator("1x1").check_sparsity(1.0)


def test_global_masks_in_one_core_call_equal_the_core():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(8, 4)).astype(np.float32) * 0.1
    b = rng.normal(size=(4, 8)).astype(np.float32)
    spec = {"pattern": "1x1", "pruning_scope": "global"}
    mc = get_mask_creator(spec)
    assert mc.is_global and not get_mask_creator("1x1").is_global
    g = tf.Graph()
    with g.as_default():
        outs = mc.create_sparsity_masks([tf.constant(a), tf.constant(b)], tf.constant(0.6, tf.float64), None,
                                        ["dense", "dense"], ["a", "b"])
        assert len([op for op in g.get_operations() if op.type.startswith("PyFunc")]) == 1
        with pytest.raises(ValueError, match="must be non-empty and of equal length"):
            mc.create_sparsity_masks([tf.constant(a)], tf.constant(0.6, tf.float64), None, ["dense"], ["a", "b"])
    with tf1.Session(graph=g) as sess:
        got_a, got_b = sess.run(outs)
    want = sparsify.get_pattern(spec).get_masks({"a": np.abs(a.T), "b": np.abs(b.T)}, 0.6)
    np.testing.assert_array_equal(got_a.T != 0, want["a"])
    np.testing.assert_array_equal(got_b.T != 0, want["b"])
    assert (got_a == 0).sum() > (got_b == 0).sum()           # one threshold: the small layer gives more
