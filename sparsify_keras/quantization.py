"""Int8 for pruned Keras 3 models that keeps every pruned zero (every backend).

After :func:`~sparsify_keras.strip_pruning`, Keras' own ``model.quantize("int8")``
quantizes ``Dense``, ``EinsumDense`` and ``Embedding`` symmetrically (abs-max
per output channel, no zero point), so a pruned zero stays zero.
:func:`quantize_int8` runs it and checks that, per layer, with
:func:`sparsify.quantization.zeros_check` (zeros before, after, new zeros made by
rounding, zeros turned non-zero: must be 0). :func:`int8_document` stores the
int8 model's ``Dense`` / ``Embedding`` weights as :mod:`sparsify.int8_format`'s
bitmask + int8 values + scales (NumPy ``.npz`` with
:func:`sparsify.int8_format.save_int8_npz`), the exact int8 values Keras computes with.

Quantization-aware fine-tuning with the masks (:func:`add_fake_quant`): each ``Dense``,
``EinsumDense``, ``Embedding`` and tied ``ReversibleEmbedding`` layer reads its weight through Keras' own int8 rounding
(``abs_max_quantize`` on the axes ``quantize("int8")`` uses) with a straight-through gradient, while
the :class:`~sparsify_keras.PruningCallback` keeps applying the masks to the variable; after
:func:`~sparsify_keras.strip_pruning` and :func:`remove_fake_quant`, ``model.quantize("int8")`` stores
exactly the rounded weights the model trained with (Keras' int8 ``Dense`` / ``EinsumDense`` also
quantize their inputs per batch, which QAT does not model). On a
:class:`~sparsify_keras.DistillationModel` only the student is fake-quantized.

Example:
    >>> import keras, numpy as np
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="fc")], name="sequential")
    >>> _ = model.get_layer("fc").kernel.assign(np.array([[0, 1], [0, 0], [2, 0], [0, -1]], "float32"))
    >>> report = quantize_int8(model)
    >>> [(r.zeros_before, r.zeros_after, r.lost_zeros) for r in report.values()]
    [(5, 5, 0)]
    >>> int8_weights(model)["sequential/fc/kernel"][0].tolist()
    [[0, 127], [0, 0], [127, 0], [0, -127]]
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from sparsify import int8_format
from sparsify.quantization import LayerZeros, require_zeros_kept, zeros_check

__all__ = ["float_weights", "int8_weights", "int8_zeros_check", "quantize_int8", "int8_document", "add_fake_quant",
           "remove_fake_quant"]


def _model(model: Any) -> Any:
    import keras

    if not isinstance(model, keras.Model):
        raise TypeError(f"model must be a Keras 3 keras.Model, got {type(model).__name__}")
    return model


def _np(v: Any) -> np.ndarray:
    from keras import ops

    return np.asarray(ops.convert_to_numpy(v))


def float_weights(model: Any) -> dict[str, np.ndarray]:
    """Every floating-point variable of ``model`` by path (what to pass as ``before`` to :func:`int8_zeros_check`)."""
    return {v.path: _np(v) for v in _model(model).variables if "float" in str(v.dtype)}


def int8_weights(model: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{path: (q, scale)}`` of every int8 variable of a quantized model, with Keras' scale
    (``weight ~ q / scale``; ``kernel`` -> ``kernel_scale``, ``embeddings`` -> ``embeddings_scale``).

    Raises:
        ValueError: an int8 variable has no scale variable beside it.
    """
    variables = {v.path: v for v in _model(model).variables}
    out = {}
    for path, v in variables.items():
        if str(v.dtype) != "int8":
            continue
        scale = variables.get(f"{path}_scale")
        if scale is None:
            raise ValueError(f"int8 variable {path!r} has no scale variable {path + '_scale'!r}")
        out[path] = (_np(v), _np(scale))
    return out


def int8_zeros_check(before: Mapping[str, np.ndarray], model: Any) -> dict[str, LayerZeros]:
    """Per int8 variable of the quantized ``model``, its zeros against the float weights ``before``.

    Args:
        before: :func:`float_weights` of the model before ``model.quantize("int8")``.
        model: the model after.

    Raises:
        ValueError: an int8 variable with no float weight of that path in ``before``.
    """
    after = {path: q for path, (q, _) in int8_weights(model).items()}
    missing = sorted(set(after) - set(before))
    if missing:
        raise ValueError(f"int8 variables without a float weight before quantization: {missing}")
    return zeros_check({p: before[p] for p in after}, after)


def quantize_int8(model: Any) -> dict[str, LayerZeros]:
    """``model.quantize("int8")``, then the zeros check per layer (see :func:`int8_zeros_check`).

    Call it on a plain model (after :func:`~sparsify_keras.strip_pruning`).

    Raises:
        TypeError: ``model`` is not a Keras model.
        ValueError: the model holds no layer Keras quantizes, or a zero became non-zero.
    """
    before = float_weights(model)
    model.quantize("int8")
    report = int8_zeros_check(before, model)
    if not report:
        raise ValueError("model.quantize('int8') quantized no layer (Keras quantizes Dense, EinsumDense and "
                         "Embedding)")
    require_zeros_kept(report)
    return report


