"""Demo backend: Keras 3 (TensorFlow backend) with ``sparsify_tf.keras.PruningCallback`` in ``model.fit``.

The dense phase is a plain ``fit``; the pruning phase recompiles with a fresh
optimizer (its ``iterations`` restart at 0, which is what the callback's
schedule follows) and fits again with the callback. ``strip_pruning`` then
leaves a plain model, saved as ``model.keras``.

TensorFlow and Keras are imported when :func:`train` runs, so choosing another backend never loads them.
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
OUTPUTS: tuple[str, ...] = ("model.keras",)


def train(config: PruningConfig, data: Digits, steps: int, seed: int, progress: DemoProgress,
          out: Path | None = None) -> BackendRun:
    """Train dense, then prune with ``PruningCallback`` for ``steps`` steps each."""
    tf = import_tensorflow()
    import keras

    import sparsify_tf.keras as sk

    keras.utils.set_random_seed(seed)

    class Progress(keras.callbacks.Callback):
        """The progress bar, and Ctrl-C at a batch end: ``stop_training`` ends ``fit`` there."""

        def __init__(self, cb: Any = None) -> None:
            super().__init__()
            self.cb, self.i = cb, 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            sparsity = None
            if self.cb is not None and (self.i % 10 == 0 or self.i == steps - 1):
                sparsity = self.cb.sparsity["total"]
            self.i += 1
            progress.step(sparsity)
            if interrupts.requested():
                self.model.stop_training = True

    layers: list[Any] = [keras.Input((SIZES[0],))]
    for i, name in enumerate(LAYERS):
        layers.append(keras.layers.Dense(SIZES[i + 1], activation=None if name == LAYERS[-1] else "relu", name=name))
    model = keras.Sequential(layers, name="digits_mlp")

    def dataset(phase_seed: int) -> Any:
        idx = np.stack(list(batch_indices(len(data.x_train), BATCH_SIZE, steps, phase_seed)))
        return tf.data.Dataset.from_tensor_slices((data.x_train[idx], data.y_train[idx]))   # one element = one batch

    def compile_fresh() -> None:
        model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

    def accuracy() -> float:
        return float(model.evaluate(data.x_test, data.y_test, verbose=0, return_dict=True)["accuracy"])

    progress.phase("dense")
    compile_fresh()
    model.fit(dataset(seed), epochs=1, verbose=0, shuffle=False, callbacks=[Progress()])
    interrupts.check()
    dense_acc = accuracy()

    pruning = sk.PruningCallback(config)
    compile_fresh()
    progress.phase("pruning", 0.0)
    model.fit(dataset(seed + 1), epochs=1, verbose=0, shuffle=False, callbacks=[pruning, Progress(pruning)])
    interrupts.check()
    pruned_acc = accuracy()
    final_step = int(model.optimizer.iterations.numpy())
    pruned = [path.split("/")[0] for path in pruning.pruned_weights]
    model = sk.strip_pruning(model)
    weights = {name: tf_to_canonical(model.get_layer(name).kernel.numpy(), "dense") for name in LAYERS}
    files: list[str] = []
    interrupts.check()
    if out is not None:
        p = os.path.join(os.fspath(out), "model.keras")
        with writing(p):
            model.save(p)
        files.append(p)
    notes = ["model.keras: a plain Keras model (strip_pruning removed the pruning state)"] if files else []
    return BackendRun(dense_acc, pruned_acc, weights, pruned, final_step, files, notes)
