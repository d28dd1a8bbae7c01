"""Mask updates inside the compiled train step: no host round trip per update.

When a model trains without a distribution strategy and without XLA
(``jit_compile``), the wrapped ``train_step`` (:mod:`.train_step`) ends with
one guarded update for the step the optimizer has just reached:
``optimizer.iterations >= next_due`` (one comparison per step) opens a branch
that hands the pruned weights and masks to the core through
``tf.numpy_function`` (:func:`sparsify_tf.common.guarded_update.build_guarded_update`, the
one TF graph mode builds) and writes what it returns with graph ops: the masks,
zeros in the weights and their optimizer slots, the done step and the next
due step (:func:`sparsify_tf.common.mask_write.write_update`: the weights stay dense under the
masks). With ``criterion="wanda"`` the input statistics (:mod:`.statistics`)
go to the core too and start again from zero after an update. An update at the end of step ``s - 1`` is the update at the start of
step ``s``: the masks, weights and every later step are those of the host
path, bit for bit (tested).

:class:`~sparsify_tf.keras.PruningCallback` keeps the host path at the start
of every epoch (the update at the starting step, a resume or restored
checkpoint), and for all batches when the step runs under a distribution
strategy (every replica would run the core) or XLA (``numpy_function`` does not
compile): :func:`in_graph_unsupported` says which.

Example:
    >>> import tf_keras
    >>> m = tf_keras.Sequential([tf_keras.layers.InputLayer((4,)), tf_keras.layers.Dense(2)])
    >>> m.compile("sgd", "mse", jit_compile=False)
    >>> in_graph_unsupported(m) is None
    True
    >>> m.compile("sgd", "mse", jit_compile=True)
    >>> in_graph_unsupported(m)
    'the train step is compiled with XLA (jit_compile=True)'
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf

from sparsify.criteria import scored_every_step
from sparsify.protocol import PruningProtocol
from sparsify_keras.compat import optimizer_slots

from ..common.guarded_update import NEVER, GuardedLayer, GuardVariables, build_guarded_update, core_update_fn
from .compat import jit_compiled, tf_variable
from .statistics import statistics_variables, window_of

__all__ = ["in_graph_unsupported", "host_update_fn", "build_graph_update", "NEVER"]


def in_graph_unsupported(model: Any, criterion: str = "magnitude") -> str | None:
    """Why the mask update cannot run inside this tf-keras model's train step (None: it can); ``criterion``:
    the config's (one scored at every step is read by the host)."""
    strategy = getattr(model, "distribute_strategy", None)
    if tf.distribute.has_strategy() or (strategy is not None and not type(strategy).__name__.startswith("_Default")):
        return "the model trains under a distribution strategy"
    if jit_compiled(model):
        return "the train step is compiled with XLA (jit_compile=True)"
    if getattr(model, "optimizer", None) is None:
        return "the model has no optimizer"
    if scored_every_step(criterion):
        return f"criterion {criterion!r} is scored at every step (the host reads the scores at an update)"
    return None


def host_update_fn(model: Any, protocol: PruningProtocol) -> Callable:
    """The core's side of the update (:func:`sparsify_tf.common.guarded_update.core_update_fn`, canonical layout).

    Make it once per protocol and pass it to every :func:`build_graph_update` of that protocol: a train
    step traced again (another batch shape) then shares what the last update left, and does not
    restore the protocol from the variables each time the other trace runs an update.
    """
    return core_update_fn(protocol, "", {}, owner=f"model {model.name!r}")


def build_graph_update(model: Any, state: Any, core: Callable, next_due: tf.Variable,
                       on_update: Callable[[int, list[np.ndarray]], None]) -> Any:
    """Add the guarded mask update to the train step being traced (call it after the optimizer step).

    ``core`` comes from :func:`host_update_fn`. ``on_update(done, masks)`` runs on the host, inside
    the update, when the core has changed the masks (``done``: the step of the update; ``masks``:
    the new masks in the TF layout, bool). The update is TF graph mode's
    (:func:`sparsify_tf.common.guarded_update.build_guarded_update`); the layout is converted on the host.
    """
    pws = list(state.pweights)
    n = len(pws)
    layers = [GuardedLayer(tf_variable(pw.variable), tf_variable(m), tf_variable(s),
                           [tf_variable(v) for v in optimizer_slots(model.optimizer, pw.variable)],
                           tf_variable(g).read_value if g is not None else None)
              for pw, m, s, g in zip(pws, state.masks, state.stored, _grads(state, n))]
    statistics = statistics_variables(state)
    n_acts = len(statistics)                     # Wanda: input sums of squares, then call counts

    def host(step: np.ndarray, done: np.ndarray, fp: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
        arrays, acts = arrays[:len(arrays) - n_acts], arrays[len(arrays) - n_acts:]
        canon = [pw.to_canonical(a) for pw, a in zip(pws * (len(arrays) // n), arrays)]
        extra = {"activations": window_of(pws, acts[:n], acts[n:]).read} if n_acts else {}
        out = core(step, done, fp, *canon, **extra)
        back = [np.ascontiguousarray(pw.from_canonical(a)) for pw, a in zip(pws + pws, out[:2 * n])]
        if int(out[-2]) != int(done):
            on_update(int(out[-2]), [b != 0 for b in back[:n]])
        return [*back, out[-2], out[-1]]

    step = tf.cast(tf_variable(model.optimizer.iterations).read_value(), tf.int64)
    guard = GuardVariables(step, tf_variable(state.last_step), next_due, tf_variable(state.fingerprint), statistics)
    return build_guarded_update(host, layers, guard, name="sparsify_mask_update")[1]


def _grads(state: Any, n: int) -> list[Any]:
    """The dense-gradient variables of RigL, one per weight (None each without)."""
    grads = list(state.grads)
    return grads if grads else [None] * n
