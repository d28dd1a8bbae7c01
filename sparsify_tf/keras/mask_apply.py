"""The compiled write of a mask update into Keras state, and the optimizer slots it needs first.

:class:`MaskApplier` builds, once per set of optimizer variables, ``read`` (the
pruned weights, dense: kernel + stored values) and ``apply`` (one concrete
function writing masks, zeros, stored values and optimizer slots through
:func:`sparsify_tf.common.mask_write.write_update`). :func:`build_optimizer_slots` creates the
optimizer's slots before a run's first step, so an update then can zero them.

Example:
    >>> MaskApplier().cache is None
    True
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from sparsify_keras.compat import optimizer_slots, unwrap_optimizer

from ..common.mask_write import dense_value, write_update
from .compat import build_optimizer, optimizer_variables, tf_variable

__all__ = ["MaskApplier", "TfStateIO", "build_optimizer_slots"]


class MaskApplier:
    """Caches ``read``/``apply`` for one callback (rebuilt when the state or the optimizer's variables change)."""

    def __init__(self) -> None:
        self.cache: tuple | None = None

    def functions(self, state: Any, optimizer: Any) -> tuple[Any, Any]:
        """``read() -> dense weights`` and ``apply(flat masks, flat zeros, step)`` for the mask update, built once.

        ``read`` returns the pruned weights, dense (kernel + stored values), as NumPy
        arrays (one compiled call for distributed variables). ``apply`` is one
        compiled function (a concrete function: no retracing, no signature
        matching per call) that writes the masks and the zeros, each one flat bool
        tensor in the order of the pruned weights (:func:`sparsify_tf.common.mask_write.write_update`:
        weights, stored values, optimizer slots, masks). Rebuilt only when the
        optimizer's variables change (slots created, optimizer replaced).
        """
        st, opt = state, optimizer
        nvars = optimizer_variables(unwrap_optimizer(opt))
        cheap = (id(st), id(opt), len(nvars)) if nvars is not None else None
        if cheap is not None and self.cache is not None and self.cache[0] == cheap:
            return self.cache[2], self.cache[3]
        slots = [optimizer_slots(opt, pw.variable) for pw in st.pweights]
        key = (id(st), tuple(id(s) for ss in slots for s in ss))
        if self.cache is not None and self.cache[1] == key:
            self.cache = (cheap, *self.cache[1:])
            return self.cache[2], self.cache[3]
        mvars = [tf_variable(m) for m in st.masks]
        wvars = [tf_variable(pw.variable) for pw in st.pweights]
        svars = [tf_variable(v) for v in st.stored]
        slots = [[tf_variable(x) for x in ss] for ss in slots]
        last = tf_variable(st.last_step)
        sizes = [int(np.prod(pw.tf_shape)) for pw in st.pweights]

        @tf.function(autograph=False)
        def apply(flat_keep: tf.Tensor, flat_zero: tf.Tensor, step: tf.Tensor) -> None:
            for i, (keep, zero, pw) in enumerate(zip(tf.split(flat_keep, sizes), tf.split(flat_zero, sizes),
                                                     st.pweights)):
                write_update(wvars[i], mvars[i], tf.reshape(keep, pw.tf_shape), tf.reshape(zero, pw.tf_shape),
                             stored=svars[i], slots=slots[i])
            last.assign(step)

        flat = tf.TensorSpec([sum(sizes)], tf.bool)
        apply_cf = apply.get_concrete_function(flat, flat, tf.TensorSpec([], tf.int64))

        @tf.function(autograph=False)
        def read_all() -> list:
            return [tf.identity(dense_value(w, s)) for w, s in zip(wvars, svars)]

        if any(isinstance(w, tf.distribute.DistributedValues) for w in wvars):
            def read() -> list[np.ndarray]:
                return [v.numpy() for v in read_all()]
        else:
            def read() -> list[np.ndarray]:     # ReadVariableOps run inline: cheaper than a call
                return [w.numpy() + s.numpy() for w, s in zip(wvars, svars)]

        self.cache = (cheap, key, read, apply_cf)
        return read, apply_cf


def build_optimizer_slots(model: Any, state: Any) -> None:
    """Create the optimizer's slots now if it has none yet (as its first step would, same variables).

    Otherwise an update before the first step of a run (step 0, or a resume from a checkpoint
    saved at an update point) could not zero the slots of the newly pruned weights, and the slots
    a checkpoint restores into them when they are created would move those weights.
    """
    opt = unwrap_optimizer(getattr(model, "optimizer", None))
    if opt is not None:
        build_optimizer(opt, model.trainable_variables, state.pweights[0].variable)


class TfStateIO:
    """tf-keras's reads and writes of one pruning state for :class:`sparsify_keras.adapter.KerasAdapter`
    (:class:`sparsify_keras.adapter.Keras3StateIO`'s methods, through a callback's :class:`MaskApplier`).

    Args:
        model: the tf-keras model (call under its distribution strategy's scope).
        state: its pruning state.
        applier: the compiled read/write functions, cached across updates (one per driver).
    """

    def __init__(self, model: Any, state: Any, applier: MaskApplier) -> None:
        build_optimizer_slots(model, state)
        #: the compiled reader and writer (one concrete function for a run: no retracing)
        self.read_dense, self.apply_function = applier.functions(state, getattr(model, "optimizer", None))

    def write(self, masks: list[tuple[np.ndarray, np.ndarray | None]], step: int) -> None:
        """Per weight ``(keep, keep_values or None)`` into the weights, stored values, slots and masks; ``step``
        as the last update step. One call of the compiled writer."""
        keep = np.concatenate([k.ravel() for k, _ in masks])
        values = np.concatenate([(k if v is None else v).ravel() for k, v in masks])
        self.apply_function(tf.constant(keep), tf.constant(values), tf.constant(step, tf.int64))
