"""The pruning state a Keras 3 model carries while it is pruned, on every backend.

Per pruned weight (TF layout, the weight's dtype): its mask, the values of its pruned entries
(``stored``: zeros where kept; the kernel holds zeros where pruned, so the dense weight the core ranks
is ``kernel + stored``), for ``regrowth="rigl"`` the dense gradient of the last step, and for criteria
that read activations (``"wanda"``) the per-input-channel sums of squares of the layer's inputs since
the last update with the number of calls they hold; then the step of the last mask update and the
config's fingerprint. They are the weights of a small layer attached to the model as
``model._sparsify_pruning_state``, which ``save_weights`` / ``ModelCheckpoint`` / ``BackupAndRestore``
save under that name (so an interrupted run resumes to exactly the same masks, and a ``.keras`` file
saved mid-run still loads as a plain model, which ignores the extra entry); and they are also listed as
the model's own non-trainable variables (:func:`sparsify_keras.compat.add_model_variables`, left out
of the model's own saved variables) so every backend's trainer carries them in its training state (JAX
passes them to the compiled step: a mask update needs no retracing). Integers are int32 (JAX's
default): the fingerprint keeps 31 bits of each field's digest.

Example:
    >>> import keras, numpy as np
    >>> from sparsify_keras.layers import find_prunable_weights
    >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc")])
    >>> st = PruningState(find_prunable_weights(m), np.zeros(3, np.int64))
    >>> [tuple(v.shape) for v in st.masks], [tuple(v.shape) for v in st.stored], st.grads, int(st.last_step.numpy())
    ([(4, 3)], [(4, 3)], [], -1)
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import keras
import numpy as np

from sparsify import PruningConfig
from sparsify.protocol import config_fingerprint

from .compat import add_model_variables, remove_model_variables
from .layers import KerasPrunableWeight

__all__ = ["STATE_ATTR", "StateSchema", "PruningState", "model_state", "attach_state", "detach_state", "short_fingerprint",
           "fingerprint_mismatch"]

STATE_ATTR = "_sparsify_pruning_state"
_BITS = 2 ** 31


def short_fingerprint(fingerprint: np.ndarray) -> np.ndarray:
    """A config fingerprint (int64 per field) as the int32 the state keeps (31 bits of each digest)."""
    return np.mod(np.asarray(fingerprint, np.int64), _BITS).astype(np.int32)


def fingerprint_mismatch(config: PruningConfig, saved: Any) -> list[str]:
    """Names of the config fields whose digests differ from the saved fingerprint (31 bits of each digest
    compared: a whole int64 fingerprint, tf-keras's, or a short one)."""
    from dataclasses import fields

    mine = short_fingerprint(config_fingerprint(config))
    saved = short_fingerprint(np.asarray(saved).reshape(-1))
    names = [f.name for f in fields(PruningConfig)]
    if saved.shape != mine.shape:
        return names
    return [n for n, a, b in zip(names, mine, saved) if int(a) != int(b)]


class StateSchema:
    """The one schema of the pruning state (see the module), shared by both Kerases' state layers.

    A state layer class mixes this into its Keras's ``Layer`` and provides ``_variable(value, dtype, name,
    summed)`` (a non-trainable variable initialised to ``value``; ``summed``: aggregated by sum over
    replicas). ``INT_DTYPE`` is the dtype of steps and counts, ``FULL_FINGERPRINT`` whether the fingerprint is
    kept whole (int64) instead of :func:`short_fingerprint`.
    """

    INT_DTYPE = "int32"
    FULL_FINGERPRINT = False

    def __init__(self, pweights: Sequence[KerasPrunableWeight], fingerprint: Any, keep_grads: bool = False,
                 keep_activations: bool = False, straight_through: bool = False, pruned_decay: float = 0.0,
                 step_scores: Any = None) -> None:
        super().__init__(name="sparsify_pruning_state", trainable=False)      # the Keras's Layer
        self._build_state(pweights, fingerprint, keep_grads, keep_activations, straight_through, pruned_decay,
                          step_scores)

    def _build_state(self, pweights: Sequence[KerasPrunableWeight], fingerprint: Any, keep_grads: bool,
                     keep_activations: bool, straight_through: bool, pruned_decay: float, step_scores: Any) -> None:
        if pruned_decay and not straight_through:
            raise ValueError(f"pruned_decay={pruned_decay!r} needs straight_through=True (pruned entries get no "
                             "gradient otherwise)")
        put = functools.partial(object.__setattr__, self)         # plain attributes (add_weight tracks)
        put("pweights", list(pweights))                           # not tracked: the model owns the layers
        put("step_scores", step_scores)
        put("straight_through", bool(straight_through))
        put("pruned_decay", float(pruned_decay))
        per_weight = list(enumerate((pw.tf_shape, str(getattr(pw.variable.dtype, "name", pw.variable.dtype)))
                                    for pw in self.pweights))
        var, ints = self._variable, self.INT_DTYPE

        def per(prefix: str, keep: bool = True, value: Any = np.zeros) -> list:
            return [var(value(s), d, f"{prefix}_{i}") for i, (s, d) in per_weight] if keep else []

        put("masks", per("sparsify_mask", value=np.ones))
        put("stored", per("sparsify_stored"))
        put("grads", per("sparsify_dense_grad", keep_grads))
        put("grads_seen", var(0, ints, "sparsify_dense_grad_seen") if keep_grads else None)
        keep_scores = step_scores is not None
        put("scores", per("sparsify_step_scores", keep_scores))
        put("scores_seen", var(0, ints, "sparsify_step_scores_seen") if keep_scores else None)
        # under a TensorFlow strategy each replica adds its share of the global batch (aggregation "sum")
        put("activation_sums", [var(np.zeros(pw.canonical_shape[1]), "float32", f"sparsify_activation_sum_{i}", True)
                                for i, pw in enumerate(self.pweights)] if keep_activations else [])
        put("activation_calls", [var(0, ints, f"sparsify_activation_calls_{i}", True)
                                 for i in range(len(self.pweights))] if keep_activations else [])
        put("last_step", var(-1, ints, "sparsify_last_update_step"))
        fp = np.asarray(fingerprint, np.int64) if self.FULL_FINGERPRINT else short_fingerprint(fingerprint)
        put("fingerprint", var(fp, "int64" if self.FULL_FINGERPRINT else "int32", "sparsify_config_fingerprint"))
        put("per_step_paths", [pw.path for pw in self.pweights])
        self.built = True

    def _variable(self, value: Any, dtype: str, name: str, summed: bool = False) -> Any:
        raise NotImplementedError

    @property
    def state_variables(self) -> list[Any]:
        """Every variable of the state, in the order they were made."""
        return [*self.masks, *self.stored, *self.grads, *([self.grads_seen] if self.grads_seen is not None else []),
                *self.activation_sums, *self.activation_calls, self.last_step, self.fingerprint,
                *self.scores, *([self.scores_seen] if self.scores_seen is not None else [])]

    def record_per_step_paths(self, paths: list[str]) -> None:
        """Set ``per_step_paths``: the weights the train step re-masks after every step."""
        object.__setattr__(self, "per_step_paths", list(paths))

    def call(self, inputs: Any) -> Any:  # pragma: no cover - never called
        return inputs


class PruningState(StateSchema, keras.layers.Layer):
    """The Keras 3 state layer (:class:`StateSchema`'s variables, see the module).

    Args:
        pweights: the pruned weights, in the protocol's order.
        fingerprint: the config's fingerprint (:func:`sparsify.protocol.config_fingerprint`).
        keep_grads: keep the dense gradient of the last step (RigL).
        step_scores: the config of a criterion scored at every step (``snip``, ``snip_momentum``, a registered
            one that needs gradients): the train step keeps its latest scores in ``scores`` (None: no such
            criterion).
        keep_activations: keep input statistics (criteria that read activations).
        straight_through: ``pruned_gradient="straight_through"`` (the train step moves what the optimizer
            puts into pruned kernel entries into the stored values, :mod:`.train_step`).
        pruned_decay: with ``straight_through``, the train step adds ``pruned_decay`` times the stored
            values to the gradients (SR-STE, ``PruningConfig.pruned_decay``); 0 adds nothing.
    """

    def _variable(self, value: Any, dtype: str, name: str, summed: bool = False) -> keras.Variable:
        value = np.asarray(value)
        return self.add_weight(shape=value.shape, dtype=dtype, trainable=False, autocast=False, name=name,
                               aggregation="sum" if summed else "none",
                               initializer=keras.initializers.Constant(value))


def model_state(model: Any) -> PruningState | None:
    """The state attached to ``model`` (None if it is not being pruned)."""
    return model.__dict__.get(STATE_ATTR)


def attach_state(model: Any, state: PruningState) -> None:
    """Attach ``state`` to ``model`` (saved under :data:`STATE_ATTR`); its variables join the training state."""
    object.__setattr__(model, STATE_ATTR, state)
    add_model_variables(model, state.state_variables)


def detach_state(model: Any) -> PruningState | None:
    """Remove the state from ``model`` (its variables leave the model) and return it."""
    state = model.__dict__.pop(STATE_ATTR, None)
    if state is not None:
        remove_model_variables(model, state.state_variables)
    return state
