"""``PruningCallback``: gradual pruning inside ``model.fit``, for Keras 3 on JAX, PyTorch and TensorFlow.

How it works (docs/keras.md has the long version):

* **Discovery**: all sublayers are walked (:func:`~sparsify_keras.layers.find_prunable_weights`) in
  definition order; the core :class:`sparsify.PruningProtocol` selects among them and checks the pattern
  before anything changes. **State** (:mod:`.state`): masks, stored values of pruned entries and the last
  update step, saved with the model's weights, so a resumed run continues exactly.
* **Mask updates** follow ``optimizer.iterations`` on the host, at the start of the batch where one is
  due (:class:`~sparsify_keras.adapter.KerasAdapter` reads and writes; on JAX the trainer's state is synced
  into the variables first and the next step starts from what was written: no retracing). Between
  updates a batch costs a comparison: the step is counted, not read.
* **Keeping zeros** (:mod:`.train_step`): pruned gradients are masked inside the compiled step (or weights
  re-masked after each step where that is not exact).

This class is the one update loop of both Kerases: :class:`sparsify_tf.keras.PruningCallback` extends it
for tf-keras (Keras 2) models, with TensorFlow's own state and in-graph updates.

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

import os
import weakref
from typing import Any, Mapping

import keras
import numpy as np

from sparsify import PruningConfig
from sparsify.adapter import collect_reads
from sparsify.criteria import scored_every_step
from sparsify.protocol import PruningProtocol, config_fingerprint

from .adapter import KerasAdapter
from .backend import compiled_read, state_scope, sync_to_variables, tf_strategy, to_numpy
from .compat import keras_flavor, optimizer_built, steps_per_execution, unwrap_optimizer
from .layers import find_prunable_weights, in_model_order
from .state import PruningState, attach_state, fingerprint_mismatch, model_state
from .statistics import check_activation_layers, install_recorders
from .strip import strip_pruning
from .train_step import install_train_step

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
                 log_dir: str | os.PathLike | None = None, log_per_layer: bool = True, verbose: int = 0) -> None:
        super().__init__()
        cfg = PruningConfig.coerce(config)
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
        self._state_reader: tuple[Any, Any] | None = None     # (state, its compiled read for _saved)
        self._writer: Any = None
        self._keras_adapter: KerasAdapter | None = None
        self._pending_logs: list[tuple[int, dict[str, float]]] = []

    # ----- what differs between Kerases (sparsify_tf.keras overrides these for tf-keras) ---------------
    def _check_flavor(self, model: Any) -> str:
        flavor = keras_flavor(model)
        if flavor != "keras3":
            raise TypeError(f"model {model.name!r} is a tf-keras (Keras 2) model: use "
                            "sparsify_tf.keras.PruningCallback")
        return flavor

    def _create_state(self, model: Any, chosen: list, keep_activations: bool) -> Any:
        state = PruningState(chosen, config_fingerprint(self.config), keep_grads=self.config.regrowth == "rigl",
                             keep_activations=keep_activations,
                             step_scores=self.config if scored_every_step(self.config.criterion) else None,
                             straight_through=self.config.pruned_gradient == "straight_through",
                             pruned_decay=self.config.pruned_decay)
        attach_state(model, state)
        install_recorders(state)
        return state

    def _install(self, model: Any, state: Any) -> None:
        install_train_step(model, state)

    def _scope(self, model: Any) -> Any:
        return state_scope(model)

    def _adapter(self, model: Any) -> Any:
        if not optimizer_built(model.optimizer):          # slots exist before the first update zeroes them
            unwrap_optimizer(model.optimizer).build(model.trainable_variables)
        if self._keras_adapter is None or self._keras_adapter.state is not self._state:
            self._keras_adapter = KerasAdapter(model, self._state, self.config.criterion)
        return self._keras_adapter

    def _sync(self) -> None:
        sync_to_variables(self.model)

    def _saved(self) -> tuple[list[str], int, list[np.ndarray]]:
        """The state as saved: config keys that differ, the done step, the masks (TF layout, bool).

        Read in one compiled call (every ``fit`` starts with this check: one dispatch, not one per
        variable); the config's digests are compared again only when the saved ones change."""
        st = self._state
        if self._state_reader is None or self._state_reader[0] is not st:
            self._state_reader = (st, compiled_read(_as_saved, [st.fingerprint, st.last_step, *st.masks]))
        fingerprint, done, *keep = (to_numpy(x) for x in self._state_reader[1]())
        if self._seen_fingerprint is None or not np.array_equal(fingerprint, self._seen_fingerprint):
            diff = fingerprint_mismatch(self.config, fingerprint)
            if diff:
                return diff, int(done), keep
            self._seen_fingerprint = fingerprint
        return [], int(done), keep

    def _check_fit(self, model: Any) -> None:
        """Refuse, before training, what cannot be done."""
        if self.config.regrowth == "rigl" and tf_strategy(model) is not None:
            raise ValueError("regrowth='rigl' is not supported under a tf.distribute strategy yet (the dense "
                             "gradients are kept per replica); use regrowth='set' or train without a strategy")
        if scored_every_step(self.config.criterion) and tf_strategy(model) is not None:
            raise ValueError(f"criterion {self.config.criterion!r} (scored from the gradients of every step) is not "
                             "supported under a tf.distribute strategy yet (the gradients are per replica there); "
                             "use 'magnitude' or 'wanda', or train without a strategy (JAX's keras.distribution "
                             "is supported)")

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
        self._check_flavor(model)
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
        self._check_flavor(model)
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
            self._state = state
            self._check_saved_config(f"model {model.name!r} already carries pruning state")
        else:
            with self._scope(model):
                state = self._create_state(model, chosen, reads_inputs)
        self._state = state
        self._install(model, state)
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
        self._check_fit(model)
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
        """``self._next`` from the protocol's next due step."""
        self._next = _as_bound(self.protocol.next_step())

    def _sync_if_needed(self) -> None:
        if self._refresh and self._state is not None:
            self._sync_from_state()

    def _step(self) -> int:
        self._sync()
        return int(to_numpy(self.model.optimizer.iterations))

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._est = None            # re-read optimizer.iterations at least once per epoch

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
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

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is None or self._state is None:
            return
        self._sync_if_needed()
        self._flush_logs()
        figures = self.protocol.figures()
        logs.update(figures if self.log_per_layer else {"sparsity": figures["sparsity"]})

    # ----- the mask update ---------------------------------------------------------------------
    def _update(self, step: int) -> None:
        with self._scope(self.model):
            self._sync()
            adapter = self._adapter(self.model)
            if adapter.waiting():
                return                   # no step ran yet: the update waits for the first one
            reads = collect_reads(self.protocol, adapter)
            if self.protocol.engine.scored_every_step:
                reads["scores"] = adapter.read_scores
            update = self.protocol.advance(step, **reads)
            if update is None:
                return
            adapter.write_update(update)
            self._seen_state = (update.step, None)     # None: the protocol's masks (converted when compared)
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
        """Write the sparsity scalars of the updates made since the last flush."""
        pending, self._pending_logs = self._pending_logs, []
        for step, figures in pending:
            self._writer.write(figures, step)


def _as_saved(values: list) -> list:
    """``[fingerprint, last_step, *masks]`` with the masks as bool (what :meth:`PruningCallback._saved` reads)."""
    return [values[0], values[1], *[keras.ops.not_equal(m, 0) for m in values[2:]]]


def _as_bound(next_step: int) -> float:
    """A protocol ``next_step()`` as a number to compare steps with (-1: never)."""
    return float("inf") if next_step < 0 else float(next_step)


