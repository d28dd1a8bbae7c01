"""Masking primitives: one mask per weight and group, rewired ops (and gradients built before), the record."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from sparsify_tf.common.masking import GraphMasks, mask_op_input, pruned_inputs

tf1 = tf.compat.v1

K = np.array([[1.0, -2.0], [3.0, -4.0], [5.0, 6.0]], np.float32)


def _graph(resource=True):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 3])
        w = tf1.get_variable("w", initializer=K, use_resource=resource)
        y1 = tf.matmul(x, w)
        y2 = tf.matmul(2.0 * x, w)
        grad = tf1.gradients(tf.reduce_sum(y1), [x])[0]     # built before masking
    return g, x, w, y1, y2, grad


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "ref"])
def test_ops_read_mask_times_weight_and_share_one_mask(resource):
    g, x, w, y1, y2, grad = _graph(resource)
    with g.as_default():
        a = mask_op_input(y1.op, None, "grp")
        n_ops = len(g.get_operations())
        assert mask_op_input(y1.op, None, "grp") is a and len(g.get_operations()) == n_ops   # recorded
        b = mask_op_input(y2.op, None, "grp")
        set_mask = tf1.assign(a.mask, [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert b.mask is a.mask and a.update is None
    assert a.masked.op.inputs[1] is a.op_input and GraphMasks.of(g).find("grp", y1.op) is a
    assert y1.op.inputs[1] is a.masked and y2.op.inputs[1] is b.masked
    assert [(r["op"], r["var"], r["group"], r["kind"]) for r in pruned_inputs(g)] == [
        ("MatMul", "w", "grp", "dense"), ("MatMul_1", "w", "grp", "dense")]
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(set_mask)
        xv = np.eye(3, dtype=np.float32)
        masked = K * np.array([[1, 0], [0, 1], [1, 1]], np.float32)
        np.testing.assert_array_equal(sess.run(y1, {x: xv}), masked)
        np.testing.assert_array_equal(sess.run(y2, {x: xv}), 2 * masked)
        np.testing.assert_array_equal(sess.run(grad, {x: xv[:1]}), masked.sum(1, keepdims=True).T)
        np.testing.assert_array_equal(sess.run(w), K)            # the weight itself is untouched


def test_leave_enabled_false_reads_the_dense_weight_after_the_end():
    g, x, w, y1, _, _ = _graph()
    with g.as_default():
        after = tf1.placeholder(tf.bool, [])
        with pytest.raises(ValueError, match="is_after_end_step must be given when leave_enabled is False"):
            mask_op_input(y1.op, None, "grp", leave_enabled=False)
        ov = mask_op_input(y1.op, None, "grp", leave_enabled=False, is_after_end_step=after)
        zero = tf1.assign(ov.mask, tf.zeros_like(ov.mask))
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(zero)
        xv = np.eye(3, dtype=np.float32)
        assert not sess.run(y1, {x: xv, after: False}).any()
        np.testing.assert_array_equal(sess.run(y1, {x: xv, after: True}), K)


def test_bad_op_is_named():
    g, x, w, y1, _, _ = _graph()
    with g.as_default():
        add = (x + 1.0).op
    with pytest.raises(ValueError, match=r"op 'add' of type 'AddV2' is not prunable"):
        mask_op_input(add, None, "grp")
    with pytest.raises(ValueError, match=r"op_input 'Placeholder:0' is not the weight input of op 'MatMul'"):
        mask_op_input(y1.op, x, "grp")
    with pytest.raises(TypeError, match="op must be a tf.Operation"):
        mask_op_input("MatMul", None, "grp")
