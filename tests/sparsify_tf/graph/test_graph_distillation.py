"""Distillation in a tf.compat.v1 graph: the term against the core's NumPy reference, a frozen snapshot teacher."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import sparsify_tf
from sparsify import DistillationConfig, PruningConfig
from sparsify.distillation import distillation_loss as np_distillation_loss
from tf_graph_models import batch, session_config

tf1 = tf.compat.v1


def mlp(x, scope: str, trainable: bool = True):
    """x (None, 64) -> fc1 (64, 16) -> relu -> fc2 (16, 10); the hidden layer and logits."""
    rng = np.random.default_rng(0)
    with tf1.variable_scope(scope):
        w1 = tf1.get_variable("fc1/kernel", initializer=rng.normal(0, 0.2, (64, 16)).astype(np.float32),
                              trainable=trainable, use_resource=True)
        w2 = tf1.get_variable("fc2/kernel", initializer=rng.normal(0, 0.2, (16, 10)).astype(np.float32),
                              trainable=trainable, use_resource=True)
    hidden = tf.nn.relu(tf.matmul(x, w1))
    return hidden, tf.matmul(hidden, w2), [w1, w2]


def test_term_equals_the_core_reference_over_a_ramp():
    cfg = DistillationConfig(temperature=2.0, weight=0.6, weight_schedule="cos", init_weight=0.1, start_step=2,
                             end_step=6, logit_weight=1.5, features=["h"], feature_weight=0.4)
    s, t = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]), np.array([[3.0, 2.0, 1.0], [1.0, 1.0, -1.0]])
    sh, th = np.array([[1.0, 2.0]]), np.array([[1.0, 4.0]])
    g = tf.Graph()
    with g.as_default():
        step = tf1.placeholder(tf.int64, [])
        loss = sparsify_tf.distillation_loss(tf.constant(s, tf.float32), tf.constant(t, tf.float32), cfg, step,
                                             {"h": tf.constant(sh, tf.float32)}, {"h": tf.constant(th, tf.float32)})
        with tf1.Session(graph=g, config=session_config()) as sess:
            for k in (0, 2, 3, 4, 6, 9):
                want = np_distillation_loss(cfg, k, s, t, [sh], [th])
                assert sess.run(loss, {step: k}) == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match=r"student_features must hold the tensors of config.features "
                                         r"\['h'\], got \[\]"):
        with tf.Graph().as_default():
            sparsify_tf.distillation_loss(tf.zeros([1, 2]), tf.zeros([1, 2]), cfg, 0)


def test_snapshot_teacher_is_frozen_while_the_pruned_student_trains(tmp_path):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 64])
        y = tf1.placeholder(tf.int64, [None])
        hidden, logits, student_vars = mlp(x, "student")
        t_hidden, t_logits, teacher_vars = mlp(x, "teacher", trainable=False)
        pruning = sparsify_tf.prune_graph(PruningConfig(target_sparsity=0.75, start_step=2, end_step=20,
                                                        pruning_frequency=6, op_names=["student/"]))
        cfg = DistillationConfig(temperature=2.0, weight=1.0, features=["hidden"], feature_weight=0.5)
        kd = sparsify_tf.distillation_loss(logits, t_logits, cfg, pruning.global_step, {"hidden": hidden},
                                           {"hidden": t_hidden})
        task = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        opt = tf1.train.AdamOptimizer(1e-2)
        train = pruning.wrap_train_op(opt.minimize(task + kd, global_step=pruning.global_step))
        snapshot = sparsify_tf.teacher_snapshot_op(student_vars, teacher_vars)
        assert not {v.name for v in teacher_vars} & {v.name for v in tf1.trainable_variables()}
        saver = tf1.train.Saver(var_list=student_vars)
        with tf1.Session(graph=g, config=session_config()) as sess:
            sess.run(tf1.global_variables_initializer())
            assert sess.run(kd, {x: batch(0)[0]}) == 0.0                      # same initial values
            sess.run(teacher_vars[1].assign(tf.zeros([16, 10])))              # differs until the snapshot
            assert sess.run(kd, {x: batch(0)[0]}) > 0
            sess.run(snapshot)
            bx, by = batch(0)
            assert sess.run(kd, {x: bx}) == 0.0                               # student == teacher
            before = sess.run(teacher_vars)
            losses = []
            for i in range(25):
                bx, by = batch(i)
                sess.run(train, {x: bx, y: by})
                losses.append(sess.run(kd, {x: bx}))
            after = sess.run(teacher_vars)
            assert all(np.array_equal(a, b) for a, b in zip(before, after))
            assert sess.run(pruning.layer_sparsity)["student/fc1/kernel"] == pytest.approx(0.75)
            assert losses[-1] > 0
            path = saver.save(sess, str(tmp_path / "student"))
    names = [n for n, _ in tf.train.list_variables(path)]
    assert names and all(n.startswith("student/") for n in names)
    with pytest.raises(ValueError, match="student_vars and teacher_vars must pair up one to one, got 2 and 1"):
        with tf.Graph().as_default():
            a = [tf1.get_variable(n, [2], use_resource=True) for n in ("a", "b")]
            sparsify_tf.teacher_snapshot_op(a, a[:1])


def test_dense_at_start_teacher_is_the_student_at_the_pruning_start_step():
    """The graph built at step 0 with start_step=5: the teacher's variables become the student's in the step
    reaching 5 (before that step's mask update), and the term is exactly 0 before."""
    from sparsify_tf.graph.distillation import teacher_train_op

    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 64])
        y = tf1.placeholder(tf.int64, [None])
        _, logits, student_vars = mlp(x, "student")
        _, t_logits, teacher_vars = mlp(x, "teacher", trainable=False)
        pruning = sparsify_tf.prune_graph(PruningConfig(target_sparsity=0.75, start_step=5, end_step=7,
                                                        pruning_frequency=1, op_names=["student/"]))
        kd = sparsify_tf.distillation_loss(logits, t_logits, {"temperature": 2.0, "weight": 1.0},
                                           pruning.global_step, teacher_step=pruning.config.start_step)
        task = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        opt = tf1.train.AdamOptimizer(1e-2)
        train = teacher_train_op(opt.minimize(task + kd, global_step=pruning.global_step), student_vars,
                                 teacher_vars, pruning)
        with tf1.Session(graph=g, config=session_config()) as sess:
            sess.run(tf1.global_variables_initializer())
            initial = sess.run(teacher_vars)
            terms = []
            for i in range(8):
                bx, by = batch(i)
                terms.append(float(sess.run(kd, {x: bx})))
                sess.run(train, {x: bx, y: by})
                if i == 4:           # global_step 5: the student now (the update at 5 prunes 0%: dense)
                    at_five = sess.run(student_vars)
                    teacher_five = sess.run(teacher_vars)
            after = sess.run(teacher_vars)
            sparsity = sess.run(pruning.layer_sparsity)["student/fc1/kernel"]
    assert terms[:5] == [0.0] * 5 and all(t > 0 for t in terms[6:])
    assert all(np.array_equal(a, b) for a, b in zip(teacher_five, at_five))
    assert not all(np.array_equal(a, b) for a, b in zip(teacher_five, initial))
    assert all(np.array_equal(a, b) for a, b in zip(after, at_five))
    assert sparsity == pytest.approx(0.75)
    with pytest.raises(ValueError, match="the pruning start_step is 0, which no training step reaches"):
        with tf.Graph().as_default():
            w = tf1.get_variable("w", [4, 4], use_resource=True)
            t = tf1.get_variable("t", [4, 4], trainable=False, use_resource=True)
            tf.matmul(tf.ones([1, 4]), w)
            p0 = sparsify_tf.prune_graph(PruningConfig(target_sparsity=0.5, start_step=0, end_step=0))
            teacher_train_op(tf.no_op(), [w], [t], p0)
    with pytest.raises(ValueError, match="teacher_step must be None or an integer >= 0, got -1"):
        with tf.Graph().as_default():
            sparsify_tf.distillation_loss(tf.zeros([1, 2]), tf.zeros([1, 2]), {}, 0, teacher_step=-1)


