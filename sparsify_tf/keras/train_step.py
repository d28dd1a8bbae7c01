"""The tf-keras train-step hooks: TensorFlow's operations for the one masking of both Kerases.

The masking itself (:func:`sparsify_keras.train_step.install_train_step`: gradient masking,
straight-through, per-step criterion scores, the per-step multiply, input statistics) is written once
against a :class:`~sparsify_keras.train_step.StepHooks`. :class:`TfStepHooks` gives it, for a tf-keras model:

* ``ops``: ``tf.*`` under ``keras.ops``'s names (``IndexedSlices`` gradients are made dense);
* the step's variables (:class:`TfStepValues`): read as tensors, written with ``assign``, and under a
  distribution strategy through the strategy (``merge_call``: every replica's copy gets the value);
* the gradient hook on the tf-keras optimizer's ``apply_gradients`` (Keras 3's optimizers hook ``apply``).

Example:
    >>> import tensorflow as tf
    >>> v = tf.Variable([1.0, 2.0])
    >>> TfStepValues().write(v, TF_OPS.multiply(TfStepValues().read(v), 2.0)); v.numpy().tolist()
    [2.0, 4.0]
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import tensorflow as tf

from sparsify.patching import unpatch
from sparsify_keras.backend import StepValues, stateful_train_step
from sparsify_keras.train_step import StepHooks, hook_optimizer

from .compat import tf_variable

__all__ = ["TF_OPS", "TfStepValues", "TfStepHooks", "strategy_of"]

#: ``keras.ops``'s names the masking uses, as TensorFlow ops (:data:`sparsify_keras.backend.STEP_OPS`)
TF_OPS = SimpleNamespace(add=tf.add, multiply=tf.multiply, cast=tf.cast, ones=tf.ones, greater=tf.greater,
                         where=tf.where, dense_gradient=tf.convert_to_tensor)
_HOOKED = "apply_gradients"      # the tf-keras optimizer method the gradient hook wraps


def strategy_of(model: Any) -> tf.distribute.Strategy:
    """The model's distribution strategy (the default one when it has none)."""
    return getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()


class TfStepValues(StepValues):
    """A tf-keras train step's variables (see the module)."""

    def read(self, variable: Any) -> Any:
        return tf.convert_to_tensor(tf_variable(variable))

    def write(self, variable: Any, value: Any) -> None:
        var = tf_variable(variable)
        value = tf.cast(value, var.dtype)
        if not tf.distribute.has_strategy():          # plain (default-strategy) training: direct ops
            var.assign(value, read_value=False)
            return

        def merge_fn(strategy: tf.distribute.Strategy, x: Any) -> Any:
            return strategy.extended.update(var, lambda v, y: v.assign(y, read_value=False), args=(x,), group=True)

        ctx = tf.distribute.get_replica_context()
        if ctx is None:
            merge_fn(tf.distribute.get_strategy(), value)
        else:
            ctx.merge_call(merge_fn, args=(value,))


class TfStepHooks(StepHooks):
    """The hooks of a tf-keras train step (see the module)."""

    ops = TF_OPS

    def wrap_train_step(self, model: Any, run_inner: Callable, after_step: Callable) -> Callable:
        # runs when tf-keras traces the train function (per replica under a strategy)
        return stateful_train_step(run_inner, after_step, TfStepValues)

    def install_grad_hook(self, model: Any, state: Any) -> None:
        def make(orig: Any, mask: Callable) -> Any:
            def hook(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
                gv = list(grads_and_vars)
                variables = [v for _, v in gv]
                return orig(list(zip(mask([g for g, _ in gv], variables, TF_OPS), variables)), *args, **kwargs)
            return hook

        hook_optimizer(model.optimizer, _HOOKED, state, make)

    def uninstall_grad_hook(self, model: Any) -> None:
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None:
            unpatch(optimizer, _HOOKED)
