"""The seed API on real graphs: scheduled ops, shared weights, constant pruning, summaries, idempotence,
build-time checks, global scope, masks equal to PruningProtocol's (user-registered criteria included)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import sparsify
import sparsify_tf
from sparsify.criteria import unregister_criterion
from sparsify.layout import tf_to_canonical
from sparsify_tf import PruningScope
from sparsify_tf.seed.mask_creator import seed_pattern
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


def _graph_with(kernels):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 8])
        h = x
        for name, k in kernels.items():
            h = tf.matmul(h, tf1.get_variable(name, initializer=k))
        gs = tf1.train.get_or_create_global_step()
    return g, gs


def test_n_in_m_sparsity_above_n_over_m_is_refused_when_the_graph_is_built():
    g, gs = _graph_with({"fc1/kernel": np.ones((8, 8), np.float32)})
    n_ops = len(g.get_operations())
    with pytest.raises(ValueError, match=re.escape(
            "final_sparsity=0.9 cannot be reached with mask_creator '2:4': final_sparsity for pattern '2:4' "
            "must be <= N/M = 0.5")):
        sparsify_tf.get_or_create_ks_scheduled_graph_ops(g, gs, ["fc1/kernel"], 0, 1000, 100, 0.0, 0.9, 3.0, True,
                                                         "main", "2:4")
    with pytest.raises(ValueError, match=r"init_sparsity=0.6 cannot be reached with mask_creator '1:4'"):
        sparsify_tf.get_or_create_ks_scheduled_graph_ops(g, gs, ["fc1/kernel"], 0, 10, 1, 0.6, 0.2, 3.0, True,
                                                         "main", "1:4")
    assert len(g.get_operations()) == n_ops
    with g.as_default():
        fixed = tf.constant(0.75, tf.float64)
        ready = tf.constant(True)
    with pytest.raises(ValueError, match=r"sparsity=0.75 cannot be reached with mask_creator '2:4'"):
        sparsify_tf.create_graph_ops_pruning(g, ["fc1/kernel"], fixed, ready, True, None, "fixed", "2:4")


def test_the_guides_seed_api_example_builds_and_prunes():
    """docs/tf_graph.md's seed API block (the README links it) on its own graph: 4x1 blocks at 0.8 by step 200."""
    guide = (Path(__file__).resolve().parents[3] / "docs" / "tf_graph.md").read_text()
    code = re.search(r"## Seed API \(low level\).*?```python\n(.*?)```", guide, flags=re.S).group(1)
    env: dict = {}
    exec(code, env)                                       # noqa: S102 - the guide's own snippet, as a reader runs it
    g = env["graph"]
    with g.as_default():
        step = tf1.placeholder(tf.int64, [])
        set_step = tf1.assign(env["global_step"], step)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        for s in (0, 100, 200):
            sess.run(set_step, {step: s})
            sess.run(env["update_op"])
        mask = sess.run(env["op_vars"][0].mask)            # fc/kernel (16, 8): canonical (8, 16), 4x1 blocks of rows
        final = float(sess.run(env["sparsity"]))
    blocks = (mask.T != 0).reshape(2, 4, 16)               # 4 output rows by 1 column
    assert final == pytest.approx(0.8) and np.all(blocks.all(axis=1) == blocks.any(axis=1))
    assert (mask == 0).sum() == 4 * round(0.8 * 32)


@pytest.mark.parametrize("creator", ["dict", "config", "pattern"])
def test_global_mask_creator_prunes_across_the_group_in_one_core_call(creator):
    rng = np.random.default_rng(0)
    small = (rng.uniform(0.5, 1.5, (8, 8)) * 0.01).astype(np.float32)
    large = rng.uniform(0.5, 1.5, (8, 8)).astype(np.float32)
    g, gs = _graph_with({"small/kernel": small, "large/kernel": large})
    spec = {"pattern": "1x1", "pruning_scope": "global"}
    mask_creator = {"dict": spec, "config": sparsify.PruningConfig(**spec),
                    "pattern": sparsify.get_pattern(spec)}[creator]
    update, op_vars, _, _ = sparsify_tf.get_or_create_ks_scheduled_graph_ops(
        g, gs, ["re:.*kernel"], 0, 0, 1, 0.0, 0.5, 3.0, True, "glob", mask_creator)
    assert op_vars[0].update is op_vars[1].update           # one update for the group...
    core_calls = [op for op in g.get_operations() if op.type in ("PyFunc", "PyFuncStateless")]
    assert len(core_calls) == 1                              # ...and one core call in it
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(update)
        masks = dict(zip(["small/kernel", "large/kernel"], sess.run([v.mask for v in op_vars])))   # op order
    pruned = {n: int((m == 0).sum()) for n, m in masks.items()}
    # a dict follows the seed (no per-layer cap: the small layer may go entirely); objects keep the core's rules
    core = seed_pattern(spec) if creator == "dict" else sparsify.get_pattern(spec)
    want = core.get_masks({"small/kernel": small.T, "large/kernel": large.T}, 0.5)
    assert pruned == {"small/kernel": int((~want["small/kernel"]).sum()), "large/kernel": int((~want["large/kernel"]).sum())}
    assert pruned["small/kernel"] >= 62 and pruned["small/kernel"] + pruned["large/kernel"] == 64


