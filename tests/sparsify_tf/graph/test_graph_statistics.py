"""Wanda in TF graph mode: input statistics collected by the training step, masks from the core and torch."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given, settings, strategies as st

import sparsify_tf
import sparsify_torch
from sparsify import PruningProtocol
from sparsify.criteria import register_criterion, unregister_criterion
from sparsify.layout import tf_to_canonical
from sparsify_tf.graph.statistics import activation_norms, input_channels
from sparsify_tf.common.graph_utils import get_prunable_ops_and_inputs
from tests.sparsify_tf.tf_graph_models import X, Y, batch, session_config

tf1 = tf.compat.v1
WINDOW = {"start_step": 3, "end_step": 3}          # one update after three training steps


def _mlp(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = tf1.placeholder(tf.float32, [None, 64])
    y = tf1.placeholder(tf.int64, [None])
    w1 = tf1.get_variable("fc1/kernel", initializer=rng.normal(0, 0.2, (64, 32)).astype(np.float32))
    w2 = tf1.get_variable("fc2/kernel", initializer=rng.normal(0, 0.2, (32, 10)).astype(np.float32))
    h = tf.nn.relu(tf.matmul(x, w1))
    logits = tf.matmul(h, w2)
    loss = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return x, y, loss, {"fc1/kernel": x, "fc2/kernel": h}, {"fc1/kernel": w1, "fc2/kernel": w2}


def _cnn(seed: int = 0):
    """conv 3x3 1->4, depthwise 3x3 (x2) -> 8, global mean, dense 8->10 (the same model in torch below)."""
    rng = np.random.default_rng(seed)
    x = tf1.placeholder(tf.float32, [None, 64])
    y = tf1.placeholder(tf.int64, [None])
    img = tf.reshape(x, [-1, 8, 8, 1])
    w = {n: tf1.get_variable(n, initializer=rng.normal(0, 0.4, s).astype(np.float32))
         for n, s in (("conv/kernel", (3, 3, 1, 4)), ("dw/depthwise_kernel", (3, 3, 4, 2)), ("fc/kernel", (8, 10)))}
    h1 = tf.nn.relu(tf.nn.conv2d(img, w["conv/kernel"], 1, "SAME"))
    h2 = tf.reduce_mean(tf.nn.relu(tf.nn.depthwise_conv2d(h1, w["dw/depthwise_kernel"], [1, 1, 1, 1], "SAME")), [1, 2])
    logits = tf.matmul(h2, w["fc/kernel"])
    loss = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return x, y, loss, {"conv/kernel": img, "dw/depthwise_kernel": h1, "fc/kernel": h2}, w


def _train(build, config: dict, lr: float, steps: int = 3):
    """Train ``steps`` SGD steps with the update wrapped in; returns what the run saw and left."""
    g = tf.Graph()
    with g.as_default():
        x, y, loss, inputs, weights = build()
        pruning = sparsify_tf.prune_graph({**config, **WINDOW})
        sgd = tf1.train.GradientDescentOptimizer(lr)
        train = pruning.wrap_train_op(sgd.minimize(loss, global_step=pruning.global_step))
    seen = {n: [] for n in inputs}
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        initial = sess.run(weights)
        for step in range(steps):
            xb, yb = batch(step, 32)
            if step == steps - 1:      # the statistics before the update empties them
                before = sess.run(pruning.collectors.sums)
            _, acts = sess.run([train, inputs], {x: xb, y: yb})
            for n, a in acts.items():
                seen[n].append(a)
        dense = {n: sess.run(weights[n]) + sess.run(pruning.stored[n]) for n in weights}
        out = {"masks": pruning.get_masks(sess), "sums_after": sess.run(pruning.collectors.sums),
               "done": int(sess.run(pruning.last_update_step)), "dense": dense, "initial": initial,
               "before": before, "seen": seen, "kinds": pruning.kinds}
    return out


def _channel_sums(name: str, arrays: list[np.ndarray]) -> np.ndarray:
    """NumPy: per input channel (the last axis), the sum of squares over batch and positions."""
    return sum(np.square(a.astype(np.float64)).reshape(-1, a.shape[-1]).sum(0) for a in arrays)


@pytest.mark.parametrize("build", [_mlp, _cnn])
def test_statistics_are_the_inputs_sums_of_squares_and_masks_are_the_cores(build):
    config = {"criterion": "wanda", "target_sparsity": 0.5, "pruning_scope": "row"}
    run = _train(build, config, lr=0.1)
    assert run["done"] == 3
    shapes = {n: tf_to_canonical(w, run["kinds"][n]).shape for n, w in run["dense"].items()}
    sums = {}
    for n, arrays in run["seen"].items():
        sums[n] = _channel_sums(n, arrays[:2])           # the window holds steps 0 and 1 before the last one
        assert np.allclose(run["before"][n], sums[n], rtol=1e-5), n
        sums[n] = _channel_sums(n, arrays)
        assert not run["sums_after"][n].any(), n             # the update started a new window
    # the core, given the dense weights after the third step and the norms of the three batches
    groups = [run["dense"][n].shape[-2] if run["kinds"][n] == "depthwise" else 1 for n in shapes]
    norms = activation_norms([sums[n].astype(np.float32) for n in shapes], list(shapes.values()), groups)
    protocol = PruningProtocol({**config, **WINDOW}, shapes)
    update = protocol.advance(3, {n: tf_to_canonical(w, run["kinds"][n]) for n, w in run["dense"].items()},
                              activations=dict(zip(shapes, norms)))
    for n in shapes:
        assert np.array_equal(tf_to_canonical(run["masks"][n], run["kinds"][n]), update.masks[n]), n
    if build is _mlp:                                   # rows of 64 and 32 weights: exactly half kept
        assert [float(m.mean()) for m in run["masks"].values()] == [0.5, 0.5]


def _torch_mlp(initial):
    model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False), torch.nn.ReLU(),
                                torch.nn.Linear(32, 10, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(initial["fc1/kernel"].T.copy()))
        model[2].weight.copy_(torch.from_numpy(initial["fc2/kernel"].T.copy()))
    back = {"0.weight": ("fc1/kernel", lambda m: m.T), "2.weight": ("fc2/kernel", lambda m: m.T)}
    return model, (lambda xb: torch.from_numpy(xb)), back


def _torch_cnn(initial):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3, padding=1, bias=False)
            self.dw = torch.nn.Conv2d(4, 8, 3, padding=1, groups=4, bias=False)
            self.fc = torch.nn.Linear(8, 10, bias=False)

        def forward(self, x):
            return self.fc(torch.relu(self.dw(torch.relu(self.conv(x)))).mean((2, 3)))

    model = Net()
    dw = initial["dw/depthwise_kernel"]
    with torch.no_grad():
        model.conv.weight.copy_(torch.from_numpy(initial["conv/kernel"].transpose(3, 2, 0, 1).copy()))
        model.dw.weight.copy_(torch.from_numpy(dw.reshape(3, 3, 8).transpose(2, 0, 1)[:, None].copy()))
        model.fc.weight.copy_(torch.from_numpy(initial["fc/kernel"].T.copy()))
    back = {"conv.weight": ("conv/kernel", lambda m: m.transpose(2, 3, 1, 0)),
            "dw.weight": ("dw/depthwise_kernel", lambda m: m[:, 0].transpose(1, 2, 0).reshape(3, 3, 4, 2)),
            "fc.weight": ("fc/kernel", lambda m: m.T)}
    return model, (lambda xb: torch.from_numpy(xb.reshape(-1, 1, 8, 8))), back


@pytest.mark.parametrize("build,torch_build,extra", [(_mlp, _torch_mlp, {"pattern": "2:4"}),
                                                     (_mlp, _torch_mlp, {"pruning_scope": "row"}),
                                                     (_cnn, _torch_cnn, {"pruning_scope": "row"}),
                                                     (_cnn, _torch_cnn, {})])
def test_graph_mode_wanda_gives_torchs_masks_for_the_same_weights_and_batches(build, torch_build, extra):
    config = {"criterion": "wanda", "target_sparsity": 0.5, **extra}
    run = _train(build, config, lr=0.0)              # lr 0: both frameworks see the same weights
    model, to_torch, back = torch_build(run["initial"])
    pruner = sparsify_torch.prune(model, {**config, **WINDOW})
    for step in range(3):
        model(to_torch(batch(step, 32)[0]))
        pruner.step()
    torch_masks = {back[n][0]: back[n][1](m.numpy()) for n, m in pruner.masks().items()}
    assert sorted(torch_masks) == sorted(run["masks"])
    for n, m in run["masks"].items():
        assert np.array_equal(m, torch_masks[n]), n


def test_wanda_waits_for_a_training_step_and_evaluation_adds_nothing():
    g = tf.Graph()
    with g.as_default():
        x, y, loss, _, _ = _mlp()
        pruning = sparsify_tf.prune_graph({"criterion": "wanda", "target_sparsity": 0.5, "start_step": 0,
                                           "end_step": 0})
        sgd = tf1.train.GradientDescentOptimizer(0.1)
        train = pruning.wrap_train_op(sgd.minimize(loss, global_step=pruning.global_step))
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(pruning.update_op)                       # due at step 0, but no input seen yet: waits
        sess.run(loss, {x: X[:8], y: Y[:8]})             # evaluation computes no gradient: nothing recorded
        assert int(sess.run(pruning.last_update_step)) == -1
        assert not any(v.any() for v in sess.run(pruning.collectors.sums).values())
        sess.run(train, {x: X[:8], y: Y[:8]})
        assert int(sess.run(pruning.last_update_step)) == 1
        assert [float(m.mean()) for m in pruning.get_masks(sess).values()] == [0.5, 0.5]


def _resumable_run(steps: range, restore: str | None = None, save: str | None = None):
    """Train the MLP (gradual Wanda, Momentum) over ``steps``, from a fresh start or a checkpoint."""
    g = tf.Graph()
    with g.as_default():
        x, y, loss, _, weights = _mlp()
        pruning = sparsify_tf.prune_graph({"criterion": "wanda", "target_sparsity": 0.75, "start_step": 2,
                                           "end_step": 10, "pruning_frequency": 4})
        opt = tf1.train.MomentumOptimizer(0.05, 0.9)
        train = pruning.wrap_train_op(opt.minimize(loss, global_step=pruning.global_step))
        saver = tf1.train.Saver()
    with tf1.Session(graph=g, config=session_config()) as sess:
        if restore is None:
            sess.run(tf1.global_variables_initializer())
        else:
            saver.restore(sess, restore)
        for step in steps:
            xb, yb = batch(step, 16)
            sess.run(train, {x: xb, y: yb})
        if save is not None:
            saver.save(sess, save)
        return sess.run(weights), pruning.get_masks(sess), sess.run(pruning.collectors.sums)


def test_saver_checkpoint_mid_window_resumes_exactly(tmp_path):
    straight = _resumable_run(range(12))
    first = _resumable_run(range(5), save=str(tmp_path / "ckpt"))
    assert all(v.any() for v in first[2].values())          # saved mid-window: statistics since step 2
    resumed = _resumable_run(range(5, 12), restore=str(tmp_path / "ckpt"))
    for a, b in zip(straight, resumed):
        for n in a:
            assert np.array_equal(a[n], b[n]), n
    assert float(np.mean(straight[1]["fc1/kernel"])) == 0.25


def test_a_user_criterion_reading_activations_runs_in_graph_mode():
    name = "test_graph_inverse_norm"

    @register_criterion(name, needs=("weight", "activation"))
    def inverse(weight, activation, **_):          # keeps the columns of the smallest inputs
        return abs(weight) / (activation + 1.0)
    try:
        g = tf.Graph()
        with g.as_default():
            x = tf1.placeholder(tf.float32, [None, 2])
            w = tf1.get_variable("fc/kernel", initializer=np.ones((2, 2), np.float32))
            loss = tf.reduce_sum(tf.matmul(x, w))
            pruning = sparsify_tf.prune_graph({"criterion": name, "target_sparsity": 0.5, "start_step": 0,
                                               "end_step": 0})
            sgd = tf1.train.GradientDescentOptimizer(0.0)
            train = pruning.wrap_train_op(sgd.minimize(loss, global_step=pruning.global_step))
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(train, {x: [[3.0, 0.0], [4.0, 1.0]]})      # input norms 5 and 1
            assert sess.run(pruning.collectors.sums["fc/kernel"]).tolist() == [0.0, 0.0]   # a new window
            assert pruning.get_masks(sess)["fc/kernel"].tolist() == [[False, False], [True, True]]
    finally:
        unregister_criterion(name)


def test_ops_whose_input_channels_cannot_be_read_are_refused_naming_the_weight():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, None)                           # unknown rank
        tf.matmul(x, tf1.get_variable("fc/kernel", [4, 2]))
        before = len(g.get_operations())
        with pytest.raises(ValueError, match=r"criterion 'wanda' needs per-input-channel statistics: the input "
                                             r"channels of weight 'fc/kernel' cannot be read.*unknown or scalar rank"):
            sparsify_tf.prune_graph({"criterion": "wanda"})
        assert len(g.get_operations()) == before
        sparsify_tf.prune_graph({"target_sparsity": 0.5})             # magnitude needs no input channels


def _grouped_graph_masks(kernel: np.ndarray, batches: list[np.ndarray], config: dict) -> dict[str, np.ndarray]:
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 5, 5, 4])
        w = tf1.get_variable("grouped/kernel", initializer=kernel)          # 4 input channels, kernel of 2: 2 groups
        loss = tf.reduce_sum(tf.nn.conv2d(x, w, 1, "SAME"))
        pruning = sparsify_tf.prune_graph({**config, **WINDOW})
        sgd = tf1.train.GradientDescentOptimizer(0.0)
        train = pruning.wrap_train_op(sgd.minimize(loss, global_step=pruning.global_step))
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        for xb in batches:
            sess.run(train, {x: xb})
        return pruning.get_masks(sess, canonical=True)["grouped/kernel"]


@pytest.mark.parametrize("scope", ["row", "local"])
def test_grouped_convolution_each_row_reads_its_group_and_matches_torch(scope):
    rng = np.random.default_rng(4)
    kernel = (rng.choice([-1, 1], (3, 3, 2, 4)) * rng.uniform(0.5, 1.0, (3, 3, 2, 4))).astype(np.float32)
    # channel 2 and 3 (group 1) see inputs 100x larger: a row of group 1 keeps its group's channels
    batches = [(rng.normal(0, 1, (2, 5, 5, 4)) * [1, 1, 100, 100]).astype(np.float32) for _ in range(3)]
    config = {"criterion": "wanda", "target_sparsity": 0.5, "pruning_scope": scope}
    graph = _grouped_graph_masks(kernel, batches, config)
    conv = torch.nn.Conv2d(4, 4, 3, padding=1, groups=2, bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(kernel.transpose(3, 2, 0, 1).copy()))
    pruner = sparsify_torch.prune(conv, {**config, **WINDOW})
    for xb in batches:
        conv(torch.from_numpy(xb.transpose(0, 3, 1, 2).copy()))
        pruner.step()
    assert np.array_equal(graph, pruner.masks()["weight"].numpy())
    if scope == "local":         # ranked across groups: group 1's rows (the large inputs) keep everything
        assert graph[2:].all() and not graph[:2].any()


def test_wanda_refuses_gradients_built_before_pruning_with_masking_inputs():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 4])
        w = tf1.get_variable("fc/kernel", [4, 2])
        tf.gradients(tf.reduce_sum(tf.matmul(x, w)), [w])
        with pytest.raises(ValueError, match=r"criterion='wanda' with regrowth='none' reads the pruned ops' inputs "
                                             r"or gradients in their gradient, but gradient ops .* exist already"):
            sparsify_tf.prune_graph({"criterion": "wanda"}, masking="inputs")


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_input_channels_follow_the_transpositions(transpose_a, transpose_b):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [5, 3] if not transpose_a else [3, 5])
        w = tf1.get_variable("w", [3, 2] if not transpose_b else [2, 3])
        tf.matmul(x, w, transpose_a=transpose_a, transpose_b=transpose_b)
        data, axis, groups = input_channels(get_prunable_ops_and_inputs(g)[0])
    assert data is x and data.shape[axis] == 3 and groups == 1


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0, 100, width=32), min_size=2, max_size=6), st.integers(1, 3))
def test_depthwise_norms_repeat_each_input_channel_for_its_outputs(sums, mult):
    sums = np.array(sums, np.float32)
    (norms,) = activation_norms([sums], [(sums.size * mult, 1, 3, 3)], [sums.size])     # one group per channel
    assert norms.shape == (sums.size * mult, 1, 1, 1)
    assert np.array_equal(norms[:, 0, 0, 0], np.repeat(np.sqrt(sums), mult))


def test_a_weight_read_by_two_ops_adds_both_inputs_and_both_gradients():
    rng = np.random.default_rng(1)
    w0 = rng.normal(0, 0.5, (3, 3)).astype(np.float32)
    xb = rng.normal(0, 1, (4, 3)).astype(np.float32)

    def model():
        x = tf1.placeholder(tf.float32, [None, 3])
        w = tf1.get_variable("shared/kernel", initializer=w0)
        h = tf.matmul(x, w)
        return x, w, h, tf.reduce_sum(tf.square(tf.matmul(h, w)))

    g = tf.Graph()
    with g.as_default():
        x, w, h, loss = model()
        pruning = sparsify_tf.prune_graph({"criterion": "wanda", "regrowth": "rigl", "target_sparsity": 0.5,
                                           "start_step": 5, "end_step": 9})
        train = tf1.train.GradientDescentOptimizer(0.0).minimize(loss, global_step=pruning.global_step)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        hv, _ = sess.run([h, train], {x: xb})
        sums = sess.run(pruning.collectors.sums["shared/kernel"])
        grads = sum(sess.run(pruning.collectors.op_grads["shared/kernel"]))
    assert len(pruning.collectors.op_grads["shared/kernel"]) == 2
    assert np.allclose(sums, np.square(xb).sum(0) + np.square(hv).sum(0), rtol=1e-5)
    ref = tf.Graph()
    with ref.as_default():
        x, w, _, loss = model()
        with tf1.Session(graph=ref) as sess:
            sess.run(tf1.global_variables_initializer())
            assert np.allclose(grads, sess.run(tf.gradients(loss, w)[0], {x: xb}), rtol=1e-5)


def test_export_leaves_the_collectors_out(tmp_path):
    g = tf.Graph()
    with g.as_default():
        x, y, loss, _, weights = _mlp()
        logits = tf.identity(g.get_tensor_by_name("MatMul_1:0"), name="logits")
        pruning = sparsify_tf.prune_graph({"criterion": "wanda", "regrowth": "rigl", "target_sparsity": 0.5,
                                           "start_step": 0, "end_step": 4, "pruning_frequency": 2})
        train = pruning.wrap_train_op(tf1.train.AdamOptimizer(0.01).minimize(loss, global_step=pruning.global_step))
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        for step in range(5):
            xb, yb = batch(step, 16)
            sess.run(train, {x: xb, y: yb})
        expected = sess.run(logits, {x: X[:8]})
        frozen = pruning.export_frozen_graph(sess, ["logits"], path=str(tmp_path / "m.pb"))
    assert not [n.name for n in frozen.node if n.op == "IdentityN" or "nm_" in n.name]
    out = tf.Graph()
    with out.as_default():
        tf.graph_util.import_graph_def(frozen, name="")
        with tf1.Session(graph=out) as sess:
            got = sess.run("logits:0", {x.name: X[:8]})
    assert np.allclose(got, expected, atol=1e-6)


def test_an_update_with_a_weight_no_step_trained_is_refused_naming_it():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 4])
        used = tf1.get_variable("used/kernel", [4, 2])
        idle = tf1.get_variable("idle/kernel", [4, 2])
        out_used, _ = tf.matmul(x, used), tf.matmul(x, idle)
        pruning = sparsify_tf.prune_graph({"criterion": "wanda", "target_sparsity": 0.5, "start_step": 1,
                                           "end_step": 1})
        opt = tf1.train.GradientDescentOptimizer(0.1)
        train = pruning.wrap_train_op(opt.minimize(tf.reduce_sum(out_used), global_step=pruning.global_step))
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        with pytest.raises(ValueError, match=r"pruning update at step 1 refused: criterion 'wanda' needs the inputs "
                                             r"of every pruned weight, but the ops of \['idle/kernel'\] computed no "
                                             "gradient since the last update"):
            pruning.run_update(sess, train, {x: X[:4, :4]})
        assert int(sess.run(pruning.last_update_step)) == -1
        assert pruning.get_masks(sess)["used/kernel"].all()


@pytest.mark.parametrize("adjoint_a,axis", [(False, 2), (True, 1)])
def test_batch_matmul_input_channels(adjoint_a, axis):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 5, 3] if not adjoint_a else [2, 3, 5])
        tf.matmul(x, tf1.get_variable("w", [3, 2]), adjoint_a=adjoint_a)
        (p,) = get_prunable_ops_and_inputs(g)
        assert p.op.type.startswith("BatchMatMul")
        assert input_channels(p) == (x, axis, 1)
