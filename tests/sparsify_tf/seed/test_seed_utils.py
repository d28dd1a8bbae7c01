"""The seed's graph helpers: the weight input of an op and the sparsity of a tensor."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from sparsify_tf.seed.utils import VAR_INDEX_FROM_TRAINABLE, eval_tensor_sparsity, get_op_input_var

tf1 = tf.compat.v1


def test_weight_input_of_matmul_and_conv():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 4, 4, 2])
        k = tf1.get_variable("k", initializer=np.ones((3, 3, 2, 3), np.float32))
        y = tf.nn.conv2d(x, k, strides=1, padding="SAME")
        w = tf1.get_variable("w", initializer=np.ones((3, 2), np.float32))
        z = tf.matmul(tf.reduce_mean(y, axis=[1, 2]), w)
        b = tf1.get_variable("b", initializer=np.ones((2,), np.float32))
        added = tf.add(z, b)
        frozen = tf1.get_variable("frozen", initializer=np.ones((2,), np.float32), trainable=False)
        plain = tf.add(z, frozen)
    assert get_op_input_var(y.op, VAR_INDEX_FROM_TRAINABLE) is y.op.inputs[1]
    assert get_op_input_var(z.op) is z.op.inputs[1] and get_op_input_var(z.op, 0) is z.op.inputs[0]
    assert get_op_input_var(added.op) is added.op.inputs[1]         # not prunable: the trainable input
    with pytest.raises(ValueError, match="reads no trainable variable"):
        get_op_input_var(plain.op)
    with pytest.raises(ValueError, match=r"var_index must be 'from_trainable' or an input index of .* in \[0, 2\)"):
        get_op_input_var(z.op, 2)
    with pytest.raises(TypeError, match="operation must be a tf.Operation"):
        get_op_input_var(z)


def test_sparsity_of_a_tensor_in_a_session():
    g = tf.Graph()
    with g.as_default():
        t = tf.constant([[0.0, 1.0], [0.0, 0.0]])
        empty = tf.zeros([0])
    with tf1.Session(graph=g) as sess:
        assert eval_tensor_sparsity(t, sess) == 0.75 and eval_tensor_sparsity(empty, sess) == 0.0
        with sess.as_default():
            assert eval_tensor_sparsity(t) == 0.75
    with pytest.raises(ValueError, match="needs sess or a default session"):
        eval_tensor_sparsity(t)
