"""Export of a pruned graph: frozen GraphDef and SavedModel with the masks baked in, no pruning ops."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import sparsify
import sparsify_tf
from tf_graph_models import batch, build_cnn, expected_pruned, session_config, X

tf1 = tf.compat.v1


def _train(sess, train_op, m, steps):
    for i in range(steps):
        bx, by = batch(i)
        sess.run(train_op, {m["x"]: bx, m["y"]: by})


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "ref"])
def test_export_frozen_graph_and_saved_model(tmp_path, resource):
    cfg = sparsify.PruningConfig(target_sparsity=0.7, start_step=0, end_step=40, pruning_frequency=20,
                                 leave_enabled=resource)   # also covers leave_enabled=False before end_step
    g = tf.Graph()
    with g.as_default():
        m = build_cnn(resource)
        pr = sparsify_tf.prune_graph(cfg)
        train = pr.wrap_train_op(tf1.train.GradientDescentOptimizer(0.05).minimize(m["loss"],
                                                                                    global_step=pr.global_step))
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        _train(sess, train, m, 30)
        ref = sess.run(m["logits"], {m["x"]: X[:16]})
        weights_before = sess.run(pr.weights)
        gd = pr.export_frozen_graph(sess, [m["logits"]], path=tmp_path / "model.pb")
        export_dir = pr.export_saved_model(sess, tmp_path / "sm", {"x": m["x"]}, {"logits": m["logits"]})
        assert all(np.array_equal(weights_before[n], w) for n, w in sess.run(pr.weights).items())
    types = {n.op for n in gd.node}
    assert not types & set(sparsify_tf.common.export.FORBIDDEN_EXPORT_OPS)
    assert not [n.name for n in gd.node if "nm_" in n.name]
    g2 = tf.Graph()
    with g2.as_default():
        loaded = tf1.GraphDef()
        loaded.ParseFromString((tmp_path / "model.pb").read_bytes())
        tf.import_graph_def(loaded, name="")
        with tf1.Session(graph=g2) as s2:
            np.testing.assert_array_equal(s2.run("logits:0", {"x:0": X[:16]}), ref)
            const = {n.name: tf.make_ndarray(n.attr["value"].tensor) for n in loaded.node if n.op == "Const"}
            target = pr.engine.target_sparsity(30)
            assert 0.5 < target < 0.7 and (const["fc/kernel"] == 0).sum() == expected_pruned(1024 * 12, target)
    with tf1.Session(graph=tf.Graph()) as s3:
        meta = tf1.saved_model.load(s3, ["serve"], export_dir)
        sig = meta.signature_def["serving_default"]
        assert not {n.op for n in s3.graph.as_graph_def().node} & {"PyFunc", "VarHandleOp", "VariableV2"}
        out = s3.run(sig.outputs["logits"].name, {sig.inputs["x"].name: X[:16]})
    np.testing.assert_array_equal(out, ref)
