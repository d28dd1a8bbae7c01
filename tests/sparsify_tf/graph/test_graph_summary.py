"""GraphPruning.summary(): the graph's trainable variables of rank 2+, pruned or left dense with why."""
from __future__ import annotations

import tensorflow as tf

from sparsify_tf import prune_graph

tf1 = tf.compat.v1


def test_graph_summary_lists_selected_excluded_unmatched_and_unsupported():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 4, 4, 2])
        k = tf1.get_variable("conv/kernel", [3, 3, 2, 8])
        h = tf.reshape(tf.nn.conv2d(x, k, 1, "SAME"), [-1, 128])
        w1 = tf1.get_variable("fc1/kernel", [128, 16])
        w2 = tf1.get_variable("fc2/kernel", [16, 4])
        b = tf1.get_variable("fc2/bias", [4])
        table = tf1.get_variable("emb/table", [10, 16])
        skip = tf1.get_variable("skip/kernel", [16, 16])
        h = tf.matmul(tf.matmul(h, w1) + tf.reduce_mean(table), skip)
        _ = tf.matmul(h, w2) + b
        pruning = prune_graph({"target_sparsity": 0.75, "pattern": "4x1", "op_names": ["conv", "fc"],
                               "excluded_op_names": ["fc2"]})
    s = pruning.summary()
    assert [(r.name, r.layer_type, r.shape, r.pattern, r.target, r.status) for r in s] == [
        ("conv/kernel", "Conv2D", (3, 3, 2, 8), "4x1", 0.75, "selected"),
        ("fc1/kernel", "MatMul", (128, 16), "4x1", 0.75, "selected"),
        ("fc2/kernel", "MatMul", (16, 4), None, None, "skipped: excluded"),
        ("emb/table", "Variable", (10, 16), None, None, "skipped: unsupported type"),
        ("skip/kernel", "MatMul", (16, 16), None, None, "skipped: not matched")]
    assert [r.name for r in s.selected] == pruning.protocol.names
    assert s.headline() == ("2 weights selected (2192 parameters), 3 skipped (480 parameters: 1 excluded, "
                            "1 unsupported type, 1 not matched)")
