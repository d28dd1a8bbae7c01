"""The Keras 3 side of the adapter contract (:mod:`sparsify.adapter`, docs/design.md), on every backend.

:class:`KerasAdapter` reads what the core needs from a model's pruning state on the host, in the
canonical layout and the protocol's order, and writes the core's :class:`~sparsify.protocol.MaskUpdate`
back with :func:`write_updates`, the one Keras 3 writer:

* ``read_weights()``: the kernels dense under the mask (kernel + stored values);
* ``read_grads()``: the dense gradients of the last step (RigL keeps them in the state);
* ``read_scores()``: a per-step criterion's scores after the last step (``snip``; the train step keeps them);
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

from typing import Any, Callable, Sequence

import keras
import numpy as np

from sparsify.protocol import MaskUpdate

from .backend import backend_name, compiled, to_numpy
from .compat import optimizer_slots
from .statistics import activation_window, reset_activations

__all__ = ["KerasAdapter", "write_update", "write_updates", "written_values"]


def written_values(weight: Any, stored: Any, mask: Any, slots: Sequence[Any], keep: Any,
                   keep_values: Any) -> tuple[Any, Any, Any, list[Any]]:
    """The new ``(weight, stored, mask, slots)`` tensors of one weight's mask update (see the module), a pure
    function of the current tensors and the two bool masks (``keras.ops``, so backends can compile it)."""
    ops = keras.ops
    dense = ops.add(weight, stored)
    nothing = ops.zeros_like(dense)
    steady = ops.logical_and(keep_values, ops.not_equal(mask, ops.zeros((), mask.dtype)))
    return (ops.where(keep_values, dense, nothing), ops.where(keep, nothing, dense), ops.cast(keep, mask.dtype),
            [ops.where(steady, slot, ops.zeros_like(slot)) for slot in slots])


def _all_written(items: list) -> list:
    out = []
    for weight, stored, mask, slots, keep, keep_values, scatter in items:
        if scatter is not None:          # the masks come flat in the canonical layout: one gather each
            keep = keras.ops.reshape(keras.ops.take(keep, scatter), keras.ops.shape(weight))
            keep_values = keras.ops.reshape(keras.ops.take(keep_values, scatter), keras.ops.shape(weight))
        out.append(written_values(weight, stored, mask, slots, keep, keep_values))
    return out


def _all_canonical(items: list) -> list:
    return [keras.ops.take(keras.ops.reshape(keras.ops.add(w, s), (-1,)), gather) for w, s, gather in items]


_COMPILED: dict[tuple[str, str], Callable] = {}     # compiled writer and reader per backend (made on first use)


def _compiled(name: str, fn: Callable) -> Callable:
    key = (name, backend_name())            # keras.config.set_backend may switch backends in a process
    if key not in _COMPILED:
        _COMPILED[key] = compiled(fn)
    return _COMPILED[key]


def write_updates(writes: Sequence[tuple], scatters: Sequence[Any] | None = None) -> None:
    """Write several weights' mask updates at once: ``writes`` holds per weight ``(weight, mask, keep,
    keep_values, stored, slots)`` (variables; the two bool masks as NumPy arrays in the weight's own layout,
    ``keep_values`` None for ``keep``). With ``scatters`` (per weight a device index tensor or None) the
    masks come flat in the canonical layout and ``scatter`` puts them into the weight's layout (see
    :meth:`~sparsify_keras.layers.KerasPrunableWeight.canonical_index`). The arithmetic runs on the device in
    one compiled call (:func:`sparsify_keras.backend.compiled`); only the bool masks travel from the host."""
    scatters = [None] * len(writes) if scatters is None else list(scatters)
    items = [(w.value, s.value, m.value, [slot.value for slot in slots], np.asarray(keep, bool),
              np.asarray(keep if values is None else values, bool), scatter)
             for (w, m, keep, values, s, slots), scatter in zip(writes, scatters)]
    written = _compiled("write", _all_written)(items)
    for (w, m, _k, _v, s, slots), (new_w, new_s, new_m, new_slots) in zip(writes, written):
        for slot, value in zip(slots, new_slots):
            slot.assign(value)
        w.assign(new_w)
        s.assign(new_s)
        m.assign(new_m)


def write_update(weight: Any, mask: Any, keep: np.ndarray, keep_values: np.ndarray | None = None, *,
                 stored: Any, slots: Sequence[Any] = ()) -> None:
    """Write one weight's mask update (see the module); ``keep_values`` defaults to ``keep``
    (:func:`write_updates` for one weight)."""
    write_updates([(weight, mask, keep, keep_values, stored, list(slots))])


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
        self._index: list[tuple[Any, Any]] | None = None     # per weight (gather, scatter) on the device

    def _device_index(self) -> list[tuple[Any, Any]]:
        """Per weight the layout permutations as device tensors (made once per adapter)."""
        if self._index is None:
            self._index = [tuple(keras.ops.convert_to_tensor(i) for i in pw.canonical_index())
                           for pw in self.state.pweights]
        return self._index

    def waiting(self) -> bool:
        """True while an update must wait for the first training step (RigL's gradients or Wanda's inputs)."""
        if activation_window(self.state, self.criterion).waiting():
            return True
        if self.state.scores and int(to_numpy(self.state.scores_seen)) == 0:
            return True
        return bool(self.state.grads) and int(to_numpy(self.state.grads_seen)) == 0

    def read_weights(self) -> dict[str, np.ndarray]:
        """The canonical kernels, dense under the mask (added and put into the canonical layout on the device,
        in one compiled call: one transfer per weight)."""
        pws = self.state.pweights
        flat = _compiled("read", _all_canonical)([(pw.variable.value, s.value, gather) for pw, s, (gather, _) in
                                                  zip(pws, self.state.stored, self._device_index())])
        return {pw.path: to_numpy(f).reshape(pw.canonical_shape) for pw, f in zip(pws, flat)}

    def read_grads(self) -> dict[str, np.ndarray]:
        """The canonical dense gradients of the last training step."""
        return self._canonical(self.state.grads)

    def read_scores(self) -> dict[str, np.ndarray]:
        """The canonical scores of a per-step criterion (``snip``...) after the last training step."""
        return self._canonical(self.state.scores)

    def _canonical(self, variables: list) -> dict[str, np.ndarray]:
        """Per-weight state variables (Keras layout) as canonical NumPy arrays."""
        return {pw.path: pw.to_canonical(to_numpy(v)) for pw, v in zip(self.state.pweights, variables)}

    def read_activations(self) -> dict[str, np.ndarray]:
        """Per-input-channel L2 norms since the last update, broadcastable to each canonical kernel."""
        return activation_window(self.state, self.criterion).read()

    def write_update(self, update: MaskUpdate) -> None:
        """The update into the kernels, stored values, masks and optimizer slots; a new statistics window."""
        optimizer = getattr(self.model, "optimizer", None)
        writes = []
        for pw, mask, stored in zip(self.state.pweights, self.state.masks, self.state.stored):
            keep = update.masks[pw.path]
            values = update.keep_values[pw.path]
            if pw.path in update.grown:
                values = values & ~update.grown[pw.path]
            writes.append((pw.variable, mask, keep.reshape(-1), None if values is keep else values.reshape(-1),
                           stored, optimizer_slots(optimizer, pw.variable)))
        write_updates(writes, [scatter for _, scatter in self._device_index()])
        self.state.last_step.assign(update.step)
        reset_activations(self.state)
