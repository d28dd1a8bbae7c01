"""Demo backends for Keras: Keras 3 on whatever backend is installed (:data:`KERAS`), and tf-keras (:data:`TF_KERAS`).

``--framework keras`` trains with Keras 3 and ``sparsify_keras.PruningCallback`` on the backend Keras
uses: ``KERAS_BACKEND`` when set, else the one in ``keras.json``, else TensorFlow when it is installed,
else JAX, else PyTorch. On JAX or PyTorch nothing imports TensorFlow. ``--framework tf-keras`` trains a
tf-keras (Keras 2) model with ``sparsify_tf.keras.PruningCallback`` (needs the ``tf`` extra).

The dense phase is a plain ``fit``; the pruning phase recompiles with a fresh optimizer (its
``iterations`` restart at 0, which the callback's schedule follows) and fits again with the callback.
``strip_pruning`` then leaves a plain model, saved as ``model.keras``. A Ctrl-C
(:mod:`sparsify.cli.interrupts`) sets ``model.stop_training`` at the end of the batch, so ``fit`` ends
there and the run stops right after it, never inside the framework.

Example:
    >>> KERAS.OUTPUTS, TF_KERAS.flavor
    (('model.keras',), 'tf_keras')
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from sparsify.config import PruningConfig
from sparsify.distillation import DistillationConfig
from sparsify.extras import install_command
from sparsify.layout import tf_to_canonical

from .. import interrupts
from ..frameworks import import_tensorflow, installed
from .common import BATCH_SIZE, LAYERS, LEARNING_RATE, SIZES, BackendRun, DemoProgress, writing
from .data import Digits, batch_indices

__all__ = ["KerasDemo", "KERAS", "TF_KERAS", "BACKEND_ORDER", "choose_keras_backend"]

#: Keras 3 backends in the order the demo picks one when nothing names it (TensorFlow: Keras's own default).
BACKEND_ORDER = ("tensorflow", "jax", "torch")
_EXTRAS = {"tensorflow": "tf", "jax": "jax", "torch": "keras-torch"}


def _keras_json_backend() -> str | None:
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as fh:
            backend = json.load(fh).get("backend")
    except (OSError, ValueError, AttributeError):
        return None
    return backend if isinstance(backend, str) else None


def choose_keras_backend() -> str | None:
    """Set ``KERAS_BACKEND`` when neither it nor ``keras.json`` names a backend: the first of
    :data:`BACKEND_ORDER` that is installed (TensorFlow, Keras's default, is left unset). Returns that
    backend, or None when it is left to Keras.

    Keras itself would default to TensorFlow and fail in a venv holding only JAX or PyTorch.
    """
    if os.environ.get("KERAS_BACKEND") or _keras_json_backend() or "keras" in sys.modules:
        return None
    for backend in BACKEND_ORDER:
        if installed(backend):
            if backend != "tensorflow":         # Keras's own default needs no setting
                os.environ["KERAS_BACKEND"] = backend
            return backend
    return None


class KerasDemo:
    """One Keras demo backend: ``IMPORT_FRAMEWORK``, ``OUTPUTS`` and ``train`` as every backend has.

    Args:
        flavor: ``"keras"`` (Keras 3, any backend, ``sparsify_keras``) or ``"tf_keras"`` (Keras 2,
            ``sparsify_tf.keras``).
    """

    #: What :meth:`train` writes into ``out``.
    OUTPUTS: tuple[str, ...] = ("model.keras",)

    def __init__(self, flavor: str) -> None:
        if flavor not in ("keras", "tf_keras"):
            raise ValueError(f"flavor must be 'keras' or 'tf_keras', got {flavor!r}")
        self.flavor = flavor

    def IMPORT_FRAMEWORK(self) -> ModuleType:  # noqa: N802 - the name every demo backend exposes
        """Import Keras (and its backend); ImportError naming the extra to install when it is missing."""
        if self.flavor == "tf_keras":
            import_tensorflow()
            try:
                return importlib.import_module("tf_keras")
            except ImportError as e:
                raise ImportError(f"tf-keras is not installed ({e}); {install_command('tf')}") from None
        choose_keras_backend()
        backend = os.environ.get("KERAS_BACKEND") or _keras_json_backend() or "tensorflow"
        if backend == "tensorflow" and installed("tensorflow"):
            import_tensorflow()                     # quietly: its start-up noise silenced
        try:
            return importlib.import_module("keras")
        except ImportError as e:
            extra = _EXTRAS.get(backend, "jax")
            raise ImportError(f"Keras 3 on the {backend} backend cannot be imported ({e}); {install_command(extra)}, "
                              "or set KERAS_BACKEND to an installed backend") from None

    def _adapter(self) -> ModuleType:
        if self.flavor == "tf_keras":
            return importlib.import_module("sparsify_tf.keras")
        return importlib.import_module("sparsify_keras")

    def train(self, config: PruningConfig, data: Digits, steps: int, seed: int, progress: DemoProgress,
              out: Path | None = None, distillation: DistillationConfig | None = None) -> BackendRun:
        """Train dense, then prune with the adapter's ``PruningCallback`` for ``steps`` steps each
        (``distillation``: the pruning phase trains a ``DistillationModel`` taught by the dense model)."""
        keras = self.IMPORT_FRAMEWORK()
        adapter = self._adapter()
        keras.utils.set_random_seed(seed)
        to_numpy = (lambda v: np.asarray(v.numpy())) if self.flavor == "tf_keras" else \
            (lambda v: np.asarray(keras.ops.convert_to_numpy(v)))

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

        model = keras.Sequential([keras.Input((SIZES[0],))] + [
            keras.layers.Dense(SIZES[i + 1], activation=None if name == LAYERS[-1] else "relu", name=name)
            for i, name in enumerate(LAYERS)], name="digits_mlp")

        def fit(phase_seed: int, callbacks: list[Any], trained: Any = None) -> None:
            trained = model if trained is None else trained
            idx = np.concatenate(list(batch_indices(len(data.x_train), BATCH_SIZE, steps, phase_seed)))
            trained.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE),
                            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
            trained.fit(data.x_train[idx], data.y_train[idx], batch_size=BATCH_SIZE, epochs=1, verbose=0,
                      shuffle=False, callbacks=callbacks)      # one batch per step, in batch_indices' order
            interrupts.check()

        def accuracy() -> float:
            return float(model.evaluate(data.x_test, data.y_test, verbose=0, return_dict=True)["accuracy"])

        progress.phase("dense")
        fit(seed, [Progress()])
        dense_acc = accuracy()
        pruning = adapter.PruningCallback(config)
        # the dense model teaches the pruned one: a frozen copy taken now, before any mask
        trained = model if distillation is None else adapter.DistillationModel(model, distillation)
        progress.phase("pruning", 0.0)
        fit(seed + 1, [pruning, Progress(pruning)], trained)
        pruned_acc = accuracy()
        final_step = int(to_numpy(trained.optimizer.iterations))
        pruned = [path.split("/")[0] for path in pruning.pruned_weights]
        model = adapter.strip_pruning(model)
        weights = {name: tf_to_canonical(to_numpy(model.get_layer(name).kernel), "dense") for name in LAYERS}
        files: list[str] = []
        interrupts.check()
        if out is not None:
            p = os.path.join(os.fspath(out), "model.keras")
            with writing(p):
                model.save(p)
            files.append(p)
        backend = "tf-keras" if self.flavor == "tf_keras" else f"Keras 3 on {keras.backend.backend()}"
        if distillation is not None:
            backend += f"; distilled from the dense model (temperature {distillation.temperature:g}, " \
                       f"weight {distillation.weight:g})"
        notes = [f"{backend}; model.keras: a plain Keras model (strip_pruning removed the pruning state)"] \
            if files else [f"{backend}"]
        return BackendRun(dense_acc, pruned_acc, weights, pruned, final_step, files, notes)


#: ``--framework keras``: Keras 3 on whatever backend is installed.
KERAS = KerasDemo("keras")
#: ``--framework tf-keras``: tf-keras (Keras 2) on TensorFlow.
TF_KERAS = KerasDemo("tf_keras")
