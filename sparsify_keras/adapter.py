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

import math
import weakref
from typing import Any, Callable, Sequence

import keras
import numpy as np

from sparsify.protocol import MaskUpdate

from .backend import backend_name, compiled_assign, compiled_read, host_view, keep_where, selector, to_numpy
from .compat import optimizer_built, optimizer_slots, unwrap_optimizer
from .statistics import activation_window, reset_activations

__all__ = ["KerasAdapter", "Keras3StateIO", "MaskWriter", "write_update", "write_updates", "written_values"]


def written_values(weight: Any, stored: Any, mask: Any, slots: Sequence[Any], keep: Any,
                   keep_values: Any) -> tuple[Any, Any, Any, list[Any]]:
    """The new ``(weight, stored, mask, slots)`` tensors of one weight's mask update (see the module), a pure
    function of the current tensors and the two bool masks (``keras.ops``, so backends can compile it).
    Zeros are ``+0.0`` (:func:`sparsify_keras.backend.keep_where`)."""
    ops = keras.ops
    keep, keep_values = ops.convert_to_tensor(keep), ops.convert_to_tensor(keep_values)
    dense = ops.add(weight, stored)
    steady = ops.logical_and(keep_values, ops.cast(mask, "bool"))      # a mask holds exactly 0 or 1
    chosen: dict[Any, Any] = {}                  # steady's selector per slot dtype

    def new_slot(slot: Any) -> Any:
        if slot.dtype not in chosen:
            chosen[slot.dtype] = selector(steady, slot)
        return keep_where(chosen[slot.dtype], slot)

    return (keep_where(selector(keep_values, dense), dense), keep_where(selector(ops.logical_not(keep), dense), dense),
            ops.cast(keep, mask.dtype), [new_slot(slot) for slot in slots])


def _new_values(values: list, masks: Sequence[tuple[Any, Any]], sizes: Sequence[int]) -> list:
    """The new values of every written variable: ``values`` holds per weight ``[weight, stored, mask,
    *slots]`` (``sizes[i]`` entries for weight i), ``masks`` per weight ``(keep, keep_values)``."""
    out, at = [], 0
    for size, (keep, keep_values) in zip(sizes, masks):
        weight, stored, mask, *slots = values[at:at + size]
        new_weight, new_stored, new_mask, new_slots = written_values(weight, stored, mask, slots, keep, keep_values)
        out += [new_weight, new_stored, new_mask, *new_slots]
        at += size
    return out


def _unpacked(packed: Any, shapes: Sequence[tuple[int, ...]]) -> list[tuple[Any, Any]]:
    """Per weight ``(keep, keep_values)`` out of one flat bool array holding every ``keep`` (weight by weight,
    each in its own layout), then every ``keep_values`` (:meth:`MaskWriter.write`)."""
    total = sum(math.prod(shape) for shape in shapes)
    pairs, offset = [], 0
    for shape in shapes:
        n = math.prod(shape)
        pairs.append((keras.ops.reshape(packed[offset:offset + n], shape),
                      keras.ops.reshape(packed[total + offset:total + offset + n], shape)))
        offset += n
    return pairs


def _dense_values(values: list) -> list:
    """Per weight ``weight + stored`` (``values`` holds the pairs one after the other)."""
    return [keras.ops.add(values[i], values[i + 1]) for i in range(0, len(values), 2)]


def _canonical_values(layouts: Sequence[tuple[tuple[int, ...], tuple[int, ...]] | None]) -> Callable[[list], list]:
    """:func:`_dense_values` in the canonical layout: per weight its ``(perm, shape)`` transpose and reshape on
    the device (one pass with the sum where the backend compiles), or None to leave its own layout."""
    def dense(values: list) -> list:
        out = []
        for layout, d in zip(layouts, _dense_values(values)):
            if layout is not None:
                perm, shape = layout
                if perm != tuple(range(len(perm))):
                    d = keras.ops.transpose(d, perm)
                d = keras.ops.reshape(d, shape)
            out.append(d)
        return out
    return dense


