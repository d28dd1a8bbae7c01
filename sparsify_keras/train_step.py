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
* **Input statistics** (criteria that read activations, :mod:`.statistics`) are recorded while the step runs.

Both run inside the compiled step of each backend (JAX's stateless step included): the host only
writes the masks at an update.

Example:
    >>> import keras
    >>> grad_masking_supported(keras.optimizers.Adam()), grad_masking_supported(keras.optimizers.Adagrad())
    (True, False)
"""
from __future__ import annotations

import weakref
from typing import Any

import keras

from .backend import StepValues, current_step_values, dense_gradient, wrap_train_step
from .compat import optimizer_class, optimizer_slots, unwrap_optimizer
from .state import PruningState, model_state
from .statistics import recording_activations

__all__ = ["GRAD_MASKING_OPTIMIZERS", "grad_masking_supported", "install_train_step", "uninstall_train_step"]

#: Optimizer classes that keep a zero weight with zero slots at zero under a zero gradient: moments
#: start at and stay 0, the update is a multiple of them (divided by ``sqrt(v) + epsilon``, hence
#: epsilon must be > 0), weight decay scales the weight. Not listed on purpose: Adagrad/Ftrl
#: (accumulators start at 0.1), Adadelta, Adafactor (factored statistics), Muon (the orthogonalised
#: update is dense), and any subclass (it may override the update).
GRAD_MASKING_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Lion", "Lamb"})
_WRAP_FLAG = "_sparsify_wrapped"


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


def _masked_gradients(state: PruningState, grads: list, variables: list, values: StepValues) -> tuple[list, set]:
    """The gradients with pruned entries masked (and RigL's dense gradients kept); ids of masked variables."""
    index = {id(pw.variable): i for i, pw in enumerate(state.pweights)}
    out, masked = [], set()
    for g, v in zip(grads, variables):
        i = index.get(id(v))
        if i is None or g is None:
            out.append(g)
            continue
        g = dense_gradient(g)
        if state.grads:
            values.write(state.grads[i], g)
            values.write(state.grads_seen, keras.ops.ones((), "int32"))
        if state.straight_through:          # the optimizer steps the dense weight (see the module)
            if state.pruned_decay:          # SR-STE: + decay * (the pruned entries' stored values)
                g = keras.ops.add(g, keras.ops.multiply(keras.ops.cast(values.read(state.stored[i]), g.dtype),
                                                        state.pruned_decay))
            out.append(g)
            continue
        out.append(keras.ops.multiply(g, keras.ops.cast(values.read(state.masks[i]), g.dtype)))
        masked.add(id(v))
    return out, masked


def _install_grad_hook(model: Any, state: PruningState, masked: set) -> None:
    optimizer = unwrap_optimizer(model.optimizer)
    current = optimizer.__dict__.get("apply")
    if current is not None and getattr(current, _WRAP_FLAG, False):
        current._sparsify_state[0] = weakref.ref(state)
        current._sparsify_masked[0] = masked
        return
    orig = current if current is not None else type(optimizer).apply.__get__(optimizer, type(optimizer))
    state_ref: list = [weakref.ref(state)]
    masked_ref: list = [masked]

    def apply(grads: Any, trainable_variables: Any = None) -> Any:
        st, values = state_ref[0](), current_step_values()
        if st is not None and values is not None:
            tv = trainable_variables if trainable_variables is not None else optimizer._trainable_variables
            grads, seen = _masked_gradients(st, list(grads), list(tv), values)
            masked_ref[0].update(seen)
        return orig(grads, trainable_variables)

    setattr(apply, _WRAP_FLAG, True)
    apply._sparsify_state, apply._sparsify_masked = state_ref, masked_ref
    apply._sparsify_inner, apply._sparsify_had_instance_attr = orig, current is not None
    object.__setattr__(optimizer, "apply", apply)


def _uninstall_grad_hook(model: Any) -> None:
    optimizer = unwrap_optimizer(getattr(model, "optimizer", None))
    current = optimizer.__dict__.get("apply") if optimizer is not None else None
    if current is None or not getattr(current, _WRAP_FLAG, False):
        return
    if current._sparsify_had_instance_attr:
        object.__setattr__(optimizer, "apply", current._sparsify_inner)
    else:
        del optimizer.__dict__["apply"]


def _mask_after_step(model: Any, state: PruningState, skip: set, values: StepValues) -> None:
    """Multiply the pruned weights not in ``skip`` (ids) and their optimizer slots by their masks
    (straight-through: move the kernel's pruned entries into the stored values instead)."""
    for pw, mask, stored in zip(state.pweights, state.masks, state.stored):
        if id(pw.variable) in skip:
            continue
        m = values.read(mask)
        if state.straight_through:
            w = values.read(pw.variable)
            m = keras.ops.cast(m, w.dtype)
            values.write(stored, keras.ops.add(values.read(stored), keras.ops.multiply(w, 1 - m)))
            values.write(pw.variable, keras.ops.multiply(w, m))
            continue
        for v in [pw.variable, *optimizer_slots(model.optimizer, pw.variable)]:
            x = values.read(v)
            values.write(v, keras.ops.multiply(x, keras.ops.cast(m, x.dtype)))


def install_train_step(model: Any, state: PruningState) -> None:
    """Wrap ``model.train_step`` and the optimizer's ``apply`` (see the module); ``fit`` traces them anew."""
    current = model.__dict__.get("train_step")
    wrapped = current is not None and getattr(current, _WRAP_FLAG, False)
    inner = current._sparsify_inner if wrapped else (
        current if current is not None else type(model).train_step.__get__(model, type(model)))
    state_ref = weakref.ref(state)

    def after_step(values: StepValues) -> None:
        st = state_ref()
        masked = after_step.masked if grad_masking_supported(model.optimizer) else set()
        if st is None or model_state(model) is not st:
            return
        skip = {id(pw.variable) for pw in st.pweights
                if id(pw.variable) in masked and getattr(pw.variable, "constraint", None) is None}
        st.record_per_step_paths([] if st.straight_through else
                                 [pw.path for pw in st.pweights if id(pw.variable) not in skip])
        _mask_after_step(model, st, skip, values)
        after_step.masked.clear()

    after_step.masked = set()

    def run_inner(*args: Any) -> Any:
        st = state_ref()
        if st is None or model_state(model) is not st:
            return inner(*args)
        if grad_masking_supported(model.optimizer) or st.grads or st.straight_through:
            _install_grad_hook(model, st, after_step.masked)
        with recording_activations(st):
            return inner(*args)

    step = wrap_train_step(model, run_inner, after_step)
    setattr(step, _WRAP_FLAG, True)
    step._sparsify_inner = inner
    step._sparsify_had_instance_attr = current is not None and not wrapped
    object.__setattr__(model, "train_step", step)
    model.train_function = None   # fit() makes the train function again, from the wrapped step


def uninstall_train_step(model: Any) -> None:
    """Give the model its own ``train_step`` and the optimizer its own ``apply`` back."""
    _uninstall_grad_hook(model)
    current = model.__dict__.get("train_step")
    if current is None or not getattr(current, _WRAP_FLAG, False):
        return
    if current._sparsify_had_instance_attr:
        object.__setattr__(model, "train_step", current._sparsify_inner)
    else:
        del model.__dict__["train_step"]
    model.train_function = None
