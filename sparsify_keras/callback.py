"""``PruningCallback``: gradual pruning inside ``model.fit``, for Keras 3 on JAX, PyTorch and TensorFlow, and tf-keras.

How it works (docs/keras.md has the long version):

* **Discovery**: all sublayers are walked (:func:`~sparsify_keras.layers.find_prunable_weights`) in
  definition order; the core :class:`sparsify.PruningProtocol` selects among them and checks the pattern
  before anything changes. **State** (:mod:`.state`): masks, stored values of pruned entries and the last
  update step, saved with the model's weights, so a resumed run continues exactly.
* **Mask updates** follow ``optimizer.iterations`` on the host, at the start of the batch where one is
  due (:class:`~sparsify_keras.adapter.KerasAdapter` reads and writes; on JAX the trainer's state is synced
  into the variables first and the next step starts from what was written: no retracing). Between
  updates a batch costs a comparison: the step is counted, not read.
* **The end of fit** warns (:class:`sparsify.target_check.TargetNotReachedWarning`, once) when the schedule
  never reached its target: the step reached, ``end_step`` and the sparsity the masks hold.
* **Keeping zeros** (:mod:`.train_step`): pruned gradients are masked inside the compiled step (or weights
  re-masked after each step where that is not exact).

This class is the one update loop of both Kerases: what differs between Keras 3 and tf-keras (Keras 2) is
asked of the model's driver (:mod:`sparsify_keras.driver`; tf-keras's, with TensorFlow's in-graph updates,
lives in :mod:`sparsify_tf.keras`). :class:`sparsify_tf.keras.PruningCallback` is this class.

Example:
    >>> import numpy as np, keras
    >>> from sparsify_keras import PruningCallback, strip_pruning
    >>> m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, name="fc"), keras.layers.Dense(2)])
    >>> m.compile("sgd", "mse")
    >>> cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2})
    >>> _ = m.fit(np.ones((32, 8)), np.ones((32, 2)), batch_size=8, epochs=1, verbose=0, callbacks=[cb])
    >>> cb.sparsity["fc/kernel"]
    0.5
    >>> m = strip_pruning(m)
"""
from __future__ import annotations

import dataclasses
import os
import time
import weakref
from typing import Any, Mapping

import keras
import numpy as np

from sparsify import PruningConfig
from sparsify.adapter import collect_reads
from sparsify.protocol import PruningProtocol
from sparsify.selection_summary import SelectionSummary
from sparsify.target_check import warn_if_unreached

from .backend import to_numpy
from .compat import steps_per_execution
from .driver import KerasDriver, driver_for
from .layers import find_prunable_weights, in_model_order
from .state import fingerprint_mismatch, model_state
from .statistics import check_activation_layers
from .strip import strip_pruning
from .summary import selection_summary

__all__ = ["PruningCallback", "strip_pruning"]


