"""A criterion registered in user code: prune_graph (TF graph mode) gives torch's masks on the same weights."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
import torch

import sparsify_tf
import sparsify_torch
from sparsify.criteria import register_criterion, unregister_criterion

tf1 = tf.compat.v1

#: TF variable name -> (torch parameter name, TF shape); created in this order in both frameworks
WEIGHTS = {"conv/kernel": ("0.weight", (3, 3, 4, 4)), "fc1/kernel": ("2.weight", (64, 8)),
           "fc2/kernel": ("3.weight", (8, 4))}


@pytest.fixture
def distance():
    """The design's example criterion, registered here (no package file knows it)."""
    name = "test_graph_distance"

    @register_criterion(name, needs=("weight",))
    def score(weight, **_):
        return abs(weight - 0.1)
    yield name
    unregister_criterion(name)


def _kernels() -> dict[str, np.ndarray]:
    # multiples of 0.125 in [-0.5, 0.75]: many equal scores within and across layers (ties)
    rng = np.random.default_rng(3)
    return {n: (rng.integers(-4, 7, size=shape) * 0.125).astype(np.float32) for n, (_, shape) in WEIGHTS.items()}


def _graph_masks(config: dict, kernels: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 6, 6, 4])
        w = {n: tf1.get_variable(n, initializer=k) for n, k in kernels.items()}
        h = tf.nn.relu(tf.nn.conv2d(x, w["conv/kernel"], 1, "VALID"))
        h = tf.nn.relu(tf.matmul(tf.reshape(h, [-1, 64]), w["fc1/kernel"]))
        _ = tf.matmul(h, w["fc2/kernel"])
        pruning = sparsify_tf.prune_graph({**config, "start_step": 0, "end_step": 0})
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(pruning.update_op)
        return {n: sess.run(pruning.masks[n]) != 0 for n in kernels}


def _torch_masks(config: dict, kernels: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, bias=False), torch.nn.Flatten(),
                                torch.nn.Linear(64, 8, bias=False), torch.nn.Linear(8, 4, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(kernels["conv/kernel"].transpose(3, 2, 0, 1).copy()))
        model[2].weight.copy_(torch.from_numpy(kernels["fc1/kernel"].T.copy()))
        model[3].weight.copy_(torch.from_numpy(kernels["fc2/kernel"].T.copy()))
    masks = sparsify_torch.prune(model, {**config, "end_step": 0}).masks()
    return {"conv/kernel": masks["0.weight"].numpy().transpose(2, 3, 1, 0),
            "fc1/kernel": masks["2.weight"].numpy().T, "fc2/kernel": masks["3.weight"].numpy().T}


@pytest.mark.parametrize("pattern,scope", [("1x1", "local"), ("1x1", "global"), ("4x1", "global"),
                                           ("2:4", "local")])
def test_a_criterion_registered_in_user_code_gives_torchs_masks_in_graph_mode(distance, pattern, scope):
    config = {"criterion": distance, "target_sparsity": 0.5, "pattern": pattern, "pruning_scope": scope}
    kernels = _kernels()
    graph, torch_masks = _graph_masks(config, kernels), _torch_masks(config, kernels)
    assert list(graph) == list(torch_masks)
    for name in kernels:
        assert graph[name].shape == kernels[name].shape
        assert np.array_equal(graph[name], torch_masks[name]), name
    kept = sum(int(m.sum()) for m in graph.values())
    assert kept == sum(m.size for m in graph.values()) // 2          # 50% of 360 weights, exactly


def test_the_registered_criterion_decides_not_magnitude(distance):
    kernels = _kernels()
    kernels["fc2/kernel"] = np.tile(np.array([0.1, 0.0], np.float32), 16).reshape(8, 4)
    masks = _graph_masks({"criterion": distance, "target_sparsity": 0.5}, kernels)
    # the 0.1s score 0 (pruned), the zeros 0.1 (kept): magnitude would do the opposite
    assert masks["fc2/kernel"].tolist() == [[False, True, False, True]] * 8
