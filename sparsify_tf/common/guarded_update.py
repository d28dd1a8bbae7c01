"""The host side of the graph-mode mask update: the ``tf.numpy_function`` body that runs the core.

:func:`sparsify_tf.prune_graph` converts the weights and masks to the canonical
layout with graph ops and calls :func:`core_update_fn`'s function inside its
update branch; it restores the core :class:`sparsify.PruningProtocol` from the
graph's variables when they changed, advances it to the global step and returns
the masks (and the zeros) to write, as 0/1 arrays of the mask variables' float
dtype (TF's oneDNN logs an error line whenever a bool or integer tensor is
transposed).

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
from typing import Any, Callable, Sequence

import numpy as np

from sparsify.protocol import PruningProtocol, config_fingerprint, fingerprint_differences

__all__ = ["NEVER", "core_update_fn", "config_mismatch_message"]

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