class PruningCallback(keras.callbacks.Callback):
    """Gradual pruning during ``model.fit``: magnitude or Wanda scores, blocks, N:M, regrowth.

    Args:
        config: a :class:`sparsify.PruningConfig`, a dict of its fields or a YAML path. Steps
            (``start_step``, ``end_step``, ``pruning_frequency``) count optimizer steps
            (``optimizer.iterations``).
        log_dir: optional directory for TensorBoard scalars, written at every mask update
            (``sparsity/total``, ``sparsity/<weight path>``; needs the ``tensorboard`` package).
        log_per_layer: also put ``sparsity/<weight path>`` into the epoch logs (the total is always
            logged as ``sparsity``).
        verbose: 1 prints a line at each mask update.
        update_in_graph: tf-keras models only: run the mask updates inside the compiled train step when the
            model trains without a distribution strategy, without XLA and with a criterion not scored at every
            step (``None``, the default, and ``True``); ``False`` keeps them on the host at batch starts. Masks
            and weights are the same either way. Keras 3 always updates on the host (every backend); ``True``
            with a Keras 3 model is a ``ValueError``.

    Attributes:
        update_timings: one dict per mask update made on the host, in order: ``step``, and the seconds of its
            parts, ``read`` (the weights to the host), ``select`` (the core's update less that read) and
            ``write`` (masks, weights and optimizer slots back); an update made inside a tf-keras train step
            is not timed.

    Raises:
        TypeError/ValueError: bad config or arguments (at construction); a model that is not built, a
            selection matching no weight, a pattern that does not fit a weight, a second model (at
            ``fit``, before training).

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
                 log_dir: str | os.PathLike | None = None, log_per_layer: bool = True, verbose: int = 0,
                 update_in_graph: bool | None = None) -> None:
        super().__init__()
        cfg = PruningConfig.coerce(config)
        if update_in_graph is not None and not isinstance(update_in_graph, bool):
            raise TypeError(f"update_in_graph must be True, False or None, got {update_in_graph!r}")
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a directory path or None, got {log_dir!r}")
        if not isinstance(log_per_layer, bool):
            raise TypeError(f"log_per_layer must be True or False, got {log_per_layer!r}")
        if verbose not in (0, 1) or isinstance(verbose, bool):
            raise ValueError(f"verbose must be 0 or 1, got {verbose!r}")
        self.config = cfg
        self.protocol: PruningProtocol | None = None   # set when attached to a model
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.log_per_layer = log_per_layer
        self.verbose = verbose
        self._bound: weakref.ref | None = None
        self._state: Any = None
        self._refresh = True        # re-read the state variables (after attach or a checkpoint restore)
        self._next = 0.0            # first step at which the protocol may act
        self._est: int | None = None  # expected optimizer.iterations at the next batch start
        self._spe = 1
        self._seen_state: tuple[int, list[np.ndarray]] | None = None   # the state as last read or written
        self._seen_fingerprint: np.ndarray | None = None      # the saved digests last found equal to the config's
        self._writer: Any = None
        self.update_in_graph = update_in_graph
        self._driver: KerasDriver | None = None       # the bound model's (sparsify_keras.driver)
        self._driver_model: weakref.ref | None = None
        self._batch_hooks = True    # whether the Keras calls on_train_batch_begin in this fit
        self._pending_logs: list[tuple[int, dict[str, float]]] = []
        self.update_timings: list[dict[str, float]] = []

    # ----- the model's driver (sparsify_keras.driver: what differs between Kerases) ---------------
    def _driver_of(self, model: Any) -> KerasDriver:
        """The driver of ``model`` (the bound one for the bound model); the config checked against it."""
        if self._driver is not None and self._driver_model is not None and self._driver_model() is model:
            return self._driver
        driver = driver_for(model)
        driver.check_config(self.config, self.update_in_graph)
        self._driver, self._driver_model = driver, weakref.ref(model)
        return driver

    def _sync(self) -> None:
        self._driver.sync(self.model)

    def _saved(self) -> tuple[list[str], int, list[np.ndarray]]:
        """The state as saved: config keys that differ, the done step, the masks (TF layout, bool); the config's
        digests are compared again only when the saved ones change."""
        fingerprint, done, keep = self._driver.saved(self._state)
        if self._seen_fingerprint is None or not np.array_equal(fingerprint, self._seen_fingerprint):
            diff = fingerprint_mismatch(self.config, fingerprint)
            if diff:
                return diff, done, keep
            self._seen_fingerprint = fingerprint
        return [], done, keep

    # ----- tf-keras's CallbackList protocol (Keras 3 reads none of it) ----------------------------
    _supports_tf_logs = True          # takes TF logs
    _chief_worker_only = None         # runs on every worker

    def _implements_train_batch_hooks(self) -> bool:
        # tf-keras asks once per fit (after set_model) and then calls batch hooks only if one wants them:
        # when the train step updates the masks itself, the per-batch Python call is saved and the host
        # catches up at each epoch start instead (see on_epoch_begin).
        m = self._model if self._bound_model() is not None else None
        self._batch_hooks = m is None or self._driver.batch_hooks(m, self.update_in_graph)
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

    @property
    def _in_graph(self) -> bool:
        """Whether the train step runs the mask updates (tf-keras without a strategy or XLA)."""
        return self._driver is not None and self._driver.in_graph

    # ----- public read-only views ----------------------------------------------------------
    @property
    def pruned_weights(self) -> list[str]:
        """Paths of the weights being pruned (empty before the callback is attached)."""
        return [pw.path for pw in self._state.pweights] if self._state is not None else []

    @property
    def masks(self) -> dict[str, np.ndarray]:
        """Current masks, ``{path: bool array in the Keras layout}`` (True = kept)."""
        if self._state is None:
            return {}
        self._sync()
        return {pw.path: to_numpy(m) != 0 for pw, m in zip(self._state.pweights, self._state.masks)}

    @property
    def per_step_paths(self) -> list[str]:
        """Pruned weights re-masked after every step instead of by gradient masking (known once ``fit`` has
        traced the train step): an optimizer not in ``GRAD_MASKING_OPTIMIZERS``, constrained weights,
        weights whose gradients bypass ``model.optimizer``."""
        return list(self._state.per_step_paths) if self._state is not None else []

    @property
    def last_update_step(self) -> int:
        """Optimizer step of the last mask update (-1 for none)."""
        if self._state is None:
            return -1
        self._sync()
        return int(to_numpy(self._state.last_step))

    def summary(self, model: Any = None) -> SelectionSummary:
        """Every weight of rank 2+ of the model: the ones this callback prunes (path, layer type, shape, pattern,
        target) and the ones it leaves dense, with why (:func:`sparsify_keras.summary.selection_summary`);
        ``print(cb.summary())`` shows a table. ``model``: a model to ask about before ``fit`` (default: the
        bound one). Once attached, the selected rows also carry the sparsity their masks hold.

        Raises:
            ValueError: no model bound and none given; the model is not built.
        """
        bound = self._bound_model()
        model = bound if model is None else model
        if model is None:
            raise ValueError("model: this PruningCallback is not attached to a model yet; pass one: cb.summary(model)")
        if bound is not model or self.protocol is None:
            return selection_summary(model, self.config)
        summary = selection_summary(model, self.config, self.protocol.skipped)
        held = self.sparsity                 # the masks' sparsity now, per pruned weight
        return SelectionSummary(dataclasses.replace(r, sparsity=held.get(r.name)) if r.selected else r
                                for r in summary)

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
        self._driver_of(model)
        super().set_model(model)          # Keras's own binding (Callback.model)
        if bound is None and getattr(model, "built", False):
            self.attach(model)

    def attach(self, model: Any) -> None:
        """Validate the model and attach the pruning state to it now.

        ``fit`` does this for you. Call it yourself only to restore a checkpoint with
        ``model.load_weights`` *before* ``fit`` (the state variables must exist to be restored).

        Raises:
            ValueError: the model is not built, nothing is selected, or the pattern does not fit a
                selected weight (nothing is changed).
        """
        bound = self._bound_model()
        if bound is model and self._state is not None:
            return
        if bound is not None and bound is not model:
            raise ValueError(f"model: this PruningCallback is already attached to model {bound.name!r}")
        driver = self._driver_of(model)
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
            self._state = state
            self._check_saved_config(f"model {model.name!r} already carries pruning state")
        else:
            with driver.scope(model):
                state = driver.create_state(model, chosen, self.config, reads_inputs)
        self._state = state
        driver.install(model, state, self)
        self.protocol = protocol
        self._bound = weakref.ref(model)
        super().set_model(model)          # Keras's own binding (Callback.model)
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
        self._driver.check_fit(model, self)
        teach_from = getattr(model, "teach_from", None)     # a DistillationModel: its dense_at_start teacher is
        if callable(teach_from):                            # the student at this schedule's start_step
            teach_from(self.config.start_step, self.config.end_step)
        if self.log_dir is not None and self._writer is None:
            self._writer = self._make_writer(self.log_dir)
        self._spe = steps_per_execution(model)
        self._refresh = True

    def _make_writer(self, log_dir: str) -> Any:
        from .tensorboard import SparsityWriter

        return SparsityWriter(log_dir)

    def _check_saved_config(self, what: str) -> None:
        diff = self._saved()[0]
        if diff:
            raise ValueError(f"{what} saved with a different pruning config (keys that differ: {', '.join(diff)}); "
                             "resume with the config it was saved with, or strip_pruning(model) to start a new "
                             "pruning run")

    def _sync_from_state(self) -> None:
        """Restore the protocol from the (possibly just restored) state variables, when they changed."""
        self._sync()
        diff, done, keep = self._saved()
        if diff:
            self._check_saved_config(f"the pruning state of model {self.model.name!r} was")
        seen = self._seen_state
        if seen is not None and seen[1] is None:
            masks = self.protocol.masks
            seen = self._seen_state = (seen[0], [pw.from_canonical(masks[pw.path]) for pw in self._state.pweights])
        if seen is None or seen[0] != done or not all(np.array_equal(a, b) for a, b in zip(keep, seen[1])):
            self.protocol.restore(done, {pw.path: pw.to_canonical(k) for pw, k in zip(self._state.pweights, keep)})
            self._seen_state = (done, keep)
        self._set_next()
        self._est = None
        self._refresh = False

    def _set_next(self) -> None:
        """``self._next`` from the protocol's next due step (and the driver's, for an in-graph update)."""
        self._next = _as_bound(self.protocol.next_step())
        self._driver.set_next_due(self.protocol.next_step())

    def _sync_if_needed(self) -> None:
        if self._refresh and self._state is not None:
            self._sync_from_state()

    def _step(self) -> int:
        return self._driver.step(self.model)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._est = None            # re-read optimizer.iterations at least once per epoch
        if (self._in_graph or not self._batch_hooks) and self._state is not None:
            # the update at the starting step, or state restored by another callback's on_train_begin
            self._host_update()

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._in_graph and not self._refresh:
            return                  # the train step updates the masks itself
        if self._driver.autotune:
            self._est = None
        self._host_update()

    def _host_update(self) -> None:
        """Restore from the state if needed, then the update due at the current step, if any."""
        self._sync_if_needed()
        # optimizer.iterations is read whenever the protocol may act (and once per epoch);
        # in between the step is counted without a device->host read.
        step = self._step() if self._est is None or self._est >= self._next else self._est
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
        # a schedule that never reached its target says so, once per run (issue 47)
        warn_if_unreached(self.protocol, step, where=f"PruningCallback (model {self.model.name!r})")

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is None or self._state is None:
            return
        self._sync_if_needed()
        self._flush_logs()
        figures = self.protocol.figures()
        logs.update(figures if self.log_per_layer else {"sparsity": figures["sparsity"]})

    # ----- the mask update ---------------------------------------------------------------------
    def _update(self, step: int) -> None:
        with self._driver.scope(self.model):
            self._sync()
            adapter = self._driver.adapter(self.model, self._state, self.config.criterion)
            if adapter.waiting():
                return                   # no step ran yet: the update waits for the first one
            reads = collect_reads(self.protocol, adapter)
            if self.protocol.engine.scored_every_step:
                reads["scores"] = adapter.read_scores
            read_weights, read_seconds = reads["weights"], [0.0]

            def timed_read() -> Any:
                started = time.perf_counter()
                try:
                    return read_weights()
                finally:
                    read_seconds[0] += time.perf_counter() - started

            reads["weights"] = timed_read
            started = time.perf_counter()
            update = self.protocol.advance(step, **reads)
            selected = time.perf_counter()
            if update is None:
                return
            adapter.write_update(update)
            self.update_timings.append({"step": step, "read": read_seconds[0],
                                        "select": selected - started - read_seconds[0],
                                        "write": time.perf_counter() - selected})
            self._seen_state = (update.step, None)     # None: the protocol's masks (converted when compared)
        self._set_next()
        self._log_update(step, update.released)
        self._flush_logs()

    def record_update_in_step(self, done: int, keep: list[np.ndarray]) -> None:
        """Host side of an update the driver made inside the train step (``keep``: the new masks, TF layout)."""
        self._seen_state = (done, keep)
        self._next = _as_bound(self.protocol.next_step())
        self._log_update(done, self.protocol.released)

    def _log_update(self, step: int, released: bool) -> None:
        if self._writer is not None:
            self._pending_logs.append((step, self.protocol.figures()))
        if self.verbose:
            what = "masks released" if released else "masks updated"
            print(f"[sparsify] step {step}: {what}, sparsity {self.protocol.total_sparsity():.4f}")

    def _flush_logs(self) -> None:
        """Write the sparsity scalars of the updates made since the last flush."""
        pending, self._pending_logs = self._pending_logs, []
        for step, figures in pending:
            self._writer.write(figures, step)


def _as_bound(next_step: int) -> float:
    """A protocol ``next_step()`` as a number to compare steps with (-1: never)."""
    return float("inf") if next_step < 0 else float(next_step)


