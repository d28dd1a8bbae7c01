"""One-shot pruning of a built Keras model without training: ``prune_oneshot(model, config, data)``.

The model is pruned straight to ``config.target_sparsity`` (:meth:`sparsify.PruningConfig.oneshot`: the
schedule window is ignored) with the config's pattern, scope and criterion; the masks come from the
core (:class:`sparsify.PruningProtocol`) and are baked into the kernels, so the model comes back plain,
with zeros. Criteria that read activations (``"wanda"``) get the per-input-channel L2 norms of each
pruned layer's inputs over ``data`` (:func:`sparsify.activation_stats.sum_of_squares`, the rule every
adapter uses), read through a sub-model whose outputs are those inputs (Sequential and Functional
models), else by running the model eagerly with the pruned layers' ``call`` recorded (subclassed models,
layers inside subclassed layers: keras_hub's attention projections; every call of a layer counts, as
with torch's forward hooks). An EinsumDense kernel contracting its input's trailing axes (attention's
query/key/value and output projections) reads those axes flattened as its input channels. Criteria that
need gradients are refused (no backward pass runs). Works for Keras 3 on every backend and for tf-keras.

``method="sparsegpt"`` prunes every selected Dense (and such EinsumDense) kernel with SparseGPT
(:mod:`sparsify.sparsegpt`, the core's reconstruction, as :func:`sparsify_torch.prune_oneshot` does):
layers one at a time in definition order, each layer's inputs read over all calibration batches from the
model whose earlier layers are already pruned (``sequential=True``), the kept weights updated to
compensate. The same weights and calibration inputs give torch's masks (weights within float32 rounding).

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

import functools
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from sparsify import PruningConfig, PruningProtocol
from sparsify.activation_stats import ActivationWindow, sum_of_squares
from sparsify.criteria import oneshot_needs_data
from sparsify.patching import patch, unpatch
from sparsify.sparsegpt import (ONESHOT_METHODS, HessianAccumulator, oneshot_method_options, sparsegpt_prune,
                                sparsegpt_target)

from .compat import keras_flavor, keras_module
from .layers import KerasPrunableWeight, find_prunable_weights, in_model_order
from .state import model_state
from .statistics import check_activation_layers, input_channels, reads_input_channels

__all__ = ["prune_oneshot", "input_channel_norms", "ONESHOT_METHODS"]


def _batches(data: Any) -> Iterable[Any]:
    """The model inputs of each batch: an array/tensor/dict is one batch; tuples ``(x, y, ...)`` give ``x``."""
    if isinstance(data, (np.ndarray, Mapping)) or (hasattr(data, "shape") and hasattr(data, "dtype")):
        data = [data]
    elif not isinstance(data, Iterable) or isinstance(data, (str, bytes, os.PathLike)):
        raise TypeError(f"data must be an array, a tf.data.Dataset or an iterable of batches (arrays or (x, y) "
                        f"tuples), got {type(data).__name__}")
    for batch in data:
        yield batch[0] if isinstance(batch, (tuple, list)) and batch else batch


def _layer_inputs(model: Any, layers: list[Any]) -> Any:
    """A sub-model whose outputs are the inputs of ``layers`` (Sequential and Functional models whose layers
    are each called once at the top level), or None when the model's graph does not hold them (subclassed
    models, layers nested in subclassed layers: keras_hub's attention projections)."""
    K = keras_module(keras_flavor(model))
    inputs = getattr(model, "inputs", None)
    if not inputs:
        return None
    try:
        return K.Model(inputs[0] if len(inputs) == 1 else inputs, [layer.input for layer in layers])
    except (AttributeError, ValueError, TypeError, RuntimeError):
        return None


class _InputRecorder:
    """Reads the inputs of ``layers`` by running the whole model eagerly with their ``call`` wrapped on the
    instance (the way torch's forward hooks do): every call of a layer in a batch is kept (one array per call,
    flattened to its input channels by the caller)."""

    def __init__(self, model: Any, layers: list[Any]) -> None:
        self.model, self.layers = model, layers
        self.K = keras_module(keras_flavor(model))

    def __call__(self, x: Any) -> list[list[np.ndarray]]:
        seen: dict[int, list[np.ndarray]] = {id(layer): [] for layer in self.layers}

        def make(inner: Any, key: int) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                value = args[0] if args else kwargs.get("inputs")
                if value is not None:
                    seen[key].append(_to_numpy(self.K, value))
                return inner(*args, **kwargs)
            return functools.wraps(inner)(call)

        for layer in self.layers:
            patch(layer, "call", functools.partial(make, key=id(layer)), nest=True)
        try:
            self.model(x, training=False)
        finally:
            for layer in self.layers:
                unpatch(layer, "call")
        missing = [layer.name for layer in self.layers if not seen[id(layer)]]
        if missing:
            raise ValueError(f"model {self.model.name!r}: the inputs of the pruned layers cannot be read: layers "
                             f"{missing} were not called when the model ran on the data; exclude their weights "
                             "with excluded_op_names")
        return [seen[id(layer)] for layer in self.layers]


def _input_reader(model: Any, layers: list[Any]) -> Any:
    """``reader(x) -> per layer, the list of its inputs (NumPy) in the batch x``: through a sub-model where the
    graph holds the layers' inputs, else by running the model with the layers' calls recorded (eager)."""
    K = keras_module(keras_flavor(model))
    probe = _layer_inputs(model, layers)
    if probe is None:
        if not getattr(model, "built", False) or not callable(model):
            raise ValueError(f"model {model.name!r}: the inputs of the pruned layers cannot be read (the model "
                             "cannot be called)")
        return _InputRecorder(model, layers)

    def read(x: Any) -> list[list[np.ndarray]]:
        outs = probe(x, training=False)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        return [[_to_numpy(K, out)] for out in outs]
    return read


