"""The canonical weight layout (``sparsify.layout``) as TensorFlow graph ops.

Every TF layout kind is a transpose followed by a reshape of the canonical
layout (Dense ``(in, out)`` -> ``(out, in)``, Conv ``(*kernel, in, out)`` ->
``(out, in, *kernel)``, DepthwiseConv2D ``(kh, kw, in, mult)`` ->
``(in*mult, 1, kh, kw)``, ...). :func:`canonical_permutation` finds that
transpose by probing :func:`sparsify.layout.tf_to_canonical` itself on an
index array, so the graph ops can never disagree with the core's NumPy
conversion; :func:`to_canonical` and :func:`from_canonical` build the ops.
Graph-mode pruning converts weights and masks with them around its one
``tf.numpy_function`` call (TF's transposes are multithreaded and avoid the
NumPy copies on the Python side).

Example:
    >>> import numpy as np, tensorflow as tf
    >>> from sparsify.layout import tf_to_canonical
    >>> k = np.arange(24.0).reshape(2, 3, 1, 4)                  # Conv2D (kh, kw, in, out)
    >>> canonical_permutation("conv", k.shape)
    (3, 2, 0, 1)
    >>> bool(np.array_equal(to_canonical(tf.constant(k), "conv").numpy(), tf_to_canonical(k, "conv")))
    True
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import tensorflow as tf

from sparsify.layout import tf_to_canonical

__all__ = ["canonical_permutation", "to_canonical", "from_canonical"]

_PRIMES = (2, 3, 5, 7, 11, 13, 17)


@functools.lru_cache(maxsize=None)
def _permutation(kind: str, ndim: int) -> tuple[int, ...]:
    if ndim > len(_PRIMES):
        raise ValueError(f"weights of rank {ndim} have no canonical layout (at most {len(_PRIMES)})")
    shape = _PRIMES[:ndim]
    idx = np.arange(int(np.prod(shape))).reshape(shape)
    canon = tf_to_canonical(idx, kind)
    for perm in itertools.permutations(range(ndim)):
        if np.array_equal(idx.transpose(perm).reshape(canon.shape), canon):
            return perm
    raise ValueError(f"layout kind {kind!r} of rank {ndim} is not a transpose of the canonical layout")


def canonical_permutation(kind: str, tf_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The axes permutation ``perm`` with ``tf_to_canonical(k, kind) == k.transpose(perm).reshape(...)``.

    Raises:
        ValueError: an unknown kind, or a rank the kind does not have.
    """
    return _permutation(kind, len(tuple(tf_shape)))


def _canonical_shape(kind: str, tf_shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(tf_to_canonical(np.zeros(tf_shape, np.int8), kind).shape)


def to_canonical(x: tf.Tensor, kind: str) -> tf.Tensor:
    """A TF-layout tensor (static shape) in the canonical layout, as graph ops."""
    shape = tuple(x.shape.as_list())
    perm = canonical_permutation(kind, shape)
    out = x if perm == tuple(range(len(shape))) else tf.transpose(x, perm)
    canon = _canonical_shape(kind, shape)
    return out if tuple(out.shape.as_list()) == canon else tf.reshape(out, canon)


def from_canonical(c: tf.Tensor, kind: str, tf_shape: tuple[int, ...]) -> tf.Tensor:
    """Inverse of :func:`to_canonical` for a weight of TF shape ``tf_shape``."""
    tf_shape = tuple(int(d) for d in tf_shape)
    perm = canonical_permutation(kind, tf_shape)
    permuted = tuple(tf_shape[i] for i in perm)
    out = c if tuple(c.shape.as_list()) == permuted else tf.reshape(c, permuted)
    if perm == tuple(range(len(perm))):
        return out
    return tf.transpose(out, tuple(int(i) for i in np.argsort(perm)))