@pytest.mark.parametrize("mask_creator", ["1x1", "unstructured", sparsify_tf.UnstructuredPruningMaskCreator()],
                         ids=["name", "sparseml-name", "sparseml-class"])
def test_final_sparsity_099_gives_099_not_the_core_cap(mask_creator):
    # 64 weights: 0.99 prunes round(63.36) = 63 (the core's 0.98 cap would stop at 62, silently)
    k = np.arange(1.0, 65.0, dtype=np.float32).reshape(8, 8)
    g, gs = _graph_with({"fc/kernel": k})
    with g.as_default():
        set_step = tf1.assign(gs, tf1.placeholder_with_default(tf.constant(0, tf.int64), []))
        update, op_vars, _, sparsity = sparsify_tf.get_or_create_ks_scheduled_graph_ops(
            g, gs, ["fc/kernel"], 0, 4, 1, 0.5, 0.99, 3.0, True, "g", mask_creator)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        for step in range(6):
            sess.run(set_step, {set_step.op.inputs[1]: step})
            sess.run(update)
        assert sess.run(sparsity) == 0.99
        mask = sess.run(op_vars[0].mask)
    assert int((mask == 0).sum()) == 63 and mask.ravel().tolist() == [0.0] * 63 + [1.0]


def test_sparsity_one_prunes_everything_with_a_name_and_is_refused_for_a_pattern():
    k = np.arange(1.0, 17.0, dtype=np.float32).reshape(8, 2)
    g, _ = _graph_with({"fc/kernel": k})
    with g.as_default():
        op = next(o for o in g.get_operations() if o.type == "MatMul")
        s = tf1.placeholder(tf.float32, [])
        op_vars = sparsify_tf.create_op_pruning(op, None, s, tf.constant(True), True, None, "g", "1x4")
    other, _ = _graph_with({"fc/kernel": k})
    with other.as_default():
        one, ready = tf.constant(1.0), tf.constant(True)
        n_ops = len(other.get_operations())
        with pytest.raises(ValueError, match=r"sparsity=1.0 cannot be reached with mask_creator '1x1'.*\[0, 1\)"):
            sparsify_tf.create_op_pruning(next(o for o in other.get_operations() if o.type == "MatMul"), None, one,
                                          ready, True, None, "h", sparsify.get_pattern("1x1"))
        assert len(other.get_operations()) == n_ops             # refused before anything was added
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(op_vars.update, {s: 0.5})
        assert (sess.run(op_vars.mask) == 0).sum() == 8
        sess.run(op_vars.update, {s: 1.0})
        assert not sess.run(op_vars.mask).any() and not sess.run(op_vars.masked).any()


# ----- the seed API's masks are the protocol's (the adapter contract) --------------------------------------

SEED_KERNELS = {"fc1/kernel": (8, 6), "fc2/kernel": (6, 4)}      # created in this order: the canonical order