def _fade_terms(distillation: dict) -> tuple[list[float], list[float]]:
    """Graph built at step 0, pruning from step 4 to 12, ``distillation_loss(..., pruning=pruning)``: the term
    and the KD without its weight (student against the teacher's variables) before each of 12 train steps."""
    from sparsify_tf.graph.distillation import kd_loss, teacher_train_op

    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 64])
        y = tf1.placeholder(tf.int64, [None])
        _, logits, student_vars = mlp(x, "student")
        _, t_logits, teacher_vars = mlp(x, "teacher", trainable=False)
        pruning = sparsify_tf.prune_graph(PruningConfig(target_sparsity=0.75, start_step=4, end_step=12,
                                                        pruning_frequency=2, op_names=["student/"]))
        term = sparsify_tf.distillation_loss(logits, t_logits, distillation, pruning.global_step, pruning=pruning)
        kd = kd_loss(logits, t_logits, 2.0)
        task = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = teacher_train_op(tf1.train.AdamOptimizer(1e-2).minimize(task + term, global_step=pruning.global_step),
                                 student_vars, teacher_vars, pruning)
        terms, kds = [], []
        with tf1.Session(graph=g, config=session_config()) as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(teacher_vars[1].assign(tf.zeros([16, 10])))     # differs from the student until step 4
            for i in range(12):
                bx, by = batch(i)
                t, k = sess.run([term, kd], {x: bx})
                terms.append(float(t))
                kds.append(float(k))
                sess.run(train, {x: bx, y: by})
    return terms, kds


def test_default_weight_fades_over_the_first_half_of_the_pruning_window():
    """No weight given: 0 before the pruning start_step 4 (the teacher is not taken yet: its KD is not 0), 1 at
    it, linearly to 0 at 4 + (12 - 4) // 2 = 8, then 0; an explicit weight=1.0 stays 1."""
    terms, kds = _fade_terms({"temperature": 2.0})
    weights = [0.0] * 4 + [1.0, 0.75, 0.5, 0.25] + [0.0] * 4
    assert all(k > 0 for k in kds[:4]) and all(k > 0 for k in kds[5:])
    np.testing.assert_allclose(terms, [w * k for w, k in zip(weights, kds)], rtol=1e-5, atol=1e-7)
    terms, kds = _fade_terms({"temperature": 2.0, "weight": 1.0})
    np.testing.assert_allclose(terms, [0.0] * 4 + kds[4:], rtol=1e-5, atol=1e-7)


def test_default_weight_without_the_pruning_window_is_refused():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"^pruning: the distillation weight fades over the pruning window \(the "
                                             r"default of the 'dense_at_start' teacher\): pass pruning= \(the "
                                             r"prune_graph result\), or give the weight \(e.g. weight=1.0\)$"):
            sparsify_tf.distillation_loss(tf.zeros([1, 2]), tf.zeros([1, 2]), {}, 0, teacher_step=3)
        with pytest.raises(ValueError, match="pruning must be the result of sparsify_tf.prune_graph"):
            sparsify_tf.distillation_loss(tf.zeros([1, 2]), tf.zeros([1, 2]), {}, 0, pruning=(4, 12))
