"""Differences between tf-keras (Keras 2) and Keras 3 on the TensorFlow backend.

Everything that depends on which Keras a model comes from lives here, so the
callback itself is written once. The flavour is decided by the model object
(``"tf_keras"`` for ``tf_keras.Model``, ``"keras3"`` for ``keras.Model`` /
``tf.keras.Model`` in TF >= 2.16), never by a global setting.

Example:
    >>> import keras
    >>> m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> keras_flavor(m)
    'keras3'
"""
from __future__ import annotations

import collections.abc
import sys
from typing import Any, Iterator

import tensorflow as tf

__all__ = ["keras_flavor", "keras_module", "child_layers", "own_variables", "short_name",
           "tf_variable", "optimizer_slots", "unwrap_optimizer", "steps_per_execution"]

FLAVORS = ("tf_keras", "keras3")


def _mro_modules(obj: Any) -> list[str]:
    return [getattr(c, "__module__", "") or "" for c in type(obj).__mro__]


def keras_flavor(model: Any) -> str:
    """``"tf_keras"`` or ``"keras3"`` for a Keras model; ``TypeError`` otherwise.

    Raises:
        TypeError: ``model`` is not a Keras model.
        ValueError: a Keras 3 model whose backend is not TensorFlow.
    """
    tfk = sys.modules.get("tf_keras")
    if tfk is not None and isinstance(model, tfk.Model):
        return "tf_keras"
    k3 = sys.modules.get("keras")
    if k3 is not None and hasattr(k3, "Model") and isinstance(model, k3.Model):
        backend = k3.backend.backend()
        if backend != "tensorflow":
            raise ValueError(f"model: sparsify_tf.keras needs Keras 3 on the TensorFlow backend, "
                             f"but KERAS_BACKEND is {backend!r}")
        return "keras3"
    raise TypeError(f"model must be a tf_keras.Model or a keras.Model (TensorFlow backend), "
                    f"got {type(model).__module__}.{type(model).__name__}")


def keras_module(flavor: str) -> Any:
    """The Keras package of a flavour (``tf_keras`` or ``keras``)."""
    if flavor == "tf_keras":
        import tf_keras

        return tf_keras
    if flavor == "keras3":
        import keras

        return keras
    raise ValueError(f"flavor must be one of {FLAVORS}, got {flavor!r}")


def child_layers(layer: Any) -> list[Any]:
    """Direct sublayers of ``layer`` in the order they were assigned, those held in a dict attribute in
    the dict's insertion order (as torch's ``nn.ModuleDict`` and Keras 3 keep them; tf-keras's own
    walk sorts a dict's keys)."""
    try:
        kids = list(layer._flatten_layers(include_self=False, recursive=False))
    except (AttributeError, TypeError):  # pragma: no cover - defensive for exotic layers
        return list(getattr(layer, "layers", []) or [])
    if len(kids) > 1 and hasattr(layer, "_self_tracked_trackables"):      # tf-keras (Keras 3 keeps the order)
        for value in vars(layer).values():        # a user's dict attribute is tracked as a wrapped dict
            if isinstance(value, _TRACKED) and isinstance(value, collections.abc.Mapping):
                _insertion_order(kids, _layers_in(value))
    return kids


_TRACKED = tf.__internal__.tracking.TrackableDataStructure


def _layers_in(value: Any) -> list[Any]:
    """Layers inside a (tracked) dict or list, in insertion order."""
    if isinstance(value, collections.abc.Mapping):
        return [leaf for v in value.values() for leaf in _layers_in(v)]
    if isinstance(value, collections.abc.Sequence) and not isinstance(value, str):
        return [leaf for v in value for leaf in _layers_in(v)]
    return [value] if hasattr(value, "_flatten_layers") else []


def _insertion_order(kids: list[Any], members: list[Any]) -> None:
    """Reorder, in place, the slots of ``kids`` that ``members`` occupy into ``members``' order."""
    slot = {id(k): i for i, k in enumerate(kids)}
    ordered = list({id(m): m for m in members if id(m) in slot}.values())
    for i, m in zip(sorted(slot[id(m)] for m in ordered), ordered):
        kids[i] = m


