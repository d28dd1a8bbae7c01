"""Input-activation statistics of the pruned layers during ``model.fit`` (criteria that read them: Wanda).

With ``criterion="wanda"`` (``|w_ij| * ||x_j||_2``) :class:`~sparsify_tf.keras.PruningCallback`
wraps the ``call`` of every pruned layer (on the instance, :func:`install_recorders`). While
the wrapped train step is traced (:func:`recording_activations`), each call adds, per input
channel, the sum of squares of the layer's input over the batch (and the spatial positions
of a convolution) to a float32 variable of the pruning state, and counts the call. These
are torch's statistics (:class:`sparsify_torch.statistics.ActivationNorms`), laid out along
the canonical weight's input axis. Evaluation and prediction steps add nothing.

At a mask update the core gets their square roots, shaped to broadcast against the
canonical weight (``(1, in)`` for Dense, ``(1, in, 1, ...)`` for Conv1D/2D/3D), and the sums
start again from zero (:class:`ActivationWindow` on the host, :func:`graph_activation_inputs`
and :func:`graph_reset` inside the train step). The sums live in the state layer, so a
checkpoint keeps them and a resumed run continues exactly. Under a distribution strategy
the variables aggregate by sum: each replica adds its share of the global batch (the call
counts then count replica calls).

Example:
    >>> import keras
    >>> from sparsify_tf.keras.layers import find_prunable_weights
    >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name="fc")])
    >>> window = ActivationWindow(list(find_prunable_weights(m)), [np.array([25.0, 1.0], np.float32)],
    ...                           [np.int64(2)])
    >>> window.read()["fc/kernel"].tolist()
    [[5.0, 1.0]]
"""
from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from typing import Any, Iterator, Sequence

import numpy as np
import tensorflow as tf

from sparsify.criteria import get_criterion

from .compat import tf_variable
from .layers import KerasPrunableWeight

__all__ = ["reads_input_channels", "check_activation_layers", "install_recorders", "uninstall_recorders",
           "recording_activations", "ActivationWindow", "activation_window", "graph_activation_inputs",
           "reset_activations", "graph_reset"]

_CONV = {"Conv1D", "Conv2D", "Conv3D", "Conv"}
_NOT_PLAIN = {"EinsumDense", "SeparableConv1D", "SeparableConv2D", "ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D"}
_WRAP_FLAG = "_sparsify_activation_recorder"
_active = threading.local()       # the states whose train step is being traced


def reads_input_channels(pw: KerasPrunableWeight) -> bool:
    """True when ``pw``'s layer multiplies the last axis of its input by the weight's input channels directly
    (Dense; Conv1D/2D/3D, channels_last, groups=1).

    Example:
        >>> import keras
        >>> from sparsify_tf.keras.layers import find_prunable_weights
        >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Embedding(4, 2)])
        >>> [reads_input_channels(pw) for pw in find_prunable_weights(m)]
        [True, False]
    """
    names = {c.__name__ for c in type(pw.layer).__mro__}
    if names & _NOT_PLAIN or not pw.path.endswith("/kernel"):
        return False
    if pw.kind == "dense":
        return "Dense" in names
    return (pw.kind == "conv" and bool(names & _CONV) and int(getattr(pw.layer, "groups", 1) or 1) == 1
            and getattr(pw.layer, "data_format", "channels_last") == "channels_last")


def check_activation_layers(weights: Sequence[KerasPrunableWeight], criterion: str) -> bool:
    """Whether ``criterion`` reads activations; if it does, raise ``ValueError`` naming the weights whose
    layers' inputs cannot be read per input channel.

    Example:
        >>> import keras
        >>> from sparsify_tf.keras.layers import find_prunable_weights
        >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Embedding(4, 2, name="emb")])
        >>> check_activation_layers(find_prunable_weights(m), "wanda")
        Traceback (most recent call last):
        ...
        ValueError: criterion 'wanda' needs the input channels of each pruned weight; ['emb/embeddings'] are not Dense or Conv1D/2D/3D kernels (channels_last, groups=1): exclude them with excluded_op_names
    """
    if "activation" not in get_criterion(criterion).needs:
        return False
    bad = [pw.path for pw in weights if not reads_input_channels(pw)]
    if bad:
        raise ValueError(f"criterion {criterion!r} needs the input channels of each pruned weight; {bad} are not "
                         "Dense or Conv1D/2D/3D kernels (channels_last, groups=1): exclude them with excluded_op_names")
    return True


def _sum_of_squares(x: Any) -> tf.Tensor:
    """Per last-axis channel: the sum of squares over every other axis (batch, positions), in float32."""
    x = tf.cast(tf.convert_to_tensor(x), tf.float32)
    return tf.reduce_sum(tf.square(x), axis=list(range(x.shape.rank - 1)))


