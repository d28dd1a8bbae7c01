"""The seed API on real graphs: scheduled ops, shared weights, constant pruning, summaries, idempotence."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import sparsify
import sparsify_tf
from sparsify_tf import PruningScope
from tf_graph_models import batch, build_mlp, expected_pruned, session_config

tf1 = tf.compat.v1


def test_scheduled_graph_ops_training_ref_variables_and_idempotence():
    g = tf.Graph()
    with g.as_default():
        m = build_mlp(resource=False)
        gs = tf1.train.get_or_create_global_step()
        args = (g, gs, ["re:fc.*kernel"], 0, 60, 20, 0.0, 0.75, 3.0, True, "seed", "1x1")
        update, op_vars, ready, sparsity = sparsify_tf.get_or_create_ks_scheduled_graph_ops(*args)
        n_ops = len(g.get_operations())
        again = sparsify_tf.get_or_create_ks_scheduled_graph_ops(*args)
        assert len(g.get_operations()) == n_ops
        assert again[0] is update and again[2] is ready and again[3] is sparsity
        assert [tuple(v) for v in again[1]] == [tuple(v) for v in op_vars]
        train = tf1.train.GradientDescentOptimizer(0.2).minimize(m["loss"], global_step=gs)
        summaries = sparsify_tf.create_summaries_pruning(op_vars)
    assert [v.op.type for v in op_vars] == ["MatMul", "MatMul"]
    assert op_vars[0].mask.op.name == "MatMul_nm_ks/seed/nm_mask"
    assert g.get_collection(PruningScope.collection_name("seed", PruningScope.VAR_MASK))[0] is op_vars[0].mask
    core = sparsify.GradualSchedule(0.0, 0.75, 0, 60, 20)
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        for i in range(70):
            step = int(sess.run(gs))
            if sess.run(ready):
                sess.run(update)
                for v in op_vars:
                    mask = sess.run(v.mask)
                    assert (mask == 0).sum() == expected_pruned(mask.size, float(core.sparsity(step))), step
            bx, by = batch(i)
            sess.run(train, {m["x"]: bx, m["y"]: by})
        vals = [sess.run(s) for s in summaries]
        w1, mk = sess.run([m["w1"], op_vars[0].mask])
    assert len(vals) == 2 and all(isinstance(v, bytes) for v in vals)
    assert np.all(w1[mk == 0] == 0) and (mk == 0).sum() == expected_pruned(w1.size, 0.75)


def test_shared_weight_uses_one_mask_and_one_update():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 8])
        w = tf1.get_variable("shared/kernel", initializer=np.arange(64, dtype=np.float32).reshape(8, 8) - 31.5)
        out = tf.matmul(tf.matmul(x, w), w)
        gs = tf1.train.get_or_create_global_step()
        update, op_vars, _, _ = sparsify_tf.get_or_create_ks_scheduled_graph_ops(
            g, gs, ["shared/kernel"], 0, 0, 1, 0.0, 0.5, 3.0, True, "sh", "1x1")
    assert len(op_vars) == 2 and op_vars[0].mask is op_vars[1].mask and op_vars[0].update is op_vars[1].update
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(update)
        mask = sess.run(op_vars[0].mask)
        wm = (np.arange(64, dtype=np.float32).reshape(8, 8) - 31.5) * mask
        np.testing.assert_allclose(sess.run(out, {x: np.eye(8, dtype=np.float32)}), wm @ wm, rtol=1e-6)
    # |w| = 31.5, 30.5, ... the 32 smallest magnitudes are the middle values 16..47 of arange(64)
    np.testing.assert_array_equal(mask.ravel(), (np.abs(np.arange(64) - 31.5) > 15.5).astype(np.float32))


def test_constant_pruning_locks_existing_zeros_until_end():
    k = np.array([[0.0, 2.0], [3.0, 0.0], [1.0, 1.0]], np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 3])
        w = tf1.get_variable("w", initializer=k)
        tf.matmul(x, w)
        gs = tf1.train.get_or_create_global_step()
        update, op_vars = sparsify_tf.create_ks_scheduled_constant_graph_ops(g, gs, ["w"], 2, 5, "const")
        step = tf1.placeholder(tf.int64, [])
        set_step = tf1.assign(gs, step)
        grow = tf1.assign(w, tf.ones_like(w))
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(set_step, {step: 2})
        sess.run(update)
        np.testing.assert_array_equal(sess.run(op_vars[0].mask), (k != 0).astype(np.float32))
        sess.run(grow)                                   # the optimizer writes the zeros back
        np.testing.assert_array_equal(sess.run(op_vars[0].masked), (k != 0).astype(np.float32))
        sess.run(set_step, {step: 5})
        sess.run(update)                                 # end: bake and release the mask
        np.testing.assert_array_equal(sess.run(op_vars[0].mask), np.ones((3, 2), np.float32))
        np.testing.assert_array_equal(sess.run(w), (k != 0).astype(np.float32))


def test_apply_op_vars_masks_and_gradients_built_before_pruning():
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        grads = tf1.gradients(m["loss"], [m["x"]])[0]            # built BEFORE pruning
        gs = tf1.train.get_or_create_global_step()
        update, op_vars, _, _ = sparsify_tf.get_or_create_ks_scheduled_graph_ops(
            g, gs, ["fc1/kernel"], 0, 0, 1, 0.0, 0.9, 3.0, True, "late", "1x1")
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(update)
        sess.run(tf1.assign(m["w1"], m["w1"] + 1.0))     # dense again behind the mask
        bx, by = batch(0)
        gx = sess.run(grads, {m["x"]: bx, m["y"]: by})
        w1 = sess.run(m["w1"])
        mask = sess.run(op_vars[0].mask)
        sparsify_tf.apply_op_vars_masks(op_vars, "late", sess)
        np.testing.assert_array_equal(sess.run(m["w1"]), w1 * mask)
        n_ops = len(g.get_operations())
        sparsify_tf.apply_op_vars_masks(op_vars, "late", sess)
        assert len(g.get_operations()) == n_ops
        b1, w2 = sess.run([m["b1"], m["w2"]])
    # the input gradient (built before pruning) now uses the masked weight: dL/dx = dL/dpre @ (w1*mask).T
    wm = w1 * mask
    pre = bx @ wm + b1
    logits = np.maximum(pre, 0) @ w2
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(by)), by] -= 1.0
    dpre = (p / len(by)) @ w2.T * (pre > 0)
    np.testing.assert_allclose(gx, dpre @ wm.T, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("pattern", ["1x1", "4x1", "2:4"])
def test_batch_matmul_and_conv_transpose_masks_equal_core(pattern):
    rng = np.random.default_rng(5)
    bm = rng.normal(size=(16, 8)).astype(np.float32)           # (in, out) for x @ W
    ct = rng.normal(size=(3, 3, 8, 4)).astype(np.float32)      # conv2d_transpose (kh, kw, out, in)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 5, 16])
        wb = tf1.get_variable("bmm/kernel", initializer=bm)
        tf.linalg.matmul(x, wb)
        img = tf1.placeholder(tf.float32, [2, 4, 4, 4])
        wc = tf1.get_variable("deconv/kernel", initializer=ct)
        tf.nn.conv2d_transpose(img, wc, [2, 8, 8, 8], [1, 2, 2, 1], "SAME")
        cfg = sparsify.PruningConfig(target_sparsity=0.5, pattern=pattern, start_step=0, end_step=0)
        pr = sparsify_tf.prune_graph(cfg)
    assert pr.kinds == {"bmm/kernel": "dense", "deconv/kernel": "conv_transpose"}
    assert {v.op.type for v in pr.op_vars} == {"BatchMatMulV2", "Conv2DBackpropInput"}
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(pr.update_op)
        got = pr.get_masks(sess, canonical=True)
    want = sparsify.PruningEngine(cfg).compute_masks(
        {"bmm/kernel": bm.T, "deconv/kernel": ct.transpose(2, 3, 0, 1)}, 0)   # rows = output channels
    for n in want:
        np.testing.assert_array_equal(got[n], want[n], err_msg=n)
