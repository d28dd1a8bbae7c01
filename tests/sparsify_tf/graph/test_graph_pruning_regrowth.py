"""Regrowth (RigL, SET) in TF graph mode: exact sparsity, grown weights and slots at zero, the core's and torch's
masks."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
import torch

import sparsify_tf
import sparsify_torch
from sparsify import PruningProtocol
from sparsify.layout import tf_to_canonical
from tests.sparsify_tf.tf_graph_models import batch, build_mlp, session_config

tf1 = tf.compat.v1
NAMES = ("fc1/kernel", "fc2/kernel")
#: sparse-to-sparse: half of each layer from step 0, a swap every 2 steps until step 8
SPARSE = {"target_sparsity": 0.5, "sparsity_decay_type": "constant", "start_step": 0, "end_step": 8,
          "pruning_frequency": 2, "regrowth_fraction": 0.4}


def _graph(config: dict, masking: str = "weights", lr: float = 0.01, resource: bool = True):
    g = tf.Graph()
    with g.as_default():
        m = build_mlp(resource=resource)
        pruning = sparsify_tf.prune_graph(config, masking=masking)
        train = tf1.train.AdamOptimizer(lr).minimize(m["loss"], global_step=pruning.global_step)
        update = pruning.build_update_op()
    return g, m, pruning, train, update


def _reference_grads(weights: dict[str, np.ndarray], xb, yb) -> dict[str, np.ndarray]:
    """The dense gradients of the same loss in a plain graph (no pruning) holding the same variables."""
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        grads = tf.gradients(m["loss"], [m["w1"], m["w2"]])
        with tf1.Session(graph=g, config=session_config()) as sess:
            sess.run(tf1.global_variables_initializer())
            m["w1"].load(weights["fc1/kernel"], sess)
            m["w2"].load(weights["fc2/kernel"], sess)
            m["b1"].load(weights["fc1/bias"], sess)
            g1, g2 = sess.run(grads, {m["x"]: xb, m["y"]: yb})
    return {"fc1/kernel": g1, "fc2/kernel": g2}


@pytest.mark.slow
@pytest.mark.parametrize("regrowth,masking", [("rigl", "weights"), ("rigl", "inputs"), ("set", "weights"),
                                              ("set", "inputs")])
def test_regrowth_keeps_exact_sparsity_grows_zeros_and_follows_the_core(regrowth, masking):
    config = {**SPARSE, "regrowth": regrowth}
    g, m, pruning, train, update = _graph(config, masking)
    protocol = PruningProtocol(config, {n: tf_to_canonical(np.zeros(pruning.weights[n].shape), "dense").shape
                                        for n in NAMES})
    grown_seen = 0

    def check(gs, dense, grads):
        nonlocal grown_seen
        expected = protocol.advance(gs, {n: tf_to_canonical(d, "dense") for n, d in dense.items()},
                                    grads={n: tf_to_canonical(v, "dense") for n, v in grads.items()} or None)
        assert int(sess.run(pruning.last_update_step)) == protocol.done_step
        if expected is None:
            return
        new = pruning.get_masks(sess)
        slots = pruning.optimizer_slots()
        for n in NAMES:
            assert np.array_equal(tf_to_canonical(new[n], "dense"), expected.masks[n]), (gs, n)
            assert new[n].mean() == 0.5                                        # exact sparsity
            grown = expected.grown[n].T                                        # canonical (out, in) -> (in, out)
            grown_seen += int(grown.sum())
            weight = sess.run(pruning.weights[n])
            assert not weight[grown].any() and not weight[~new[n]].any()       # grown start at zero; pruned zero
            assert len(slots[n]) == 2
            for slot in slots[n]:                                               # Adam m and v
                value = sess.run(slot)
                assert not value[grown].any() and not value[~new[n]].any()

    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        initial = sess.run(pruning.weights)
        sess.run(update)              # step 0: SET prunes now; RigL waits for a gradient
        assert int(sess.run(pruning.last_update_step)) == (0 if regrowth == "set" else -1)
        if regrowth == "set":
            check(0, initial, {})
        for step in range(9):
            xb, yb = batch(step, 32)
            weights_used = sess.run({**pruning.weights, "fc1/bias": m["b1"]})   # what the step computes with
            sess.run(train, {m["x"]: xb, m["y"]: yb})
            dense = {n: sess.run(pruning.weights[n]) + sess.run(pruning.stored[n]) for n in NAMES}
            grads = {n: sess.run(pruning.collectors.op_grads[n][0]) for n in NAMES} if regrowth == "rigl" else {}
            if regrowth == "rigl":            # the dense gradient of the step, pruned entries included
                for n, ref in _reference_grads(weights_used, xb, yb).items():
                    assert np.allclose(grads[n], ref, atol=1e-6), n
                    assert grads[n][~pruning.get_masks(sess)[n]].any() or step == 0
            sess.run(update)
            check(int(sess.run(pruning.global_step)), dense, grads)
    assert grown_seen > 0


def _torch_mlp(weights: dict[str, np.ndarray]):
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(weights["fc1/kernel"].T.copy()))
        model[0].bias.zero_()
        model[2].weight.copy_(torch.from_numpy(weights["fc2/kernel"].T.copy()))
    return model


@pytest.mark.slow
@pytest.mark.parametrize("regrowth", ["rigl", "set"])
def test_regrowth_gives_torchs_masks_for_the_same_weights_and_batches(regrowth):
    """lr 0: both frameworks keep the same weights (only regrowth's zeros change them), so each update
    sees the same weights and gradients."""
    config = {**SPARSE, "regrowth": regrowth}
    g, m, pruning, train, update = _graph(config, lr=0.0)
    graph_masks = []
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        initial = sess.run(pruning.weights)
        sess.run(update)                          # SET prunes at step 0, as torch's prune() does
        for step in range(9):
            xb, yb = batch(step, 32)
            sess.run(train, {m["x"]: xb, m["y"]: yb})
            sess.run(update)
            graph_masks.append(pruning.get_masks(sess))
    model = _torch_mlp(initial)
    opt = torch.optim.Adam(model.parameters(), lr=0.0)
    pruner = sparsify_torch.prune(model, config, optimizer=opt)
    for step in range(9):
        xb, yb = batch(step, 32)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(xb)), torch.from_numpy(yb)).backward()
        opt.step()
        pruner.step()
        masks = pruner.masks()
        assert np.array_equal(masks["0.weight"].numpy().T, graph_masks[step]["fc1/kernel"]), step
        assert np.array_equal(masks["2.weight"].numpy().T, graph_masks[step]["fc2/kernel"]), step
    assert not np.array_equal(graph_masks[0]["fc1/kernel"], graph_masks[-1]["fc1/kernel"])   # masks moved


def test_rigl_with_the_hook_and_legacy_ref_variables():
    config = {**SPARSE, "regrowth": "rigl"}
    g, m, pruning, train, _ = _graph(config, resource=False)
    with g.as_default(), tf1.train.MonitoredTrainingSession(hooks=[pruning.hook()], config=session_config()) as sess:
        for step in range(5):
            xb, yb = batch(step, 32)
            sess.run(train, {m["x"]: xb, m["y"]: yb})
        masks = pruning.get_masks(sess)
        assert int(sess.run(pruning.last_update_step)) == 4          # waited for a gradient, then 1, 2, 4
        assert [float(v.mean()) for v in masks.values()] == [0.5, 0.5]


def test_rigl_refuses_gradients_built_before_pruning():
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        tf.gradients(m["loss"], [m["w1"]])
        with pytest.raises(ValueError, match=r"regrowth='rigl' reads the pruned ops' inputs or gradients in their "
                                             r"gradient, but gradient ops .* exist already"):
            sparsify_tf.prune_graph({**SPARSE, "regrowth": "rigl"}, masking="inputs")
