"""Cross-framework parity: the same weights and config give the same masks, bit for bit.

Legs:
* torch ``Pruner`` vs the core ``PruningEngine`` fed the Keras-layout kernels converted back with
  ``sparsify.layout`` (no TF needed);
* torch ``Pruner`` vs ``sparsify_tf.keras.PruningCallback`` driving ``model.fit`` on a Keras model
  holding the same weights (learning rate 0, so the weights stay fixed and masks must match exactly);
* torch ``Pruner`` vs TF graph mode (``sparsify_tf.prune_graph`` on a ``tf.compat.v1`` graph with
  Conv2D/MatMul ops on the same kernels, the update op run after every global step).

Both legs cover "1x1", "4x1", "2:4" and "channelx1" in local and global scope and compare the masks
at every step of the schedule (update steps and the steps between them).
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from sparsify import PruningEngine  # noqa: E402
from sparsify.layout import canonical_to_tf, tf_to_canonical  # noqa: E402
from sparsify_torch import prune  # noqa: E402

PATTERNS = ["1x1", "4x1", "2:4", "channelx1"]
SCOPES = ["local", "global"]
END, FREQ = 6, 2                 # updates at steps 0, 2, 4, 6
STEPS = END + 2                  # masks compared after 0..STEPS-1 optimizer steps
# torch name -> (keras layer, layout kind, keras kernel shape). 2-D views: (8, 36) (8, 72) (16, 128) (8, 16).
LAYERS = {"conv1.weight": ("conv1", "conv", (3, 3, 4, 8)), "conv2.weight": ("conv2", "conv", (3, 3, 8, 8)),
          "fc.weight": ("fc", "dense", (128, 16)), "head.weight": ("head", "dense", (16, 8))}


class TorchNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 8, 3)
        self.conv2 = nn.Conv2d(8, 8, 3)
        self.fc = nn.Linear(128, 16)
        self.head = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.head(torch.relu(self.fc(x.flatten(1))))


def config(pattern: str, scope: str) -> dict:
    return {"target_sparsity": 0.5, "pattern": pattern, "pruning_scope": scope, "start_step": 0,
            "end_step": END, "pruning_frequency": FREQ}


def torch_net(seed: int = 0) -> TorchNet:
    torch.manual_seed(seed)
    net = TorchNet()
    with torch.no_grad():   # a few exact ties, so tie-breaking must agree too
        net.fc.weight[0, :8] = 0.25
        net.conv1.weight[1, 0, 0, :] = -0.125
    return net


def keras_kernels(net: TorchNet) -> dict[str, np.ndarray]:
    """The torch weights in the Keras layouts."""
    sd = net.state_dict()
    return {n: canonical_to_tf(sd[n].numpy(), kind, shape) for n, (_, kind, shape) in LAYERS.items()}


def torch_mask_history(cfg: dict) -> list[dict[str, np.ndarray]]:
    """Masks after 0, 1, ..., STEPS-1 optimizer steps with fixed weights (learning rate 0)."""
    net = torch_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    pruner = prune(net, cfg)
    x = torch.randn(4, 4, 8, 8)
    history = []
    for _ in range(STEPS):
        history.append({n: m.numpy().copy() for n, m in pruner.masks().items()})
        opt.zero_grad()
        net(x).square().mean().backward()
        opt.step()
        pruner.step()
    return history


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_torch_matches_core_on_converted_keras_kernels(pattern, scope):
    cfg = config(pattern, scope)
    history = torch_mask_history(cfg)
    kernels = keras_kernels(torch_net())
    engine = PruningEngine(cfg)
    weights = {n: tf_to_canonical(k, LAYERS[n][1]) for n, k in kernels.items()}
    masks = {n: np.ones(w.shape, bool) for n, w in weights.items()}
    done = -1
    for step in range(STEPS):
        if engine.update_due(done, step):
            masks = engine.compute_masks({n: w * masks[n] for n, w in weights.items()}, step, pre_masks=masks)
            done = step
        for n in LAYERS:
            np.testing.assert_array_equal(history[step][n], masks[n], err_msg=f"{n} at step {step}")
    final = history[-1]
    assert 0 < sum(int((~m).sum()) for m in final.values()) < sum(m.size for m in final.values())


def _keras_mask_history(cfg: dict) -> list[dict[str, np.ndarray]]:
    import keras

    from sparsify_tf.keras import PruningCallback

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((8, 8, 4)),
        keras.layers.Conv2D(8, 3, activation="relu", name="conv1"),
        keras.layers.Conv2D(8, 3, activation="relu", name="conv2"),
        keras.layers.Flatten(),
        keras.layers.Dense(16, activation="relu", name="fc"),
        keras.layers.Dense(8, name="head"),
    ])
    for n, kernel in keras_kernels(torch_net()).items():
        layer = model.get_layer(LAYERS[n][0])
        layer.set_weights([kernel, np.zeros(layer.get_weights()[1].shape, np.float32)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0), loss="mse")
    pruning = PruningCallback(cfg)
    history: list[dict[str, np.ndarray]] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):   # runs after PruningCallback's update
            history.append({n: tf_to_canonical(pruning.masks[f"{LAYERS[n][0]}/kernel"], LAYERS[n][1])
                            for n in LAYERS})

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4 * STEPS, 8, 8, 4)).astype(np.float32)
    y = rng.normal(size=(4 * STEPS, 8)).astype(np.float32)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[pruning, Record()])
    for n, (layer, kind, _) in LAYERS.items():          # weights really stayed fixed (apart from pruning)
        k = tf_to_canonical(model.get_layer(layer).get_weights()[0], kind)
        np.testing.assert_array_equal(k, tf_to_canonical(keras_kernels(torch_net())[n], kind) * history[-1][n])
    return history


def assert_same_masks_every_step(torch_history: list, other_history: list) -> None:
    """Identical masks for every layer at every step, and pruning actually happened."""
    assert len(torch_history) == len(other_history) == STEPS
    for step, (t, o) in enumerate(zip(torch_history, other_history)):
        for n in LAYERS:
            np.testing.assert_array_equal(t[n], o[n], err_msg=f"{n} at step {step}")
    assert any((~m).any() for m in torch_history[-1].values())


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_torch_matches_keras_callback(pattern, scope):
    cfg = config(pattern, scope)
    keras_history = _keras_mask_history(cfg)
    torch_history = torch_mask_history(cfg)
    assert_same_masks_every_step(torch_history, keras_history)


def _graph_mask_history(cfg: dict) -> list[dict[str, np.ndarray]]:
    import tensorflow as tf

    from sparsify_tf.graph_pruning import prune_graph

    tf1 = tf.compat.v1
    kernels = keras_kernels(torch_net())
    graph = tf.Graph()
    with graph.as_default():
        gs = tf1.train.get_or_create_global_step()
        x = tf1.placeholder(tf.float32, [None, 8, 8, 4])
        var = {n: tf1.get_variable(f"{LAYERS[n][0]}/kernel", initializer=tf.constant(k), use_resource=True)
               for n, k in kernels.items()}
        h = tf.nn.relu(tf.nn.conv2d(x, var["conv1.weight"], 1, "VALID"))
        h = tf.nn.relu(tf.nn.conv2d(h, var["conv2.weight"], 1, "VALID"))
        h = tf.nn.relu(tf.matmul(tf.reshape(h, [-1, 128]), var["fc.weight"]))
        tf.matmul(h, var["head.weight"])
        pruning = prune_graph(cfg, graph, global_step=gs)
        set_step = tf1.placeholder(tf.int64, [])
        assign_step = tf1.assign(gs, set_step)
        init = tf1.global_variables_initializer()
    history = []
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        for step in range(STEPS):
            sess.run(assign_step, {set_step: step})
            sess.run(pruning.update_op)
            masks = pruning.get_masks(sess, canonical=True)
            history.append({n: masks[f"{LAYERS[n][0]}/kernel"] for n in LAYERS})
    return history


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_torch_matches_tf_graph_mode(pattern, scope):
    cfg = config(pattern, scope)
    graph_history = _graph_mask_history(cfg)
    torch_history = torch_mask_history(cfg)
    assert_same_masks_every_step(torch_history, graph_history)