def own_variables(layer: Any) -> list[Any]:
    """Variables created by ``layer`` itself (not by its sublayers)."""
    out: list[Any] = []
    for attr in ("_trainable_weights", "_non_trainable_weights",        # tf-keras
                 "_trainable_variables", "_non_trainable_variables"):   # Keras 3
        vs = getattr(layer, attr, None)
        if isinstance(vs, collections.abc.Sequence):
            for v in vs:
                if not any(v is o for o in out):
                    out.append(v)
    return out


def short_name(variable: Any) -> str:
    """``"kernel"`` for ``dense/kernel:0`` (tf-keras) or ``kernel`` (Keras 3)."""
    return str(variable.name).split("/")[-1].split(":")[0]


def tf_variable(variable: Any) -> tf.Variable:
    """The ``tf.Variable`` behind a Keras 3 variable (tf-keras variables are already one)."""
    inner = getattr(variable, "_value", None)
    if isinstance(inner, tf.Variable):
        return inner
    return variable


def unwrap_optimizer(optimizer: Any) -> Any:
    """The optimizer that owns the slots (looks through LossScaleOptimizer)."""
    seen = 0
    while getattr(optimizer, "inner_optimizer", None) is not None and seen < 4:
        optimizer = optimizer.inner_optimizer
        seen += 1
    return optimizer


def _index_of(opt: Any, var: Any) -> int | None:
    try:
        if hasattr(opt, "_get_variable_index"):           # Keras 3
            return int(opt._get_variable_index(var))
        if hasattr(opt, "_index_dict") and hasattr(opt, "_var_key"):  # tf-keras new optimizer
            return int(opt._index_dict[opt._var_key(var)])
    except (KeyError, AttributeError, TypeError):
        return None
    return None


def _n_tracked(opt: Any) -> int | None:
    if hasattr(opt, "_trainable_variables_indices"):
        return len(opt._trainable_variables_indices)
    if hasattr(opt, "_index_dict"):
        return len(opt._index_dict)
    return None


def optimizer_slots(optimizer: Any, variable: Any) -> list[Any]:
    """Optimizer variables of ``variable``'s shape that belong to it (momentum, Adam moments, ...).

    Works with Keras 3 optimizers, tf-keras optimizers and tf-keras legacy
    optimizers; returns ``[]`` when the optimizer is not built yet.
    """
    opt = unwrap_optimizer(optimizer)
    if opt is None:
        return []
    shape = tuple(variable.shape)
    found: list[Any] = []
    if hasattr(opt, "get_slot_names") and hasattr(opt, "get_slot") and not hasattr(opt, "_index_dict") \
            and not hasattr(opt, "_trainable_variables_indices"):  # tf-keras legacy optimizer
        for name in opt.get_slot_names():
            try:
                s = opt.get_slot(variable, name)
            except (KeyError, ValueError, AttributeError):
                continue
            if s is not None and tuple(s.shape) == shape:
                found.append(s)
        return found
    idx, n = _index_of(opt, variable), _n_tracked(opt)
    if idx is None or not n:
        return []
    for attr, value in sorted(vars(opt).items()):
        if attr in ("_variables", "_trainable_variables", "_variables_list") or isinstance(value, (str, bytes)):
            continue
        if not isinstance(value, collections.abc.Sequence) or len(value) != n:
            continue
        s = value[idx]
        if s is None or s is variable or not hasattr(s, "assign") or not hasattr(s, "shape"):
            continue
        if tuple(s.shape) == shape and not any(s is f for f in found):
            found.append(s)
    return found


def steps_per_execution(model: Any) -> int:
    """Steps one ``train_function`` call runs (1 when unknown)."""
    for attr in ("steps_per_execution", "_steps_per_execution"):
        v = getattr(model, attr, None)
        if v is None:
            continue
        try:
            return max(1, int(v.numpy() if hasattr(v, "numpy") else v))
        except (TypeError, ValueError):
            continue
    return 1


def iter_tree(layer: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, layer)`` for every sublayer below ``layer``, depth first, each layer once."""
    seen: set[int] = set()

    def walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
        for child in child_layers(node):
            if id(child) in seen:
                continue
            seen.add(id(child))
            cpath = f"{path}/{child.name}" if path else str(child.name)
            yield cpath, child
            yield from walk(child, cpath)

    seen.add(id(layer))
    yield from walk(layer, prefix)
