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

import weakref
from typing import Any

import keras

from sparsify.criteria import get_criterion, gradient_score
from sparsify.patching import patch, patch_of, unpatch

from .backend import StepValues, current_step_values, dense_gradient, wrap_train_step
from .compat import optimizer_class, optimizer_slots, optimizer_trainable_variables, unwrap_optimizer
from .state import PruningState, model_state
from .statistics import recording_activations

__all__ = ["GRAD_MASKING_OPTIMIZERS", "grad_masking_supported", "install_train_step", "uninstall_train_step",
           "step_scores"]

#: Optimizer classes that keep a zero weight with zero slots at zero under a zero gradient: moments
#: start at and stay 0, the update is a multiple of them (divided by ``sqrt(v) + epsilon``, hence
#: epsilon must be > 0), weight decay scales the weight. Not listed on purpose: Adagrad/Ftrl
#: (accumulators start at 0.1), Adadelta, Adafactor (factored statistics), Muon (the orthogonalised
#: update is dense), and any subclass (it may override the update).
GRAD_MASKING_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Lion", "Lamb"})


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


def step_scores(config: Any, previous: Any, weight: Any, grad: Any, seen: Any) -> Any:
    """:func:`sparsify.criteria.gradient_score` inside a compiled step: ``previous`` is ignored while ``seen``
    is False (a running average starts with this step). ``weight`` is the dense weight, ``grad`` the gradient
    the optimizer gets (zero at pruned entries unless straight-through), as in every adapter."""
    if "state" not in get_criterion(config.criterion).needs:
        return gradient_score(config, None, weight, grad)
    return keras.ops.where(seen, gradient_score(config, previous, weight, grad),
                           gradient_score(config, None, weight, grad))


def _record_scores(state: PruningState, i: int, grad: Any, values: StepValues) -> None:
    """Fold this step's gradient of weight ``i`` into its per-step criterion scores."""
    dense = keras.ops.add(values.read(state.pweights[i].variable), values.read(state.stored[i]))
    seen = keras.ops.greater(values.read(state.scores_seen), 0)
    new = step_scores(state.step_scores, values.read(state.scores[i]), dense, grad, seen)
    values.write(state.scores[i], new)


def _masked_gradients(state: PruningState, grads: list, variables: list, values: StepValues) -> tuple[list, set]:
    """The gradients with pruned entries masked (RigL's dense gradients and per-step criterion scores kept);
    ids of masked variables."""
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
        else:
            m = values.read(state.masks[i])        # the backend's own operator: one op per step on eager torch
            g = g * (m if m.dtype == g.dtype else keras.ops.cast(m, g.dtype))
            masked.add(id(v))
        if state.scores:
            _record_scores(state, i, g, values)
        out.append(g)
    if state.scores and any(i is not None for i in map(index.get, map(id, variables))):
        values.write(state.scores_seen, keras.ops.ones((), "int32"))
    return out, masked


def _install_grad_hook(model: Any, state: PruningState, masked: set) -> None:
    optimizer = unwrap_optimizer(model.optimizer)
    found = patch_of(optimizer, "apply")
    if found is not None:
        found.data["state"][0] = weakref.ref(state)
        found.data["masked"][0] = masked
        return
    state_ref: list = [weakref.ref(state)]
    masked_ref: list = [masked]

    def make(orig: Any) -> Any:
        def apply(grads: Any, trainable_variables: Any = None) -> Any:
            st, values = state_ref[0](), current_step_values()
            if st is not None and values is not None:
                tv = trainable_variables if trainable_variables is not None \
                    else optimizer_trainable_variables(optimizer)
                grads, seen = _masked_gradients(st, list(grads), list(tv), values)
                masked_ref[0].update(seen)
            return orig(grads, trainable_variables)
        return apply

    patch(optimizer, "apply", make, state=state_ref, masked=masked_ref)


def _uninstall_grad_hook(model: Any) -> None:
    optimizer = unwrap_optimizer(getattr(model, "optimizer", None))
    if optimizer is not None:
        unpatch(optimizer, "apply")


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
    state_ref = weakref.ref(state)
    patch(model, "train_step", lambda inner: _wrapped_step(model, inner, state_ref))
    model.train_function = None   # fit() makes the train function again, from the wrapped step


def _wrapped_step(model: Any, inner: Any, state_ref: Any) -> Any:
    """The model's step ``inner`` with the gradient hook, the activation recorders and the masking after it."""

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
        if grad_masking_supported(model.optimizer) or st.grads or st.straight_through or st.scores:
            _install_grad_hook(model, st, after_step.masked)
        with recording_activations(st):
            return inner(*args)

    return wrap_train_step(model, run_inner, after_step)


def uninstall_train_step(model: Any) -> None:
    """Give the model its own ``train_step`` and the optimizer its own ``apply`` back."""
    _uninstall_grad_hook(model)
    if unpatch(model, "train_step"):
        model.train_function = None
