"""Gradient masking: pruned gradients are multiplied by the mask before the optimizer applies them.

With a zero gradient and zeroed slots (zeroed at every mask update), the
optimizers in :data:`GRAD_MASKING_OPTIMIZERS` leave a zero weight and its
slots exactly at zero, so nothing has to be re-masked after each step.
The tf-keras ``model.optimizer.apply_gradients`` is wrapped on the optimizer
instance, at trace time (Keras 3 models: :mod:`sparsify_keras.train_step`).

Example:
    >>> import keras
    >>> grad_masking_supported(keras.optimizers.Adam()), grad_masking_supported(keras.optimizers.Adagrad())
    (True, False)
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Iterator

import tensorflow as tf

from sparsify.patching import patch, patch_of, unpatch

from .compat import tf_variable, unwrap_optimizer
from .state import model_state

__all__ = ["GRAD_MASKING_OPTIMIZERS", "grad_masking_supported", "mask_gradients", "install_grad_hook",
           "uninstall_grad_hook", "recording_masked_variables"]

#: Optimizer classes (Keras 3, tf-keras and tf-keras legacy) that keep a zero weight with zero
#: slots at zero under a zero gradient: moments start at and stay 0, the update is a multiple
#: of them (divided by ``sqrt(v) + epsilon``, hence epsilon must be > 0), weight decay scales
#: the weight. Not listed on purpose: Adagrad/Ftrl (accumulators start at 0.1; 0/0 with
#: epsilon=0 or l2=0 once zeroed), Adadelta, Adafactor (factored statistics), Muon (the
#: orthogonalised update is dense), and any subclass (it may override the update).
GRAD_MASKING_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Lion", "Lamb"})
_HOOKED = "apply_gradients"      # the tf-keras optimizer method the hook wraps
_TLS = threading.local()


@contextlib.contextmanager
def recording_masked_variables() -> Iterator[set]:
    """Collect (ids of) the variables whose gradients :func:`mask_gradients` masked while tracing."""
    seen: set[int] = set()
    prev = getattr(_TLS, "seen", None)
    _TLS.seen = seen
    try:
        yield seen
    finally:
        _TLS.seen = prev


def grad_masking_supported(optimizer: Any) -> bool:
    """Whether pruned gradients can be masked instead of re-masking weights after each step.

    Example:
        >>> import keras
        >>> grad_masking_supported(keras.optimizers.Adam()), grad_masking_supported(keras.optimizers.Adagrad())
        (True, False)
    """
    opt = unwrap_optimizer(optimizer)
    if opt is None:
        return False
    cls = type(opt)
    if cls.__name__ not in GRAD_MASKING_OPTIMIZERS or not (cls.__module__ or "").startswith(("keras.", "tf_keras.")):
        return False
    eps = getattr(opt, "epsilon", None)
    if eps is not None:
        try:
            if not float(eps) > 0:
                return False
        except (TypeError, ValueError):
            return False
    return True


def mask_gradients(models: list, grads: list, variables: list) -> list:
    """Multiply the gradients of pruned variables by their masks (trace time, replica context).

    With ``regrowth="rigl"`` the dense gradient (before masking) is kept in the state's
    ``grads`` variables first: the core grows the pruned weights with the largest ones.
    """
    table: dict[int, Any] = {}
    for ref in models:
        mdl = ref()
        st = model_state(mdl) if mdl is not None else None
        if st is None:
            continue
        for i, (pw, mask) in enumerate(zip(st.pweights, st.masks)):
            keep = (st.grads[i], st.grads_seen) if st.grads else None
            table[id(pw.variable)] = (pw.variable, mask, keep)
            table[id(tf_variable(pw.variable))] = (pw.variable, mask, keep)
    if not table:
        return list(grads)
    seen = getattr(_TLS, "seen", None)
    out = []
    for g, v in zip(grads, variables):
        entry = table.get(id(v))
        if entry is None or g is None:
            out.append(g)
            continue
        m = tf_variable(entry[1])
        if entry[2] is not None:
            tf_variable(entry[2][0]).assign(tf.cast(tf.convert_to_tensor(g), entry[2][0].dtype), read_value=False)
            tf_variable(entry[2][1]).assign(1, read_value=False)
        if isinstance(g, tf.IndexedSlices):
            vals = g.values
            mg = tf.gather(m, g.indices)
            g = tf.IndexedSlices(vals * (mg if mg.dtype == vals.dtype else tf.cast(mg, vals.dtype)),
                                 g.indices, g.dense_shape)
        else:
            g = tf.convert_to_tensor(g)
            g = g * (m if m.dtype == g.dtype else tf.cast(m, g.dtype))
        if seen is not None:
            seen.add(id(entry[0]))
        out.append(g)
    return out


def install_grad_hook(model: Any, optimizer: Any) -> None:
    """Wrap the tf-keras ``optimizer.apply_gradients`` on the instance (:func:`sparsify.patching.patch`): the
    gradients of every model hooked on it are masked first (the models are held weakly)."""
    found = patch_of(optimizer, _HOOKED)
    if found is not None:
        refs = found.data["models"]
        refs[:] = [r for r in refs if r() is not None]
        if not any(r() is model for r in refs):
            refs.append(weakref.ref(model))
        return
    refs = [weakref.ref(model)]

    def make(orig: Any) -> Any:
        def hook(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            gv = list(grads_and_vars)
            grads = mask_gradients(refs, [g for g, _ in gv], [v for _, v in gv])
            return orig(list(zip(grads, [v for _, v in gv])), *args, **kwargs)
        return hook

    patch(optimizer, _HOOKED, make, models=refs)


def uninstall_grad_hook(model: Any) -> None:
    """Take ``model`` off its optimizer's hook; give the optimizer its own ``apply_gradients`` back when no
    other model is hooked on it."""
    opt = getattr(model, "optimizer", None)
    found = patch_of(opt, _HOOKED) if opt is not None else None
    if found is None:
        return
    refs = found.data["models"]
    refs[:] = [r for r in refs if r() is not None and r() is not model]
    if not refs:
        unpatch(opt, _HOOKED)
