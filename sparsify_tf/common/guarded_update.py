"""The guarded in-graph mask update, one builder for TF graph mode and the tf-keras train step.

:func:`build_guarded_update` adds ``cond(step >= next_due, update, no_op)``: one comparison per step,
and an update branch that hands the dense weights (``weight + stored``), the masks, the dense gradients
(RigL) and the input statistics (Wanda) to the core through ``tf.numpy_function`` and writes what it returns
with the one TF writer (:func:`sparsify_tf.common.mask_write.write_update`): the masks, the weights, the
stored values and the optimizer slots, then the done and next due steps, and it zeroes the statistics
after an update. :func:`sparsify_tf.prune_graph` (graph ops convert the layout) and
:mod:`sparsify_tf.keras.graph_update` (the host converts) both build their update with it.

The host side, :func:`core_update_fn`, is the ``numpy_function`` body that runs the core: it restores the
core :class:`sparsify.PruningProtocol` from the graph's variables when they changed, advances it to the
step and returns the masks (and the zeros) to write, as 0/1 arrays of the mask variables' float dtype
(TF's oneDNN logs an error line whenever a bool or integer tensor is transposed).

Example:
    >>> import numpy as np
    >>> from sparsify import PruningConfig, PruningProtocol
    >>> from sparsify.protocol import config_fingerprint
    >>> cfg = PruningConfig(target_sparsity=0.5, start_step=0, end_step=0)
    >>> fn = core_update_fn(PruningProtocol(cfg, {"w": (2, 2)}), "g", {})
    >>> keep, zero, done, nxt = fn(np.int64(0), np.int64(-1), config_fingerprint(cfg),
    ...                            np.array([[1., 4.], [3., 2.]]), np.ones((2, 2), np.float32))
    >>> keep.tolist(), int(done), int(nxt) == NEVER          # masks travel as 0/1 floats
    ([[0.0, 1.0], [1.0, 0.0]], 0, True)
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf

from sparsify.protocol import PruningProtocol, config_fingerprint, fingerprint_differences

from .layout_ops import from_canonical, to_canonical
from .mask_write import dense_value, write_update
from .pruning_scope import PruningScope

__all__ = ["NEVER", "core_update_fn", "config_mismatch_message", "GuardedLayer", "GuardVariables",
           "build_guarded_update"]

#: "no update ever again" in the next-update-step variable.
NEVER = np.iinfo(np.int64).max


def config_mismatch_message(ks_group: str, keys: Sequence[str], *, owner: str | None = None) -> str:
    """The error for state saved with another config; ``owner`` names it (default: the ks_group)."""
    owner = f"ks_group {ks_group!r}" if owner is None else owner
    return (f"the pruning state of {owner} was saved with a different pruning config (keys that "
            f"differ: {', '.join(keys)}); resume with the config it was saved with, or start a new run")


def core_update_fn(protocol: PruningProtocol, ks_group: str, errors: dict, *,
                   owner: str | None = None) -> Callable:
    """The ``numpy_function`` body: restore the protocol from the variables, advance it, return what to write.

    Weights and masks arrive in the canonical layout (converted by graph ops); the new masks and the
    masks of the zeros to write leave as canonical bool arrays, with the done and next due steps. The
    protocol is restored from the graph's masks and done step only when they differ from what the last
    call left (a restored checkpoint, another session), so an ordinary update converts nothing twice.
    State saved with another config (the fingerprint) and errors of the core (NaN weights) raise a short
    ``ValueError``, also kept in ``errors["error"]`` (and as the function's ``errors`` attribute) for
    :meth:`GraphPruning.run_update` and :func:`~sparsify_tf.common.core_errors.reraise_core_errors`. ``owner`` names
    the state in that error (default: ``ks_group 'name'``; the Keras callback names the model).
    The arrays are the weights (dense: pruned entries hold their stored values), the masks and, for
    ``regrowth="rigl"``, the dense gradients. Entries regrowth grew are zeros to write (they start at zero).
    Criteria that read activations get them from the keyword ``activations`` (canonical per-input-channel
    norms by name, or a callable returning them, read only when an update is due; the Keras callback
    passes them from its host function, :mod:`sparsify_tf.keras.statistics`).
    """
    names = list(protocol.names)
    n = len(names)
    lock = threading.Lock()
    last: dict[str, Any] = {"done": None, "masks": None}
    expected = config_fingerprint(protocol.config)

    def fn(step, done, fingerprint, *arrays, activations=None):
        try:
            return _fn(step, done, fingerprint, *arrays, activations=activations)
        except (ValueError, TypeError) as e:      # a short error: the layer or keys, no core traceback
            errors["error"] = e
            raise type(e)(str(e)) from None
    fn.errors = errors                            # type: ignore[attr-defined]  # for reraise_core_errors

    def _fn(step, done, fingerprint, *arrays, activations=None):
        ws, raw, gs = arrays[:n], arrays[n:2 * n], arrays[2 * n:3 * n]
        ms = [np.asarray(m) != 0 for m in raw]           # 0/1 in the masks' own float dtype
        if not np.array_equal(fingerprint, expected):
            raise ValueError(config_mismatch_message(ks_group, fingerprint_differences(protocol.config, fingerprint),
                                                     owner=owner))
        with lock:
            same = last["masks"] is not None and last["done"] == int(done) and \
                all(np.array_equal(a, b) for a, b in zip(ms, last["masks"]))
            if not same:
                protocol.restore(int(done), dict(zip(names, ms)))
            try:
                update = protocol.advance(int(step), lambda: dict(zip(names, ws)),
                                          grads=(lambda: dict(zip(names, gs))) if gs else None,
                                          activations=activations)
            except ValueError as e:
                last["masks"] = None          # the protocol may be half-advanced: restore it next time
                raise type(e)(f"pruning update at step {int(step)} refused: {e}; the weights and masks "
                              "are unchanged") from None
            nxt = protocol.next_step()
            if update is None:        # the guard and the protocol agree, so this is only a safety net
                new, zero = list(ms), [np.ones_like(m) for m in ms]
            else:
                new = [np.asarray(update.masks[k], bool) for k in names]
                zero = [np.asarray(update.keep_values[k], bool) for k in names]
                zero = [z & ~update.grown[k] if k in update.grown else z for z, k in zip(zero, names)]
            last["done"], last["masks"] = protocol.done_step, [np.array(m) for m in new]
        back = [m.astype(r.dtype) for m, r in zip(new, raw)] + [m.astype(r.dtype) for m, r in zip(zero, raw)]
        return [*back, np.int64(protocol.done_step), np.int64(NEVER if nxt < 0 else nxt)]

    return fn


@dataclass(frozen=True)
class GuardedLayer:
    """One pruned weight as :func:`build_guarded_update` reads and writes it.

    Attributes:
        weight: the weight variable (TF layout).
        mask: its mask variable (0/1 in its float dtype).
        stored: the variable holding its pruned entries' values (0 where kept).
        slots: its optimizer slot variables (zeroed except where the weight is kept throughout).
        grad: a function returning the dense gradient handed to the core (TF layout; RigL), called inside
            the update branch; None: no gradient.
        kind: its layout kind (``"dense"``, ``"conv"``...): graph ops convert the weight, mask and gradient to
            the canonical layout and the masks back (:mod:`sparsify_tf.common.layout_ops`). None: they travel
            in the TF layout and the host function converts them.
    """

    weight: Any
    mask: Any
    stored: Any
    slots: Sequence[Any] = ()
    grad: Callable[[], tf.Tensor] | None = None
    kind: str | None = None

    def to_host(self, x: tf.Tensor) -> tf.Tensor:
        """``x`` (TF layout) as the host function receives it."""
        return x if self.kind is None else to_canonical(x, self.kind)

    def from_host(self, x: tf.Tensor) -> tf.Tensor:
        """A mask the host function returned, in the weight's TF layout."""
        return x if self.kind is None else from_canonical(x, self.kind, tuple(self.weight.shape.as_list()))


@dataclass(frozen=True)
class GuardVariables:
    """The step and the variables the guard and the update read and write.

    Attributes:
        step: the int64 step the update is for (the global step, or the optimizer's iterations).
        done: int64 variable, the protocol's done step (-1: none).
        next_due: int64 variable, the first step with something due after ``done`` (:data:`NEVER`: nothing).
        fingerprint: int64 variable, the config fingerprint the state was saved with.
        statistics: variables read after the layers' arrays (Wanda: the input sums of squares, then the
            call counts) and zeroed by an update.
    """

    step: tf.Tensor
    done: Any
    next_due: Any
    fingerprint: Any
    statistics: Sequence[Any] = ()


def build_guarded_update(host: Callable, layers: Sequence[GuardedLayer], guard: GuardVariables, *,
                         ready: tf.Tensor | None = None, cond: Callable = tf.cond,
                         name: str = PruningScope.OP_COND_UPDATE) -> tuple[tf.Tensor, Any]:
    """The guarded mask update: ``cond(step >= next_due [and ready], update, no_op)``.

    ``host(step, done, fingerprint, *weights, *masks, *grads, *statistics)`` runs on the host (it wraps
    :func:`core_update_fn`'s function) and returns the new masks, the masks of the values to keep, the done
    step and the next due step; ``cond`` builds the conditional (TF graph mode passes v1 control flow, which
    can assign legacy ref variables). Build it inside the caller's name scope, in a ``tf.compat.v1`` graph or
    a ``tf.function``.

    Returns:
        ``(ready, update)``: the bool guard and the conditional's result (run it once per step).

    Example:
        >>> import numpy as np, tensorflow as tf
        >>> w, m, s = tf.Variable([1.0, -3.0]), tf.Variable([1.0, 1.0]), tf.Variable([0.0, 0.0])
        >>> done, due = tf.Variable(np.int64(-1)), tf.Variable(np.int64(0))
        >>> guard = GuardVariables(tf.constant(np.int64(0)), done, due, tf.Variable(np.zeros(1, np.int64)))
        >>> def host(step, done, fp, weight, mask):   # keep the largest magnitude; nothing due again
        ...     keep = (np.abs(weight) == np.abs(weight).max()).astype(mask.dtype)
        ...     return [keep, keep, np.int64(step), np.int64(NEVER)]
        >>> _ = build_guarded_update(host, [GuardedLayer(w, m, s)], guard)
        >>> w.numpy().tolist(), s.numpy().tolist(), m.numpy().tolist(), int(done.numpy())
        ([0.0, -3.0], [1.0, 0.0], [0.0, 1.0], 0)
    """
    due = tf.greater_equal(guard.step, guard.next_due.read_value())
    due = due if ready is None else tf.logical_and(due, ready)

    def skip() -> Any:
        return tf.group(tf.constant(0, name=PruningScope.OP_MASK_UPDATE_NO_OP))

    return due, cond(due, lambda: tf.group(*_update_ops(host, layers, guard)), skip, name=name)


def _update_ops(host: Callable, layers: Sequence[GuardedLayer], guard: GuardVariables) -> list[Any]:
    """The update branch: the core on the host, then the writes (masks last) and the reset statistics."""
    n = len(layers)
    dense = [dense_value(layer.weight, layer.stored) for layer in layers]
    masks = [layer.to_host(layer.mask.read_value()) for layer in layers]
    grads = [layer.to_host(layer.grad()) for layer in layers if layer.grad is not None]
    done_before = guard.done.read_value()
    inputs = [guard.step, done_before, guard.fingerprint.read_value(),
              *(layer.to_host(d) for layer, d in zip(layers, dense)), *masks, *grads,
              *(v.read_value() for v in guard.statistics)]
    outs = tf.numpy_function(host, inputs, [m.dtype for m in masks] * 2 + [tf.int64, tf.int64], stateful=True,
                             name="nm_core_masks")
    ops = []
    for i, (layer, d) in enumerate(zip(layers, dense)):
        outs[i].set_shape(masks[i].shape)
        outs[n + i].set_shape(masks[i].shape)
        ops.extend(write_update(layer.weight, layer.mask, layer.from_host(outs[i]), layer.from_host(outs[n + i]),
                                stored=layer.stored, slots=layer.slots, dense=d))
    for out, var in ((outs[-2], guard.done), (outs[-1], guard.next_due)):
        out.set_shape([])
        ops.append(var.assign(out, read_value=False))
    updated = tf.not_equal(outs[-2], done_before)                 # an update: a new statistics window
    for var in guard.statistics:
        ops.append(var.assign(tf.where(updated, tf.zeros_like(var), var.read_value()), read_value=False))
    return ops
