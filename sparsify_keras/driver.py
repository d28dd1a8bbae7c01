"""The seam between the one Keras update loop and the two Kerases: a :class:`KerasDriver` per pruned model.

:class:`~sparsify_keras.PruningCallback` (the update loop), :func:`~sparsify_keras.strip_pruning`, the state
schema (:class:`~sparsify_keras.state.StateSchema`), the gradient masking
(:func:`~sparsify_keras.train_step.masked_gradients`) and the adapter (:class:`~sparsify_keras.adapter.KerasAdapter`)
are written once. What differs between Keras 3 (JAX, PyTorch, TensorFlow) and tf-keras (Keras 2) is asked of
the model's driver, chosen once per model by its class (:func:`driver_for`):

* the state layer's class and how it joins the model (:meth:`KerasDriver.create_state`, :meth:`~KerasDriver.uninstall`);
* the tensor operations and train-step hooks (:attr:`KerasDriver.hooks`, a :class:`~sparsify_keras.train_step.StepHooks`);
* the compiled reads and writes of the state (:meth:`KerasDriver.adapter`), host syncs and steps;
* what the loop must refuse or may skip (:meth:`~KerasDriver.check_config`, :meth:`~KerasDriver.check_fit`, the
  in-graph update of tf-keras: :attr:`~KerasDriver.in_graph`, :meth:`~KerasDriver.batch_hooks`).

:class:`Keras3Driver` is here (``keras.ops``, ``keras.Variable``); the tf-keras driver is
``sparsify_tf.keras.driver.TfKerasDriver`` (``tf.*``), imported only when a tf-keras model shows up, so this
package imports without TensorFlow.

Example:
    >>> import keras
    >>> driver_for(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])).flavor
    'keras3'
"""
from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from sparsify import PruningConfig
from sparsify.criteria import scored_every_step
from sparsify.protocol import config_fingerprint

from .adapter import KerasAdapter
from .backend import compiled_read, state_scope, sync_to_variables, tf_strategy, to_numpy
from .compat import keras_flavor
from .state import PruningState, attach_state, detach_state
from .statistics import install_recorders, uninstall_recorders
from .train_step import StepHooks, install_train_step, uninstall_train_step

__all__ = ["KerasDriver", "Keras3Driver", "driver_for", "DRIVERS"]

#: Where each Keras's driver lives (``module:class``), imported when a model of that Keras is first pruned.
DRIVERS = {"keras3": "sparsify_keras.driver:Keras3Driver", "tf_keras": "sparsify_tf.keras.driver:TfKerasDriver"}


class KerasDriver:
    """What the update loop asks of one Keras (see the module); one instance per pruned model.

    Subclasses set :attr:`flavor` and :attr:`hooks` and implement the methods without a body here. The
    attributes about the in-graph update keep their defaults for a driver that updates on the host only.
    """

    flavor = ""
    #: the train step's tensor operations and hooks (:func:`sparsify_keras.train_step.install_train_step`)
    hooks: StepHooks
    #: the train step runs the mask updates itself (the loop then skips its per-batch host update)
    in_graph = False
    #: the Keras tunes ``steps_per_execution`` while it trains (the loop then reads the step at every batch)
    autotune = False
    #: how :meth:`check_fit`'s refusals name the strategy, and what they add after "without a strategy"
    strategy_name = "a distribution strategy"
    strategy_hint = ""

    def check_config(self, config: PruningConfig, update_in_graph: bool | None) -> None:
        """Refuse (``ValueError``) what this Keras cannot do with ``config``, before anything changes."""

    def create_state(self, model: Any, chosen: list, config: PruningConfig, keep_activations: bool) -> Any:
        """Make the state layer (:meth:`state_class`) for the ``chosen`` weights and attach it to ``model``."""
        state = self.state_class()(chosen, config_fingerprint(config), keep_grads=config.regrowth == "rigl",
                                   keep_activations=keep_activations,
                                   step_scores=config if scored_every_step(config.criterion) else None,
                                   straight_through=config.pruned_gradient == "straight_through",
                                   pruned_decay=config.pruned_decay)
        self.attach(model, state)
        return state

    def state_class(self) -> type:
        """The state layer's class (a :class:`~sparsify_keras.state.StateSchema` on this Keras's ``Layer``)."""
        raise NotImplementedError

    def attach(self, model: Any, state: Any) -> None:
        """Join ``state`` to ``model`` (and whatever records into it)."""
        raise NotImplementedError

    def scope(self, model: Any) -> Any:
        """Where the state is created and written (a distribution strategy's scope)."""
        raise NotImplementedError

    def sync(self, model: Any) -> None:
        """Make the variables hold the trainer's current state (before the host reads or writes them)."""

    def step(self, model: Any) -> int:
        """The optimizer's step, read on the host."""
        self.sync(model)
        return int(to_numpy(model.optimizer.iterations))

    def saved(self, state: Any) -> tuple[np.ndarray, int, list[np.ndarray]]:
        """The state as saved: its config fingerprint, last update step and masks (bool, TF layout)."""
        return (to_numpy(state.fingerprint), int(to_numpy(state.last_step)), [to_numpy(m) != 0 for m in state.masks])

    def adapter(self, model: Any, state: Any, criterion: str) -> KerasAdapter:
        """The adapter that reads and writes ``state`` for the core (made again when the state changes)."""
        raise NotImplementedError

    def install(self, model: Any, state: Any, callback: Any) -> None:
        """Wrap the model's train step (masking; ``callback`` for an in-graph update)."""
        raise NotImplementedError

    def uninstall(self, model: Any) -> Any:
        """Remove every hook and the state from ``model``; the state it held (None if none)."""
        raise NotImplementedError

    def under_strategy(self, model: Any) -> bool:
        """Whether ``model`` trains under a strategy that keeps its gradients per replica."""
        return False

    def check_fit(self, model: Any, callback: Any) -> None:
        """Refuse (``ValueError``), at the start of ``fit``, what cannot be done in this fit: RigL's dense
        gradients and per-step scores under a strategy (:meth:`under_strategy`: the gradients are per replica)."""
        config = callback.config
        rigl, every_step = config.regrowth == "rigl", scored_every_step(config.criterion)
        if not (rigl or every_step) or not self.under_strategy(model):
            return
        if rigl:
            raise ValueError(f"regrowth='rigl' is not supported under {self.strategy_name} (the dense gradients "
                             "are kept per replica); use regrowth='set' or train without a strategy")
        raise ValueError(f"criterion {config.criterion!r} (scored from the gradients of every step) is not "
                         f"supported under {self.strategy_name} (the gradients are per replica there); use "
                         f"'magnitude' or 'wanda', or train without a strategy{self.strategy_hint}")

    def batch_hooks(self, model: Any, update_in_graph: bool | None) -> bool:
        """Whether the loop needs its per-batch hook in this fit (tf-keras asks once per fit)."""
        return True

    def set_next_due(self, next_step: int) -> None:
        """The protocol's next due step (-1: never), for an update made in the train step."""


