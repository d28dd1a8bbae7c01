"""Demo backends for Keras: Keras 3 on whatever backend is installed (:data:`KERAS`), and tf-keras (:data:`TF_KERAS`).

``--framework keras`` trains with Keras 3 and ``sparsify_keras.PruningCallback`` on the backend
``--backend`` or ``KERAS_BACKEND`` names, else the one in ``keras.json`` when it is installed (Keras's
first import writes that file with ``"tensorflow"`` whatever is installed), else TensorFlow when it is
installed, else JAX, else PyTorch (:func:`pick_keras_backend`). On JAX or PyTorch the demo imports no
TensorFlow (Keras's input pipeline may, where TensorFlow is installed). ``--framework tf-keras`` trains a
tf-keras (Keras 2) model with ``sparsify_tf.keras.PruningCallback`` (needs the ``tf`` extra).

Both phases feed ``fit`` a generator of batches (:func:`batch_stream`), made as training asks for them,
so memory does not grow with the number of steps. The dense phase is a plain ``fit``; the pruning phase
recompiles with a fresh optimizer (its ``iterations`` restart at 0, which the callback's schedule
follows) and fits again with the callback.
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
from typing import Any, Callable, Iterator

import numpy as np

from sparsify.config import PruningConfig
from sparsify.distillation import DistillationConfig
from sparsify.extras import install_command
from sparsify.layout import tf_to_canonical

from .. import interrupts
from ..frameworks import import_tensorflow, installed
from .common import BATCH_SIZE, LAYERS, LEARNING_RATE, SIZES, BackendRun, DemoProgress, distillation_note, writing
from .data import Digits, batch_indices

__all__ = ["KerasDemo", "KERAS", "TF_KERAS", "BACKEND_ORDER", "pick_keras_backend", "choose_keras_backend",
           "batch_stream"]

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


def pick_keras_backend(explicit: str | None, env: str | None, json_backend: str | None,
                       is_installed: Callable[[str], bool] = installed) -> str:
    """The Keras 3 backend the demo runs on, by the rule docs/cli.md states.

    ``explicit`` (``--backend``) first, then ``env`` (``KERAS_BACKEND``), both taken as given (a backend that
    is not installed fails with the extra to install); then the ``keras.json`` backend ``json_backend`` if it
    is installed (Keras's first import writes that file with ``"tensorflow"``, whatever is installed); then
    the first of :data:`BACKEND_ORDER` that is installed; with none installed, TensorFlow (the error then
    names its extra).

    Example:
        >>> only_jax = lambda module: module == "jax"
        >>> pick_keras_backend(None, None, "tensorflow", only_jax)      # the keras.json Keras wrote itself
        'jax'
        >>> pick_keras_backend(None, "torch", "jax", only_jax), pick_keras_backend("jax", "torch", None, only_jax)
        ('torch', 'jax')
    """
    for named in (explicit, env):
        if named:
            return named
    if json_backend in BACKEND_ORDER and is_installed(json_backend):
        return json_backend
    return next((b for b in BACKEND_ORDER if is_installed(b)), "tensorflow")


def choose_keras_backend(explicit: str | None = None) -> str:
    """Pick the demo's Keras 3 backend (:func:`pick_keras_backend`) and set ``KERAS_BACKEND`` to it.

    When Keras is already imported, its backend is fixed: that one is returned, and an ``explicit``
    backend that differs is a ``ValueError``.
    """
    if explicit is not None and explicit not in BACKEND_ORDER:
        raise ValueError(f"backend must be one of {BACKEND_ORDER}, got {explicit!r}")
    if "keras" in sys.modules:
        keras = sys.modules["keras"]
        current = keras.backend.backend() if keras is not None and hasattr(keras, "backend") else None
        if current is not None:
            if explicit is not None and explicit != current:
                raise ValueError(f"backend {explicit!r}: Keras is already imported in this process on the "
                                 f"{current!r} backend, which is fixed at its first import; run a new process")
            return current
    backend = pick_keras_backend(explicit, os.environ.get("KERAS_BACKEND"), _keras_json_backend())
    os.environ["KERAS_BACKEND"] = backend
    return backend


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
        backend = choose_keras_backend()
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
            trained.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE),
                            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
            # one batch per step, in batch_indices' order, made when fit asks for it: memory flat in --steps
            trained.fit(batch_stream(data, steps, phase_seed), steps_per_epoch=steps, epochs=1, verbose=0,
                        shuffle=False, callbacks=callbacks)
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
            backend += "; " + distillation_note(distillation)
        notes = [f"{backend}; model.keras: a plain Keras model (strip_pruning removed the pruning state)"] \
            if files else [f"{backend}"]
        return BackendRun(dense_acc, pruned_acc, weights, pruned, final_step, files, notes)


def batch_stream(data: Digits, steps: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The ``(x, y)`` training batches of one phase, one at a time (a generator: memory flat in ``steps``).

    Example:
        >>> from sparsify.cli.demo.data import load_digits_split
        >>> stream = batch_stream(load_digits_split(), steps=100_000, seed=0)
        >>> x, y = next(stream)
        >>> x.shape, y.shape
        ((64, 64), (64,))
    """
    for idx in batch_indices(len(data.x_train), BATCH_SIZE, steps, seed):
        yield data.x_train[idx], data.y_train[idx]


#: ``--framework keras``: Keras 3 on whatever backend is installed.
KERAS = KerasDemo("keras")
#: ``--framework tf-keras``: tf-keras (Keras 2) on TensorFlow.
TF_KERAS = KerasDemo("tf_keras")
