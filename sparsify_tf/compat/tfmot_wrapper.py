"""``PruneLowMagnitude``: the layer wrapper tfmot's API puts around each layer it prunes.

The wrapper holds, per pruned weight, a mask (ones at first) and the last
threshold, plus a ``pruning_step`` (-1 until :class:`UpdatePruningStep`
starts training). Each training call adds one to the step, updates the masks
when the schedule says so, then multiplies the weights by their masks before
the wrapped layer runs; the masks come from :mod:`.tfmot_arithmetic`. There is
one wrapper class per Keras (``keras`` and ``tf_keras``), both named
``PruneLowMagnitude`` so saved models name it as tfmot's do.

Example:
    >>> import keras
    >>> from sparsify_tf.compat.tfmot_arithmetic import ConstantSparsity
    >>> w = wrap(keras.layers.Dense(4), ConstantSparsity(0.5, 0))
    >>> w.name.startswith("prune_low_magnitude_dense"), is_prune_wrapper(w)
    (True, True)
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
import tensorflow as tf

from sparsify_keras.compat import keras_module
from sparsify_tf.keras.compat import tf_variable

from .tfmot_arithmetic import (ConstantSparsity, PruningSchedule, block_mask, check_m_by_n, m_by_n_mask,
                               m_by_n_supported, schedule_from_config, should_update_masks)
from .tfmot_registry import prunable_weights, short_name, supports

__all__ = ["wrapper_class", "wrap", "is_prune_wrapper", "layer_flavor", "check_pruning_params", "PruningVars"]

CALLBACK_MISSING = ("a prune_low_magnitude layer trained without the UpdatePruningStep callback: add "
                    "UpdatePruningStep() to the callbacks of model.fit (or call its on_train_begin before "
                    "a custom training loop)")
_CLASSES: dict[str, type] = {}


def layer_flavor(layer: Any) -> str:
    """``"tf_keras"`` for a tf_keras layer, ``"keras3"`` for a Keras 3 layer; TypeError otherwise."""
    tfk = sys.modules.get("tf_keras")
    if tfk is not None and isinstance(layer, tfk.layers.Layer):
        return "tf_keras"
    import keras

    if isinstance(layer, keras.layers.Layer):
        return "keras3"
    raise TypeError(f"to_prune must be a Keras layer or model (keras or tf_keras), "
                    f"got {type(layer).__module__}.{type(layer).__name__}")


def is_prune_wrapper(obj: Any) -> bool:
    """Whether ``obj`` is a ``PruneLowMagnitude`` wrapper of either Keras."""
    return any(isinstance(obj, cls) for cls in _CLASSES.values())


class PruningVars:
    """The (weight, mask, threshold) triples of one wrapper (kept off Keras' attribute tracking)."""

    def __init__(self, triples: list[tuple[Any, Any, Any]]) -> None:
        self.triples = triples


def _check_block(block_size: Any) -> tuple[int, int]:
    try:
        pair = tuple(block_size)
    except TypeError:
        raise ValueError(f"block_size must be 2 positive ints (height, width), got {block_size!r}") from None
    if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in pair):
        raise ValueError(f"block_size must be 2 positive ints (height, width), got {block_size!r}")
    return int(pair[0]), int(pair[1])


def check_pruning_params(pruning_schedule: Any, block_size: Any, block_pooling_type: Any,
                         sparsity_m_by_n: Any) -> tuple[PruningSchedule, tuple[int, int], str, tuple[int, int] | None]:
    """The wrapper's arguments checked: ``(schedule, block, pooling, m_by_n)``; TypeError/ValueError otherwise.

    Example:
        >>> check_pruning_params(None, [1, 4], "MAX", None)[1:]
        ((1, 4), 'MAX', None)
    """
    schedule = ConstantSparsity(0.5, 0) if pruning_schedule is None else schedule_from_config(pruning_schedule)
    if not isinstance(schedule, PruningSchedule):
        raise TypeError(f"pruning_schedule must be a PruningSchedule (ConstantSparsity, PolynomialDecay, ...), "
                        f"got {pruning_schedule!r}")
    block = _check_block(block_size)
    if block_pooling_type not in ("AVG", "MAX"):
        raise ValueError(f"block_pooling_type must be 'AVG' or 'MAX', got {block_pooling_type!r}")
    m_by_n = None if not sparsity_m_by_n else check_m_by_n(sparsity_m_by_n)
    return schedule, block, block_pooling_type, m_by_n