class MaskWriter:
    """The one Keras 3 writer: writes masks (NumPy bool, each weight's own layout) into several weights'
    kernels, stored values, masks and optimizer slots (see the module), in one compiled call
    (:func:`sparsify_keras.backend.compiled_assign`): only the bool masks travel from the host (on JAX and
    TensorFlow packed into one array: one argument to convert and transfer instead of two per weight).

    Args:
        weights: per weight ``(weight, mask, stored, slots)`` (variables).
    """

    def __init__(self, weights: Sequence[tuple[Any, Any, Any, Sequence[Any]]]) -> None:
        targets = [v for weight, mask, stored, slots in weights for v in (weight, stored, mask, *slots)]
        sizes = [3 + len(slots) for *_, slots in weights]
        shapes = self._shapes = [tuple(int(d) for d in weight.shape) for weight, *_ in weights]
        # packed where each argument of a compiled call costs (tf.function's conversion and matching, JAX's
        # transfers); eager PyTorch takes the arrays as they are (slicing one array costs more ops there)
        self._packed = backend_name() != "torch"
        if self._packed:
            self._assign = compiled_assign(lambda values, packed: _new_values(values, _unpacked(packed, shapes), sizes),
                                           targets)
        else:
            self._assign = compiled_assign(lambda values, pairs: _new_values(values, pairs, sizes), targets)

    def write(self, masks: Sequence[tuple[np.ndarray, np.ndarray | None]]) -> None:
        """Per weight ``(keep, keep_values)`` (``keep_values`` None: ``keep``), in the weights' layouts."""
        if len(masks) != len(self._shapes):
            raise ValueError(f"masks: one (keep, keep_values) pair per weight ({len(self._shapes)}), got {len(masks)}")
        pairs = []
        for shape, (keep, values) in zip(self._shapes, masks):
            keep = np.asarray(keep, bool).reshape(shape)
            pairs.append((keep, keep if values is None else np.asarray(values, bool).reshape(shape)))
        if self._packed:
            self._assign(np.concatenate([k.reshape(-1) for k, _ in pairs] + [v.reshape(-1) for _, v in pairs]))
        else:
            self._assign(pairs)


def write_updates(writes: Sequence[tuple]) -> None:
    """Write several weights' mask updates at once: ``writes`` holds per weight ``(weight, mask, keep,
    keep_values, stored, slots)`` (variables; the two bool masks as NumPy arrays in the weight's own layout,
    ``keep_values`` None for ``keep``). One :class:`MaskWriter` call (a writer used repeatedly is faster:
    it is compiled once)."""
    MaskWriter([(w, m, s, list(slots)) for w, m, _k, _v, s, slots in writes]).write(
        [(k, v) for _w, _m, k, v, _s, _slots in writes])


def write_update(weight: Any, mask: Any, keep: np.ndarray, keep_values: np.ndarray | None = None, *,
                 stored: Any, slots: Sequence[Any] = ()) -> None:
    """Write one weight's mask update (see the module); ``keep_values`` defaults to ``keep``
    (:func:`write_updates` for one weight)."""
    write_updates([(weight, mask, keep, keep_values, stored, list(slots))])


