"""Graph-mode pruning on real small graphs: schedule, masks, training, checkpoints, hooks, export."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import sparsify
import sparsify_tf
from sparsify.layout import tf_to_canonical
from tf_graph_models import batch, build_cnn, build_mlp, expected_pruned, session_config, X

tf1 = tf.compat.v1


def _train(sess, train_op, m, steps, start=0):
    for i in range(start, start + steps):
        bx, by = batch(i)
        sess.run(train_op, {m["x"]: bx, m["y"]: by})


# ----- schedule tensors ------------------------------------------------------------------------
@pytest.mark.parametrize("sched", [
    sparsify.GradualSchedule(0.0, 0.9, 10, 110, 10),
    sparsify.GradualSchedule(0.05, 0.85, 3, 97, 7, exponent=2.5, leave_enabled=False),
    sparsify.GradualSchedule(0.0, 0.5, 20, 20, 5),
    sparsify.GradualSchedule(0.1, 0.7, 0, 50, 0),
    sparsify.ConstantSchedule(0.6, 5, 40, 10),
    sparsify.DecaySchedule("linear", 0.0, 0.8, 0, 60, 6),
    sparsify.DecaySchedule("cube", 0.0, 0.8, 0, 60, 6),
])
def test_schedule_tensors_equal_core_at_every_step(sched):
    steps = np.arange(0, 160, dtype=np.int64)
    g = tf.Graph()
    with g.as_default():
        s = tf1.placeholder(tf.int64, [None])
        t = sparsify_tf.schedule_tensors(sched, s)
    with tf1.Session(graph=g) as sess:
        out = sess.run(t, {s: steps})
    np.testing.assert_array_equal(out["sparsity"], sched.sparsity(steps))
    np.testing.assert_array_equal(out["update_ready"], sched.update_ready(steps))
    np.testing.assert_array_equal(out["last_update_step"], sched.last_update_step(steps))
    last = sched.last_update_step(steps)
    np.testing.assert_array_equal(out["target_sparsity"], np.where(last >= 0, sched.sparsity(np.maximum(last, 0)), 0.0))


def test_seed_schedule_ops_equal_core_gradual_schedule():
    g = tf.Graph()
    with g.as_default():
        gs = tf1.train.get_or_create_global_step()
        ready, sparsity = sparsify_tf.create_ks_schedule_ops(gs, 5, 85, 8, 0.05, 0.9, 3.0, "sched")
        assign = tf1.placeholder(tf.int64, [])
        set_step = tf1.assign(gs, assign)
    core = sparsify.GradualSchedule(0.05, 0.9, 5, 85, 8, 3.0)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        for step in range(0, 100):
            sess.run(set_step, {assign: step})
            r, sp = sess.run([ready, sparsity])
            assert bool(r) == bool(core.update_ready(step)), step
            assert sp == core.sparsity(step), step
    assert ready.name.startswith("nm_ks_ops/sched/nm_update_ready")


# ----- training an MLP: exact sparsity per update, masked forward, zeros stay zero ---------------
@pytest.mark.parametrize("resource", [True, False], ids=["resource", "ref"])
def test_mlp_training_exact_sparsity_masked_forward(resource):
    cfg = sparsify.PruningConfig(target_sparsity=0.8, start_step=0, end_step=200, pruning_frequency=50)
    g = tf.Graph()
    with g.as_default():
        m = build_mlp(resource)
        pr = sparsify_tf.prune_graph(cfg)
        train = tf1.train.GradientDescentOptimizer(0.2).minimize(m["loss"], global_step=pr.global_step)
        train = pr.wrap_train_op(train)
    assert pr.layer_names == ["fc1/kernel", "fc2/kernel"]
    checked = []
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(pr.update_op)
        for i in range(260):
            _train(sess, train, m, 1, i)
            step = int(sess.run(pr.global_step))
            if step % 25 == 0:
                masks, weights = sess.run(pr.masks), sess.run(pr.weights)
                target = pr.engine.target_sparsity(step)
                assert sess.run(pr.sparsity) == target
                for n in pr.layer_names:
                    assert int((masks[n] == 0).sum()) == expected_pruned(masks[n].size, target), (n, step)
                    # pruned weights stay exactly zero (SGD: zero gradient through the mask)
                    assert np.all(weights[n][masks[n] == 0] == 0.0)
                checked.append(step)
        # the forward pass uses the masked weights
        w1, b1, w2 = sess.run([m["w1"], m["b1"], m["w2"]])
        mk = sess.run(pr.masks)
        logits = sess.run(m["logits"], {m["x"]: X[:32]})
    assert checked[-1] == 250 and 200 in checked
    ref = np.maximum(X[:32] @ (w1 * mk["fc1/kernel"]) + b1, 0) @ (w2 * mk["fc2/kernel"])
    np.testing.assert_allclose(logits, ref, rtol=1e-5, atol=1e-5)
    assert (mk["fc1/kernel"] == 0).sum() == expected_pruned(64 * 32, 0.8)


def test_masked_forward_reads_mask_even_when_weight_is_dense():
    """Write a dense weight behind the mask's back: the op still multiplies by the mask."""
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph({"target_sparsity": 0.5, "start_step": 0, "end_step": 0, "op_names": ["fc2"]})
        new = tf1.placeholder(tf.float32, [32, 10])
        overwrite = tf1.assign(m["w2"], new)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(pr.update_op)
        sess.run(overwrite, {new: np.ones((32, 10), np.float32)})
        h = np.maximum(X[:4] @ sess.run(m["w1"]) + sess.run(m["b1"]), 0)
        out = sess.run(m["logits"], {m["x"]: X[:4]})
        mask = sess.run(pr.masks["fc2/kernel"])
    assert pr.layer_names == ["fc2/kernel"] and (mask == 0).sum() == 160
    np.testing.assert_allclose(out, h @ mask, rtol=1e-5)


