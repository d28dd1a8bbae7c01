"""Demo backend: TensorFlow ``tf.compat.v1`` graph mode with ``sparsify_tf.prune_graph``.

The dense phase trains one graph; the pruning phase builds a second graph
initialised from the dense weights, adds pruning with
:func:`sparsify_tf.prune_graph` (before the optimizer, so pruned weights get
zero gradients) and runs ``GraphPruning.wrap_train_op`` each step. The pruned
model is written as a ``tf.compat.v1.train.Saver`` checkpoint (masks baked
into the weights) and an inference SavedModel exported by
``sparsify_tf.export_saved_model`` (no mask variables, no update ops).

Ctrl-C (:mod:`sparsify.cli.interrupts`) is looked at between session runs and between the files written,
never inside TensorFlow. TensorFlow is imported when :func:`train` runs, so choosing another backend never
loads it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from sparsify.config import PruningConfig
from sparsify.layout import tf_to_canonical

from .. import interrupts
from ..frameworks import import_tensorflow
from .common import BATCH_SIZE, LAYERS, LEARNING_RATE, SIZES, BackendRun, DemoProgress, writing
from .data import Digits, batch_indices

__all__ = ["IMPORT_FRAMEWORK", "OUTPUTS", "train"]

#: Imports the framework :func:`train` needs (ImportError naming the extra to install when it is missing).
IMPORT_FRAMEWORK = import_tensorflow
#: What :func:`train` writes into ``out``.
OUTPUTS: tuple[str, ...] = ("checkpoint", "saved_model")


def _build(tf: Any, init: dict[str, np.ndarray] | None, seed: int):
    """The MLP as plain variables + MatMul ops; returns (x, y, logits, loss, accuracy, variables)."""
    tf1 = tf.compat.v1
    tf1.set_random_seed(seed)
    x = tf1.placeholder(tf.float32, [None, SIZES[0]], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    h, variables = x, {}
    for i, name in enumerate(LAYERS):
        shape = (SIZES[i], SIZES[i + 1])
        with tf1.variable_scope(name):
            k_init = tf1.glorot_uniform_initializer(seed=seed + i) if init is None \
                else tf1.constant_initializer(init[f"{name}/kernel"])
            b_init = tf1.zeros_initializer() if init is None else tf1.constant_initializer(init[f"{name}/bias"])
            kernel = tf1.get_variable("kernel", shape, tf.float32, initializer=k_init, use_resource=True)
            bias = tf1.get_variable("bias", shape[1:], tf.float32, initializer=b_init, use_resource=True)
        variables[f"{name}/kernel"], variables[f"{name}/bias"] = kernel, bias
        h = tf.matmul(h, kernel) + bias
        if name != LAYERS[-1]:
            h = tf.nn.relu(h)
    logits = tf.identity(h, name="logits")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    return x, y, logits, loss, acc, variables


def train(config: PruningConfig, data: Digits, steps: int, seed: int, progress: DemoProgress,
          out: Path | None = None) -> BackendRun:
    """Train dense, then prune with ``sparsify_tf.prune_graph`` for ``steps`` steps each."""
    tf = import_tensorflow()
    import sparsify_tf

    tf1 = tf.compat.v1
    n = len(data.x_train)
    session_cfg = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)

    # ----- dense phase ------------------------------------------------------------------
    progress.phase("dense")
    g1 = tf.Graph()
    with g1.as_default():
        x, y, _, loss, acc, variables = _build(tf, None, seed)
        train_op = tf1.train.AdamOptimizer(LEARNING_RATE).minimize(loss)
        with tf1.Session(graph=g1, config=session_cfg) as sess:
            sess.run(tf1.global_variables_initializer())
            for idx in batch_indices(n, BATCH_SIZE, steps, seed):
                interrupts.check()      # between two session runs: Ctrl-C stops the run here
                sess.run(train_op, {x: data.x_train[idx], y: data.y_train[idx]})
                progress.step()
            dense_acc = float(sess.run(acc, {x: data.x_test, y: data.y_test}))
            dense = sess.run(variables)

    # ----- pruning phase ----------------------------------------------------------------
    interrupts.check()
    g2 = tf.Graph()
    with g2.as_default():
        x, y, logits, loss, acc, variables = _build(tf, dense, seed)
        pruning = sparsify_tf.prune_graph(config)          # before the optimizer: gradients see the masks
        global_step = tf1.train.get_global_step()
        train_op = pruning.wrap_train_op(
            tf1.train.AdamOptimizer(LEARNING_RATE).minimize(loss, global_step=global_step))
        with tf1.Session(graph=g2, config=session_cfg) as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(pruning.update_op)                     # an update point at step 0 applies right away
            progress.phase("pruning", float(sess.run(pruning.total_sparsity)))
            for i, idx in enumerate(batch_indices(n, BATCH_SIZE, steps, seed + 1)):
                interrupts.check()
                sess.run(train_op, {x: data.x_train[idx], y: data.y_train[idx]})
                sparsity = None
                if i % 10 == 0 or i == steps - 1:
                    sparsity = float(sess.run(pruning.total_sparsity))
                progress.step(sparsity)
            pruned_acc = float(sess.run(acc, {x: data.x_test, y: data.y_test}))
            final_step = int(sess.run(global_step))
            pruning.apply_masks(sess)                        # bake the masks into the weights
            pruned = [name.split("/")[0] for name in pruning.weights]
            kernels = sess.run({name: variables[f"{name}/kernel"] for name in LAYERS})
            weights = {name: tf_to_canonical(w, "dense") for name, w in kernels.items()}
            files: list[str] = []
            interrupts.check()
            if out is not None:          # a fresh directory (the run's staging area): nothing to replace
                ckpt_dir = os.path.join(os.fspath(out), "checkpoint")
                with writing(ckpt_dir):
                    ckpt = tf1.train.Saver(var_list=list(variables.values()), save_relative_paths=True).save(
                        sess, os.path.join(ckpt_dir, "model.ckpt"), write_meta_graph=False)
                files.append(ckpt)
                interrupts.check()
                export_dir = os.path.join(os.fspath(out), "saved_model")
                with writing(export_dir):
                    files.append(pruning.export_saved_model(sess, export_dir, {"x": x}, {"logits": logits}))
    notes = ["checkpoint/: tf.compat.v1 Saver checkpoint of the pruned weights; saved_model/: inference graph "
             "exported with the masks baked in"] if out is not None else []
    return BackendRun(dense_acc, pruned_acc, weights, pruned, final_step, files, notes)