def _seed_graph(kernels, mask_creator, init_sparsity, final_sparsity):
    """Two MatMuls pruned by the seed API from step 0 to 2 (update every step); returns the graph's handles."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 8])
        h = x
        variables = {}
        for name, k in kernels.items():
            variables[name] = tf1.get_variable(name, initializer=k)
            h = tf.matmul(h, variables[name])
        gs = tf1.train.get_or_create_global_step()
        update, op_vars, _, sparsity = sparsify_tf.get_or_create_ks_scheduled_graph_ops(
            g, gs, ["re:fc.*kernel"], 0, 2, 1, init_sparsity, final_sparsity, 3.0, True, "proto", mask_creator)
        step = tf1.assign_add(gs, 1)
        moves = {n: tf1.assign_add(v, tf.ones_like(v) * 0.125 * (i + 1)) for i, (n, v) in enumerate(variables.items())}
    return g, variables, update, op_vars, sparsity, step, moves


def _seed_masks_and_protocol_masks(config, mask_creator, init_sparsity=0.25, final_sparsity=0.75):
    rng = np.random.default_rng(7)
    # multiples of 0.125: many equal magnitudes within and across the layers (ties)
    kernels = {n: (rng.integers(-4, 5, size=s) * 0.125).astype(np.float32) for n, s in SEED_KERNELS.items()}
    g, variables, update, op_vars, sparsity, step, moves = _seed_graph(kernels, mask_creator, init_sparsity,
                                                                        final_sparsity)
    proto = sparsify.PruningProtocol({**config, "init_sparsity": init_sparsity, "target_sparsity": final_sparsity,
                                      "start_step": 0, "end_step": 2, "pruning_frequency": 1, "exponent": 3.0},
                                     {n: s[::-1] for n, s in SEED_KERNELS.items()})
    seed, core = [], []
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        for t in range(3):
            weights = {n: tf_to_canonical(w, "dense") for n, w in sess.run(variables).items()}
            s, _ = sess.run([sparsity, update])
            assert s == proto.target_sparsity(t)
            seed.append({n: tf_to_canonical(m, "dense") != 0 for n, m in zip(SEED_KERNELS, sess.run(
                [ov.mask for ov in op_vars]))})
            core.append(dict(proto.advance(t, weights).masks))
            sess.run([step, *moves.values()])          # new values: the next update re-ranks the kept weights
    return seed, core


@pytest.mark.parametrize("config, mask_creator", [
    ({"pattern": "1x1"}, "1x1"),
    ({"pattern": "1x1", "pruning_scope": "global"}, {"pattern": "1x1", "pruning_scope": "global"}),
    ({"pattern": "2x1", "pruning_scope": "global"}, {"pattern": "2x1", "pruning_scope": "global"}),
])
def test_seed_api_masks_equal_the_protocols_for_the_same_weights_and_sparsity(config, mask_creator):
    seed, core = _seed_masks_and_protocol_masks(config, mask_creator)
    assert [sorted(m) for m in seed] == [list(SEED_KERNELS)] * 3
    for t, (got, want) in enumerate(zip(seed, core)):
        for name in SEED_KERNELS:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"update {t}, {name}")
    pruned = [sum(int((~m).sum()) for m in masks.values()) for masks in seed]
    assert pruned[0] < pruned[1] < pruned[2] == round(0.75 * 72)


@pytest.fixture
def seed_distance():
    """A criterion registered in user code (no package file knows it), unregistered afterwards."""
    name = "test_seed_distance_from_tenth"

    @sparsify.register_criterion(name, needs=("weight",))
    def score(weight, **_):
        return abs(weight - 0.1)
    yield name
    unregister_criterion(name)


def test_a_user_registered_criterion_prunes_through_the_seed_api(seed_distance):
    creator = sparsify_tf.CoreMaskCreator("1x1", criterion=seed_distance)
    seed, core = _seed_masks_and_protocol_masks({"pattern": "1x1", "criterion": seed_distance}, creator)
    for got, want in zip(seed, core):
        assert all(np.array_equal(got[n], want[n]) for n in SEED_KERNELS)
    magnitude, _ = _seed_masks_and_protocol_masks({"pattern": "1x1"}, "1x1")
    assert any(not np.array_equal(seed[t][n], magnitude[t][n]) for t in range(3) for n in SEED_KERNELS)  # not |w|
    dict_seed, _ = _seed_masks_and_protocol_masks({"pattern": "1x1"}, {"pattern": "1x1", "criterion": seed_distance})
    assert all(np.array_equal(dict_seed[t][n], seed[t][n]) for t in range(3) for n in SEED_KERNELS)


def test_a_criterion_the_seed_api_cannot_feed_is_refused_before_the_graph_changes():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 8])
        tf.matmul(x, tf1.get_variable("fc1/kernel", shape=(8, 6)))
        gs = tf1.train.get_or_create_global_step()
    n_ops = len(g.get_operations())
    with pytest.raises(ValueError, match=r"mask_creator: criterion='snip' needs \['weight', 'grad'\]; the seed API "
                                         r"reads only the weights"):
        sparsify_tf.get_or_create_ks_scheduled_graph_ops(g, gs, ["fc1/kernel"], 0, 2, 1, 0.0, 0.5, 3.0, True, "bad",
                                                         {"pattern": "1x1", "criterion": "snip"})
    assert len(g.get_operations()) == n_ops