def _to_numpy(K: Any, x: Any) -> np.ndarray:
    return np.asarray(K.ops.convert_to_numpy(x) if hasattr(K, "ops") else x)


def _flat_inputs(a: np.ndarray, pw: KerasPrunableWeight) -> np.ndarray:
    """A layer input as ``(rows, input channels of pw)`` (an EinsumDense's contracted trailing axes flattened)."""
    return np.asarray(a).reshape(-1, input_channels(pw))


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
    layers = list(dict.fromkeys(pw.layer for pw in weights))
    read = _input_reader(model, layers)
    window = ActivationWindow({pw.path: pw.canonical_shape for pw in weights}, criterion=criterion)
    seen = 0
    for x in _batches(data):
        calls = {id(layer): found for layer, found in zip(layers, read(x))}
        for pw in weights:
            for a in calls[id(pw.layer)]:
                window.add(pw.path, sum_of_squares(_flat_inputs(a, pw)))
        seen += 1
    if not seen:
        raise ValueError("data held no batch: activation criteria need at least one batch of inputs")
    return window.read()


def _sparsegpt(model: Any, cfg: PruningConfig, chosen: list[KerasPrunableWeight], data: Any, *, dampening: float,
               block_size: int, sequential: bool) -> Any:
    """Prune each chosen Dense kernel with SparseGPT, in definition order, kernels written in place."""
    target = sparsegpt_target(cfg)
    refused = [pw.path for pw in chosen if not reads_input_channels(pw)]
    if refused:
        raise ValueError(f"method='sparsegpt' prunes Dense and EinsumDense kernels (an EinsumDense contracting its "
                         f"input's trailing axes) only; exclude {refused} with excluded_op_names")
    if data is None:
        raise ValueError("method='sparsegpt' reconstructs each layer from its inputs: pass calibration data")
    batches = list(_batches(data))
    if not batches:
        raise ValueError("data held no batch: SparseGPT needs at least one batch of inputs")

    def hessians(pws: list[KerasPrunableWeight]) -> list[HessianAccumulator]:
        layers = list(dict.fromkeys(pw.layer for pw in pws))
        read = _input_reader(model, layers)
        accs = [HessianAccumulator(pw.canonical_shape[1], name=pw.path) for pw in pws]
        for x in batches:
            calls = {id(layer): found for layer, found in zip(layers, read(x))}
            for acc, pw in zip(accs, pws):
                for a in calls[id(pw.layer)]:
                    acc.add(_flat_inputs(a, pw).astype(np.float64))
        return accs

    accs = None if sequential else hessians(chosen)
    for i, pw in enumerate(chosen):
        acc = hessians([pw])[0] if sequential else accs[i]
        kernel = np.asarray(pw.variable.numpy())
        new_w, _ = sparsegpt_prune(pw.to_canonical(kernel).astype(np.float64), acc.hessian(), block_size=block_size,
                                   dampening=dampening, name=pw.path, **target)
        pw.variable.assign(pw.from_canonical(new_w).astype(kernel.dtype))
    return model


def prune_oneshot(model: Any, config: PruningConfig | Mapping[str, Any] | str, data: Any = None, *,
                  method: str = "criterion", dampening: float | None = None, block_size: int | None = None,
                  sequential: bool | None = None) -> Any:
    """Prune the built ``model`` in place to ``config.target_sparsity`` at once and return it (masks baked in).

    Args:
        model: a built Keras 3 (any backend) or tf-keras model (trained).
        config: a ``PruningConfig``, a dict or a YAML path; its target is taken as given.
        data: calibration inputs for criteria that read activations (``"wanda"``) and SparseGPT: an array
            (one batch), a ``tf.data.Dataset`` or an iterable of batches, each inputs or ``(inputs, targets)``.
        method: ``"criterion"`` (masks by the config's criterion, kept weights unchanged) or ``"sparsegpt"``.
        dampening, block_size, sequential: ``method="sparsegpt"`` only (:func:`sparsify.sparsegpt.sparsegpt_options`).

    Raises:
        ValueError: an unknown method or an option it does not take, a criterion that needs gradients, an
            activation criterion or SparseGPT without data, a model that is not built or is being pruned by
            a ``PruningCallback`` (strip it first), a config SparseGPT cannot follow.
    """
    keras_flavor(model)
    options = oneshot_method_options(method, dampening, block_size, sequential)
    cfg = PruningConfig.coerce(config).oneshot()
    needs_data = oneshot_needs_data(cfg.criterion, data is not None)
    if not getattr(model, "built", False):
        raise ValueError(f"model {model.name!r} is not built: build it (or call it on a batch) before pruning")
    if model_state(model) is not None:
        raise ValueError(f"model {model.name!r} is being pruned by a PruningCallback: call strip_pruning(model) "
                         "before prune_oneshot")
    candidates = in_model_order(model, find_prunable_weights(model))
    protocol = PruningProtocol(cfg, {pw.path: pw.canonical_shape for pw in candidates})
    by_path = {pw.path: pw for pw in candidates}
    chosen = [by_path[n] for n in protocol.names]
    if options is not None:
        return _sparsegpt(model, cfg, chosen, data, **options)
    acts = input_channel_norms(model, chosen, data, cfg.criterion) if needs_data else None
    weights = {pw.path: pw.to_canonical(np.asarray(pw.variable.numpy())) for pw in chosen}
    update = protocol.advance(0, weights, activations=acts)
    for pw in chosen:
        kernel = np.asarray(pw.variable.numpy())
        keep = pw.from_canonical(update.masks[pw.path])
        pw.variable.assign(np.where(keep, kernel, np.zeros((), kernel.dtype)))
    return model
