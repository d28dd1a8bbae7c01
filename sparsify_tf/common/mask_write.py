"""The one TensorFlow writer of a mask update: masks, weights, stored values, optimizer slots.

Every TF path writes what the core decided through :func:`write_update`: graph
mode (:func:`sparsify_tf.prune_graph`), both Keras paths (the host update of
:mod:`sparsify_tf.keras.mask_apply` and the in-graph update of
:mod:`sparsify_tf.keras.graph_update`) and the SparseML seed API
(:mod:`sparsify_tf.seed.mask_pruning`). It builds assign ops, so it works in a
``tf.compat.v1`` graph, inside a ``tf.function`` and eagerly, on resource,
legacy ref and distributed variables.

Two ways to hold pruned weights:

* **With a stored-values variable** (graph mode, Keras): the weight holds zeros
  where pruned and ``stored`` holds the pruned entries' values (zeros where
  kept), so the dense weight the core ranks is ``weight + stored``
  (:func:`dense_value`) and with ``monotone=False`` a pruned weight competes
  again by the value it kept. With ``dense`` that dense value:

  * ``weight = dense`` where ``zero`` holds, else 0 (``zero`` is the new mask
    for an update, the last mask at a release, and False where regrowth grew:
    grown weights start at zero);
  * ``stored = dense`` where the new mask ``keep`` prunes, else 0 (all zero
    after a release: an exported model keeps the zeros).

* **Without one** (``stored=None``, the seed API): ``weight = dense * zero``, the
  seed's ``weight * mask`` (pruned values are lost; ``-0.0``, ``inf * 0 = nan``
  exactly as the multiplication gives them).

Either way optimizer slots keep their values only where the weight was kept
and stays kept (``zero`` and the old mask): newly pruned, returning and grown
entries start from zeroed state. The mask variable gets ``keep`` last, after
everything that reads the old mask. The ops are named as the seed API names
them (:attr:`~sparsify_tf.common.pruning_scope.PruningScope.OP_MASK_ASSIGN`,
:attr:`~sparsify_tf.common.pruning_scope.PruningScope.OP_WEIGHT_UPDATE`,
:data:`SLOT_ZERO_OP`) inside the caller's name scope.

Example:
    >>> import tensorflow as tf
    >>> w, s, m = tf.Variable([0.0, 2.0, 3.0]), tf.Variable([1.0, 0.0, 0.0]), tf.Variable([0.0, 1.0, 1.0])
    >>> _ = write_update(w, m, tf.constant([True, False, True]), stored=s)
    >>> w.numpy().tolist(), s.numpy().tolist(), m.numpy().tolist()
    ([1.0, 0.0, 3.0], [0.0, 2.0, 0.0], [1.0, 0.0, 1.0])
    >>> v, n = tf.Variable([-1.0, 2.0]), tf.Variable([1.0, 1.0])
    >>> _ = write_update(v, n, tf.constant([0.0, 1.0]))          # no stored values: weight * mask
    >>> v.numpy().tolist(), n.numpy().tolist()
    ([-0.0, 2.0], [0.0, 1.0])
"""
from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf

from .pruning_scope import PruningScope

__all__ = ["dense_value", "write_update", "SLOT_ZERO_OP"]

#: Name of the ops zeroing optimizer-slot entries (graph mode's name, kept for every path).
SLOT_ZERO_OP = "nm_slot_zero"


def dense_value(weight: tf.Variable, stored: tf.Variable | None = None) -> tf.Tensor:
    """The dense weight: the weight where kept, the stored values where pruned (the weight without ``stored``).

    Example:
        >>> import tensorflow as tf
        >>> dense_value(tf.Variable([0.0, 2.0]), tf.Variable([1.0, 0.0])).numpy().tolist()
        [1.0, 2.0]
    """
    if stored is None:
        return weight.read_value()
    return weight.read_value() + stored.read_value()


def _as_bool(x: tf.Tensor) -> tf.Tensor:
    # a comparison, not a cast: oneDNN logs an error line for a cast to bool on CPUs without AVX-512
    return x if x.dtype == tf.bool else tf.not_equal(x, tf.zeros([], x.dtype))


def write_update(weight: Any, mask: Any, keep: Any, zero: Any = None, *, stored: Any = None,
                 slots: Sequence[Any] = (), dense: tf.Tensor | None = None) -> list[Any]:
    """Assign ops writing a mask update (see the module for the semantics).

    Args:
        weight: the weight variable (TF layout).
        mask: its mask variable (0/1 in its own dtype).
        keep: the new mask, bool or 0/1 (the mask's dtype is not converted when it already matches).
        zero: where the weight keeps its value (bool or 0/1; default ``keep``).
        stored: the variable holding the pruned entries' values, or None: the weight becomes
            ``dense * zero`` (the seed API's ``weight * mask``).
        slots: optimizer slot variables of the weight (zeroed except where kept throughout).
        dense: the dense weight already read (default :func:`dense_value` of ``weight`` and ``stored``).

    Returns:
        The assign ops (run them all; in a ``tf.compat.v1`` graph, group them).

    Example:
        >>> import tensorflow as tf
        >>> w, m, slot = tf.Variable([1.0, 2.0]), tf.Variable([1.0, 1.0]), tf.Variable([0.5, 0.5])
        >>> _ = write_update(w, m, tf.constant([False, True]), stored=tf.Variable([0.0, 0.0]), slots=[slot])
        >>> w.numpy().tolist(), slot.numpy().tolist()
        ([0.0, 2.0], [0.0, 0.5])
    """
    keep = tf.convert_to_tensor(keep)
    zero = keep if zero is None else tf.convert_to_tensor(zero)
    if dense is None:
        dense = dense_value(weight, stored)
    nothing = tf.zeros([], dense.dtype)
    if stored is None:
        new_weight = dense * tf.cast(zero, dense.dtype)
        ops = [weight.assign(new_weight, name=PruningScope.OP_WEIGHT_UPDATE, read_value=False)]
    else:
        ops = [weight.assign(tf.where(_as_bool(zero), dense, nothing), name=PruningScope.OP_WEIGHT_UPDATE,
                             read_value=False),
               stored.assign(tf.where(_as_bool(keep), nothing, dense), read_value=False)]
    if slots:
        steady = tf.logical_and(_as_bool(zero), tf.not_equal(mask.read_value(), 0))
        for slot in slots:
            ops.append(slot.assign(tf.where(steady, slot.read_value(), tf.zeros([], slot.dtype)),
                                   name=SLOT_ZERO_OP, read_value=False))
    with tf.control_dependencies(ops):        # the reads above see the old mask
        ops.append(mask.assign(tf.cast(keep, mask.dtype), name=PruningScope.OP_MASK_ASSIGN, read_value=False))
    return ops