def int8_document(model: Any) -> dict[str, Any]:
    """The :mod:`sparsify.int8_format` document of a quantized model: int8 ``Dense`` kernels
    (``(in, out)``, channels on axis 1) and ``Embedding`` tables (channels on axis 0) as bitmask +
    int8 values + scales ``1 / keras_scale`` (float32); every other variable exactly.

    Raises:
        ValueError: no int8 variable, or one whose scale is not one value per channel (``EinsumDense``).
    """
    ints = int8_weights(model)
    if not ints:
        raise ValueError("the model holds no int8 variable: call quantize_int8(model) first")
    entries = {}
    for path, (q, scale) in ints.items():
        axis = 1 if q.ndim == 2 and scale.shape == (q.shape[1],) and path.endswith("kernel") else \
            0 if scale.shape == (q.shape[0],) and path.endswith("embeddings") else None
        if axis is None:
            raise ValueError(f"int8 variable {path!r} of shape {q.shape} has a scale of shape {scale.shape}, not one "
                             "value per output channel (only Dense kernels and Embedding tables are stored)")
        entries[path] = int8_format.encode_int8_values(q, (1.0 / scale.astype(np.float64)).astype(np.float32), axis)
    scales = {f"{p}_scale" for p in ints}
    rest = {v.path: _np(v) for v in model.variables if v.path not in ints and v.path not in scales}
    doc = int8_format.compress_int8(rest, quantize=[])
    doc["tensors"] = {**entries, **doc["tensors"]}
    return doc


_QAT_CLASSES: dict[type, type] = {}


def _keras_int8_class(layer: Any) -> type | None:
    """The class whose ``quantize`` Keras' ``model.quantize("int8")`` runs on ``layer``: ``type(layer)`` when
    it defines one itself (Keras quantizes no subclass of it), else None (the layer stays float)."""
    import keras

    definer = next(c for c in type(layer).__mro__ if "quantize" in vars(c))
    return definer if definer is type(layer) and definer is not keras.layers.Layer else None


def _qat_spec(layer: Any) -> tuple[str, Any] | None:
    """``(property, rounding axis)`` of a layer :func:`add_fake_quant` handles, as Keras' int8 rounds it."""
    import keras

    cls = type(layer)
    if cls is keras.layers.Dense:
        return "kernel", 0
    if cls is keras.layers.EinsumDense:
        if not layer.built:
            return "kernel", None                # not fake-quantized (add_fake_quant takes built layers)
        layer._set_quantization_info()          # Keras' own analysis of the equation (what quantize uses)
        return "kernel", tuple(layer._kernel_reduced_axes)
    if cls is keras.layers.Embedding or (cls is getattr(keras.layers, "ReversibleEmbedding", None)
                                         and layer.tie_weights):
        return "embeddings", -1          # a tied ReversibleEmbedding's logits use the same int8 table
    return None


def _qat_class(cls: type, prop: str) -> type:
    """``cls`` with its ``prop`` (kernel / embeddings) read through Keras' int8 rounding, straight through.

    Its ``from_config`` builds a plain ``cls``: a copy (``keras.models.clone_model``, the
    ``dense_at_start`` teacher of a :class:`~sparsify_keras.DistillationModel`) is float."""
    if cls not in _QAT_CLASSES:
        from keras import ops, quantizers

        base = getattr(cls, prop)

        def rounded(self: Any) -> Any:
            w = base.fget(self)
            if self.quantization_mode is not None:
                return w
            q, scale = quantizers.abs_max_quantize(w, axis=self.__dict__["_sparsify_fake_quant_axis"])
            back = ops.divide(ops.cast(q, w.dtype), scale)
            return ops.add(w, ops.stop_gradient(ops.subtract(back, w)))

        def from_config(_klass: type, config: Any) -> Any:
            return cls.from_config(config)

        _QAT_CLASSES[cls] = type(f"FakeQuant{cls.__name__}", (cls,), {
            prop: property(rounded), "from_config": classmethod(from_config), "_sparsify_fake_quant_base": cls})
    return _QAT_CLASSES[cls]


def _reset_functions(model: Any) -> None:
    for attr in ("train_function", "test_function", "predict_function"):
        if hasattr(model, attr):
            setattr(model, attr, None)          # traced again with the weights as they are read now


def _leaf_layers(model: Any) -> list[Any]:
    """The layers of the model whose weights are trained and quantized: a distillation wrapper's student's
    (its teacher is never fake-quantized), without nested models."""
    from .layers import pruning_root

    return [layer for layer in pruning_root(_model(model))._flatten_layers(include_self=False)
            if len(list(layer._flatten_layers())) == 1]


