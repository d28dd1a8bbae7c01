"""PruningHook with MonitoredTrainingSession, and the one graph-mode integration test of the update protocol
(skipped steps, resume from a checkpoint, release) through prune_graph and the hook."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import sparsify
import sparsify_tf
from sparsify.layout import tf_to_canonical
from tf_graph_models import batch, build_mlp, expected_pruned, session_config

tf1 = tf.compat.v1


def test_monitored_training_session_with_hook():
    cfg = sparsify.PruningConfig(target_sparsity=0.6, pattern="1x4", start_step=0, end_step=60, pruning_frequency=20)
    g = tf.Graph()
    seen = {}
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph(cfg)
        train = tf1.train.AdamOptimizer(1e-2).minimize(m["loss"], global_step=pr.global_step)
        hooks = [pr.hook(), tf1.train.StopAtStepHook(last_step=80)]
        with tf1.train.MonitoredTrainingSession(hooks=hooks, config=session_config(),
                                                log_step_count_steps=None) as sess:
            assert g.finalized
            with pytest.raises(ValueError, match="graph is finalized"):
                sparsify_tf.prune_graph(cfg, ks_group="again")
            i = 0
            while not sess.should_stop():
                bx, by = batch(i)
                sess.run(train, {m["x"]: bx, m["y"]: by})
                i += 1
                if i in (20, 40, 70):
                    seen[i] = sess.run(pr.layer_sparsity)
    engine = sparsify.PruningEngine(cfg)
    for step, sp in seen.items():
        target = engine.target_sparsity(step)
        assert sp["fc1/kernel"] == pytest.approx(expected_pruned(2048 // 4, target) / 512)
        assert sp["fc2/kernel"] == pytest.approx(expected_pruned(80, target) / 80)


def test_hook_with_a_bare_update_op_runs_it_after_every_step():
    g = tf.Graph()
    with g.as_default():
        gs = tf1.train.get_or_create_global_step()
        counter = tf1.get_variable("counter", [], tf.int64, initializer=tf1.zeros_initializer(), use_resource=True)
        hook = sparsify_tf.PruningHook(tf1.assign_add(counter, 1).op, run_at_start=False)
        train = tf1.assign_add(gs, 1)
        with tf1.train.MonitoredTrainingSession(hooks=[hook], log_step_count_steps=None) as sess:
            for _ in range(5):
                sess.run(train)
            assert sess.run(counter) == 5
    with pytest.raises(TypeError, match="pruning must be a GraphPruning"):
        sparsify_tf.PruningHook("update")
    with pytest.raises(TypeError, match="run_at_start must be True or False"):
        sparsify_tf.PruningHook(hook.update_op, run_at_start=1)


# ----- the integration test: skipped steps, resume, release -------------------------------------------
CFG = sparsify.PruningConfig(target_sparsity=0.8, start_step=0, end_step=60, pruning_frequency=20,
                             leave_enabled=False)


def _hook_run(checkpoint_dir, last_step, calls, watch=()):
    """Train with MonitoredTrainingSession + the hook up to ``last_step``; record the steps at which the hook
    ran the update, and masks/weights after the steps in ``watch``. Returns (masks, weights, slots, watched)."""
    g = tf.Graph()
    watched = {}
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph(CFG)
        train = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(m["loss"], global_step=pr.global_step)
        slots = pr.optimizer_slots()
        hook = pr.hook()
        saver = tf1.train.Saver()
        hooks = [hook, tf1.train.StopAtStepHook(last_step=last_step)]
        with tf1.train.MonitoredTrainingSession(checkpoint_dir=checkpoint_dir, hooks=hooks, config=session_config(),
                                                save_checkpoint_steps=None, save_checkpoint_secs=None,
                                                save_summaries_steps=None, log_step_count_steps=None) as sess:
            raw = sess._tf_sess()
            original_run = raw.run

            def counting_run(fetches, *args, **kwargs):
                if fetches is hook.update_fetch:
                    calls.append(int(original_run(pr.global_step)))
                return original_run(fetches, *args, **kwargs)

            raw.run = counting_run
            while not sess.should_stop():
                i = int(raw.run(pr.global_step))
                bx, by = batch(i)
                sess.run(train, {m["x"]: bx, m["y"]: by})
                if i + 1 in watch:
                    watched[i + 1] = raw.run([pr.masks, pr.weights])
            raw.run = original_run
            if checkpoint_dir:
                saver.save(raw, f"{checkpoint_dir}/model.ckpt", global_step=pr.global_step)
            return (*raw.run([pr.masks, pr.weights, slots]), watched)


def test_skipped_steps_resume_and_release_through_prune_graph_and_hook(tmp_path):
    # 1. The hook asks the protocol: the update runs only at the update points 20, 40, 60 and at the release
    #    (61), or one step early when the step was read after this run's increment (the graph then does nothing).
    calls: list[int] = []
    masks, weights, slots, watched = _hook_run(None, 70, calls, watch=(60, 61))
    assert {20, 40, 60, 61} <= set(calls) <= {19, 20, 39, 40, 59, 60, 61}
    m60, w60 = watched[60]
    m61, w61 = watched[61]
    for n in m60:
        assert (m60[n] == 0).sum() == expected_pruned(m60[n].size, 0.8) and np.all(w60[n][m60[n] == 0] == 0.0)
        # release: masks become ones, the weights keep the zeros of the last masks...
        assert np.all(m61[n] == 1.0) and np.all(w61[n][m60[n] == 0] == 0.0)
        # ...and training regrows them afterwards: no mask is applied any more
        assert np.all(masks[n] == 1.0) and np.any(weights[n][m60[n] == 0] != 0.0)

    # 2. Resume: stop at step 30 with a checkpoint, resume to 70: the same masks, weights and Momentum slots.
    first, second = [], []
    _hook_run(str(tmp_path), 30, first)
    resumed = _hook_run(str(tmp_path), 70, second)
    assert {40, 60, 61} <= set(second) <= {39, 40, 59, 60, 61}
    for got, want in zip(resumed[:2], (masks, weights)):
        for n in want:
            np.testing.assert_array_equal(got[n], want[n])
    for n in slots:
        np.testing.assert_array_equal(resumed[2][n][0], slots[n][0])

    # 3. Skipped steps through prune_graph itself: the update op run at steps 0, 45 and 100 only applies what
    #    the core protocol applies at those steps (the update at 40; then the update at 60 and the release).
    g = tf.Graph()
    with g.as_default():
        m = build_mlp(seed=4)
        pr = sparsify_tf.prune_graph(CFG)
        step_in = tf1.placeholder(tf.int64, [])
        set_step = tf1.assign(pr.global_step, step_in)
    core = sparsify.PruningProtocol(CFG, pr.protocol.shapes)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        for step in (0, 45, 100, 101):
            sess.run(set_step, {step_in: step})
            before = sess.run(pr.weights)
            ready = sess.run(pr.update_ready)
            sess.run(pr.update_op)
            update = core.advance(step, {n: tf_to_canonical(w, pr.kinds[n]) for n, w in before.items()})
            assert ready == (update is not None), step
            got = pr.get_masks(sess, canonical=True)
            after = sess.run(pr.weights)
            for n in core.names:
                np.testing.assert_array_equal(got[n], core.masks[n], err_msg=f"{n} at {step}")
                if update is not None:
                    zero = tf_to_canonical(after[n], pr.kinds[n]) == 0
                    assert np.all(zero[~update.keep_values[n]]), (n, step)
            assert sess.run(pr.last_update_step) == core.done_step
        assert core.done_step == 100 and core.released
        assert sess.run(pr.total_sparsity) == 0.0


def _hooked_run(end_step: int, last_step: int) -> list:
    import warnings

    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph({"target_sparsity": 0.5, "end_step": end_step, "pruning_frequency": 10})
        train = tf1.train.GradientDescentOptimizer(1e-2).minimize(m["loss"], global_step=pr.global_step)
        hooks = [pr.hook(), tf1.train.StopAtStepHook(last_step=last_step)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with tf1.train.MonitoredTrainingSession(hooks=hooks, config=session_config(),
                                                    log_step_count_steps=None) as sess:
                i = 0
                while not sess.should_stop():
                    bx, by = batch(i)
                    sess.run(train, {m["x"]: bx, m["y"]: by})
                    i += 1
    return [str(w.message) for w in caught if issubclass(w.category, sparsify.target_check.TargetNotReachedWarning)]


def test_hook_warns_at_the_end_when_the_run_stopped_before_end_step():
    (message,) = _hooked_run(end_step=200, last_step=30)
    assert message.startswith("PruningHook: training ended at step 30 before the pruning schedule reached its "
                              "target: the last mask update was at step 30")
    assert "end_step 200" in message
    assert _hooked_run(end_step=20, last_step=30) == []