class _PruneLogic:
    """The wrapper's behaviour, shared by the ``keras`` and ``tf_keras`` classes."""

    def __init__(self, layer: Any, pruning_schedule: Any = None, block_size: Any = (1, 1),
                 block_pooling_type: str = "AVG", sparsity_m_by_n: Any = None, **kwargs: Any) -> None:
        schedule, block, pooling, m_by_n = check_pruning_params(pruning_schedule, block_size, block_pooling_type,
                                                                sparsity_m_by_n)
        if not supports(layer):
            prunable_weights(layer)          # raises the ValueError naming the layer
        kwargs["name"] = f"prune_low_magnitude_{layer.name}"
        super().__init__(layer, **kwargs)
        self.pruning_schedule = schedule
        self.block_size = block
        self.block_pooling_type = pooling
        self.sparsity_m_by_n = m_by_n
        self._pvars = PruningVars([])
        for attr in ("_batch_input_shape", "_input_shape_arg"):      # first layer of a Sequential
            if getattr(layer, attr, None) is not None and getattr(self, attr, None) is None:
                setattr(self, attr, getattr(layer, attr))

    # ----- variables -------------------------------------------------------------------------
    def build(self, input_shape: Any = None) -> None:
        super().build(input_shape)
        weights = prunable_weights(self.layer)
        for w in weights:
            shape = tuple(w.shape)
            if self.sparsity_m_by_n and not m_by_n_supported(shape):
                raise ValueError(f"sparsity_m_by_n: layer {self.layer.name!r} weight {short_name(w)!r} has shape "
                                 f"{shape}; m_by_n pruning needs a rank-2 (Dense) or rank-4 (Conv2D) weight")
            if not self.sparsity_m_by_n and self.block_size != (1, 1) and len(shape) != 2:
                raise ValueError(f"block_size {self.block_size}: layer {self.layer.name!r} weight {short_name(w)!r} "
                                 f"has shape {shape}; block sparsity needs rank-2 weights")
        triples = []
        for w in weights:
            name = short_name(w)
            mask = self.add_weight(name=f"{name}_mask", shape=tuple(w.shape), initializer="ones", dtype=w.dtype,
                                   trainable=False)
            threshold = self.add_weight(name=f"{name}_threshold", shape=(), initializer="zeros", dtype=w.dtype,
                                        trainable=False)
            triples.append((w, mask, threshold))
        self._pvars = PruningVars(triples)
        self.pruning_step = self.add_weight(name="pruning_step", shape=(), dtype="int64", trainable=False,
                                            initializer=keras_module(self._flavor).initializers.Constant(-1))
        self.built = True

    @property
    def pruning_vars(self) -> list[tuple[Any, Any, Any]]:
        """``[(weight, mask, threshold), ...]`` of the pruned weights (empty before build)."""
        return list(self._pvars.triples)

    # ----- the pruning ops ---------------------------------------------------------------------
    def _new_mask(self, weight: tf.Tensor, step: tf.Tensor) -> tuple[Any, tf.Tensor]:
        if self.sparsity_m_by_n:
            return tf.constant(999.0, weight.dtype), m_by_n_mask(weight, self.sparsity_m_by_n)
        sparsity = self.pruning_schedule(step)[1]
        return block_mask(weight, sparsity, self.block_size, self.block_pooling_type)

    def update_masks(self) -> Any:
        """Recompute the masks if the schedule says so at the current ``pruning_step``."""
        step_var = tf_variable(self.pruning_step)

        def update() -> Any:
            ops = []
            for w, m, t in self._pvars.triples:
                threshold, mask = self._new_mask(tf_variable(w).read_value(), step_var.read_value())
                ops.append(tf_variable(t).assign(tf.cast(threshold, t.dtype)))
                ops.append(tf_variable(m).assign(tf.cast(mask, m.dtype)))
            return tf.group(ops)

        return tf.cond(should_update_masks(self.pruning_schedule, self.sparsity_m_by_n, step_var.read_value()),
                       update, tf.no_op)

    def apply_masks(self) -> Any:
        """``weight = weight * mask`` for every pruned weight."""
        return tf.group([tf_variable(w).assign(tf.math.multiply(tf_variable(w).read_value(),
                                                                tf_variable(m).read_value()))
                         for w, m, _ in self._pvars.triples])

    def _training_step(self) -> Any:
        step_var = tf_variable(self.pruning_step)
        step_var.assign(step_var.read_value() + 1)
        with tf.control_dependencies([tf.debugging.assert_greater_equal(step_var.read_value(), np.int64(1),
                                                                        message=CALLBACK_MISSING)]):
            return self.update_masks()

    def call(self, inputs: Any, training: Any = None, **kwargs: Any) -> Any:
        if training is None and self._flavor == "tf_keras":
            training = keras_module("tf_keras").backend.learning_phase()
        if isinstance(training, (bool, int, np.bool_, np.integer)) or training is None:
            if training:
                self._training_step()
        else:
            tf.cond(tf.cast(training, tf.bool), self._training_step, tf.no_op)
        self.apply_masks()
        if "training" in _call_args(self.layer):
            return self.layer.call(inputs, training=training, **kwargs)
        return self.layer.call(inputs, **kwargs)

    # ----- shapes and serialization ----------------------------------------------------------
    def compute_output_shape(self, input_shape: Any) -> Any:
        return self.layer.compute_output_shape(input_shape)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"pruning_schedule": self.pruning_schedule.get_config(),
                       "block_size": list(self.block_size), "block_pooling_type": self.block_pooling_type,
                       "sparsity_m_by_n": None if self.sparsity_m_by_n is None else list(self.sparsity_m_by_n)})
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects: dict | None = None) -> Any:
        config = dict(config)
        layer = keras_module(cls._flavor).layers.deserialize(config.pop("layer"), custom_objects=custom_objects)
        config["pruning_schedule"] = schedule_from_config(config["pruning_schedule"], custom_objects)
        return cls(layer, **config)