def add_fake_quant(model: Any, layers: list[str] | None = None) -> list[str]:
    """Make each ``Dense``, ``EinsumDense``, ``Embedding`` and tied ``ReversibleEmbedding`` layer read its
    weight int8-rounded exactly as ``model.quantize("int8")`` will round it (per output channel; per row
    of an embedding table), with a straight-through gradient.

    Use it on a model being pruned (the masks stay applied: the callback masks the
    variable, the rounding reads it, and 0 rounds to 0) before ``fit``; then
    :func:`~sparsify_keras.strip_pruning`, :func:`remove_fake_quant` and
    :func:`quantize_int8`. On a :class:`~sparsify_keras.DistillationModel` only the
    student's layers are changed (the teacher keeps its float weights). Returns the layers' names.

    Args:
        model: a Keras 3 model (or a ``DistillationModel``), built.
        layers: names of the layers to fake-quantize; ``None``: every built, unquantized layer of
            those types. Layers of other types that ``model.quantize("int8")`` quantizes (an untied
            ``ReversibleEmbedding``, whose separate output table QAT cannot read) are refused: name the
            others in ``layers`` and those get post-training int8 only.

    Raises:
        TypeError: ``model`` is not a Keras model.
        ValueError: no such layer, a layer named twice, unknown or not one of those types, a layer
            Keras int8-quantizes that QAT cannot model (with ``layers=None``), or one already rounded.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(10, 4, name="emb"),
        ...                       keras.layers.Dense(2, name="fc")])
        >>> add_fake_quant(m), [type(layer).__name__ for layer in m.layers]
        (['emb', 'fc'], ['FakeQuantEmbedding', 'FakeQuantDense'])
        >>> remove_fake_quant(m), [type(layer).__name__ for layer in m.layers]
        (['emb', 'fc'], ['Embedding', 'Dense'])
    """
    leaves = _leaf_layers(model)
    if layers is not None:
        if isinstance(layers, str) or not all(isinstance(n, str) for n in layers):
            raise ValueError(f"layers must be a list of layer names, got {layers!r}")
        by_name = {layer.name: layer for layer in leaves}
        unknown = [n for n in layers if n not in by_name]
        if unknown or len(set(layers)) != len(layers):
            raise ValueError(f"layers: {unknown or layers} (unknown or named twice); the model's layers are "
                             f"{sorted(by_name)}")
        chosen = [by_name[n] for n in layers]
        unready = [layer.name for layer in chosen if not layer.built or layer.quantization_mode is not None]
        if unready:
            raise ValueError(f"add_fake_quant: layers {unready} are not built or are quantized already")
        wrong = [f"{layer.name} ({type(layer).__name__})" for layer in chosen if _qat_spec(layer) is None]
        if wrong:
            raise ValueError(f"add_fake_quant: layers {wrong} cannot be fake-quantized: only Dense, EinsumDense, "
                             "Embedding and tied ReversibleEmbedding layers (the exact Keras classes) are")
    else:
        chosen = [layer for layer in leaves if _qat_spec(layer) is not None]
        other = [f"{layer.name} ({type(layer).__name__})" for layer in leaves
                 if _qat_spec(layer) is None and _keras_int8_class(layer) is not None]
        if other:
            raise ValueError(f"add_fake_quant: model.quantize('int8') also quantizes layers {other}, which QAT "
                             "cannot model (only Dense, EinsumDense, Embedding and tied ReversibleEmbedding); pass "
                             "layers=[...] naming the layers to fake-quantize (the others then get post-training "
                             "int8 only)")
    chosen = [layer for layer in chosen if layer.built and layer.quantization_mode is None]
    if not chosen:
        raise ValueError("add_fake_quant: the model has no built, unquantized Dense, EinsumDense or Embedding "
                         "layer")
    done = [layer.name for layer in chosen if hasattr(type(layer), "_sparsify_fake_quant_base")]
    if done:
        raise ValueError(f"add_fake_quant: layers {done} already read their weights int8-rounded")
    for layer in chosen:
        prop, axis = _qat_spec(layer)
        object.__setattr__(layer, "_sparsify_fake_quant_axis", axis)      # not tracked by Keras
        layer.__class__ = _qat_class(type(layer), prop)
    _reset_functions(model)
    return [layer.name for layer in chosen]


def remove_fake_quant(model: Any) -> list[str]:
    """Undo :func:`add_fake_quant` (the layers are of their Keras class again: they save and quantize as
    such). Returns the layers' names (empty if none had it).

    Example:
        >>> import keras
        >>> remove_fake_quant(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]))
        []
    """
    names = []
    for layer in _leaf_layers(model):
        base = getattr(type(layer), "_sparsify_fake_quant_base", None)
        if base is not None:
            layer.__class__ = base
            object.__delattr__(layer, "_sparsify_fake_quant_axis")
            names.append(layer.name)
    _reset_functions(model)
    return names