def install_recorders(state: Any) -> None:
    """Wrap the ``call`` of each pruned layer of ``state`` so the traced train step records its inputs.

    A layer wrapped before (another state) is re-wrapped around its own ``call``; outside
    :func:`recording_activations` the wrapper only calls through.
    """
    if not getattr(state, "activation_sums", None):
        return
    state_ref = weakref.ref(state)
    for index, pw in enumerate(state.pweights):
        layer = pw.layer
        current = layer.__dict__.get("call")
        wrapped = current is not None and getattr(current, _WRAP_FLAG, False)
        inner = current._sparsify_inner if wrapped else layer.call
        had_instance_call = current._sparsify_had_instance_call if wrapped else current is not None

        def call(*args: Any, _inner: Any = inner, _index: int = index, **kwargs: Any) -> Any:
            st = state_ref()
            seen = getattr(_active, "by_state", {}).get(id(st)) if st is not None else None
            x = args[0] if args else kwargs.get("inputs")
            if seen is not None and x is not None:
                tf_variable(st.activation_sums[_index]).assign_add(_sum_of_squares(x), read_value=False)
                tf_variable(st.activation_calls[_index]).assign_add(tf.constant(1, tf.int64), read_value=False)
                seen.add(_index)
            return _inner(*args, **kwargs)

        call = functools.wraps(inner)(call)          # the layer's signature, for Keras' call inspection
        setattr(call, _WRAP_FLAG, True)
        call._sparsify_inner = inner
        call._sparsify_had_instance_call = had_instance_call
        object.__setattr__(layer, "call", call)


def uninstall_recorders(state: Any) -> None:
    """Give the pruned layers of ``state`` their own ``call`` back."""
    for pw in getattr(state, "pweights", []):
        current = pw.layer.__dict__.get("call")
        if current is None or not getattr(current, _WRAP_FLAG, False):
            continue
        if current._sparsify_had_instance_call:
            object.__setattr__(pw.layer, "call", current._sparsify_inner)
        else:
            del pw.layer.__dict__["call"]


@contextlib.contextmanager
def recording_activations(state: Any, criterion: str = "wanda") -> Iterator[None]:
    """Record the inputs of ``state``'s pruned layers in the train step traced inside (nothing without sums).

    Raises:
        ValueError: a pruned layer was not called in the traced step (its inputs cannot be read), named.
    """
    if not getattr(state, "activation_sums", None):
        yield
        return
    by_state = _active.__dict__.setdefault("by_state", {})
    seen: set[int] = set()
    by_state[id(state)] = seen
    try:
        yield
    finally:
        by_state.pop(id(state), None)
    missing = [pw.path for i, pw in enumerate(state.pweights) if i not in seen]
    if missing:
        raise ValueError(f"criterion {criterion!r} reads the inputs of each pruned layer in the training step, but "
                         f"the layers of {missing} were not called in the model's train step (their inputs cannot "
                         "be read): exclude them with excluded_op_names")


class ActivationWindow:
    """The statistics since the last update, read on the host: sums of squares and call counts (TF layout free).

    Args:
        pweights: the pruned weights.
        sums: per weight, the per-input-channel sums of squares (float32, ``(in,)``).
        calls: per weight, the layer calls the sums hold.
        criterion: named in errors.
    """

    def __init__(self, pweights: Sequence[KerasPrunableWeight], sums: Sequence[Any], calls: Sequence[Any],
                 criterion: str = "wanda") -> None:
        self.pweights = list(pweights)
        self.sums = [np.asarray(s, np.float32) for s in sums]
        self.calls = [int(c) for c in calls]
        self.criterion = criterion

    def waiting(self) -> bool:
        """True when there are layers and none was called since the last update (no training step ran:
        the update waits)."""
        return bool(self.calls) and not any(self.calls)

    def read(self) -> dict[str, np.ndarray]:
        """Per weight, the per-input-channel L2 norms, broadcastable to the canonical weight.

        Raises:
            ValueError: a pruned layer saw no input since the last update while others did (named).
        """
        missing = [pw.path for pw, c in zip(self.pweights, self.calls) if c == 0]
        if missing:
            raise ValueError(f"criterion {self.criterion!r} needs the inputs of every pruned layer, but the layers of "
                             f"{missing} saw none since the last update (not called in these training steps)")
        return {pw.path: np.sqrt(s).reshape((1, s.size) + (1,) * (len(pw.canonical_shape) - 2))
                for pw, s in zip(self.pweights, self.sums)}


def activation_window(state: Any, criterion: str = "wanda") -> ActivationWindow:
    """The state's statistics as an :class:`ActivationWindow` (an empty one when the state keeps none)."""
    if not getattr(state, "activation_sums", None):
        return ActivationWindow([], [], [], criterion)
    return ActivationWindow(state.pweights, [tf_variable(s).numpy() for s in state.activation_sums],
                            [tf_variable(c).numpy() for c in state.activation_calls], criterion)


def reset_activations(state: Any) -> None:
    """Start a new window on the host (after an update)."""
    for v in [*getattr(state, "activation_sums", []), *getattr(state, "activation_calls", [])]:
        tf_variable(v).assign(tf.zeros_like(tf_variable(v)), read_value=False)


def graph_activation_inputs(state: Any) -> list[tf.Tensor]:
    """The sums then the call counts, read in the train step for the update's ``numpy_function`` ([] if none)."""
    return [tf_variable(v).read_value() for v in [*getattr(state, "activation_sums", []),
                                                  *getattr(state, "activation_calls", [])]]


def graph_reset(state: Any, updated: tf.Tensor) -> list[Any]:
    """Ops zeroing the sums and counts where ``updated`` (a bool scalar) holds, in the train step."""
    ops = []
    for v in [*getattr(state, "activation_sums", []), *getattr(state, "activation_calls", [])]:
        var = tf_variable(v)
        ops.append(var.assign(tf.where(updated, tf.zeros_like(var), var.read_value()), read_value=False))
    return ops
