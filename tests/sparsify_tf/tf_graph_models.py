"""Small real graphs for the graph-mode tests: an MLP and a CNN on sklearn digits."""
from __future__ import annotations

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

tf1 = tf.compat.v1

_X, _Y = load_digits(return_X_y=True)
X = (_X / 16.0).astype(np.float32)
Y = _Y.astype(np.int64)


def batch(step: int, size: int = 64):
    idx = (np.arange(size) + step * size) % len(X)
    return X[idx], Y[idx]


def session_config():
    return tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)


def build_mlp(resource: bool = True, seed: int = 0, hidden: int = 32):
    """x (None, 64) -> fc1 (64, hidden) -> relu -> fc2 (hidden, 10). Returns dict of handles."""
    rng = np.random.default_rng(seed)
    x = tf1.placeholder(tf.float32, [None, 64], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    w1 = tf1.get_variable("fc1/kernel", initializer=rng.normal(0, 0.2, (64, hidden)).astype(np.float32),
                          use_resource=resource)
    b1 = tf1.get_variable("fc1/bias", initializer=np.zeros(hidden, np.float32), use_resource=resource)
    w2 = tf1.get_variable("fc2/kernel", initializer=rng.normal(0, 0.2, (hidden, 10)).astype(np.float32),
                          use_resource=resource)
    h = tf.nn.relu(tf.matmul(x, w1) + b1)
    logits = tf.identity(tf.matmul(h, w2), name="logits")
    loss = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return {"x": x, "y": y, "w1": w1, "b1": b1, "w2": w2, "logits": logits, "loss": loss}


def build_cnn(resource: bool = True, seed: int = 0):
    """8x8 digits -> conv 3x3 (1->8) -> depthwise 3x3 (x1) -> conv 3x3 (8->16) -> dense (1024 -> 12)."""
    rng = np.random.default_rng(seed)
    x = tf1.placeholder(tf.float32, [None, 64], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    img = tf.reshape(x, [-1, 8, 8, 1])

    def var(name, shape, scale=0.3):
        return tf1.get_variable(name, initializer=rng.normal(0, scale, shape).astype(np.float32),
                                use_resource=resource)

    c1 = var("conv1/kernel", (3, 3, 1, 8))
    dw = var("dw/depthwise_kernel", (3, 3, 8, 1))
    c2 = var("conv2/kernel", (3, 3, 8, 16))
    fc = var("fc/kernel", (8 * 8 * 16, 12), 0.05)
    h = tf.nn.relu(tf.nn.conv2d(img, c1, [1, 1, 1, 1], "SAME"))
    h = tf.nn.relu(tf.nn.depthwise_conv2d(h, dw, [1, 1, 1, 1], "SAME"))
    h = tf.nn.relu(tf.nn.conv2d(h, c2, [1, 1, 1, 1], "SAME"))
    logits = tf.identity(tf.matmul(tf.reshape(h, [-1, 8 * 8 * 16]), fc)[:, :10], name="logits")
    loss = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return {"x": x, "y": y, "conv1": c1, "dw": dw, "conv2": c2, "fc": fc, "logits": logits, "loss": loss}


def expected_pruned(n: int, ratio: float, cap: float = 0.98) -> int:
    """docs/design.md, rule 5: count, with the per-layer cap (units = elements)."""
    def k(s):
        return min(int(np.ceil(s * n - 0.5)), n - 1)
    return min(k(ratio), k(min(cap, 0.999999)))