class Keras3StateIO:
    """Keras 3's reads and writes of one pruning state, each one compiled call (made once, the writer again
    when the optimizer's slots change): what :class:`KerasAdapter` needs of a driver.

    ``read_dense()``: the kernels dense under the mask (kernel + stored values), NumPy, each in its own
    layout; ``read_canonical()``: the same in the canonical layout (converted on the device); ``write(masks, step)``: per weight ``(keep, keep_values or None)`` (:class:`MaskWriter`), then the
    state's last update step.
    """

    def __init__(self, model: Any, state: Any) -> None:
        self.model, self.state = model, state
        if not optimizer_built(model.optimizer):          # slots exist before the first update zeroes them
            unwrap_optimizer(model.optimizer).build(model.trainable_variables)
        self._reader: Any = None
        self._canonical_reader: Any = None
        self._canonical_layouts: list = []
        self._writer: tuple[Any, MaskWriter] | None = None     # (the optimizer's slots it writes, the writer)
        self._writer_key: Any = None

    def _mask_writer(self) -> MaskWriter:
        """The writer of this model's weights and current optimizer slots (made again when they change)."""
        optimizer = getattr(self.model, "optimizer", None)
        # the slots only change with the optimizer (a new one compiled in) or its variables (built)
        count = len(getattr(optimizer, "variables", None) or ())
        if self._writer is not None and self._writer_key is not None and self._writer_key[0]() is optimizer \
                and self._writer_key[1] == count:
            return self._writer[1]
        slots = [optimizer_slots(optimizer, pw.variable) for pw in self.state.pweights]
        key = [id(v) for vs in slots for v in vs]
        if self._writer is None or self._writer[0] != key:
            self._writer = (key, MaskWriter([(pw.variable, mask, stored, vs) for pw, mask, stored, vs in
                                             zip(self.state.pweights, self.state.masks, self.state.stored, slots)]))
        self._writer_key = None if optimizer is None else (weakref.ref(optimizer), count)
        return self._writer[1]

    def read_dense(self) -> list[np.ndarray]:
        """Kernel + stored values per weight, added on the device in one compiled call."""
        if self._reader is None:        # the same variables for the adapter's life: compiled once
            self._reader = compiled_read(_dense_values, [v for pw, s in zip(self.state.pweights, self.state.stored)
                                                         for v in (pw.variable, s)])
        return [to_numpy(d) for d in self._reader()]

    def read_canonical(self) -> list[np.ndarray]:
        """:meth:`read_dense` in the canonical layout, converted on the device in the same compiled call: the host
        receives arrays the core reads as they are (on a CPU backend without a copy), instead of converting
        each kernel again with NumPy."""
        if self._canonical_reader is None:
            layouts = []
            for pw in self.state.pweights:
                try:
                    layouts.append(pw.canonical_transpose())
                except ValueError:                        # not one transpose: converted on the host
                    layouts.append(None)
            self._canonical_layouts = layouts
            self._canonical_reader = compiled_read(_canonical_values(layouts),
                                                   [v for pw, s in zip(self.state.pweights, self.state.stored)
                                                    for v in (pw.variable, s)])
        return [host_view(d) if layout is not None else pw.to_canonical(to_numpy(d)) for pw, layout, d in
                zip(self.state.pweights, self._canonical_layouts, self._canonical_reader())]

    def write(self, masks: Sequence[tuple[np.ndarray, np.ndarray | None]], step: int) -> None:
        """The masks into the weights, stored values, masks and slots; ``step`` as the last update step."""
        self._mask_writer().write(masks)
        self.state.last_step.assign(step)


class KerasAdapter:
    """Reads and writes one model's pruning state for the core (see the module), either Keras.

    Args:
        model: the Keras model being pruned.
        state: its pruning state (:class:`~sparsify_keras.state.StateSchema`).
        criterion: the config's criterion (named in statistics errors).
        io: the driver's compiled reads and writes of the state (:class:`Keras3StateIO` by default; the
            tf-keras driver's for a tf-keras model).
    """

    def __init__(self, model: Any, state: Any, criterion: str = "magnitude", io: Any = None) -> None:
        self.model, self.state, self.criterion = model, state, criterion
        self.names: list[str] = [pw.path for pw in state.pweights]
        self.io = Keras3StateIO(model, state) if io is None else io

    def waiting(self) -> bool:
        """True while an update must wait for the first training step (RigL's gradients or Wanda's inputs)."""
        if activation_window(self.state, self.criterion).waiting():
            return True
        if self.state.scores and int(to_numpy(self.state.scores_seen)) == 0:
            return True
        return bool(self.state.grads) and int(to_numpy(self.state.grads_seen)) == 0

    def read_weights(self) -> dict[str, np.ndarray]:
        """The canonical kernels, dense under the mask (one compiled read; Keras 3 changes the layout on the device)."""
        if hasattr(self.io, "read_canonical"):            # converted on the device (Keras 3)
            return dict(zip((pw.path for pw in self.state.pweights), self.io.read_canonical()))
        return {pw.path: pw.to_canonical(d) for pw, d in zip(self.state.pweights, self.io.read_dense())}

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
        masks = []
        for pw in self.state.pweights:
            keep = update.masks[pw.path]
            values = update.keep_values[pw.path]
            if pw.path in update.grown:
                values = values & ~update.grown[pw.path]
            masks.append((pw.from_canonical(keep), None if values is keep else pw.from_canonical(values)))
        self.io.write(masks, update.step)
        reset_activations(self.state)
