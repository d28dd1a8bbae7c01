"""The Keras 3 side of the adapter contract (:mod:`sparsify.adapter`, docs/design.md), on every backend.

:class:`KerasAdapter` reads what the core needs from a model's pruning state on the host, in the
canonical layout and the protocol's order, and writes the core's :class:`~sparsify.protocol.MaskUpdate`
back with :func:`write_update`, the one Keras 3 writer:

* ``read_weights()``: the kernels dense under the mask (kernel + stored values);
* ``read_grads()``: the dense gradients of the last step (RigL keeps them in the state);
* ``read_activations()``: per-input-channel L2 norms of each layer's inputs since the last update;
* ``write_update(update)``: per weight, the kernel keeps its dense value where ``keep_values`` holds and
  is zero elsewhere (grown entries start at zero), ``stored`` keeps the values the new mask prunes, the
  optimizer slots keep their values only where the weight was kept and stays kept; the mask last.
  These are :func:`sparsify_tf.common.mask_write.write_update`'s semantics, so both Kerases and TF graphs
  write the same values. A new statistics window starts.

Call it between steps, after :func:`sparsify_keras.backend.sync_to_variables`.

Example:
    >>> import keras, numpy as np
    >>> w, s, m = keras.Variable([0.0, 2.0, 3.0]), keras.Variable([1.0, 0.0, 0.0]), keras.Variable([0.0, 1.0, 1.0])
    >>> write_update(w, m, np.array([True, False, True]), stored=s)
    >>> [w.numpy().tolist(), s.numpy().tolist(), m.numpy().tolist()]
    [[1.0, 0.0, 3.0], [0.0, 2.0, 0.0], [1.0, 0.0, 1.0]]
"""
from __future__ import annotations

from typing import Any, Sequence

import keras
import numpy as np

from sparsify.protocol import MaskUpdate

from .backend import to_numpy
from .compat import optimizer_slots
from .statistics import activation_window, reset_activations

__all__ = ["KerasAdapter", "write_update"]


def write_update(weight: Any, mask: Any, keep: np.ndarray, keep_values: np.ndarray | None = None, *,
                 stored: Any, slots: Sequence[Any] = ()) -> None:
    """Write one weight's mask update (see the module); ``keep_values`` defaults to ``keep``. The arithmetic
    runs on the device (``keras.ops``): only the two bool masks travel from the host."""
    ops = keras.ops
    keep_t = ops.convert_to_tensor(np.asarray(keep, bool))
    values_t = keep_t if keep_values is None else ops.convert_to_tensor(np.asarray(keep_values, bool))
    dense = ops.add(weight.value, stored.value)
    nothing = ops.zeros_like(dense)
    steady = ops.logical_and(values_t, ops.not_equal(mask.value, ops.zeros((), mask.dtype)))
    for slot in slots:
        value = slot.value
        slot.assign(ops.where(steady, value, ops.zeros_like(value)))
    weight.assign(ops.where(values_t, dense, nothing))
    stored.assign(ops.where(keep_t, nothing, dense))
    mask.assign(ops.cast(keep_t, mask.dtype))


class KerasAdapter:
    """Reads and writes one model's pruning state for the core (see the module).

    Args:
        model: the Keras 3 model being pruned.
        state: its :class:`~sparsify_keras.state.PruningState`.
        criterion: the config's criterion (named in statistics errors).
    """

    def __init__(self, model: Any, state: Any, criterion: str = "magnitude") -> None:
        self.model, self.state, self.criterion = model, state, criterion
        self.names: list[str] = [pw.path for pw in state.pweights]

    def waiting(self) -> bool:
        """True while an update must wait for the first training step (RigL's gradients or Wanda's inputs)."""
        if activation_window(self.state, self.criterion).waiting():
            return True
        return bool(self.state.grads) and int(to_numpy(self.state.grads_seen)) == 0

    def read_weights(self) -> dict[str, np.ndarray]:
        """The canonical kernels, dense under the mask (added on the device: one transfer per weight)."""
        return {pw.path: pw.to_canonical(to_numpy(keras.ops.add(pw.variable.value, s.value)))
                for pw, s in zip(self.state.pweights, self.state.stored)}

    def read_grads(self) -> dict[str, np.ndarray]:
        """The canonical dense gradients of the last training step."""
        return {pw.path: pw.to_canonical(to_numpy(g)) for pw, g in zip(self.state.pweights, self.state.grads)}

    def read_activations(self) -> dict[str, np.ndarray]:
        """Per-input-channel L2 norms since the last update, broadcastable to each canonical kernel."""
        return activation_window(self.state, self.criterion).read()

    def write_update(self, update: MaskUpdate) -> None:
        """The update into the kernels, stored values, masks and optimizer slots; a new statistics window."""
        optimizer = getattr(self.model, "optimizer", None)
        for pw, mask, stored in zip(self.state.pweights, self.state.masks, self.state.stored):
            values = update.keep_values[pw.path]
            if pw.path in update.grown:
                values = values & ~update.grown[pw.path]
            write_update(pw.variable, mask, pw.from_canonical(update.masks[pw.path]), pw.from_canonical(values),
                         stored=stored, slots=optimizer_slots(optimizer, pw.variable))
        self.state.last_step.assign(update.step)
        reset_activations(self.state)
