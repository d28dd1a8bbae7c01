"""Pruned weights and their optimizer slots stay exactly zero through training (Momentum, Adam, RMSProp...)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import tensorflow as tf

import sparsify
import sparsify_tf
from sparsify_tf import find_optimizer_slots
from tf_graph_models import batch, build_cnn, build_mlp, expected_pruned, session_config

tf1 = tf.compat.v1

CFG = sparsify.PruningConfig(target_sparsity=0.8, start_step=0, end_step=200, pruning_frequency=50)

OPTIMIZERS = {
    "momentum": lambda: tf1.train.MomentumOptimizer(0.05, 0.9),
    "adam": lambda: tf1.train.AdamOptimizer(1e-2),
    "rmsprop": lambda: tf1.train.RMSPropOptimizer(1e-3, momentum=0.9, centered=True),
    "adagrad": lambda: tf1.train.AdagradOptimizer(0.1),
}
# slots zeroed with the weight (Adagrad's accumulator is never zeroed: ApplyAdagrad divides by sqrt(accum))
# (slot variable name suffixes in apply-op input order; centered RMSProp: mg, ms, mom)
SLOT_SUFFIXES = {"momentum": ["Momentum"], "adam": ["Adam", "Adam_1"],
                 "rmsprop": ["RMSProp_1", "RMSProp", "RMSProp_2"], "adagrad": []}


def _check_step(sess, pr, slots, step, pruned_seen):
    """After a training step: every pruned entry of a weight and of each of its slots is exactly 0.0."""
    masks, weights, slot_vals = sess.run([pr.masks, pr.weights, slots])
    for n in pr.layer_names:
        pruned = masks[n] == 0
        assert np.all(np.isfinite(weights[n])), (n, step)
        assert np.all(weights[n][pruned] == 0.0), (n, step, np.abs(weights[n][pruned]).max())
        for s, val in zip(slots[n], slot_vals[n]):
            assert np.all(val[pruned] == 0.0), (s.op.name, step, np.abs(val[pruned]).max())
        pruned_seen[n] = max(pruned_seen.get(n, 0), int(pruned.sum()))
    return masks, slot_vals


def _assert_live_slots(masks, slot_vals, pr, slots):
    """The slots checked are the optimizer's real state: non-zero on kept weights."""
    for n in pr.layer_names:
        for s, val in zip(slots[n], slot_vals[n]):
            assert np.any(val[masks[n] != 0] != 0.0), s.op.name


@pytest.mark.slow
@pytest.mark.parametrize("masking", ["weights", "inputs"])
@pytest.mark.parametrize("opt,builder,resource", [
    ("momentum", "mlp", True),
    ("adam", "mlp", False),
    ("rmsprop", "mlp", True),
    ("momentum", "cnn", False),
    ("adagrad", "mlp", True),
], ids=["momentum-mlp-resource", "adam-mlp-ref", "rmsprop-mlp-resource", "momentum-cnn-ref", "adagrad-mlp-resource"])
def test_wrap_train_op_keeps_pruned_weights_and_slots_zero(opt, builder, resource, masking):
    """After every training step, pruned weights and their slots are exactly 0.0, in both masking modes."""
    steps = 300 if builder == "mlp" else 220
    g = tf.Graph()
    with g.as_default():
        m = build_mlp(resource) if builder == "mlp" else build_cnn(resource)
        pr = sparsify_tf.prune_graph(CFG, masking=masking)     # documented order: prune, then the optimizer
        train = OPTIMIZERS[opt]().minimize(m["loss"], global_step=pr.global_step)
        train = pr.wrap_train_op(train)
    assert pr.slots == {n: [] for n in pr.layer_names}      # no optimizer existed at prune time
    slots = pr.optimizer_slots()
    assert {n: [s.op.name for s in v] for n, v in slots.items()} == \
        {n: [f"{n}/{suffix}" for suffix in SLOT_SUFFIXES[opt]] for n in pr.layer_names}
    seen: dict[str, int] = {}
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(pr.update_op)
        for i in range(steps):
            bx, by = batch(i)
            sess.run(train, {m["x"]: bx, m["y"]: by})
            masks, slot_vals = _check_step(sess, pr, slots, i + 1, seen)
        _assert_live_slots(masks, slot_vals, pr, slots)
        assert int(sess.run(pr.global_step)) == steps
    for n in pr.layer_names:
        assert seen[n] == expected_pruned(masks[n].size, 0.8), n


