"""Find the prunable weights of a Keras model and convert them to the canonical layout.

All sublayers are walked (Sequential, Functional, nested and subclassed
models); a layer shared by several call sites is found once. A weight's
*path* is the chain of layer names below the model plus the weight's short
name, e.g. ``"block1/conv/kernel"``; ``op_names``/``excluded_op_names`` match
these paths.

Prunable weights and their TF layout kind (see :mod:`sparsify.layout`):

==========================================  =============================  ==================
layer                                       weight                          kind
==========================================  =============================  ==================
Dense                                       kernel ``(in, out)``            dense
EinsumDense (MultiHeadAttention q/k/v/out)  kernel (input axes first)       einsum -> dense
Conv1D/2D/3D, ConvLSTM cells                kernel, recurrent_kernel        conv
Conv1D/2D/3DTranspose                       kernel ``(*k, out, in)``        conv_transpose
DepthwiseConv1D/2D                          depthwise_kernel                depthwise
SeparableConv1D/2D                          depthwise / pointwise_kernel    depthwise / conv
Embedding                                   embeddings                      embedding
ReversibleEmbedding (keras_hub, untied)     reverse_embeddings (in, out)    dense
SimpleRNN/GRU/LSTM cells                    kernel, recurrent_kernel        dense
==========================================  =============================  ==================

Example:
    >>> import keras
    >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc")])
    >>> [(w.path, w.kind, w.canonical_shape) for w in find_prunable_weights(m)]
    [('fc/kernel', 'dense', (3, 4))]
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sparsify.layout import canonical_to_tf, tf_to_canonical

from .compat import backend_variable, iter_tree, own_variables, short_name

__all__ = ["KerasPrunableWeight", "find_prunable_weights", "weight_kinds", "in_model_order", "PRUNING_ROOT_ATTR",
           "pruning_root"]

#: A model holding another (e.g. :class:`sparsify_keras.DistillationModel`: the student and its frozen teacher)
#: names the one to prune under this attribute: discovery walks that model only, with its own paths.
PRUNING_ROOT_ATTR = "_sparsify_pruning_root"

_TRANSPOSE = {"Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose", "BaseConvTranspose", "Conv2DTransposeV1"}
_SEPARABLE = {"SeparableConv1D", "SeparableConv2D", "SeparableConv", "BaseSeparableConv"}
_DEPTHWISE = {"DepthwiseConv1D", "DepthwiseConv2D", "DepthwiseConv", "BaseDepthwiseConv"}
_CONV_RNN_CELL = {"ConvLSTMCell", "ConvLSTM1DCell", "ConvLSTM2DCell", "ConvLSTM3DCell"}
_CONV = {"Conv", "BaseConv", "Conv1D", "Conv2D", "Conv3D"}
_RNN_CELL = {"SimpleRNNCell", "GRUCell", "LSTMCell"}


def weight_kinds(layer: Any) -> dict[str, str]:
    """``{short weight name: kind}`` of the prunable weights a layer owns ({} if none).

    Example:
        >>> import keras
        >>> weight_kinds(keras.layers.SeparableConv2D(4, 3))
        {'depthwise_kernel': 'depthwise', 'pointwise_kernel': 'conv'}
    """
    names = {c.__name__ for c in type(layer).__mro__}
    if names & _TRANSPOSE:
        return {"kernel": "conv_transpose"}
    if names & _SEPARABLE:
        return {"depthwise_kernel": "depthwise", "pointwise_kernel": "conv"}
    if names & _DEPTHWISE:
        return {"depthwise_kernel": "depthwise", "kernel": "depthwise"}
    if names & _CONV_RNN_CELL:
        return {"kernel": "conv", "recurrent_kernel": "conv"}
    if names & _CONV:
        return {"kernel": "conv"}
    if "EinsumDense" in names:
        return {"kernel": "einsum"}
    if "Dense" in names:
        return {"kernel": "dense"}
    if "Embedding" in names:        # keras_hub's ReversibleEmbedding with tie_weights=False: its LM head (hidden, vocab) too
        if getattr(layer, "tie_weights", True) is False:
            return {"embeddings": "embedding", "reverse_embeddings": "dense"}
        return {"embeddings": "embedding"}
    if names & _RNN_CELL:
        return {"kernel": "dense", "recurrent_kernel": "dense"}
    return {}


def _einsum_perm(layer: Any, ndim: int) -> tuple[tuple[int, ...], int]:
    """Permutation putting the kernel's input-contracted axes first, and how many there are."""
    eq = str(getattr(layer, "equation", "")).replace(" ", "")
    m = re.fullmatch(r"([a-z.]+),([a-z]+)->([a-z.]+)", eq)
    if not m or len(m.group(2)) != ndim:
        raise ValueError(f"layer {layer.name!r}: cannot read EinsumDense equation {eq!r}")
    inp, ker = m.group(1), m.group(2)
    in_axes = [i for i, c in enumerate(ker) if c in inp]
    out_axes = [i for i, c in enumerate(ker) if c not in inp]
    if not in_axes or not out_axes:
        raise ValueError(f"layer {layer.name!r}: EinsumDense equation {eq!r} has no input or output axis")
    return tuple(in_axes + out_axes), len(in_axes)