# ----- parity with the core ---------------------------------------------------------------------
@pytest.mark.parametrize("pattern,builder", [("1x1", "cnn"), ("4x1", "cnn"), ("2:4", "mlp")])
def test_masks_equal_core_masks(pattern, builder):
    cfg = sparsify.PruningConfig(target_sparsity=0.5, pattern=pattern, start_step=0, end_step=0)
    g = tf.Graph()
    with g.as_default():
        m = build_cnn() if builder == "cnn" else build_mlp()
        pr = sparsify_tf.prune_graph(cfg)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        before = sess.run(pr.weights)
        sess.run(pr.update_op)
        got = pr.get_masks(sess, canonical=True)
    canon = {n: tf_to_canonical(w, pr.kinds[n]) for n, w in before.items()}
    want = sparsify.PruningEngine(cfg).compute_masks(canon, 0)
    assert set(got) == set(want) and len(got) == (4 if builder == "cnn" else 2)
    for n in want:
        np.testing.assert_array_equal(got[n], want[n], err_msg=n)
    if builder == "cnn":
        assert pr.kinds == {"conv1/kernel": "conv", "dw/depthwise_kernel": "depthwise",
                            "conv2/kernel": "conv", "fc/kernel": "dense"}


def test_literal_masks_dense_and_4x1():
    """Dense kernel (in=4, out=4): canonical rows are output units; 4x1 prunes whole 4-row blocks per column."""
    k = np.array([[1, 8, 2, 7],
                  [9, 1, 3, 1],
                  [2, 2, 9, 1],
                  [1, 9, 1, 8]], np.float32)          # (in, out)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 4])
        w = tf1.get_variable("w", initializer=k)
        tf.matmul(x, w)
        pr = sparsify_tf.prune_graph({"target_sparsity": 0.5, "pattern": "4x1", "start_step": 0, "end_step": 0})
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(pr.update_op)
        mask = sess.run(pr.masks["w"])
    # canonical (out, in) = k.T; 4x1 blocks are columns of k.T = rows of k; block sums 18, 14, 14, 19:
    # prune 2 of 4 -> rows 1 and 2 of k (tie 14/14 broken by lower index, both pruned).
    np.testing.assert_array_equal(mask, np.array([[1] * 4, [0] * 4, [0] * 4, [1] * 4], np.float32))


