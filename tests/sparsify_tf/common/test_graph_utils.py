"""Graph helpers: which weights graph mode can mask, and why the others cannot be."""
import tensorflow as tf

from sparsify_tf.common.graph_utils import get_prunable_ops_and_inputs, unmaskable_weight_uses, v1_cond

tf1 = tf.compat.v1


def test_weights_graph_mode_cannot_mask_are_named_with_the_reason():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 8])
        h = tf.matmul(x, tf1.get_variable("plain", [8, 8]))
        w_cond = tf1.get_variable("in_cond_v2", [8, 8])
        h = tf.cond(tf.constant(True), lambda: tf.matmul(h, w_cond), lambda: h)
        w_cond1 = tf1.get_variable("in_cond_v1", [8, 8], use_resource=False)
        h = v1_cond(tf.constant(True), lambda: tf.matmul(h, w_cond1), lambda: h)
        w_while = tf1.get_variable("in_while", [8, 8])
        _, h = tf.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, tf.matmul(a, w_while)), [0, h])
        h = tf.matmul(h, tf1.get_variable("parted", [8, 8], partitioner=tf1.fixed_size_partitioner(2)))
        tf.nn.embedding_lookup(tf1.get_variable("emb", [10, 8]), [1, 2])
        tf1.nn.conv1d(tf1.placeholder(tf.float32, [2, 5, 3]), tf1.get_variable("conv1d/kernel", [2, 3, 4]), 1, "VALID")
        tf1.get_variable("bias", [8])                                   # 1-D: never a candidate
    assert [p.var_name for p in get_prunable_ops_and_inputs(g)] == ["plain"]
    assert unmaskable_weight_uses(g) == {
        "in_cond_v2": "it is read inside tf.cond (control flow v2)",
        "in_cond_v1": "it is read inside tf.cond (control flow v1)",
        "in_while": "it is read inside tf.while_loop (control flow v2)",
        "parted/part_0": "it is one partition of a partitioned variable",
        "parted/part_1": "it is one partition of a partitioned variable",
        "emb": "it is read by an embedding lookup (gather)",
        "conv1d/kernel": "it is reshaped (ExpandDims, e.g. by Conv1D) before the op reads it",
    }