def _call_args(layer: Any) -> list[str]:
    import inspect

    return list(inspect.signature(layer.call).parameters)


def _keras3_extras() -> dict:
    def compute_output_spec(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("training", None)
        return self.layer.compute_output_spec(*args, **kwargs)

    return {"compute_output_spec": compute_output_spec}


def wrapper_class(flavor: str) -> type:
    """The ``PruneLowMagnitude`` class of a Keras flavour (``"keras3"`` or ``"tf_keras"``), made once."""
    if flavor not in _CLASSES:
        base = keras_module(flavor).layers.Wrapper
        extras = _keras3_extras() if flavor == "keras3" else {}
        cls = type("PruneLowMagnitude", (_PruneLogic, base), {"_flavor": flavor, "__module__": __name__,
                                                               "__doc__": _PruneLogic.__doc__, **extras})
        _CLASSES[flavor] = cls
    return _CLASSES[flavor]


def wrap(layer: Any, pruning_schedule: Any = None, block_size: Any = (1, 1), block_pooling_type: str = "AVG",
         sparsity_m_by_n: Any = None, **kwargs: Any) -> Any:
    """``layer`` wrapped for pruning (the wrapper of the layer's own Keras)."""
    return wrapper_class(layer_flavor(layer))(layer, pruning_schedule=pruning_schedule, block_size=block_size,
                                              block_pooling_type=block_pooling_type,
                                              sparsity_m_by_n=sparsity_m_by_n, **kwargs)