# ----- global scope ------------------------------------------------------------------------------
def test_global_scope_cap_and_exact_total():
    cfg = sparsify.PruningConfig(target_sparsity=0.9, pruning_scope="global", start_step=0, end_step=0,
                                 max_sparsity_ratio_per_layer=0.95)
    g = tf.Graph()
    with g.as_default():
        m = build_mlp(hidden=32)
        scale = tf1.assign(m["w2"], m["w2"] * 100.0)     # fc2 (320 weights) dominates, fc1 (2048) is tiny
        pr = sparsify_tf.prune_graph(cfg)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(scale)
        sess.run(pr.update_op)
        masks = sess.run(pr.masks)
        total = sess.run(pr.total_sparsity)
    n1, n2 = masks["fc1/kernel"].size, masks["fc2/kernel"].size
    z1, z2 = int((masks["fc1/kernel"] == 0).sum()), int((masks["fc2/kernel"] == 0).sum())
    assert z1 == expected_pruned(n1, 0.95)                 # capped at 95%
    assert z1 + z2 == int(np.floor(0.9 * (n1 + n2) + 0.5))  # exact total
    assert total == pytest.approx((z1 + z2) / (n1 + n2))


# ----- checkpoints -------------------------------------------------------------------------------
def _ckpt_graph(cfg):
    g = tf.Graph()
    with g.as_default():
        m = build_mlp(seed=3)
        pr = sparsify_tf.prune_graph(cfg)
        opt = tf1.train.MomentumOptimizer(0.05, 0.9)
        train = pr.wrap_train_op(opt.minimize(m["loss"], global_step=pr.global_step))
        saver = tf1.train.Saver()
    return g, m, pr, train, saver


def test_checkpoint_mid_schedule_restores_exactly(tmp_path):
    cfg = sparsify.PruningConfig(target_sparsity=0.75, start_step=10, end_step=150, pruning_frequency=20)
    g, m, pr, train, saver = _ckpt_graph(cfg)
    slots = pr.optimizer_slots()
    assert [s.op.name for s in slots["fc1/kernel"]] == ["fc1/kernel/Momentum"]
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(pr.update_op)
        _train(sess, train, m, 75)
        path = saver.save(sess, str(tmp_path / "ckpt"), global_step=pr.global_step)
        _train(sess, train, m, 95, 75)
        want_masks, want_w, want_slots = sess.run(pr.masks), sess.run(pr.weights), sess.run(slots)
    assert int((want_masks["fc1/kernel"] == 0).sum()) == expected_pruned(2048, 0.75)
    for n in want_masks:   # Momentum: pruned weights and their accumulator entries are exactly zero
        assert np.all(want_w[n][want_masks[n] == 0] == 0.0)
        assert np.all(want_slots[n][0][want_masks[n] == 0] == 0.0)
    g2, m2, pr2, train2, saver2 = _ckpt_graph(cfg)
    slots2 = pr2.optimizer_slots()
    with tf1.Session(graph=g2, config=session_config()) as sess:
        saver2.restore(sess, path)
        assert sess.run(pr2.last_update_step) == 70 and sess.run(pr2.global_step) == 75
        _train(sess, train2, m2, 95, 75)
        got_masks, got_w, got_slots = sess.run(pr2.masks), sess.run(pr2.weights), sess.run(slots2)
    for n in want_masks:
        np.testing.assert_array_equal(got_masks[n], want_masks[n])
        np.testing.assert_array_equal(got_w[n], want_w[n])
        np.testing.assert_array_equal(got_slots[n][0], want_slots[n][0])


# ----- idempotence, hook ----------------------------------------------------------------------
def test_prune_graph_is_idempotent():
    g = tf.Graph()
    with g.as_default():
        build_mlp()
        cfg = {"target_sparsity": 0.5, "end_step": 10}
        a = sparsify_tf.prune_graph(cfg)
        n_ops, n_vars = len(g.get_operations()), len(tf1.global_variables())
        b = sparsify_tf.prune_graph(cfg)
        assert a is b
        assert len(g.get_operations()) == n_ops and len(tf1.global_variables()) == n_vars
        with pytest.raises(ValueError, match="ks_group 'sparsify'.*another config"):
            sparsify_tf.prune_graph({"target_sparsity": 0.6, "end_step": 10})


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


