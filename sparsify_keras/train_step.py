"""Keeping pruned weights at zero inside a Keras 3 training step, on every backend.

:func:`install_train_step` wraps the model's ``train_step`` (on the instance, through
:func:`sparsify_keras.backend.wrap_train_step`) and the optimizer's ``apply``:

* **Gradient masking**: for the optimizers in :data:`GRAD_MASKING_OPTIMIZERS` the gradients of pruned
  weights are multiplied by their masks before the optimizer applies them. With a zero gradient and
  zeroed slots (zeroed at every mask update) those optimizers keep a zero weight and its slots at zero
  (weight decay scales the weight), so nothing has to be re-masked. With ``regrowth="rigl"`` the dense
  gradient is kept first (the core grows the pruned weights with the largest ones).
* **Per-step masking**: every other pruned weight (another optimizer, a weight constraint that could move
  a zero, a weight the optimizer did not see) and its slots are multiplied by the mask after each step.
* **Straight-through** (``pruned_gradient="straight_through"``): gradients are not masked, so the optimizer
  steps pruned entries like any weight (the forward pass still sees zeros); after each step what the
  optimizer moved into a pruned entry of the kernel is added to its stored value and the kernel entry
  zeroed again, so the dense weight (kernel + stored) is the one the optimizer stepped. With
  ``pruned_decay`` (SR-STE) the gradient also gets ``pruned_decay`` times the stored values (the pruned
  entries' dense values, zero where kept).
* **Per-step criteria** (``snip``, ``snip_momentum``, a registered criterion that needs gradients): after the
  gradient of a pruned weight is formed (masked, or dense with straight-through) its scores are computed
  from the dense weight and kept in the state (a running state folded in), as torch's pruner does after
  each backward pass; the host reads them at an update.
* **Input statistics** (criteria that read activations, :mod:`.statistics`) are recorded while the step runs.

Both run inside the compiled step of each backend (JAX's stateless step included): the host only
writes the masks at an update.

Example:
    >>> import keras
    >>> grad_masking_supported(keras.optimizers.Adam()), grad_masking_supported(keras.optimizers.Adagrad())
    (True, False)
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Protocol, runtime_checkable

import keras

from sparsify.criteria import get_criterion, gradient_score
from sparsify.patching import patch, patch_of, unpatch

from .backend import STEP_OPS, StepValues, current_step_values, wrap_train_step
from .compat import backend_variable, optimizer_class, optimizer_slots, optimizer_trainable_variables, unwrap_optimizer
from .state import model_state
from .statistics import recording_activations

__all__ = ["GRAD_MASKING_OPTIMIZERS", "grad_masking_supported", "masked_gradients", "mask_after_step",
           "hook_optimizer", "TrainStepExtension", "StepHooks", "install_train_step", "uninstall_train_step", "step_scores"]

#: Optimizer classes that keep a zero weight with zero slots at zero under a zero gradient: moments
#: start at and stay 0, the update is a multiple of them (divided by ``sqrt(v) + epsilon``, hence
#: epsilon must be > 0), weight decay scales the weight. Not listed on purpose: Adagrad/Ftrl
#: (accumulators start at 0.1), Adadelta, Adafactor (factored statistics), Muon (the orthogonalised
#: update is dense), and any subclass (it may override the update).
GRAD_MASKING_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Lion", "Lamb"})
_TLS = threading.local()


def grad_masking_supported(optimizer: Any) -> bool:
    """Whether pruned gradients can be masked instead of re-masking weights after each step."""
    cls = optimizer_class(optimizer)
    if cls is None or cls.__name__ not in GRAD_MASKING_OPTIMIZERS:
        return False
    if not (cls.__module__ or "").startswith(("keras.", "tf_keras.")):
        return False
    eps = getattr(unwrap_optimizer(optimizer), "epsilon", None)
    if eps is not None:
        try:
            return float(eps) > 0
        except (TypeError, ValueError):
            return False
    return True


def step_scores(config: Any, previous: Any, weight: Any, grad: Any, seen: Any, ops: Any = STEP_OPS) -> Any:
    """:func:`sparsify.criteria.gradient_score` inside a compiled step: ``previous`` is ignored while ``seen``
    is False (a running average starts with this step). ``weight`` is the dense weight, ``grad`` the gradient
    the optimizer gets (zero at pruned entries unless straight-through), as in every adapter; ``ops`` the
    driver's tensor operations."""
    if "state" not in get_criterion(config.criterion).needs:
        return gradient_score(config, None, weight, grad)
    return ops.where(seen, gradient_score(config, previous, weight, grad), gradient_score(config, None, weight, grad))


