"""tfmot's model-level pruning functions: ``prune_low_magnitude``, ``strip_pruning``, ``prune_scope``.

Same names, arguments and results as ``tfmot.sparsity.keras``, for Keras 3
and tf-keras (each model keeps its own Keras):

* ``prune_low_magnitude(layer)`` wraps one layer; a list of layers gives a
  list; a Sequential or Functional model is cloned with every layer wrapped
  (the wrappers hold the original layers, so the weights are shared). A
  subclassed model is pruned by wrapping layers inside it.
* ``strip_pruning(model)`` multiplies the weights by their masks one last
  time and clones the model without the wrappers.
* ``prune_scope()`` is the scope in which saved pruned models load.

Example:
    >>> import keras
    >>> from sparsify_tf.compat.tfmot_arithmetic import ConstantSparsity
    >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc")])
    >>> pm = prune_low_magnitude(m, pruning_schedule=ConstantSparsity(0.5, 0))
    >>> [layer.name for layer in pm.layers]
    ['prune_low_magnitude_fc']
    >>> [layer.name for layer in strip_pruning(pm).layers]
    ['fc']
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

from sparsify_keras.compat import iter_tree, keras_module

from .tfmot_arithmetic import ConstantSparsity, PolynomialDecay, PruningSchedule
from .tfmot_wrapper import check_pruning_params, is_prune_wrapper, layer_flavor, wrap, wrapper_class

__all__ = ["prune_low_magnitude", "strip_pruning", "prune_scope", "collect_prunable_layers"]


def _is_graph_model(model: Any, keras: Any) -> bool:
    return isinstance(model, keras.Sequential) or type(model).__name__ == "Functional" or \
        bool(getattr(model, "_is_graph_network", False))


def prune_low_magnitude(to_prune: Any, pruning_schedule: PruningSchedule | None = None, block_size: Any = (1, 1),
                        block_pooling_type: str = "AVG", pruning_policy: Any = None, sparsity_m_by_n: Any = None,
                        **kwargs: Any) -> Any:
    """Wrap a layer, a list of layers or a Sequential/Functional model for magnitude pruning.

    Args:
        to_prune: a Keras layer, a list of layers, or a Sequential/Functional model.
        pruning_schedule: when and how much to prune (default ``ConstantSparsity(0.5, 0)``).
        block_size: ``(height, width)`` blocks pruned together in rank-2 weights.
        block_pooling_type: ``"AVG"`` or ``"MAX"``, how a block's magnitudes are pooled.
        pruning_policy: optional object with ``allow_pruning(layer)`` and
            ``ensure_model_supports_pruning(model)``, deciding which layers are wrapped.
        sparsity_m_by_n: ``(m, n)``: ``m`` zeros in every ``n`` consecutive weights along the
            input dimension (``(2, 4)`` keeps 2 of 4), masks made at the first training step
            and kept (the schedule is then not used), as in tfmot 0.8.
        **kwargs: passed to the wrapper when ``to_prune`` is a single layer.

    Returns:
        The wrapped layer, list or model (a model comes back uncompiled: compile it again).

    Raises:
        ValueError: a layer that cannot be pruned, a subclassed model, or a bad argument.
    """
    params = {"pruning_schedule": pruning_schedule, "block_size": block_size,
              "block_pooling_type": block_pooling_type, "sparsity_m_by_n": sparsity_m_by_n}
    if isinstance(to_prune, list):
        return [layer if is_prune_wrapper(layer) else
                layer.__class__.from_config(layer.get_config()) if type(layer).__name__ == "InputLayer"
                else wrap(layer, **params) for layer in to_prune]
    flavor = layer_flavor(to_prune)
    keras = keras_module(flavor)
    if isinstance(to_prune, keras.Model):
        if not _is_graph_model(to_prune, keras):
            raise ValueError(f"to_prune: model {to_prune.name!r} is a subclassed model, which cannot be cloned; "
                             "wrap its layers instead (self.fc = prune_low_magnitude(keras.layers.Dense(...)) "
                             "in __init__)")
        if pruning_policy is not None:
            pruning_policy.ensure_model_supports_pruning(to_prune)
        check_pruning_params(**params)                              # before cloning anything

        def add_wrapper(layer: Any) -> Any:
            if isinstance(layer, keras.Model):
                return keras.models.clone_model(layer, input_tensors=None, clone_function=add_wrapper)
            if is_prune_wrapper(layer) or type(layer).__name__ == "InputLayer":
                return layer
            if pruning_policy is not None and not pruning_policy.allow_pruning(layer):
                return layer
            return wrap(layer, **params)

        return keras.models.clone_model(to_prune, input_tensors=None, clone_function=add_wrapper)
    params.update(kwargs)
    return wrap(to_prune, **params)


def collect_prunable_layers(model: Any) -> list[Any]:
    """Every ``PruneLowMagnitude`` wrapper inside ``model`` (nested and subclassed models too), once each."""
    found = [layer for _, layer in iter_tree(model) if is_prune_wrapper(layer)]
    return ([model] if is_prune_wrapper(model) else []) + found


def strip_pruning(model: Any) -> Any:
    """A copy of ``model`` without the pruning wrappers, the pruned weights exactly zero.

    Sequential and Functional models are cloned (the layers themselves are
    reused, as in tfmot); a subclassed model is refused.

    Raises:
        ValueError: ``model`` is not a Keras model, or is a subclassed model.
    """
    try:
        flavor = layer_flavor(model)
    except TypeError:
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}") from None
    keras = keras_module(flavor)
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}")
    if not _is_graph_model(model, keras):
        raise ValueError(f"model {model.name!r} is a subclassed model; strip_pruning clones Sequential and "
                         "Functional models only (build the model without wrappers and copy the weights)")
    for wrapper in collect_prunable_layers(model):
        if wrapper.built:
            wrapper.apply_masks()

    def unwrap(layer: Any) -> Any:
        if isinstance(layer, keras.Model):
            return keras.models.clone_model(layer, input_tensors=None, clone_function=unwrap)
        if is_prune_wrapper(layer):
            inner = layer.layer
            for attr in ("_batch_input_shape", "_input_shape_arg"):
                if getattr(inner, attr, None) is None and getattr(layer, attr, None) is not None:
                    setattr(inner, attr, getattr(layer, attr))
            return inner
        return layer

    return keras.models.clone_model(model, input_tensors=None, clone_function=unwrap)


class _PruneScope:
    """Context manager registering the pruning classes with Keras 3 and, if installed, tf-keras."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None

    def _flavors(self) -> Iterator[str]:
        yield "keras3"
        if "tf_keras" in sys.modules:
            yield "tf_keras"
        else:
            try:
                import tf_keras  # noqa: F401
            except ImportError:
                return
            yield "tf_keras"

    def __enter__(self) -> "_PruneScope":
        self._stack = contextlib.ExitStack()
        for flavor in self._flavors():
            objects = {"PruneLowMagnitude": wrapper_class(flavor), "ConstantSparsity": ConstantSparsity,
                       "PolynomialDecay": PolynomialDecay}
            self._stack.enter_context(keras_module(flavor).utils.custom_object_scope(objects))
        return self

    def __exit__(self, *exc: Any) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()


def prune_scope() -> _PruneScope:
    """Scope in which models saved with pruning wrappers load (``.keras``, ``.h5``).

    Example:
        >>> import os, tempfile, keras
        >>> path = os.path.join(tempfile.mkdtemp(), "pruned.keras")
        >>> prune_low_magnitude(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="fc")])).save(path)
        >>> with prune_scope():
        ...     model = keras.models.load_model(path)
        >>> model.layers[0].name
        'prune_low_magnitude_fc'
    """
    return _PruneScope()