# ----- export -----------------------------------------------------------------------------------
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
    assert not types & set(sparsify_tf.export.FORBIDDEN_EXPORT_OPS)
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


def test_leave_enabled_false_stops_masking_after_end():
    cfg = sparsify.PruningConfig(target_sparsity=0.5, start_step=0, end_step=5, pruning_frequency=5,
                                 leave_enabled=False, op_names=["fc2"])
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph(cfg)
        step_in = tf1.placeholder(tf.int64, [])
        set_step = tf1.assign(pr.global_step, step_in)
        new = tf1.placeholder(tf.float32, [32, 10])
        overwrite = tf1.assign(m["w2"], new)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(set_step, {step_in: 5})
        sess.run(pr.update_op)
        mask = sess.run(pr.masks["fc2/kernel"])
        sess.run(overwrite, {new: np.ones((32, 10), np.float32)})
        h = np.maximum(X[:4] @ sess.run(m["w1"]) + sess.run(m["b1"]), 0)
        at_end = sess.run(m["logits"], {m["x"]: X[:4]})
        sess.run(set_step, {step_in: 6})
        after = sess.run(m["logits"], {m["x"]: X[:4]})
    assert (mask == 0).sum() == 160
    np.testing.assert_allclose(at_end, h @ mask, rtol=1e-5)
    np.testing.assert_allclose(after, h @ np.ones((32, 10)), rtol=1e-5)


# ----- bad input: clear errors, nothing changed ----------------------------------------------------
def _unchanged(g, fn, exc, match):
    n_ops, n_vars = len(g.get_operations()), len(g.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES))
    with pytest.raises(exc, match=match):
        fn()
    assert len(g.get_operations()) == n_ops
    assert len(g.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)) == n_vars


def test_bad_inputs_raise_before_changing_the_graph():
    g = tf.Graph()
    with g.as_default():
        m = build_mlp(hidden=30)
        gs = tf1.train.get_or_create_global_step()
        fstep = tf1.get_variable("fstep", [], tf.float32)
        vstep = tf1.get_variable("vstep", [2], tf.int64)
        add_op = (m["w1"] + 1.0).op
        _unchanged(g, lambda: sparsify_tf.prune_graph({"op_names": ["nothing_like_this"]}), ValueError,
                   r"op_names=\['nothing_like_this'\].*match no prunable weight.*fc1/kernel")
        _unchanged(g, lambda: sparsify_tf.get_or_create_ks_scheduled_graph_ops(
            g, gs, ["re:nope.*"], 0, 10, 1, 0.0, 0.5, 3.0, True, "g", "1x1"), ValueError,
            r"var_names entry 're:nope\.\*' matches no prunable weight")
        _unchanged(g, lambda: sparsify_tf.get_or_create_ks_scheduled_graph_ops(
            g, gs, ["fc1/bias"], 0, 10, 1, 0.0, 0.5, 3.0, True, "g", "1x1"), ValueError,
            r"'fc1/bias' is a variable that feeds no prunable op")
        _unchanged(g, lambda: sparsify_tf.create_op_pruning_no_update(add_op, add_op.inputs[0], "g"), ValueError,
                   r"op 'add(_\d+)?' of type 'AddV2' is not prunable")
        # fc1 canonical (30, 64): 30 rows do not split into 4x1 blocks
        _unchanged(g, lambda: sparsify_tf.prune_graph({"pattern": "4x1", "target_sparsity": 0.5}), ValueError,
                   r"layer 'fc1/kernel'.*does not fit pattern '4x1'")
        _unchanged(g, lambda: sparsify_tf.get_or_create_ks_scheduled_graph_ops(
            g, gs, ["fc1/kernel"], 0, 10, 1, 0.0, 0.5, 3.0, True, "g", "4x1"), ValueError,
            r"layer 'fc1/kernel'.*does not fit pattern '4x1'")
        _unchanged(g, lambda: sparsify_tf.prune_graph({"target_sparsity": 0.5}, global_step=fstep), TypeError,
                   r"global_step must have an integer dtype.*float32")
        _unchanged(g, lambda: sparsify_tf.prune_graph({"target_sparsity": 0.5}, global_step=vstep), ValueError,
                   r"global_step must be a scalar, got shape \(2,\)")
        _unchanged(g, lambda: sparsify_tf.create_ks_schedule_ops(fstep, 0, 10, 1, 0.0, 0.5, 3.0, "g"), TypeError,
                   r"global_step must have an integer dtype")
        _unchanged(g, lambda: sparsify_tf.prune_graph({"target_sparsity": 1.5}), ValueError,
                   r"target_sparsity must be in \[0, 1\), got 1.5")
        _unchanged(g, lambda: sparsify_tf.prune_graph({"criterion": "snip"}), ValueError, r"criterion 'snip'")
        _unchanged(g, lambda: sparsify_tf.get_or_create_ks_scheduled_graph_ops(
            g, gs, ["fc1/kernel"], 0, 10, 1, 0.0, 0.5, 3.0, True, "g", "7y"), ValueError, r"mask_creator: .*'7y'")
        _unchanged(g, lambda: sparsify_tf.get_or_create_ks_scheduled_graph_ops(
            g, gs, "fc1/kernel", 0, 10, 1, 0.0, 0.5, 3.0, True, "g", "1x1"), TypeError, r"var_names must be")
    g.finalize()
    _unchanged(g, lambda: sparsify_tf.prune_graph({"target_sparsity": 0.5}, graph=g), ValueError,
               r"graph is finalized")
    _unchanged(g, lambda: sparsify_tf.get_or_create_ks_scheduled_graph_ops(
        g, gs, ["fc1/kernel"], 0, 10, 1, 0.0, 0.5, 3.0, True, "g", "1x1"), ValueError, r"graph is finalized")


