"""The tf-keras (Keras 2) driver of the one Keras update loop (:mod:`sparsify_keras.driver`).

:class:`TfKerasDriver` gives :class:`sparsify_keras.PruningCallback` what a ``tf_keras.Model`` needs:
its state layer (:mod:`.state`), TensorFlow's train-step hooks (:mod:`.train_step`), the compiled reads
and writes of the state (:mod:`.mask_apply`), distribution strategies, and the mask update inside the
compiled train step (:mod:`.graph_update`: without a strategy, without XLA and with a criterion not scored
at every step, the core runs through ``tf.numpy_function`` only when an update is due; tf-keras then
skips the callback's per-batch Python call). :func:`sparsify_keras.driver.driver_for` imports this module
when a tf-keras model is first pruned.

Example:
    >>> import numpy as np, tf_keras
    >>> from sparsify_keras import PruningCallback
    >>> m = tf_keras.Sequential([tf_keras.layers.InputLayer((8,)), tf_keras.layers.Dense(16, name="fc")])
    >>> m.compile("sgd", "mse")
    >>> cb = PruningCallback({"target_sparsity": 0.5, "end_step": 4, "pruning_frequency": 2,
    ...                       "pruned_gradient": "straight_through"})
    >>> _ = m.fit(np.ones((32, 8)), np.ones((32, 16)), batch_size=8, verbose=0, callbacks=[cb])
    >>> type(cb._driver).__name__, cb.sparsity["fc/kernel"]
    ('TfKerasDriver', 0.5)
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import tensorflow as tf

from sparsify_keras.adapter import KerasAdapter
from sparsify_keras.driver import KerasDriver
from sparsify_keras.train_step import install_train_step, uninstall_train_step

from ..common.core_errors import reraise_core_errors
from .compat import autotunes_steps_per_execution
from .graph_update import NEVER, build_graph_update, host_update_fn, in_graph_unsupported
from .mask_apply import MaskApplier, TfStateIO
from .state import attach_state, detach_state, state_class
from .train_step import TfStepHooks, strategy_of

__all__ = ["TfKerasDriver"]


class TfKerasDriver(KerasDriver):
    """tf-keras models: ``tf.*`` and ``tf.Variable`` (see the module); one per pruned model."""

    flavor = "tf_keras"
    hooks = TfStepHooks()

    def __init__(self) -> None:
        self._applier = MaskApplier()
        self._next_due: tf.Variable | None = None   # the graph's guard: the protocol's next due step
        self._graph_core: tuple | None = None       # (protocol, the core's side of the in-graph update)
        self._loop: weakref.ref | None = None       # the callback whose updates the train step makes
        self._state: Any = None

    def state_class(self) -> type:
        return state_class()

    def attach(self, model: Any, state: Any) -> None:
        attach_state(model, state)

    def scope(self, model: Any) -> Any:
        return strategy_of(model).scope()

    def step(self, model: Any) -> int:
        return int(np.asarray(model.optimizer.iterations.numpy()))

    def adapter(self, model: Any, state: Any, criterion: str) -> KerasAdapter:
        return KerasAdapter(model, state, criterion, io=TfStateIO(model, state, self._applier))

    def install(self, model: Any, state: Any, callback: Any) -> None:
        if self._next_due is None:
            with tf.init_scope():
                self._next_due = tf.Variable(0, dtype=tf.int64, trainable=False, name="sparsify_next_due_step")
        self._loop, self._state = weakref.ref(callback), state
        install_train_step(model, state, self.hooks, extension=self)

    def uninstall(self, model: Any) -> Any:
        uninstall_train_step(model, self.hooks)
        return detach_state(model)

    def under_strategy(self, model: Any) -> bool:
        return "strategy" in (in_graph_unsupported(model) or "")

    def check_fit(self, model: Any, callback: Any) -> None:
        super().check_fit(model, callback)
        self.autotune = autotunes_steps_per_execution(model)
        # a refused in-graph update (NaN weights) raises the core's one line, not TF's long error
        model.train_function = reraise_core_errors(
            model.train_function, lambda: getattr(self._graph_core and self._graph_core[1], "errors", None))

    def batch_hooks(self, model: Any, update_in_graph: bool | None) -> bool:
        loop = self._loop() if self._loop is not None else None
        criterion = loop.config.criterion if loop is not None else "magnitude"
        return update_in_graph is False or in_graph_unsupported(model, criterion) is not None

    def set_next_due(self, next_step: int) -> None:
        if self._next_due is not None:
            self._next_due.assign(NEVER if next_step < 0 else next_step)

    def extend_train_step(self, model: Any) -> None:
        """:class:`~sparsify_keras.train_step.TrainStepExtension`: the in-graph update, traced into the step."""
        loop = self._loop() if self._loop is not None else None
        self.in_graph = (loop is not None and loop.update_in_graph is not False and loop.protocol is not None
                         and self._next_due is not None and in_graph_unsupported(model, loop.config.criterion) is None)
        if self.in_graph:
            if self._graph_core is None or self._graph_core[0] is not loop.protocol:
                self._graph_core = (loop.protocol, host_update_fn(model, loop.protocol))
            build_graph_update(model, self._state, self._graph_core[1], self._next_due, loop.record_update_in_step)
