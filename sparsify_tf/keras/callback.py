"""``PruningCallback`` for tf-keras (Keras 2) models, and for Keras 3 models through :mod:`sparsify_keras`.

The update loop is :class:`sparsify_keras.PruningCallback`'s (the one Keras update loop); this class adds
what a tf-keras model needs: its state layer (:mod:`.state`), its train step (:mod:`.train_step`,
:mod:`.grad_masking`), its reader/writer (:mod:`.adapter`, :mod:`.mask_apply`), distribution strategies,
and the mask update inside the compiled train step (:mod:`.graph_update`: without a strategy and without
XLA, the core runs through ``tf.numpy_function`` only when an update is due). A Keras 3 model given to
this class (any backend) is pruned exactly as :class:`sparsify_keras.PruningCallback` prunes it.

Example:
    >>> import numpy as np, tf_keras
    >>> from sparsify_tf.keras import PruningCallback, strip_pruning
    >>> m = tf_keras.Sequential([tf_keras.layers.InputLayer((8,)), tf_keras.layers.Dense(16, name="fc"),
    ...                          tf_keras.layers.Dense(2)])
    >>> m.compile("sgd", "mse")
    >>> cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2})
    >>> _ = m.fit(np.ones((32, 8)), np.ones((32, 2)), batch_size=8, epochs=1, verbose=0, callbacks=[cb])
    >>> cb.sparsity["fc/kernel"]
    0.5
    >>> m = strip_pruning(m)
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from sparsify import PruningConfig
from sparsify.criteria import scored_every_step
from sparsify.protocol import config_fingerprint, fingerprint_differences
from sparsify_keras.callback import PruningCallback as KerasPruningCallback
from sparsify_keras.compat import keras_flavor

from ..common.core_errors import reraise_core_errors
from .adapter import KerasAdapter
from .compat import autotunes_steps_per_execution, declare_callback_protocol
from .grad_masking import GRAD_MASKING_OPTIMIZERS, grad_masking_supported
from .graph_update import NEVER, build_graph_update, host_update_fn, in_graph_unsupported
from .mask_apply import MaskApplier
from .state import STATE_ATTR, attach_state, state_class
from .strip import strip_pruning
from .train_step import install_train_step, strategy_of

__all__ = ["PruningCallback", "strip_pruning", "STATE_ATTR", "GRAD_MASKING_OPTIMIZERS", "grad_masking_supported"]


class PruningCallback(KerasPruningCallback):
    """Gradual pruning during ``model.fit`` for tf-keras and Keras 3 models (see the module).

    Args:
        config, log_dir, log_per_layer, verbose: as :class:`sparsify_keras.PruningCallback`.
        update_in_graph: tf-keras models only: run the mask updates inside the compiled train step when
            the model trains without a distribution strategy and without XLA (``None``, the default, and
            ``True``); ``False`` keeps them on the host at batch starts. Masks and weights are the same
            either way. Keras 3 always updates on the host (every backend); ``True`` with a Keras 3 model
            is a ``ValueError``.

    Example:
        >>> import numpy as np, tf_keras
        >>> model = tf_keras.Sequential([tf_keras.layers.InputLayer((4,)), tf_keras.layers.Dense(8, name="fc1"),
        ...                              tf_keras.layers.Dense(2, name="fc2")])
        >>> model.compile("sgd", "mse")
        >>> cb = PruningCallback({"target_sparsity": 0.75, "end_step": 0})
        >>> _ = model.fit(np.ones((8, 4)), np.zeros((8, 2)), epochs=1, verbose=0, callbacks=[cb])
        >>> cb.sparsity
        {'fc1/kernel': 0.75, 'fc2/kernel': 0.75, 'total': 0.75}
    """

    def __init__(self, config: PruningConfig | Mapping[str, Any] | str | os.PathLike, *,
                 log_dir: str | os.PathLike | None = None, log_per_layer: bool = True,
                 verbose: int = 0, update_in_graph: bool | None = None) -> None:
        if update_in_graph is not None and not isinstance(update_in_graph, bool):
            raise TypeError(f"update_in_graph must be True, False or None, got {update_in_graph!r}")
        super().__init__(config, log_dir=log_dir, log_per_layer=log_per_layer, verbose=verbose)
        self.update_in_graph = update_in_graph
        declare_callback_protocol(self)             # tf-keras CallbackList protocol
        self.validation_data = None
        self._flavor: str | None = None
        self._applier = MaskApplier()
        self._autotune = False
        self._in_graph = False      # the traced train step runs the mask updates (see .graph_update)
        self._batch_hooks = True    # whether tf-keras calls on_train_batch_begin in this fit
        self._graph_core: tuple | None = None     # (protocol, the core's side of the in-graph update)
        self._next_due: tf.Variable | None = None   # the graph's guard: the protocol's next due step

    def _tf(self) -> bool:
        return self._flavor == "tf_keras"

    # ----- tf-keras CallbackList protocol ------------------------------------------------
    def _implements_train_batch_hooks(self) -> bool:
        # tf-keras asks once per fit (after set_model) and then calls batch hooks only if one wants
        # them: when the train step will update the masks itself, the per-batch Python call is saved
        # and the host catches up at each epoch start instead (see on_epoch_begin).
        m = self._model if self._bound_model() is not None else None
        self._batch_hooks = (not self._tf() or self.update_in_graph is False or m is None
                             or in_graph_unsupported(m) is not None)
        return self._batch_hooks

    def _implements_test_batch_hooks(self) -> bool:
        return False

    def _implements_predict_batch_hooks(self) -> bool:
        return False

    @property
    def model(self) -> Any:
        return self._model

    @model.setter
    def model(self, value: Any) -> None:
        self._model = value

    # ----- the tf-keras side of the update loop's hooks --------------------------------------
    def _check_flavor(self, model: Any) -> str:
        flavor = keras_flavor(model)
        if flavor == "tf_keras" and self.config.pruned_gradient != "none":
            raise ValueError(f"pruned_gradient={self.config.pruned_gradient!r} is not supported for tf-keras models "
                             "yet (pruned weights get no gradient there); use Keras 3 (sparsify_keras, any backend) "
                             "or PyTorch, or leave pruned_gradient='none'")
        if flavor == "tf_keras" and scored_every_step(self.config.criterion):
            raise ValueError(f"criterion {self.config.criterion!r} is scored from the gradients of every step, which "
                             "the tf-keras (Keras 2) callback does not do; use Keras 3 (sparsify_keras, any backend) "
                             "or PyTorch, or a weight or activation criterion such as 'magnitude' or 'wanda'")
        if flavor == "keras3" and self.update_in_graph:
            raise ValueError("update_in_graph=True applies to tf-keras models; Keras 3 models update their masks "
                             "on the host at batch starts on every backend (leave update_in_graph unset)")
        self._flavor = flavor
        return flavor

    def _create_state(self, model: Any, chosen: list, keep_activations: bool) -> Any:
        if not self._tf():
            return super()._create_state(model, chosen, keep_activations)
        state = state_class()(chosen, config_fingerprint(self.config),
                              keep_grads=self.config.regrowth == "rigl", keep_activations=keep_activations)
        attach_state(model, state)
        return state

    def _install(self, model: Any, state: Any) -> None:
        if not self._tf():
            super()._install(model, state)
            return
        if self._next_due is None:
            with tf.init_scope():
                self._next_due = tf.Variable(0, dtype=tf.int64, trainable=False, name="sparsify_next_due_step")
        install_train_step(model, state, extension=self)

    def _scope(self, model: Any) -> Any:
        return strategy_of(model).scope() if self._tf() else super()._scope(model)

    def _adapter(self, model: Any) -> Any:
        if not self._tf():
            return super()._adapter(model)
        return KerasAdapter(model, self._state, self._applier, self.config.criterion)

    def _sync(self) -> None:
        if not self._tf():
            super()._sync()

    def _saved(self) -> tuple[list[str], int, list[np.ndarray]]:
        if not self._tf():
            return super()._saved()
        st = self._state
        return (fingerprint_differences(self.config, st.fingerprint.numpy()), int(st.last_step.numpy()),
                [m.numpy() != 0 for m in st.masks])

    def _step(self) -> int:
        if not self._tf():
            return super()._step()
        return int(np.asarray(self.model.optimizer.iterations.numpy()))

    def _check_fit(self, model: Any) -> None:
        if not self._tf():
            super()._check_fit(model)
            return
        if self.config.regrowth == "rigl" and "strategy" in (in_graph_unsupported(model) or ""):
            raise ValueError("regrowth='rigl' is not supported under a distribution strategy yet (the dense "
                             "gradients are kept per replica); use regrowth='set' or train without a strategy")
        self._autotune = autotunes_steps_per_execution(model)
        # a refused in-graph update (NaN weights) raises the core's one line, not TF's long error
        model.train_function = reraise_core_errors(
            model.train_function, lambda: getattr(self._graph_core and self._graph_core[1], "errors", None))

    def _set_next(self) -> None:
        super()._set_next()
        if self._next_due is not None and self._tf():
            nxt = self.protocol.next_step()
            self._next_due.assign(NEVER if nxt < 0 else nxt)

    # ----- host updates: every batch, or each epoch start when the graph updates -------------
    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        super().on_epoch_begin(epoch, logs)
        if self._tf() and (self._in_graph or not self._batch_hooks) and self._state is not None:
            # the update at the starting step, or state restored by another callback's on_train_begin
            self._host_update()

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._in_graph and not self._refresh:
            return                  # the train step updates the masks itself
        if self._autotune:
            self._est = None
        super().on_train_batch_begin(batch, logs)

    # ----- the mask update inside the train step (see .graph_update) ---------------------------
    def extend_train_step(self, model: Any) -> None:
        """:class:`~sparsify_tf.keras.train_step.TrainStepExtension`: the in-graph update, traced into the step."""
        self._in_graph = (self.update_in_graph is not False and self.protocol is not None
                          and self._next_due is not None and in_graph_unsupported(model) is None)
        if self._in_graph:
            if self._graph_core is None or self._graph_core[0] is not self.protocol:
                self._graph_core = (self.protocol, host_update_fn(model, self.protocol))
            build_graph_update(model, self._state, self._graph_core[1], self._next_due, self._graph_updated)

    def _graph_updated(self, done: int, keep: list[np.ndarray]) -> None:
        """Host side of an update made in the graph (inside the numpy_function)."""
        self._seen_state = (done, keep)
        super()._set_next()
        self._log_update(done, self.protocol.released)
