"""tfmot's training callbacks: ``UpdatePruningStep`` (required) and ``PruningSummaries`` (TensorBoard).

Both work in ``model.fit`` of Keras 3 and of tf-keras, and in a custom
training loop through their hooks (``set_model``, ``on_train_begin``,
``on_epoch_end``), as tfmot's guide shows.

Example:
    >>> import os, tempfile, numpy as np, keras
    >>> from sparsify_tf.compat.tfmot_api import prune_low_magnitude
    >>> model = prune_low_magnitude(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))
    >>> model.compile("sgd", "mse")
    >>> logs = tempfile.mkdtemp()
    >>> _ = model.fit(np.ones((8, 4)), np.ones((8, 2)), batch_size=4, verbose=0,
    ...               callbacks=[UpdatePruningStep(), PruningSummaries(log_dir=logs)])
    >>> int(model.layers[0].pruning_step.numpy()), len(os.listdir(logs))
    (2, 1)
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import tensorflow as tf

import keras as _keras3

from ..common.summaries import write_scalar
from .tfmot_api import collect_prunable_layers
from .tfmot_registry import short_name

__all__ = ["UpdatePruningStep", "PruningSummaries"]

_TENSORBOARD_ARGS = {"histogram_freq", "write_graph", "write_images", "write_steps_per_second", "profile_batch",
                     "embeddings_freq", "embeddings_metadata"}


class _BothKerasCallback(_keras3.callbacks.Callback):
    """A Keras 3 callback that tf-keras' ``fit`` accepts too (its CallbackList protocol)."""

    def __init__(self) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self._chief_worker_only = None
        self.validation_data = None

    def _implements_train_batch_hooks(self) -> bool:
        return False

    def _implements_test_batch_hooks(self) -> bool:
        return False

    def _implements_predict_batch_hooks(self) -> bool:
        return False

    @property
    def model(self) -> Any:
        return getattr(self, "_model", None)

    @model.setter
    def model(self, value: Any) -> None:
        self._model = value

    def set_model(self, model: Any) -> None:
        self._model = model


class UpdatePruningStep(_BothKerasCallback):
    """Starts the wrappers' step counters and re-masks the weights at each epoch end.

    Required while training a model with ``prune_low_magnitude`` layers: at the
    start of training it sets the wrappers' ``pruning_step`` from -1 to 0 (the
    wrappers count the steps from there), and at the end of every epoch it
    multiplies the weights by their masks so a saved model is sparse.

    Example:
        >>> cb = UpdatePruningStep()
        >>> cb.prunable_layers      # filled at on_train_begin
        []
    """

    def __init__(self) -> None:
        super().__init__()
        self.prunable_layers: list[Any] = []

    def on_train_begin(self, logs: dict | None = None) -> None:
        if self.model is None:
            raise ValueError("model: UpdatePruningStep.on_train_begin called before set_model(model)")
        self.prunable_layers = [w for w in collect_prunable_layers(self.model) if w.built]
        if self.prunable_layers and int(self.prunable_layers[0].pruning_step.numpy()) == -1:
            for layer in self.prunable_layers:
                layer.pruning_step.assign(0)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Nothing to do: the wrappers count their steps (kept for custom loops written for tfmot)."""

    def on_epoch_end(self, batch: int, logs: dict | None = None) -> None:
        for layer in self.prunable_layers:
            layer.apply_masks()


class PruningSummaries(_BothKerasCallback):
    """Writes TensorBoard scalars at each epoch end: each mask's sparsity and threshold, and the epoch logs.

    Tags are ``<mask name>/sparsity`` and ``<threshold name>/threshold`` (as tfmot
    names them) plus ``epoch_<metric>`` for the values in the epoch logs; the
    step is ``optimizer.iterations``. The ``tensorboard`` package is not needed.

    Args:
        log_dir: directory of the event files.
        update_freq: ``"epoch"`` (only value with an effect; ``"batch"`` or an int are accepted
            and treated as ``"epoch"``).
        **kwargs: other ``TensorBoard`` arguments are accepted and ignored.

    Example:
        >>> PruningSummaries(log_dir="logs", update_freq="epoch").log_dir
        'logs'
    """

    def __init__(self, log_dir: str | os.PathLike, update_freq: Any = "epoch", **kwargs: Any) -> None:
        super().__init__()
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a directory path, got {log_dir!r}")
        is_int = isinstance(update_freq, int) and not isinstance(update_freq, bool)
        if update_freq not in ("epoch", "batch") and not is_int:
            raise ValueError(f"update_freq must be 'epoch', 'batch' or an int, got {update_freq!r}")
        unknown = sorted(set(kwargs) - _TENSORBOARD_ARGS)
        if unknown:
            raise TypeError(f"PruningSummaries got unexpected arguments {unknown}; allowed besides log_dir and "
                            f"update_freq: {sorted(_TENSORBOARD_ARGS)}")
        self.log_dir = os.fspath(log_dir)
        self.update_freq = update_freq
        self._writer: Any = None

    def on_epoch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.model is None:
            raise ValueError("model: PruningSummaries.on_epoch_end called before set_model(model)")
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        optimizer = getattr(self.model, "optimizer", None)
        step = int(optimizer.iterations.numpy()) if optimizer is not None else 0
        figures = {f"epoch_{k}": float(np.asarray(v)) for k, v in (logs or {}).items()
                   if np.asarray(v).size == 1}
        for layer in collect_prunable_layers(self.model):
            for _, mask, threshold in layer.pruning_vars:
                figures[f"{_name(layer, mask)}/sparsity"] = 1.0 - float(np.mean(mask.numpy()))
                figures[f"{_name(layer, threshold)}/threshold"] = float(threshold.numpy())
        with self._writer.as_default(step=step):
            for tag, value in figures.items():
                write_scalar(tag, value)
        self._writer.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._writer is not None:
            self._writer.flush()


def _name(layer: Any, variable: Any) -> str:
    """``"<wrapper name>/<variable name>"`` (tfmot's mask and threshold names, without ``:0``), both Kerases."""
    return f"{layer.name}/{short_name(variable)}"