class Keras3Driver(KerasDriver):
    """Keras 3 on JAX, PyTorch or TensorFlow: ``keras.ops`` and ``keras.Variable`` (:mod:`sparsify_keras.backend`)."""

    flavor = "keras3"
    hooks = StepHooks()
    strategy_name = "a tf.distribute strategy"
    strategy_hint = " (JAX's keras.distribution is supported)"

    def __init__(self) -> None:
        self._adapter: KerasAdapter | None = None
        self._reader: tuple[Any, Any] | None = None      # (state, its compiled read for saved())

    def check_config(self, config: PruningConfig, update_in_graph: bool | None) -> None:
        if update_in_graph:
            raise ValueError("update_in_graph=True applies to tf-keras models; Keras 3 models update their masks "
                             "on the host at batch starts on every backend (leave update_in_graph unset)")

    def state_class(self) -> type:
        return PruningState

    def attach(self, model: Any, state: Any) -> None:
        attach_state(model, state)
        install_recorders(state)

    def scope(self, model: Any) -> Any:
        return state_scope(model)

    def sync(self, model: Any) -> None:
        sync_to_variables(model)

    def saved(self, state: Any) -> tuple[np.ndarray, int, list[np.ndarray]]:
        """Read in one compiled call (every ``fit`` starts with this check: one dispatch, not one per variable)."""
        if self._reader is None or self._reader[0] is not state:
            self._reader = (state, compiled_read(_as_saved, [state.fingerprint, state.last_step, *state.masks]))
        fingerprint, done, *keep = (to_numpy(x) for x in self._reader[1]())
        return fingerprint, int(done), keep

    def adapter(self, model: Any, state: Any, criterion: str) -> KerasAdapter:
        if self._adapter is None or self._adapter.state is not state:
            self._adapter = KerasAdapter(model, state, criterion)
        return self._adapter

    def install(self, model: Any, state: Any, callback: Any) -> None:
        install_train_step(model, state, self.hooks)

    def uninstall(self, model: Any) -> Any:
        uninstall_train_step(model, self.hooks)
        state = detach_state(model)
        uninstall_recorders(state)
        return state

    def under_strategy(self, model: Any) -> bool:
        return tf_strategy(model) is not None


def _as_saved(values: list) -> list:
    """``[fingerprint, last_step, *masks]`` with the masks as bool (what :meth:`Keras3Driver.saved` reads)."""
    import keras

    return [values[0], values[1], *[keras.ops.not_equal(m, 0) for m in values[2:]]]


def driver_for(model: Any) -> KerasDriver:
    """A new driver for ``model``, chosen by its class (:func:`sparsify_keras.compat.keras_flavor`).

    Raises:
        TypeError: ``model`` is not a Keras model.
        ImportError: a tf-keras model without TensorFlow's extra installed (named).
    """
    flavor = keras_flavor(model)
    module, _, name = DRIVERS[flavor].partition(":")
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as e:   # only tf-keras's driver can miss its framework: Keras 3's is this module
        if (e.name or "").split(".")[0] not in ("tensorflow", "tf_keras"):
            raise
        raise ImportError(f"model {getattr(model, 'name', model)!r} is a tf-keras model, which needs TensorFlow: "
                          f"install sparsify's `tf` extra ({e})") from e
    return getattr(found, name)()
