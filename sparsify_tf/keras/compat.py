"""What the tf-keras (Keras 2) driver needs beyond :mod:`sparsify_keras.compat`: every tf-keras private
attribute :mod:`sparsify_tf.keras` reads or writes is touched here, and only here.

The TF variable inside a Keras variable (:func:`tf_variable`), the callback protocol flags tf-keras reads
(:func:`declare_callback_protocol`), a model's XLA and steps-per-execution autotuning settings
(:func:`jit_compiled`, :func:`autotunes_steps_per_execution`), building an optimizer's slots
(:func:`build_optimizer`), the optimizer's variable list (:func:`optimizer_variables`) and the model's
checkpoint dependency on the pruning state (:func:`track_dependency`, :func:`untrack_dependency`). What
both Kerases share (a model's flavour, its layers, an optimizer's slots) is read in
:mod:`sparsify_keras.compat`.

Example:
    >>> v = tf.Variable([1.0, 2.0])          # a tf-keras variable is a tf.Variable already
    >>> tf_variable(v) is v
    True
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from sparsify_keras.compat import optimizer_slots

__all__ = ["tf_variable", "declare_callback_protocol", "jit_compiled", "autotunes_steps_per_execution",
           "build_optimizer", "track_dependency", "untrack_dependency", "optimizer_variables"]


def tf_variable(variable: Any) -> tf.Variable:
    """The ``tf.Variable`` behind a Keras 3 variable (tf-keras variables are already one)."""
    inner = getattr(variable, "_value", None)
    if isinstance(inner, tf.Variable):
        return inner
    return variable


def optimizer_variables(optimizer: Any) -> list | None:
    """The optimizer's variable list: ``_variables`` (Keras 3, tf-keras), ``_weights`` (tf-keras legacy); else None."""
    found = getattr(optimizer, "_variables", None)
    if not isinstance(found, list):
        found = getattr(optimizer, "_weights", None)
    return found if isinstance(found, list) else None


def declare_callback_protocol(callback: Any) -> None:
    """Set the flags tf-keras' ``CallbackList`` reads on a callback: it takes TF logs, and runs on every worker."""
    callback._supports_tf_logs = True
    callback._chief_worker_only = None


def jit_compiled(model: Any) -> bool:
    """Whether a tf-keras model's train step is compiled with XLA (``jit_compile=True``).

    Example:
        >>> import tf_keras
        >>> m = tf_keras.Sequential([tf_keras.layers.Dense(2)])
        >>> m.compile("sgd", "mse", jit_compile=True)
        >>> jit_compiled(m)
        True
    """
    return getattr(model, "_jit_compile", None) is True


def autotunes_steps_per_execution(model: Any) -> bool:
    """Whether tf-keras tunes the model's ``steps_per_execution`` while it trains (``"auto"``)."""
    return bool(getattr(model, "_autotune_steps_per_execution", False))


def build_optimizer(optimizer: Any, variables: list, probe: Any) -> None:
    """Create a tf-keras optimizer's slots for ``variables`` now, as its first step would (nothing if it has
    them: ``probe``, a variable, has slots, or the optimizer is built)."""
    if hasattr(optimizer, "_create_all_weights") and not hasattr(optimizer, "build"):     # legacy optimizers
        if not optimizer_slots(optimizer, probe):
            optimizer._create_all_weights(variables)
    elif hasattr(optimizer, "build") and not (getattr(optimizer, "built", False)
                                              or getattr(optimizer, "_built", False)):
        optimizer.build(variables)


def track_dependency(model: Any, trackable: Any, name: str) -> None:
    """Make ``trackable`` a checkpoint dependency of ``model`` named ``name`` (TF-format ``save_weights``,
    ``BackupAndRestore``); this also restores it when ``load_weights`` ran before it existed."""
    model._track_trackable(trackable, name=name, overwrite=True)


def untrack_dependency(model: Any, name: str) -> None:
    """Undo :func:`track_dependency`."""
    deps = getattr(model, "_self_unconditional_checkpoint_dependencies", None)
    if isinstance(deps, list):
        deps[:] = [d for d in deps if d.name != name]
    names = getattr(model, "_self_unconditional_dependency_names", None)
    if isinstance(names, dict):
        names.pop(name, None)
