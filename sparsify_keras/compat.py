"""Every Keras private attribute sparsify touches, for Keras 3 (any backend) and tf-keras, in one place.

The rest of :mod:`sparsify_keras` (and the tf-keras driver in :mod:`sparsify_tf.keras`) reads
layers, variables and optimizer state only through these functions, so a change in
Keras's internals is fixed here once. Nothing here imports TensorFlow, JAX or torch.

Example:
    >>> import keras
    >>> m = keras.Sequential([keras.layers.InputLayer((3,), name="x"), keras.layers.Dense(2, name="fc")])
    >>> keras_flavor(m), [path for path, _ in iter_tree(m)]
    ('keras3', ['x', 'fc'])
"""
from __future__ import annotations

import collections.abc
import sys
from typing import Any, Iterator

import keras

from sparsify.patching import patch, patch_of, unpatch

__all__ = ["FLAVORS", "keras_flavor", "keras_module", "child_layers", "own_variables", "short_name",
           "iter_tree", "unwrap_optimizer", "optimizer_class", "optimizer_slots", "optimizer_built",
           "steps_per_execution", "add_model_variables", "remove_model_variables", "same_variable",
           "backend_variable", "optimizer_trainable_variables"]

FLAVORS = ("tf_keras", "keras3")


def keras_flavor(model: Any) -> str:
    """``"tf_keras"`` for a ``tf_keras.Model``, ``"keras3"`` for a ``keras.Model`` (any backend).

    Raises:
        TypeError: ``model`` is not a Keras model.
    """
    tfk = sys.modules.get("tf_keras")
    if tfk is not None and isinstance(model, tfk.Model):
        return "tf_keras"
    k3 = sys.modules.get("keras")
    if k3 is not None and hasattr(k3, "Model") and isinstance(model, k3.Model):
        if k3 is not keras:
            raise TypeError(f"the Keras backend was switched to {k3.backend.backend()!r} (keras.config.set_backend) "
                            f"after sparsify_keras was imported under {keras.backend.backend()!r}; sparsify_keras "
                            "works with the Keras it was imported with: switch before importing it, or run each "
                            "backend in its own process")
        return "keras3"
    if k3 is not None and any(c.__module__.startswith("keras.") and c.__name__ == "Model" for c in type(model).__mro__):
        raise TypeError(f"model {getattr(model, 'name', '?')!r} was made before the Keras backend was switched to "
                        f"{k3.backend.backend()!r} (keras.config.set_backend): its layers and variables belong to "
                        "the backend it was made with; build the model again after switching")
    raise TypeError(f"model must be a tf_keras.Model or a keras.Model (Keras 3, any backend), "
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


def backend_variable(variable: Any) -> Any:
    """The backend variable inside a Keras 3 variable (``_value``): Keras 3 only; None for tf-keras variables."""
    return getattr(variable, "_value", None)


def same_variable(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are one variable (a Keras 3 variable or the backend variable inside it)."""
    return a is b or backend_variable(a) is b or backend_variable(b) is a


def _functional_order(model: Any) -> list[Any] | None:
    """A Functional model's layers in the order a recursive evaluation of its outputs first finishes them
    (each layer's inputs in the order they were passed), or None for other models (docs/design.md)."""
    outputs = getattr(model, "outputs", None)
    if not outputs or not (hasattr(model, "_nodes_by_depth") or hasattr(model, "_operations")):
        return None
    order: list[Any] = []
    seen: set[int] = set()
    entered: set[int] = set()          # layers whose inputs are being visited (an input layer is its own input)
    stack: list[tuple[Any, bool]] = [(t, False) for t in reversed(list(_flat(outputs)))]
    while stack:
        tensor, done = stack.pop()
        history = getattr(tensor, "_keras_history", None)
        if history is None:
            continue
        layer = history[0]
        if done:
            if id(layer) not in seen:
                seen.add(id(layer))
                order.append(layer)
            continue
        if id(layer) in seen or id(layer) in entered:
            continue
        entered.add(id(layer))
        stack.append((tensor, True))
        node = _inbound_node(layer, history)
        for parent in reversed(list(_flat(_node_inputs(node)))):
            stack.append((parent, False))
    return order


def _flat(x: Any) -> Iterator[Any]:
    if isinstance(x, collections.abc.Mapping):
        for v in x.values():
            yield from _flat(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _flat(v)
    elif x is not None:
        yield x


def _inbound_node(layer: Any, history: Any) -> Any:
    nodes = getattr(layer, "_inbound_nodes", None) or []
    index = history[1] if len(history) > 1 else 0
    return nodes[index] if 0 <= index < len(nodes) else None


def _node_inputs(node: Any) -> Any:
    if node is None:
        return []
    if hasattr(node, "input_tensors"):                # Keras 3 and tf-keras
        return node.input_tensors
    return getattr(node, "keras_inputs", [])


def child_layers(layer: Any) -> list[Any]:
    """Direct sublayers of ``layer`` in definition order: a Functional model's in call order
    (:func:`_functional_order`), others' in the order they were assigned, a dict attribute's layers in
    the dict's insertion order (as torch's ``nn.ModuleDict``; tf-keras's own walk sorts a dict's keys)."""
    try:
        kids = list(layer._flatten_layers(include_self=False, recursive=False))
    except (AttributeError, TypeError):  # pragma: no cover - defensive for exotic layers
        return list(getattr(layer, "layers", []) or [])
    ordered = _functional_order(layer) if len(kids) > 1 else None
    if ordered is not None:
        rank = {id(k): i for i, k in enumerate(ordered)}
        kids.sort(key=lambda k: rank.get(id(k), len(rank)))
    elif len(kids) > 1 and hasattr(layer, "_self_tracked_trackables"):      # tf-keras (Keras 3 keeps the order)
        tracked = _tf_tracked_type()
        for value in vars(layer).values():        # a user's dict attribute is tracked as a wrapped dict
            if tracked is not None and isinstance(value, tracked) and isinstance(value, collections.abc.Mapping):
                _insertion_order(kids, _layers_in(value))
    return kids


def _tf_tracked_type() -> Any:
    tf = sys.modules.get("tensorflow")
    return getattr(getattr(getattr(tf, "__internal__", None), "tracking", None), "TrackableDataStructure", None)


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


def unwrap_optimizer(optimizer: Any) -> Any:
    """The optimizer that owns the slots (looks through LossScaleOptimizer)."""
    seen = 0
    while getattr(optimizer, "inner_optimizer", None) is not None and seen < 4:
        optimizer = optimizer.inner_optimizer
        seen += 1
    return optimizer


def optimizer_class(optimizer: Any) -> type | None:
    """The optimizer's Keras class: Keras 3 on torch swaps ``Adam`` for its subclass ``TorchAdam``, which is
    looked through (None: no optimizer)."""
    opt = unwrap_optimizer(optimizer)
    if opt is None:
        return None
    for cls in type(opt).__mro__:
        module = cls.__module__ or ""
        if module.startswith(("keras.src.backend.", "keras.backend.")) and cls.__name__.startswith("Torch"):
            continue
        return cls
    return type(opt)  # pragma: no cover


def optimizer_trainable_variables(optimizer: Any) -> Any:
    """The variables a Keras 3 optimizer was built for (what its ``apply`` updates when given none): Keras 3 only."""
    return optimizer._trainable_variables


def optimizer_built(optimizer: Any) -> bool:
    opt = unwrap_optimizer(optimizer)
    return bool(getattr(opt, "built", False) or getattr(opt, "_built", False))


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


def add_model_variables(model: Any, variables: list[Any]) -> None:
    """List ``variables`` among the Keras 3 model's own non-trainable variables, so every backend's trainer
    carries them in its training state (JAX passes them to the compiled step). They are left out of the
    model's own saved variables (``save_own_variables`` / ``load_own_variables`` are wrapped on the
    instance): their owner saves them, so a model saved mid-run loads as a plain model."""
    own = model._non_trainable_variables
    for v in variables:
        if not any(v is o for o in own):
            own.append(v)
    extra = model.__dict__.setdefault("_sparsify_extra_variables", [])
    extra.extend(v for v in variables if not any(v is e for e in extra))
    for name in ("save_own_variables", "load_own_variables"):
        if patch_of(model, name) is None:
            patch(model, name, lambda method: _without_extra(model, method))


def _without_extra(model: Any, method: Any) -> Any:
    def call(store: Any) -> Any:
        own = model._non_trainable_variables
        extra = {id(v) for v in model.__dict__.get("_sparsify_extra_variables", [])}
        model._non_trainable_variables = [v for v in own if id(v) not in extra]
        try:
            return method(store)
        finally:
            model._non_trainable_variables = own
    return call


def remove_model_variables(model: Any, variables: list[Any]) -> None:
    """Undo :func:`add_model_variables`."""
    drop = {id(v) for v in variables}
    model._non_trainable_variables[:] = [v for v in model._non_trainable_variables if id(v) not in drop]
    extra = [v for v in model.__dict__.get("_sparsify_extra_variables", []) if id(v) not in drop]
    if extra:
        model.__dict__["_sparsify_extra_variables"] = extra
        return
    model.__dict__.pop("_sparsify_extra_variables", None)
    for name in ("save_own_variables", "load_own_variables"):
        unpatch(model, name)