@pytest.mark.parametrize("masking", ["weights", "inputs"])
def test_hook_with_monitored_training_session_adam_cnn(masking):
    """The hook builds its update after the optimizer (in begin()), so Adam's m and v are zeroed too."""
    cfg = CFG.replace(end_step=120, pruning_frequency=40, pattern="4x1")
    g = tf.Graph()
    with g.as_default():
        m = build_cnn(resource=True)
        pr = sparsify_tf.prune_graph(cfg, masking=masking)
        train = tf1.train.AdamOptimizer(1e-2).minimize(m["loss"], global_step=pr.global_step)
        hook = pr.hook()
        assert hook.update_op is pr.update_op
        slots = pr.optimizer_slots()
        seen: dict[str, int] = {}
        with tf1.train.MonitoredTrainingSession(hooks=[hook], config=session_config(),
                                                log_step_count_steps=None) as sess:
            assert hook.update_op is not pr.update_op and hook.update_op is pr.build_update_op()
            for i in range(1, 161):
                bx, by = batch(i)
                sess.run(train, {m["x"]: bx, m["y"]: by})
                masks, slot_vals = _check_step(sess, pr, slots, i, seen)
            _assert_live_slots(masks, slot_vals, pr, slots)
            assert int(sess.run(pr.global_step)) == 160
    assert sorted(seen) == sorted(pr.layer_names)
    for n in pr.layer_names:
        assert [s.op.name for s in slots[n]] == [f"{n}/Adam", f"{n}/Adam_1"]
        assert seen[n] == expected_pruned(masks[n].size // 4, 0.8) * 4, n


def test_build_update_op_by_hand_is_cached_and_zeroes_slots():
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph(CFG.replace(end_step=0))
        assert pr.build_update_op() is pr.update_op          # no optimizer yet: nothing new to build
        train = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(m["loss"], global_step=pr.global_step)
        update = pr.build_update_op()
        n_ops = len(g.get_operations())
        assert pr.build_update_op() is update and len(g.get_operations()) == n_ops
    assert update is not pr.update_op
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        for i in range(5):                                    # dense training: momentum builds up
            bx, by = batch(i)
            sess.run(train, {m["x"]: bx, m["y"]: by})
        acc_var = pr.optimizer_slots()["fc2/kernel"][0]
        before = sess.run(acc_var)
        sess.run(update)                                      # one-shot update point (end_step=0)
        mask, w, acc = sess.run([pr.masks["fc2/kernel"], m["w2"], acc_var])
    pruned = mask == 0
    assert pruned.sum() == expected_pruned(320, 0.8)
    assert np.count_nonzero(before[pruned]) > 100             # there was momentum to clear
    assert np.all(w[pruned] == 0.0) and np.all(acc[pruned] == 0.0)
    np.testing.assert_array_equal(acc[~pruned], before[~pruned])   # kept entries untouched


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "ref"])
def test_find_optimizer_slots_per_optimizer(resource):
    g = tf.Graph()
    with g.as_default():
        ws = {}
        for name in ("mom", "adam", "rms", "crms", "ada", "ftrl", "sgd", "adadelta"):
            ws[name] = tf1.get_variable(f"{name}/w", [3, 2], use_resource=resource)
        other = tf1.get_variable("other/w", [3, 2], use_resource=resource)
        loss = lambda w: tf.reduce_sum(tf.matmul(tf.ones([1, 3]), w) ** 2)  # noqa: E731
        tf1.train.MomentumOptimizer(0.1, 0.9).minimize(loss(ws["mom"]) + loss(other))
        tf1.train.AdamOptimizer(0.1).minimize(loss(ws["adam"]))
        tf1.train.RMSPropOptimizer(0.1, momentum=0.9).minimize(loss(ws["rms"]))
        tf1.train.RMSPropOptimizer(0.1, centered=True).minimize(loss(ws["crms"]))
        tf1.train.AdagradOptimizer(0.1).minimize(loss(ws["ada"]))
        tf1.train.FtrlOptimizer(0.1).minimize(loss(ws["ftrl"]))
        tf1.train.GradientDescentOptimizer(0.1).minimize(loss(ws["sgd"]))
        tf1.train.AdadeltaOptimizer(0.1).minimize(loss(ws["adadelta"]))
    got = find_optimizer_slots(g, [f"{n}/w" for n in ws])
    assert {n: [s.op.name for s in v] for n, v in got.items()} == {
        "mom/w": ["mom/w/Momentum"],
        "adam/w": ["adam/w/Adam", "adam/w/Adam_1"],
        "rms/w": ["rms/w/RMSProp", "rms/w/RMSProp_1"],               # ms, mom
        "crms/w": ["crms/w/RMSProp_1", "crms/w/RMSProp", "crms/w/RMSProp_2"],   # mg, ms, mom
        "ada/w": [],                                                  # accumulator must stay > 0
        "ftrl/w": ["ftrl/w/Ftrl_1"],                                  # linear; accumulator kept
        "sgd/w": [],
        "adadelta/w": ["adadelta/w/Adadelta", "adadelta/w/Adadelta_1"],
    }
    assert all(isinstance(s, tf.Variable) for v in got.values() for s in v)


def test_hook_on_finalized_graph_warns_when_slots_are_missed():
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph(CFG)
        tf1.train.AdamOptimizer(1e-2).minimize(m["loss"], global_step=pr.global_step)
    hook = pr.hook()
    g.finalize()
    with pytest.warns(UserWarning, match=r"slots of pruned weights .*fc1/kernel/Adam.* are not zeroed"):
        hook.begin()
    assert hook.update_op is pr.update_op
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="graph is finalized"):
            pr.build_update_op()