def _hook_run(cfg, checkpoint_dir, last_step, calls):
    """Train with MonitoredTrainingSession + the hook up to ``last_step``; count update-op runs."""
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph(cfg)
        train = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(m["loss"], global_step=pr.global_step)
        hook = pr.hook()
        saver = tf1.train.Saver()
        hooks = [hook, tf1.train.StopAtStepHook(last_step=last_step)]
        with tf1.train.MonitoredTrainingSession(checkpoint_dir=checkpoint_dir, hooks=hooks, config=session_config(),
                                                save_checkpoint_steps=None, save_checkpoint_secs=None,
                                                save_summaries_steps=None, log_step_count_steps=None) as sess:
            raw = sess._tf_sess()
            original_run = raw.run

            def counting_run(fetches, *args, **kwargs):
                if fetches is hook.update_op or fetches is hook._done_after_update:
                    calls.append(int(original_run(pr.global_step)))
                return original_run(fetches, *args, **kwargs)

            raw.run = counting_run
            while not sess.should_stop():
                i = int(raw.run(pr.global_step))
                bx, by = batch(i)
                sess.run(train, {m["x"]: bx, m["y"]: by})
            raw.run = original_run
            if checkpoint_dir:
                saver.save(raw, f"{checkpoint_dir}/model.ckpt", global_step=pr.global_step)
            return raw.run([pr.masks, pr.weights])


def test_hook_skips_idle_steps_and_resumes_exactly(tmp_path):
    cfg = sparsify.PruningConfig(target_sparsity=0.8, start_step=0, end_step=60, pruning_frequency=20)
    calls: list[int] = []
    full = _hook_run(cfg, None, 70, calls)
    # after the start-up call, the update op runs only at the update points 20, 40, 60 (or one step
    # before one, when the step was read after this run's increment; the graph then does nothing)
    assert {20, 40, 60} <= set(calls) <= {19, 20, 39, 40, 59, 60}
    first, second = [], []
    _hook_run(cfg, str(tmp_path), 30, first)
    resumed = _hook_run(cfg, str(tmp_path), 70, second)
    for part in (0, 1):
        for name in full[part]:
            np.testing.assert_array_equal(resumed[part][name], full[part][name])