def _record_scores(state: Any, i: int, grad: Any, values: StepValues, ops: Any) -> None:
    """Fold this step's gradient of weight ``i`` into its per-step criterion scores."""
    dense = ops.add(values.read(state.pweights[i].variable), values.read(state.stored[i]))
    seen = ops.greater(values.read(state.scores_seen), 0)
    new = step_scores(state.step_scores, values.read(state.scores[i]), dense, grad, seen, ops)
    values.write(state.scores[i], new)


def masked_gradients(state: Any, grads: list, variables: list, values: StepValues,
                     ops: Any = STEP_OPS) -> tuple[list, set]:
    """The one gradient masking of both Kerases: the gradients with pruned entries masked (RigL's dense
    gradients and per-step criterion scores kept; straight-through: not masked, SR-STE's decay added); ids
    of the masked variables. ``ops``: the driver's tensor operations (``keras.ops``, or TensorFlow's for
    tf-keras), ``values``: the step's variables (:class:`~sparsify_keras.backend.StepValues`)."""
    index: dict[int, int] = {}
    for i, pw in enumerate(state.pweights):
        index[id(pw.variable)] = i
        if backend_variable(pw.variable) is not None:        # TensorFlow's optimizers may see the inner one
            index[id(backend_variable(pw.variable))] = i
    out, masked = [], set()
    for g, v in zip(grads, variables):
        i = index.get(id(v))
        if i is None or g is None:
            out.append(g)
            continue
        g = ops.dense_gradient(g)
        if state.grads:
            values.write(state.grads[i], g)
            values.write(state.grads_seen, ops.ones((), state.INT_DTYPE))
        if state.straight_through:          # the optimizer steps the dense weight (see the module)
            if state.pruned_decay:          # SR-STE: + decay * (the pruned entries' stored values)
                g = ops.add(g, ops.multiply(ops.cast(values.read(state.stored[i]), g.dtype), state.pruned_decay))
        else:
            m = values.read(state.masks[i])        # the backend's own operator: one op per step on eager torch
            g = g * (m if m.dtype == g.dtype else ops.cast(m, g.dtype))
            masked.add(id(state.pweights[i].variable))
        if state.scores:
            _record_scores(state, i, g, values, ops)
        out.append(g)
    if state.scores and any(i is not None for i in map(index.get, map(id, variables))):
        values.write(state.scores_seen, ops.ones((), state.INT_DTYPE))
    return out, masked


def hook_optimizer(optimizer: Any, name: str, state: Any, make: Callable) -> None:
    """Patch ``optimizer.<name>`` (on the instance) so the gradients it gets are :func:`masked_gradients`' first.

    ``make(original, mask)`` returns the wrapper; ``mask(grads, variables, ops)`` masks a step's gradients
    (nothing outside a wrapped train step) and records the masked variables for the step being traced in
    this thread (each replica of a ``tf.distribute`` strategy traces in its own). Hooking again (the step
    traced anew) only points the hook at ``state``.
    """
    found = patch_of(optimizer, name)
    if found is not None:
        found.data["state"][0] = weakref.ref(state)
        return
    state_ref: list = [weakref.ref(state)]

    def mask(grads: Any, variables: Any, ops: Any) -> list:
        st, values = state_ref[0](), current_step_values()
        if st is None or values is None:
            return list(grads)
        out, seen = masked_gradients(st, list(grads), list(variables), values, ops)
        _masked_in_step().update(seen)
        return out

    patch(optimizer, name, lambda original: make(original, mask), state=state_ref)


def _masked_in_step() -> set:
    """Ids of the variables whose gradients were masked in the step this thread is tracing."""
    if not hasattr(_TLS, "masked"):
        _TLS.masked = set()
    return _TLS.masked


def _install_grad_hook(model: Any, state: Any) -> None:
    """Keras 3: mask in the optimizer's ``apply(grads, variables)``."""
    optimizer = unwrap_optimizer(model.optimizer)

    def make(orig: Any, mask: Callable) -> Any:
        def apply(grads: Any, trainable_variables: Any = None) -> Any:
            tv = trainable_variables if trainable_variables is not None else optimizer_trainable_variables(optimizer)
            return orig(mask(grads, tv, STEP_OPS), trainable_variables)
        return apply

    hook_optimizer(optimizer, "apply", state, make)


def _uninstall_grad_hook(model: Any) -> None:
    optimizer = unwrap_optimizer(getattr(model, "optimizer", None))
    if optimizer is not None:
        unpatch(optimizer, "apply")


