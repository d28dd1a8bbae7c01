"""Keeping pruned weights at zero inside the training step.

:func:`install_train_step` wraps the model's ``train_step`` (on the instance):
it installs gradient masking (:mod:`.grad_masking`) for the optimizers that
support it, and for everything else (other optimizers, constrained weights,
weights whose gradients bypass ``model.optimizer``, found when the step is
traced) multiplies the weight and its optimizer slots by the mask after every
step. Both run in the graph, on every replica. Last, the step hands itself to
a :class:`TrainStepExtension` (the :class:`~sparsify_tf.keras.PruningCallback`
adds the mask update due at the step just reached, :mod:`.graph_update`;
nothing under a distribution strategy or XLA).

Example:
    >>> import tensorflow as tf
    >>> v, m = tf.Variable([1.0, 2.0]), tf.Variable([1.0, 0.0])
    >>> mask_all([(v, m)]); v.numpy().tolist()
    [1.0, 0.0]
"""
from __future__ import annotations

import weakref
from typing import Any, Protocol, runtime_checkable

import tensorflow as tf

from sparsify.patching import patch, unpatch

from .compat import optimizer_slots, tf_variable
from .grad_masking import grad_masking_supported, install_grad_hook, recording_masked_variables
from .state import model_state
from .statistics import recording_activations

__all__ = ["TrainStepExtension", "strategy_of", "mask_all", "masking_pairs", "install_train_step",
           "uninstall_train_step"]


@runtime_checkable
class TrainStepExtension(Protocol):
    """What :func:`install_train_step` calls at the end of the wrapped train step while Keras traces it.

    ``extend_train_step(model)`` runs inside the step's trace (a ``tf.function``), after the optimizer
    step and the masking, so the ops it creates run at the end of every step (``PruningCallback`` adds its
    guarded in-graph mask update there). The train step keeps only a weak reference to the extension.

    Example:
        >>> import numpy as np, tf_keras
        >>> from sparsify_keras.layers import find_prunable_weights
        >>> from sparsify_tf.keras.state import attach_state, state_class
        >>> class CountTraces:
        ...     traces = 0
        ...     def extend_train_step(self, model):
        ...         self.traces += 1
        >>> m = tf_keras.Sequential([tf_keras.layers.InputLayer((4,)), tf_keras.layers.Dense(2)])
        >>> m.compile("sgd", "mse")
        >>> state = state_class()(find_prunable_weights(m), np.zeros(3, np.int64))
        >>> attach_state(m, state)
        >>> counter = CountTraces()
        >>> isinstance(counter, TrainStepExtension)
        True
        >>> install_train_step(m, state, extension=counter)
        >>> _ = m.fit(np.ones((4, 4)), np.zeros((4, 2)), verbose=0)
        >>> counter.traces > 0
        True
    """

    def extend_train_step(self, model: Any) -> None:
        """Add ops to the train step of ``model`` being traced (after the optimizer step)."""


def strategy_of(model: Any) -> tf.distribute.Strategy:
    """The model's distribution strategy (the default one when it has none)."""
    return getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()


def mask_all(pairs: list[tuple[tf.Variable, tf.Variable]]) -> Any:
    """``var.assign(var * mask)`` for every pair, on every replica (graph or eager)."""
    if not tf.distribute.has_strategy():          # plain (default-strategy) training: direct ops
        for v, m in pairs:
            v.assign(v * m, read_value=False)
        return None

    def merge_fn(strategy: tf.distribute.Strategy) -> Any:
        ops = [strategy.extended.update(v, lambda x, m: x.assign(x * m, read_value=False), args=(m,), group=True)
               for v, m in pairs]
        return tf.group(ops)

    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        return merge_fn(tf.distribute.get_strategy())
    return ctx.merge_call(merge_fn)


def masking_pairs(state: Any, model: Any, skip: frozenset = frozenset()) -> list[tuple[tf.Variable, tf.Variable]]:
    """(variable, mask) pairs for the pruned weights not in ``skip`` (ids) and their optimizer slots."""
    pairs = []
    opt = getattr(model, "optimizer", None)
    for pw, mask in zip(state.pweights, state.masks):
        if id(pw.variable) in skip:
            continue
        m = tf_variable(mask)
        pairs.append((tf_variable(pw.variable), m))
        for s in optimizer_slots(opt, pw.variable):
            pairs.append((tf_variable(s), m))
    return pairs


def install_train_step(model: Any, state: Any, extension: TrainStepExtension | None = None) -> None:
    """Wrap the tf-keras ``model.train_step`` on the instance (see the module; :func:`sparsify.patching.patch`:
    a second call wraps the model's own step again); ``extension`` extends the step at its end (weakly held)."""
    state_ref = weakref.ref(state)
    extension_ref = weakref.ref(extension) if extension is not None else None

    def make(inner: Any) -> Any:
        def train_step(data: Any) -> Any:
            # Runs when Keras traces the train function (per replica under a strategy).
            st = state_ref()
            if st is None or model_state(model) is not st:
                return inner(data)
            logs = _masked_step(model, st, inner, data)
            ext = extension_ref() if extension_ref is not None else None
            if ext is not None:          # PruningCallback: the mask update due at the step just reached
                ext.extend_train_step(model)
            return logs
        return train_step

    patch(model, "train_step", make)
    model.train_function = None   # force fit() to trace the wrapped step


def _masked_step(model: Any, st: Any, inner: Any, data: Any) -> Any:
    """``inner(data)`` with the pruned gradients masked, then the per-step multiply of what they missed."""
    opt = getattr(model, "optimizer", None)
    use_grads = grad_masking_supported(opt)
    if use_grads or st.grads:        # RigL: the hook also keeps the dense gradients
        install_grad_hook(model, opt)
    with recording_masked_variables() as seen, recording_activations(st):   # Wanda: sums the layers' inputs
        logs = inner(data)
    # Gradient-masked weights need nothing more; constrained weights (the constraint
    # may move a zero), weights the hook did not see (a custom train_step with another
    # optimizer) and unsupported optimizers get the per-step multiply of weight and slots.
    skip = frozenset(id(pw.variable) for pw in st.pweights
                     if use_grads and id(pw.variable) in seen
                     and getattr(pw.variable, "constraint", None) is None)
    st.record_per_step_paths([pw.path for pw in st.pweights if id(pw.variable) not in skip])
    pairs = masking_pairs(st, model, skip)
    if pairs:
        mask_all(pairs)
    return logs


def uninstall_train_step(model: Any) -> None:
    """Give ``model`` its own ``train_step`` back (nothing if it is not wrapped)."""
    if unpatch(model, "train_step"):
        model.train_function = None