@dataclass
class KerasPrunableWeight:
    """One prunable weight: where it is, its TF layout and how to reach the canonical one.

    Attributes:
        path: ``"layer/.../weight"`` name matched by ``op_names``.
        variable: the Keras variable.
        kind: ``dense``, ``einsum``, ``conv``, ``conv_transpose``, ``depthwise`` or ``embedding``.
        layer: the layer owning the variable.
        tf_shape: the variable's shape.
    """

    path: str
    variable: Any
    kind: str
    layer: Any
    tf_shape: tuple[int, ...]
    _perm: tuple[int, ...] | None = field(default=None, repr=False)
    _n_in: int = field(default=0, repr=False)
    _canonical_shape: tuple[int, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kind == "einsum":
            self._perm, self._n_in = _einsum_perm(self.layer, len(self.tf_shape))

    # kernel (TF layout) <-> canonical layout -------------------------------------------
    def _pre(self, k: np.ndarray) -> tuple[np.ndarray, str]:
        if self.kind == "einsum":
            kt = k.transpose(self._perm)
            n_in = int(np.prod(kt.shape[:self._n_in]))
            return kt.reshape(n_in, -1), "dense"
        if self.kind == "depthwise" and k.ndim == 3:      # DepthwiseConv1D (k, in, mult)
            return k[None], "depthwise"
        return k, self.kind

    def to_canonical(self, kernel: np.ndarray) -> np.ndarray:
        """TF-layout array -> canonical (torch) layout."""
        k, kind = self._pre(np.asarray(kernel))
        return tf_to_canonical(k, kind)

    def from_canonical(self, arr: np.ndarray) -> np.ndarray:
        """Canonical-layout array -> TF layout of this weight."""
        probe, kind = self._pre(np.zeros(self.tf_shape, dtype=np.int8))
        k = canonical_to_tf(np.asarray(arr), kind, probe.shape)
        if self.kind == "einsum":
            permuted = tuple(self.tf_shape[i] for i in self._perm)
            return k.reshape(permuted).transpose(np.argsort(self._perm))
        if self.kind == "depthwise" and len(self.tf_shape) == 3:
            return k[0]
        return k

    def canonical_transpose(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(perm, shape)`` with ``to_canonical(k) == k.transpose(perm).reshape(shape)`` for every kernel ``k``
        of this weight: found by converting an index array of distinct extents, so it can never disagree with
        :meth:`to_canonical` (every layout kind is one transpose and a reshape)."""
        ndim = len(self.tf_shape)
        probe_shape = _PROBE_EXTENTS[:ndim]
        idx = np.arange(int(np.prod(probe_shape, dtype=np.int64))).reshape(probe_shape)
        probe = KerasPrunableWeight(self.path, self.variable, self.kind, self.layer, probe_shape)
        if self.kind == "einsum":
            probe._perm, probe._n_in = self._perm, self._n_in
        canon = probe.to_canonical(idx)
        for perm in itertools.permutations(range(ndim)):
            if np.array_equal(idx.transpose(perm).reshape(canon.shape), canon):
                return tuple(perm), self.canonical_shape
        raise ValueError(f"{self.path}: layout kind {self.kind!r} is not a transpose of the canonical layout")

    @property
    def canonical_shape(self) -> tuple[int, ...]:
        """Shape the core sees."""
        if self._canonical_shape is None:
            self._canonical_shape = tuple(self.to_canonical(np.zeros(self.tf_shape, dtype=np.int8)).shape)
        return self._canonical_shape


_PROBE_EXTENTS = (2, 3, 5, 7, 11, 13, 17)     # distinct extents: a transpose of them is never ambiguous


def pruning_root(model: Any) -> Any:
    """The model whose weights are pruned when ``model`` is fitted: ``model`` itself, or the model it names
    under :data:`PRUNING_ROOT_ATTR` (a distillation wrapper's student; its teacher is never pruned)."""
    return model.__dict__.get(PRUNING_ROOT_ATTR, model) if hasattr(model, "__dict__") else model


def find_prunable_weights(model: Any) -> list[KerasPrunableWeight]:
    """Every prunable weight below ``model`` in a deterministic order (layer walk order).

    A variable shared by several layers (tied weights) is listed once.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, name="c"),
        ...                       keras.layers.Flatten(), keras.layers.Dense(2, name="fc")])
        >>> [w.path for w in find_prunable_weights(m)]
        ['c/kernel', 'fc/kernel']
    """
    out: list[KerasPrunableWeight] = []
    seen: set[int] = set()
    for path, layer in iter_tree(pruning_root(model)):
        kinds = weight_kinds(layer)
        if not kinds:
            continue
        for var in own_variables(layer):
            name = short_name(var)
            kind = kinds.get(name)
            if kind is None or id(var) in seen or len(tuple(var.shape)) < 2:
                continue
            seen.add(id(var))
            out.append(KerasPrunableWeight(f"{path}/{name}", var, kind, layer, tuple(int(d) for d in var.shape)))
    return out


def in_model_order(model: Any, weights: list[KerasPrunableWeight]) -> list[KerasPrunableWeight]:
    """``weights`` in the model's definition order: a layer's own variables, then its sublayers' in the
    order they were assigned (a dict attribute's in insertion order; a Functional model's in the order its
    outputs call them, :func:`sparsify_keras.compat.child_layers`), depth first. That is
    ``model.weights`` in Keras 3 and torch's ``named_parameters()`` for a model defined alike (tf-keras's
    ``model.weights`` differs: dict keys sorted, frozen layers last), so global scope breaks cross-layer
    ties the same way in every adapter (``docs/design.md``).

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="a"), keras.layers.Dense(2, name="b")])
        >>> [w.path for w in in_model_order(m, find_prunable_weights(m)[::-1])]
        ['a/kernel', 'b/kernel']
    """
    position: dict[int, int] = {}
    model = pruning_root(model)
    for layer in [model, *(layer for _, layer in iter_tree(model))]:
        for v in own_variables(layer):
            position.setdefault(id(v), len(position))
            inner = backend_variable(v)                 # a Keras 3 variable's backend variable
            if inner is not None:
                position.setdefault(id(inner), len(position))
    big = len(position)
    return sorted(weights, key=lambda pw: position.get(id(pw.variable), big))
