"""``PruningCallback``: gradual pruning inside ``model.fit`` (tf-keras and Keras 3).

How it works (docs/keras.md has the long version):

* **Discovery**: all sublayers are walked (:func:`~sparsify_tf.keras.layers.find_prunable_weights`) in the
  model's own weight order; the core :class:`sparsify.PruningProtocol` selects among them and checks the
  pattern before anything changes. **State** (:mod:`.state`): masks, stored values of pruned entries and the
  last update step, saved with the model's weights, so a resumed run continues exactly.
* **Mask updates** follow ``optimizer.iterations``: inside the train step (:mod:`.graph_update`, the core
  through ``tf.numpy_function`` only when an update is due), or on the host at each epoch start and under a
  distribution strategy or XLA; :mod:`.mask_apply` writes them. No pruning math and no step logic live here.
* **Keeping zeros** (:mod:`.train_step`, :mod:`.grad_masking`): pruned gradients are masked between updates
  (or weights re-masked after each step where that is not exact).

Example:
    >>> import numpy as np, keras
    >>> from sparsify_tf.keras import PruningCallback, strip_pruning
    >>> m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, name="fc"), keras.layers.Dense(2)])
    >>> m.compile("sgd", "mse")
    >>> cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2})
    >>> _ = m.fit(np.ones((32, 8)), np.ones((32, 2)), batch_size=8, epochs=1, verbose=0, callbacks=[cb])
    >>> cb.sparsity["fc/kernel"]
    0.5
    >>> m = strip_pruning(m)
"""
from __future__ import annotations

import os
import weakref
from typing import Any, Mapping

import numpy as np
import tensorflow as tf

import keras as _keras3

from sparsify import PruningConfig
from sparsify.adapter import collect_reads
from sparsify.criteria import needs_gradients
from sparsify.protocol import PruningProtocol, config_fingerprint, fingerprint_differences

from ..core_errors import reraise_core_errors
from ..summaries import write_scalar
from .adapter import KerasAdapter
from .compat import keras_flavor, steps_per_execution
from .grad_masking import GRAD_MASKING_OPTIMIZERS, grad_masking_supported
from .graph_update import NEVER, build_graph_update, host_update_fn, in_graph_unsupported
from .layers import find_prunable_weights, in_model_order
from .mask_apply import MaskApplier
from .state import STATE_ATTR, attach_state, model_state, state_class
from .statistics import check_activation_layers
from .strip import strip_pruning
from .train_step import install_train_step, strategy_of

__all__ = ["PruningCallback", "strip_pruning", "STATE_ATTR", "GRAD_MASKING_OPTIMIZERS", "grad_masking_supported"]


