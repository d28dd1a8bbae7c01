"""`sparsify_tf.common.export`: frozen and SavedModel exports use no deprecated TensorFlow API (nothing logged), keep
the pruned outputs, and freeze embedding lookups on resource variables (issue 14, quiet output)."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

import sparsify_tf

tf1 = tf.compat.v1


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.levelname}: {record.getMessage()}")


@pytest.fixture
def tf_log():
    logger = tf.get_logger()
    level = logger.level
    handler = _Records()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler.messages
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_export_logs_no_deprecation_and_keeps_outputs(tmp_path, tf_log):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 8], name="x")
        ids = tf1.placeholder(tf.int32, [None], name="ids")
        k = tf1.get_variable("fc/kernel", initializer=np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32),
                             use_resource=True)
        emb = tf1.get_variable("emb", initializer=np.arange(20, dtype=np.float32).reshape(5, 4), use_resource=True)
        logits = tf.identity(tf.matmul(x, k) + tf.nn.embedding_lookup(emb, ids), name="logits")
        pruning = sparsify_tf.prune_graph({"target_sparsity": 0.5, "start_step": 0, "end_step": 0,
                                           "op_names": ["fc/kernel"]})
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(pruning.update_op)
            feed = {x: np.ones((3, 8), np.float32), ids: np.array([0, 4, 2], np.int32)}
            want = sess.run(logits, feed)
            tf_log.clear()
            frozen = sparsify_tf.export_frozen_graph(sess, [logits])
            export_dir = sparsify_tf.export_saved_model(sess, tmp_path / "sm", {"x": x, "ids": ids},
                                                        {"logits": logits})
    assert not [m for m in tf_log if "is deprecated" in m or m.startswith(("WARNING", "ERROR"))], tf_log
    ops = {n.op for n in frozen.node}
    assert not ops & {"VarHandleOp", "ReadVariableOp", "ResourceGather", "VariableV2"} and "Gather" in ops
    g2 = tf.Graph()
    with g2.as_default():
        tf.import_graph_def(frozen, name="")
        with tf1.Session(graph=g2) as s2:
            got = s2.run("logits:0", {"x:0": feed[x], "ids:0": feed[ids]})
    np.testing.assert_allclose(got, want, rtol=1e-6)
    loaded = tf.saved_model.load(export_dir).signatures["serving_default"]
    np.testing.assert_allclose(loaded(x=tf.constant(feed[x]), ids=tf.constant(feed[ids]))["logits"].numpy(), want,
                               rtol=1e-6)