def mask_after_step(model: Any, state: Any, skip: set, values: StepValues, ops: Any = STEP_OPS) -> None:
    """Multiply the pruned weights not in ``skip`` (ids) and their optimizer slots by their masks
    (straight-through: move the kernel's pruned entries into the stored values instead)."""
    for pw, mask, stored in zip(state.pweights, state.masks, state.stored):
        if id(pw.variable) in skip:
            continue
        m = values.read(mask)
        if state.straight_through:
            w = values.read(pw.variable)
            m = ops.cast(m, w.dtype)
            values.write(stored, ops.add(values.read(stored), ops.multiply(w, 1 - m)))
            values.write(pw.variable, ops.multiply(w, m))
            continue
        for v in [pw.variable, *optimizer_slots(model.optimizer, pw.variable)]:
            x = values.read(v)
            values.write(v, ops.multiply(x, ops.cast(m, x.dtype)))


@runtime_checkable
class TrainStepExtension(Protocol):
    """What :func:`install_train_step` calls at the end of the wrapped train step while it is traced.

    ``extend_train_step(model)`` runs inside the step's trace, after the optimizer step and the masking, so
    the ops it creates run at the end of every step (the tf-keras driver adds its guarded in-graph mask
    update there). The train step keeps only a weak reference to the extension.
    """

    def extend_train_step(self, model: Any) -> None:
        """Add ops to the train step of ``model`` being traced (after the optimizer step)."""


class StepHooks:
    """How a driver hooks a train step: Keras 3's (``keras.ops``; the optimizer's ``apply``;
    :func:`sparsify_keras.backend.wrap_train_step`). The tf-keras driver has its own."""

    ops = STEP_OPS

    def wrap_train_step(self, model: Any, run_inner: Any, after_step: Any) -> Any:
        return wrap_train_step(model, run_inner, after_step)

    def install_grad_hook(self, model: Any, state: Any) -> None:
        _install_grad_hook(model, state)

    def uninstall_grad_hook(self, model: Any) -> None:
        _uninstall_grad_hook(model)


def install_train_step(model: Any, state: Any, hooks: StepHooks | None = None,
                       extension: TrainStepExtension | None = None) -> None:
    """Wrap ``model.train_step`` and the optimizer's update (see the module) through ``hooks`` (the model's
    driver's; Keras 3's by default); ``extension`` extends the step at its end (weakly held). ``fit`` traces
    them anew; a second call wraps the model's own step again."""
    hooks = StepHooks() if hooks is None else hooks
    state_ref = weakref.ref(state)
    extension_ref = weakref.ref(extension) if extension is not None else None
    patch(model, "train_step", lambda inner: _wrapped_step(model, inner, state_ref, hooks, extension_ref))
    model.train_function = None   # fit() makes the train function again, from the wrapped step


def _wrapped_step(model: Any, inner: Any, state_ref: Any, hooks: StepHooks, extension_ref: Any) -> Any:
    """The model's step ``inner`` with the gradient hook, the activation recorders and the masking after it."""

    def after_step(values: StepValues) -> None:
        st = state_ref()
        masked = _masked_in_step() if grad_masking_supported(model.optimizer) else set()
        if st is None or model_state(model) is not st:
            return
        skip = {id(pw.variable) for pw in st.pweights
                if id(pw.variable) in masked and getattr(pw.variable, "constraint", None) is None}
        st.record_per_step_paths([] if st.straight_through else
                                 [pw.path for pw in st.pweights if id(pw.variable) not in skip])
        mask_after_step(model, st, skip, values, hooks.ops)
        _masked_in_step().clear()
        ext = extension_ref() if extension_ref is not None else None
        if ext is not None:          # the tf-keras driver: the mask update due at the step just reached
            ext.extend_train_step(model)

    def run_inner(*args: Any) -> Any:
        st = state_ref()
        if st is None or model_state(model) is not st:
            return inner(*args)
        _masked_in_step().clear()
        if grad_masking_supported(model.optimizer) or st.grads or st.straight_through or st.scores:
            hooks.install_grad_hook(model, st)
        with recording_activations(st):
            return inner(*args)

    return hooks.wrap_train_step(model, run_inner, after_step)


def uninstall_train_step(model: Any, hooks: StepHooks | None = None) -> None:
    """Give the model its own ``train_step`` and the optimizer its own update back."""
    (StepHooks() if hooks is None else hooks).uninstall_grad_hook(model)
    if unpatch(model, "train_step"):
        model.train_function = None
