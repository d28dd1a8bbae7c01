"""One-shot pruning of a built Keras model without training: ``prune_oneshot(model, config, data)``.

The model is pruned straight to ``config.target_sparsity`` (:meth:`sparsify.PruningConfig.oneshot`: the
schedule window is ignored) with the config's pattern, scope and criterion; the masks come from the
core (:class:`sparsify.PruningProtocol`) and are baked into the kernels, so the model comes back plain,
with zeros. Criteria that read activations (``"wanda"``) get the per-input-channel L2 norms of each
pruned layer's inputs over ``data`` (:func:`sparsify.activation_stats.sum_of_squares`, the rule every
adapter uses), read through a sub-model whose outputs are those inputs (Sequential and Functional
models). Criteria that need gradients are refused (no backward pass runs). Works for Keras 3 on every
backend and for tf-keras.

Example:
    >>> import numpy as np, keras
    >>> keras.utils.set_random_seed(0)
    >>> m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, name="fc"), keras.layers.Dense(2, name="out")])
    >>> x = np.random.default_rng(0).normal(size=(32, 8)).astype("float32")
    >>> m = prune_oneshot(m, {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row"}, x)
    >>> [float(np.mean(m.get_layer(n).kernel.numpy() == 0)) for n in ("fc", "out")]
    [0.5, 0.5]
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from sparsify import PruningConfig, PruningProtocol
from sparsify.activation_stats import ActivationWindow, sum_of_squares
from sparsify.criteria import get_criterion

from .compat import keras_flavor, keras_module
from .layers import KerasPrunableWeight, find_prunable_weights, in_model_order
from .state import model_state
from .statistics import check_activation_layers

__all__ = ["prune_oneshot", "input_channel_norms"]


def _batches(data: Any) -> Iterable[Any]:
    """The model inputs of each batch: an array/tensor/dict is one batch; tuples ``(x, y, ...)`` give ``x``."""
    if isinstance(data, (np.ndarray, Mapping)) or (hasattr(data, "shape") and hasattr(data, "dtype")):
        data = [data]
    elif not isinstance(data, Iterable) or isinstance(data, (str, bytes, os.PathLike)):
        raise TypeError(f"data must be an array, a tf.data.Dataset or an iterable of batches (arrays or (x, y) "
                        f"tuples), got {type(data).__name__}")
    for batch in data:
        yield batch[0] if isinstance(batch, (tuple, list)) and batch else batch


def input_channel_norms(model: Any, weights: list[KerasPrunableWeight], data: Any,
                        criterion: str = "wanda") -> dict[str, np.ndarray]:
    """Per-input-channel L2 norms of the inputs of each weight's layer over ``data``, canonical-broadcastable.

    Raises:
        ValueError: a weight whose layer does not read its input channels directly, a model whose layers'
            inputs cannot be read (subclassed, a layer called at several places), or ``data`` with no batch.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name="fc")])
        >>> input_channel_norms(m, find_prunable_weights(m), [np.array([[3.0, 0.0], [4.0, 1.0]])])["fc/kernel"]
        array([[5., 1.]], dtype=float32)
    """
    check_activation_layers(weights, criterion)
    K = keras_module(keras_flavor(model))
    layers = list(dict.fromkeys(pw.layer for pw in weights))
    try:
        inputs = getattr(model, "inputs", None)
        if not inputs:
            raise AttributeError("the model has no symbolic inputs")
        probe = K.Model(inputs[0] if len(inputs) == 1 else inputs, [layer.input for layer in layers])
    except (AttributeError, ValueError, TypeError, RuntimeError) as e:
        raise ValueError(f"model {model.name!r}: the inputs of the pruned layers cannot be read ({e}); activation "
                         "criteria need a Sequential or Functional model whose pruned layers are each called once"
                         ) from None
    window = ActivationWindow({pw.path: pw.canonical_shape for pw in weights}, criterion=criterion)
    seen = 0
    for x in _batches(data):
        outs = probe(x, training=False)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        sums = {id(layer): sum_of_squares(np.asarray(K.ops.convert_to_numpy(out) if hasattr(K, "ops") else out))
                for layer, out in zip(layers, outs)}
        for pw in weights:
            window.add(pw.path, sums[id(pw.layer)])
        seen += 1
    if not seen:
        raise ValueError("data held no batch: activation criteria need at least one batch of inputs")
    return window.read()


def prune_oneshot(model: Any, config: PruningConfig | Mapping[str, Any] | str, data: Any = None) -> Any:
    """Prune the built ``model`` in place to ``config.target_sparsity`` at once and return it (masks baked in).

    Args:
        model: a built Keras 3 (any backend) or tf-keras model (trained).
        config: a ``PruningConfig``, a dict or a YAML path; its target is taken as given.
        data: calibration inputs for criteria that read activations (``"wanda"``): an array (one
            batch), a ``tf.data.Dataset`` or an iterable of batches, each inputs or ``(inputs, targets)``.

    Raises:
        ValueError: a criterion that needs gradients, an activation criterion without data, a model that
            is not built or is being pruned by a ``PruningCallback`` (strip it first).
    """
    keras_flavor(model)
    cfg = PruningConfig.coerce(config).oneshot()
    crit = get_criterion(cfg.criterion)
    if crit.per_step:
        raise ValueError(f"criterion {cfg.criterion!r} needs gradients, but one-shot pruning runs no backward pass; "
                         "use a criterion that needs only weights or activations ('magnitude', 'wanda')")
    needs_data = "activation" in crit.needs
    if needs_data and data is None:
        raise ValueError(f"criterion {cfg.criterion!r} reads the layers' inputs: pass calibration data")
    if not getattr(model, "built", False):
        raise ValueError(f"model {model.name!r} is not built: build it (or call it on a batch) before pruning")
    if model.__dict__.get("_sparsify_pruning_state") is not None or model_state(model) is not None:
        raise ValueError(f"model {model.name!r} is being pruned by a PruningCallback: call strip_pruning(model) "
                         "before prune_oneshot")
    candidates = in_model_order(model, find_prunable_weights(model))
    protocol = PruningProtocol(cfg, {pw.path: pw.canonical_shape for pw in candidates})
    by_path = {pw.path: pw for pw in candidates}
    chosen = [by_path[n] for n in protocol.names]
    acts = input_channel_norms(model, chosen, data, cfg.criterion) if needs_data else None
    weights = {pw.path: pw.to_canonical(np.asarray(pw.variable.numpy())) for pw in chosen}
    update = protocol.advance(0, weights, activations=acts)
    for pw in chosen:
        kernel = np.asarray(pw.variable.numpy())
        keep = pw.from_canonical(update.masks[pw.path])
        pw.variable.assign(np.where(keep, kernel, np.zeros((), kernel.dtype)))
    return model
