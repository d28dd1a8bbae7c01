"""The tf-keras side of the adapter contract (:mod:`sparsify.adapter`, docs/design.md) for the host update
(Keras 3 models: :mod:`sparsify_keras.adapter`).

:class:`KerasAdapter` reads what the core needs from a model's pruning state, in the
canonical layout and the model's weight order (``names``), and writes the core's
:class:`~sparsify.protocol.MaskUpdate` back with the shared TF writer
(:func:`sparsify_tf.common.mask_write.write_update`, through the compiled applier of
:mod:`.mask_apply`):

* ``read_weights()``: the kernels dense under the mask (kernel + stored values);
* ``read_grads()``: the dense gradients of the last step (RigL keeps them in the state);
* ``read_activations()``: per-input-channel L2 norms of each layer's inputs since the
  last update (Wanda, :mod:`.statistics`);
* ``write_update(update)``: masks, stored values, zeros of a release, grown entries
  zero in the kernel and its optimizer slots; the statistics window starts again.

The in-graph update (:mod:`.graph_update`) hands the same arrays to the core inside
the train step and writes with the same writer.

Example:
    >>> import tf_keras, numpy as np
    >>> from sparsify.adapter import MaskWriter, WeightReader, collect_reads
    >>> from sparsify_tf.keras import PruningCallback
    >>> from sparsify_tf.keras.mask_apply import MaskApplier
    >>> from sparsify_tf.keras.state import model_state
    >>> m = tf_keras.Sequential([tf_keras.layers.InputLayer((4,)), tf_keras.layers.Dense(2, name="d")])
    >>> m.compile("sgd", "mse")
    >>> cb = PruningCallback({"target_sparsity": 0.5, "end_step": 0})
    >>> cb.attach(m)
    >>> adapter = KerasAdapter(m, model_state(m), MaskApplier())
    >>> isinstance(adapter, WeightReader) and isinstance(adapter, MaskWriter), adapter.names
    (True, ['d/kernel'])
    >>> adapter.write_update(cb.protocol.advance(0, **collect_reads(cb.protocol, adapter)))
    >>> int((m.layers[0].kernel.numpy() == 0).sum())
    4
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from sparsify.protocol import MaskUpdate

from .mask_apply import MaskApplier, build_optimizer_slots
from .statistics import activation_window, reset_activations

__all__ = ["KerasAdapter"]


class KerasAdapter:
    """Reads and writes one model's pruning state for the core (see the module).

    Args:
        model: the Keras model being pruned (call under its distribution strategy's scope).
        state: its pruning state layer (:func:`.state.model_state`).
        applier: the compiled read/write functions, cached across updates (one per callback).
        criterion: the config's criterion (named in statistics errors).
    """

    def __init__(self, model: Any, state: Any, applier: MaskApplier, criterion: str = "magnitude") -> None:
        self.model, self.state, self.criterion = model, state, criterion
        self.names: list[str] = [pw.path for pw in state.pweights]
        build_optimizer_slots(model, state)
        #: the compiled reader and writer (one concrete function for a run: no retracing)
        self.read_function, self.apply_function = applier.functions(state, getattr(model, "optimizer", None))

    def waiting(self) -> bool:
        """True while an update must wait for the first training step (RigL's gradients or Wanda's inputs)."""
        window = activation_window(self.state, self.criterion)
        return window.waiting() or bool(self.state.grads and int(self.state.grads_seen.numpy()) == 0)

    def read_weights(self) -> dict[str, np.ndarray]:
        """The canonical kernels, dense under the mask."""
        return {pw.path: pw.to_canonical(v) for pw, v in zip(self.state.pweights, self.read_function())}

    def read_grads(self) -> dict[str, np.ndarray]:
        """The canonical dense gradients of the last training step."""
        return {pw.path: pw.to_canonical(g.numpy()) for pw, g in zip(self.state.pweights, self.state.grads)}

    def read_activations(self) -> dict[str, np.ndarray]:
        """Per-input-channel L2 norms since the last update, broadcastable to each canonical kernel."""
        return activation_window(self.state, self.criterion).read()

    def write_update(self, update: MaskUpdate) -> None:
        """The update into the kernels, stored values, masks and optimizer slots; a new statistics window."""
        pws = self.state.pweights
        # zeros: the new masks (the last ones at a release: the weights keep their zeros), and grown entries
        zero = [pw.from_canonical(update.keep_values[pw.path] & ~update.grown[pw.path] if pw.path in update.grown
                                  else update.keep_values[pw.path]) for pw in pws]
        keep = [pw.from_canonical(update.masks[pw.path]) for pw in pws]
        self.apply_function(tf.constant(np.concatenate([k.ravel() for k in keep])),
                    tf.constant(np.concatenate([z.ravel() for z in zero])), tf.constant(update.step, tf.int64))
        reset_activations(self.state)
