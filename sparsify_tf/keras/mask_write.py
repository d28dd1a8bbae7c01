"""Writing a mask update into Keras state, the weights staying dense under the mask.

A pruned Keras kernel holds zeros where pruned (the layer's forward reads the
kernel itself, and pruned gradients are masked), and the pruning state keeps
the pruned entries' values in a *stored* variable (zeros where kept). The
dense weight the core ranks is ``kernel + stored`` (:func:`dense_value`), so
with ``monotone=False`` a pruned weight competes again by the value it kept.

:func:`write_update` writes what the core returned, with graph ops (the host
path and the in-graph update share it): with ``dense = kernel + stored``,

* ``kernel = dense`` where ``zero`` holds, else 0 (``zero`` is the new mask for
  an update, the last pruning mask at a release, and False where regrowth
  grew: grown weights start at zero);
* ``stored = dense`` where the new mask prunes, else 0 (all zero after a release:
  the exported model keeps the zeros);
* optimizer slots keep their values only where the weight was kept and stays
  kept (``zero`` and the old mask): newly pruned, returning and grown entries
  start from zeroed state;
* the mask variable gets the new mask.

With ``monotone=True`` the kernel and slots are what multiplying by the new mask gave.

Example:
    >>> import tensorflow as tf
    >>> w, s, m = tf.Variable([0.0, 2.0, 3.0]), tf.Variable([1.0, 0.0, 0.0]), tf.Variable([0.0, 1.0, 1.0])
    >>> _ = write_update(w, s, m, [], tf.constant([True, False, True]), tf.constant([True, False, True]))
    >>> w.numpy().tolist(), s.numpy().tolist(), m.numpy().tolist()
    ([1.0, 0.0, 3.0], [0.0, 2.0, 0.0], [1.0, 0.0, 1.0])
"""
from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf

__all__ = ["dense_value", "write_update"]


def dense_value(weight: tf.Variable, stored: tf.Variable) -> tf.Tensor:
    """The dense weight: the kernel where kept, the stored values where pruned.

    Example:
        >>> dense_value(tf.Variable([0.0, 2.0]), tf.Variable([1.0, 0.0])).numpy().tolist()
        [1.0, 2.0]
    """
    return weight.read_value() + stored.read_value()


def write_update(weight: tf.Variable, stored: tf.Variable, mask: tf.Variable, slots: Sequence[tf.Variable],
                 keep: tf.Tensor, zero: tf.Tensor) -> list[Any]:
    """Assign ops writing the new mask ``keep`` and the zeros ``zero`` (bool, TF layout); see the module."""
    keep, zero = tf.cast(keep, tf.bool), tf.cast(zero, tf.bool)
    dense = dense_value(weight, stored)
    kept_before = tf.not_equal(mask.read_value(), 0)
    nothing = tf.zeros([], dense.dtype)
    ops = [weight.assign(tf.where(zero, dense, nothing), read_value=False),
           stored.assign(tf.where(keep, nothing, dense), read_value=False)]
    steady = tf.logical_and(zero, kept_before)
    for slot in slots:
        ops.append(slot.assign(tf.where(steady, slot.read_value(), tf.zeros([], slot.dtype)), read_value=False))
    with tf.control_dependencies(ops):        # the reads above see the old mask
        ops.append(mask.assign(tf.cast(keep, mask.dtype), read_value=False))
    return ops