class PruningCallback(_keras3.callbacks.Callback):
    """Gradual pruning during ``model.fit``: magnitude or Wanda scores (:mod:`.statistics`), blocks, N:M.

    Works for tf-keras (``import tf_keras``) and Keras 3 on the TensorFlow
    backend (``import keras`` or ``tf.keras``), chosen by the model passed to
    ``fit``; Sequential, Functional, nested and subclassed models.

    Args:
        config: a :class:`sparsify.PruningConfig`, a dict of its fields or a YAML path.
            Steps (``start_step``, ``end_step``, ``pruning_frequency``) count
            optimizer steps (``optimizer.iterations``).
        log_dir: optional directory for a TensorBoard summary writer; sparsity
            scalars are written at every mask update.
        log_per_layer: also put ``sparsity/<weight path>`` into the epoch logs
            (the total is always logged as ``sparsity``).
        verbose: 1 prints a line at each mask update.
        update_in_graph: run the mask updates inside the compiled train step when the
            model trains without a distribution strategy and without XLA (the default;
            one comparison per step, no per-batch Python hook). False keeps them on the
            host at batch starts, as under a strategy. Masks and weights are the same
            either way.

    Raises:
        TypeError/ValueError: bad config or arguments (at construction); a model
            that is not built, a selection matching no weight, a pattern that
            does not fit a weight, a second model (at ``fit``, before training).

    Example:
        >>> import numpy as np, keras
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="fc1"),
        ...                           keras.layers.Dense(2, name="fc2")])
        >>> model.compile("sgd", "mse")
        >>> cb = PruningCallback({"target_sparsity": 0.75, "end_step": 0})
        >>> _ = model.fit(np.ones((8, 4)), np.zeros((8, 2)), epochs=1, verbose=0, callbacks=[cb])
        >>> cb.sparsity
        {'fc1/kernel': 0.75, 'fc2/kernel': 0.75, 'total': 0.75}
    """

    def __init__(self, config: PruningConfig | Mapping[str, Any] | str | os.PathLike, *,
                 log_dir: str | os.PathLike | None = None, log_per_layer: bool = True,
                 verbose: int = 0, update_in_graph: bool = True) -> None:
        super().__init__()
        cfg = PruningConfig.coerce(config)
        if needs_gradients(cfg.criterion):
            raise ValueError(f"criterion {cfg.criterion!r} needs gradients, which PruningCallback does not "
                             "collect; use a weight or activation criterion such as 'magnitude' or 'wanda' (snip and "
                             "snip_momentum score every step: PyTorch only)")
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a directory path or None, got {log_dir!r}")
        if not isinstance(log_per_layer, bool):
            raise TypeError(f"log_per_layer must be True or False, got {log_per_layer!r}")
        if verbose not in (0, 1) or isinstance(verbose, bool):
            raise ValueError(f"verbose must be 0 or 1, got {verbose!r}")
        if not isinstance(update_in_graph, bool):
            raise TypeError(f"update_in_graph must be True or False, got {update_in_graph!r}")
        self.config = cfg
        self.protocol: PruningProtocol | None = None   # set when attached to a model
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.log_per_layer = log_per_layer
        self.verbose = verbose
        self.update_in_graph = update_in_graph
        # tf-keras CallbackList protocol
        self._supports_tf_logs = True
        self._chief_worker_only = None
        self.validation_data = None
        # state
        self._bound: weakref.ref | None = None
        self._state: Any = None
        self._refresh = True        # re-read the state variables (after attach or a checkpoint restore)
        self._next = 0.0            # first step at which the protocol may act
        self._est: int | None = None  # expected optimizer.iterations at the next batch start
        self._spe = 1
        self._applier = MaskApplier()
        self._seen_fingerprint: np.ndarray | None = None   # the state as last read or written (see _sync_from_state)
        self._seen_state: tuple[int, list[np.ndarray]] | None = None
        self._autotune = False
        self._writer: Any = None
        self._pending_logs: list[tuple[int, dict[str, float]]] = []   # updates made in the graph, for TensorBoard
        self._in_graph = False      # the traced train step runs the mask updates (see .graph_update)
        self._batch_hooks = True    # whether tf-keras calls on_train_batch_begin in this fit
        self._graph_core: tuple | None = None     # (protocol, the core's side of the in-graph update)
        self._next_due: tf.Variable | None = None   # the graph's guard: the protocol's next due step

    # ----- tf-keras CallbackList protocol ------------------------------------------------
    def _implements_train_batch_hooks(self) -> bool:
        # tf-keras asks once per fit (after set_model) and then calls batch hooks only if one wants
        # them: when the train step will update the masks itself, the per-batch Python call is saved
        # and the host catches up at each epoch start instead (see on_epoch_begin).
        m = self._model if self._bound_model() is not None else None
        self._batch_hooks = not self.update_in_graph or m is None or in_graph_unsupported(m) is not None
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

    # ----- public read-only views ----------------------------------------------------------
    @property
    def pruned_weights(self) -> list[str]:
        """Paths of the weights being pruned (empty before the callback is attached)."""
        return [pw.path for pw in self._state.pweights] if self._state is not None else []

    @property
    def masks(self) -> dict[str, np.ndarray]:
        """Current masks, ``{path: bool array in the TF layout}`` (True = kept)."""
        if self._state is None:
            return {}
        return {pw.path: m.numpy() != 0 for pw, m in zip(self._state.pweights, self._state.masks)}

    @property
    def per_step_paths(self) -> list[str]:
        """Pruned weights re-masked after every step instead of by gradient masking.

        Known once ``fit`` has traced the train step. These are the weights of
        an optimizer not in :data:`GRAD_MASKING_OPTIMIZERS`, constrained weights,
        and weights whose gradients bypass ``model.optimizer``.
        """
        return list(self._state.per_step_paths) if self._state is not None else []

    @property
    def last_update_step(self) -> int:
        """Optimizer step of the last mask update (-1 for none)."""
        return int(self._state.last_step.numpy()) if self._state is not None else -1

    @property
    def sparsity(self) -> dict[str, float | None]:
        """Fraction of pruned weights per path (None: skipped, ``protocol.skipped``), plus ``"total"``."""
        if self.protocol is None:
            return {"total": 0.0}
        self._sync_if_needed()
        return {**self.protocol.layer_sparsity(), "total": self.protocol.total_sparsity()}

    # ----- binding -----------------------------------------------------------------------------
    def _bound_model(self) -> Any:
        m = self._bound() if self._bound is not None else None
        if m is not None and model_state(m) is not self._state:
            return None   # stripped: the callback may be used again
        return m

    def set_model(self, model: Any) -> None:
        """Called by Keras before training; binds the callback to ``model``."""
        if model is None:
            return
        bound = self._bound_model()
        if bound is not None and bound is not model:
            raise ValueError(f"model: this PruningCallback is bound to model {bound.name!r} but fit was called "
                             f"on model {model.name!r}; create one PruningCallback per model "
                             "(or strip_pruning the first model)")
        keras_flavor(model)
        self._model = model
        if bound is None and getattr(model, "built", False):
            self.attach(model)

    def attach(self, model: Any) -> None:
        """Validate the model and attach the pruning state to it now.

        ``fit`` does this for you. Call it yourself only to restore a
        checkpoint with ``model.load_weights`` *before* ``fit`` on Keras 3
        (the state variables must exist to be restored).

        Raises:
            ValueError: the model is not built, nothing is selected, or the
                pattern does not fit a selected weight (nothing is changed).
        """
        flavor = keras_flavor(model)
        bound = self._bound_model()
        if bound is model and self._state is not None:
            return
        if bound is not None and bound is not model:
            raise ValueError(f"model: this PruningCallback is already attached to model {bound.name!r}")
        if not getattr(model, "built", False):
            raise ValueError(f"model {model.name!r} is not built: build it (model.build(input_shape) or call it "
                             "on a batch) before fit so its weights exist")
        candidates = in_model_order(model, find_prunable_weights(model))
        protocol = PruningProtocol(self.config, {pw.path: pw.canonical_shape for pw in candidates})
        by_path = {pw.path: pw for pw in candidates}
        chosen = [by_path[n] for n in protocol.names]
        reads_inputs = check_activation_layers(chosen, self.config.criterion)     # Wanda: Dense/Conv kernels
        state = model_state(model)
        if state is not None:
            old = [(pw.path, pw.tf_shape) for pw in state.pweights]
            if old != [(pw.path, pw.tf_shape) for pw in chosen]:
                raise ValueError(f"model {model.name!r} already carries pruning state for {[p for p, _ in old]}; "
                                 "call strip_pruning(model) before pruning a different selection")
            self._check_fingerprint(state, f"model {model.name!r} already carries pruning state")
        else:
            with strategy_of(model).scope():
                state = state_class(flavor)(chosen, config_fingerprint(self.config),
                                            keep_grads=self.config.regrowth == "rigl", keep_activations=reads_inputs)
            attach_state(model, state, flavor)
        if self._next_due is None:
            with tf.init_scope():
                self._next_due = tf.Variable(0, dtype=tf.int64, trainable=False, name="sparsify_next_due_step")
        install_train_step(model, state, flavor, extension=self)
        self.protocol = protocol
        self._state = state
        self._bound = weakref.ref(model)
        self._model = model
        self._refresh = True
        self._seen_fingerprint = self._seen_state = None     # a new protocol: restore it from the state

    # ----- training hooks --------------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        model = self.model
        if model is None:
            raise ValueError("model: PruningCallback.on_train_begin called before set_model")
        if self._bound_model() is not model:
            self.attach(model)
        if getattr(model, "optimizer", None) is None:
            raise ValueError(f"model {model.name!r} has no optimizer: compile it before fit")
        if not model.trainable_weights:
            raise ValueError(f"model {model.name!r} has no trainable weights (trainable=False?): fit never advances "
                             "optimizer.iterations, so the pruning schedule could never move; unfreeze the model "
                             "(or the layers to prune) before fit")
        if self.config.regrowth == "rigl" and "strategy" in (in_graph_unsupported(model) or ""):
            raise ValueError("regrowth='rigl' is not supported under a distribution strategy yet (the dense "
                             "gradients are kept per replica); use regrowth='set' or train without a strategy")
        if self.log_dir is not None and self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        self._spe = steps_per_execution(model)
        self._autotune = bool(getattr(model, "_autotune_steps_per_execution", False))
        self._refresh = True
        # a refused in-graph update (NaN weights) raises the core's one line, not TF's long error
        model.train_function = reraise_core_errors(
            model.train_function, lambda: getattr(self._graph_core and self._graph_core[1], "errors", None))

    def _check_fingerprint(self, state: Any, what: str) -> None:
        diff = fingerprint_differences(self.config, state.fingerprint.numpy())
        if diff:
            raise ValueError(f"{what} saved with a different pruning config (keys that differ: {', '.join(diff)}); "
                             "resume with the config it was saved with, or strip_pruning(model) to start a new "
                             "pruning run")

    def _sync_from_state(self) -> None:
        """Restore the protocol from the (possibly just restored) state variables.

        The variables are read and compared with what this callback last wrote or restored; the
        protocol is restored (and the config fingerprint checked) only when they differ, so a
        ``fit`` called once per epoch does not redo the conversion each time.
        """
        st = self._state
        fp = st.fingerprint.numpy()
        if self._seen_fingerprint is None or not np.array_equal(fp, self._seen_fingerprint):
            self._check_fingerprint(st, f"the pruning state of model {self.model.name!r} was")
            self._seen_fingerprint = fp
        done = int(st.last_step.numpy())
        keep = [m.numpy() != 0 for m in st.masks]
        seen = self._seen_state
        if seen is None or seen[0] != done or not all(np.array_equal(a, b) for a, b in zip(keep, seen[1])):
            self.protocol.restore(done, {pw.path: pw.to_canonical(k) for pw, k in zip(st.pweights, keep)})
            self._seen_state = (done, keep)
        self._set_next()
        self._est = None
        self._refresh = False

    def _sync_if_needed(self) -> None:
        if self._refresh and self._state is not None:
            self._sync_from_state()

    def _step(self) -> int:
        return int(np.asarray(self.model.optimizer.iterations.numpy()))

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._est = None            # re-read optimizer.iterations at least once per epoch
        if (self._in_graph or not self._batch_hooks) and self._state is not None:
            # updates in the graph (and, under tf-keras, no batch hooks at all): the update at the
            # starting step, or state restored by another callback's on_train_begin, is handled here
            self._host_update()

    def _set_next(self) -> None:
        """``self._next`` and the graph's guard from the protocol's next due step."""
        nxt = self.protocol.next_step()
        self._next = _as_bound(nxt)
        if self._next_due is not None:
            self._next_due.assign(NEVER if nxt < 0 else nxt)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._in_graph and not self._refresh:
            return                  # the train step updates the masks itself
        self._host_update()

    def _host_update(self) -> None:
        """The host path: restore from the state if needed, then the update due at the current step, if any."""
        self._sync_if_needed()
        # optimizer.iterations is read whenever the protocol may act (and once per epoch);
        # in between the step is known without a device->host read.
        if self._est is None or self._est >= self._next or self._autotune:
            step = self._step()
        else:
            step = self._est
        if step >= self._next and self.protocol.due(step):
            self._update(step)
        self._est = step + self._spe

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._state is None or self._bound_model() is not self.model:
            return
        self._sync_if_needed()
        step = self._step()
        if self.protocol.due(step):
            self._update(step)
        self._flush_logs()
        if self._writer is not None:
            self._writer.flush()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is None or self._state is None:
            return
        self._sync_if_needed()
        self._flush_logs()
        figures = self.protocol.figures()
        logs.update(figures if self.log_per_layer else {"sparsity": figures["sparsity"]})

    # ----- the mask update ---------------------------------------------------------------------
    def _update(self, step: int) -> None:
        with strategy_of(self.model).scope():
            adapter = KerasAdapter(self.model, self._state, self._applier, self.config.criterion)
            if adapter.waiting():
                return                   # no step ran yet: the update waits for the first one
            update = self.protocol.advance(step, **collect_reads(self.protocol, adapter))
            if update is None:
                return
            adapter.write_update(update)
            self._seen_state = (update.step, [pw.from_canonical(update.masks[pw.path]) for pw in self._state.pweights])
        self._set_next()
        self._log_update(step, update.released)
        self._flush_logs()

    def _log_update(self, step: int, released: bool) -> None:
        if self._writer is not None:
            self._pending_logs.append((step, self.protocol.figures()))
        if self.verbose:
            what = "masks released" if released else "masks updated"
            print(f"[sparsify] step {step}: {what}, sparsity {self.protocol.total_sparsity():.4f}")

    def _flush_logs(self) -> None:
        """Write the sparsity scalars of the updates made since the last flush (host side, eager)."""
        pending, self._pending_logs = self._pending_logs, []
        for step, figures in pending:
            with self._writer.as_default(step=step):
                write_scalar("sparsity/total", figures.pop("sparsity"))
                for tag, v in figures.items():
                    write_scalar(tag, v)

    # ----- the mask update inside the train step (see .graph_update) ---------------------------
    def extend_train_step(self, model: Any) -> None:
        """:class:`~sparsify_tf.keras.train_step.TrainStepExtension`: the in-graph update, traced into the step."""
        self._in_graph = (self.update_in_graph and self.protocol is not None and self._next_due is not None
                          and in_graph_unsupported(model) is None)
        if self._in_graph:
            if self._graph_core is None or self._graph_core[0] is not self.protocol:
                self._graph_core = (self.protocol, host_update_fn(model, self.protocol))
            build_graph_update(model, self._state, self._graph_core[1], self._next_due, self._graph_updated)

    def _graph_updated(self, done: int, keep: list[np.ndarray]) -> None:
        """Host side of an update made in the graph (inside the numpy_function)."""
        self._seen_state = (done, keep)
        self._next = _as_bound(self.protocol.next_step())
        self._log_update(done, self.protocol.released)


def _as_bound(next_step: int) -> float:
    """A protocol ``next_step()`` as a number to compare steps with (-1: never)."""
    return float("inf") if next_step < 0 else float(next_step)
