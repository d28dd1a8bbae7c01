"""Input-activation statistics of the pruned layers during ``model.fit`` (criteria that read them: Wanda).

With ``criterion="wanda"`` (``|w_ij| * ||x_j||_2``) the ``call`` of every pruned layer is wrapped (on
the instance, :func:`install_recorders`). While the wrapped train step runs (:func:`recording_activations`),
each call adds, per input channel, the sum of squares of the layer's input over the batch (and the
spatial positions of a convolution) to a float32 variable of the pruning state and counts the call,
with ``keras.ops`` and ``Variable.assign_add``: on JAX the additions are part of the compiled step's
new state. Evaluation and prediction steps add nothing. At a mask update the core reads them
(:func:`activation_window`, :class:`sparsify.activation_stats.ActivationWindow`) and they start again
from zero (:func:`reset_activations`). They live in the state, so a checkpoint keeps them.

Example:
    >>> import keras
    >>> from sparsify_keras.layers import find_prunable_weights
    >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Embedding(4, 2)])
    >>> [reads_input_channels(pw) for pw in find_prunable_weights(m)]
    [True, False]
"""
from __future__ import annotations

import contextlib
import functools
import re
import threading
import weakref
from typing import Any, Iterator, Sequence

import keras
import numpy as np

from sparsify.activation_stats import ActivationWindow
from sparsify.criteria import get_criterion
from sparsify.patching import patch, unpatch

from .backend import add_to, to_numpy
from .layers import KerasPrunableWeight

__all__ = ["reads_input_channels", "einsum_input_channels", "input_channels", "check_activation_layers",
           "install_recorders", "uninstall_recorders",
           "recording_activations", "window_of", "activation_window", "reset_activations"]

_CONV = {"Conv1D", "Conv2D", "Conv3D", "Conv", "BaseConv"}
_NOT_PLAIN = {"EinsumDense", "SeparableConv1D", "SeparableConv2D", "ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D",
              "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose", "BaseConvTranspose",
              "DepthwiseConv1D", "DepthwiseConv2D", "BaseDepthwiseConv"}
_active = threading.local()       # the states whose train step is running


def einsum_input_channels(pw: KerasPrunableWeight) -> bool:
    """True when ``pw`` is an EinsumDense kernel whose input axes are the trailing axes of the layer's input, in
    the kernel's order (``"abc,cde->abde"``, ``"abcd,cde->abe"``: attention's query/key/value and output
    projections): its canonical input channels are then the input's trailing axes flattened."""
    if pw.kind != "einsum" or not pw.path.endswith("/kernel"):
        return False
    eq = str(getattr(pw.layer, "equation", "")).replace(" ", "")
    m = re.fullmatch(r"([a-z]+),([a-z]+)->([a-z]+)", eq)
    if not m:
        return False
    inp, ker = m.group(1), m.group(2)
    in_axes = "".join(c for c in ker if c in inp)
    return bool(in_axes) and inp.endswith(in_axes)


def reads_input_channels(pw: KerasPrunableWeight) -> bool:
    """True when ``pw``'s layer multiplies its input's channels by the weight's input channels directly
    (Dense; Conv1D/2D/3D, channels_last, groups=1; EinsumDense contracting the input's trailing axes,
    :func:`einsum_input_channels`)."""
    names = {c.__name__ for c in type(pw.layer).__mro__}
    if "EinsumDense" in names:
        return einsum_input_channels(pw)
    if names & _NOT_PLAIN or not pw.path.endswith("/kernel"):
        return False
    if pw.kind == "dense":
        return "Dense" in names
    return (pw.kind == "conv" and bool(names & _CONV) and int(getattr(pw.layer, "groups", 1) or 1) == 1
            and getattr(pw.layer, "data_format", "channels_last") == "channels_last")


def input_channels(pw: KerasPrunableWeight) -> int:
    """How many input channels the weight's canonical layout has: a layer input reshaped to ``(-1, that)`` holds
    one input channel per column (for an EinsumDense, its contracted trailing axes flattened)."""
    return int(pw.canonical_shape[1])


def check_activation_layers(weights: Sequence[KerasPrunableWeight], criterion: str) -> bool:
    """Whether ``criterion`` reads activations; if it does, raise ``ValueError`` naming every weight whose
    layer's inputs cannot be read per input channel."""
    if "activation" not in get_criterion(criterion).needs:
        return False
    bad = [pw.path for pw in weights if not reads_input_channels(pw)]
    if bad:
        raise ValueError(f"criterion {criterion!r} needs the input channels of each pruned weight; {bad} are not "
                         "Dense or Conv1D/2D/3D kernels (channels_last, groups=1), nor EinsumDense kernels "
                         "contracting their input's trailing axes: exclude them with excluded_op_names")
    return True


def _sum_of_squares(x: Any, channels: int) -> Any:
    """Per input channel (the input as ``(-1, channels)``): the sum of squares over every other axis (batch,
    positions), in float32."""
    x = keras.ops.reshape(keras.ops.cast(x, "float32"), (-1, channels))
    return keras.ops.sum(keras.ops.square(x), axis=0)


def _add_call(state: Any, index: int, x: Any) -> None:
    """Add one call's input statistics to the state (``Variable.assign_add``, every backend)."""
    add_to(state.activation_sums[index], _sum_of_squares(x, input_channels(state.pweights[index])))
    add_to(state.activation_calls[index], keras.ops.ones((), "int32"))


def install_recorders(state: Any, add: Any = _add_call) -> None:
    """Wrap the ``call`` of each pruned layer of ``state`` so the train step records its inputs.

    ``add(state, index, inputs)`` adds one call's statistics (the tf-keras driver passes TensorFlow ops).
    A layer wrapped before (another state) is re-wrapped around its own ``call``; outside
    :func:`recording_activations` the wrapper only calls through.
    """
    if not getattr(state, "activation_sums", None):
        return
    state_ref = weakref.ref(state)
    for index, pw in enumerate(state.pweights):
        def make(inner: Any, _index: int = index) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                st = state_ref()
                seen = getattr(_active, "by_state", {}).get(id(st)) if st is not None else None
                x = args[0] if args else kwargs.get("inputs")
                if seen is not None and x is not None:
                    add(st, _index, x)
                    seen.add(_index)
                return inner(*args, **kwargs)
            return functools.wraps(inner)(call)          # the layer's signature, for Keras' call inspection

        patch(pw.layer, "call", make)


def uninstall_recorders(state: Any) -> None:
    """Give the pruned layers of ``state`` their own ``call`` back."""
    for pw in getattr(state, "pweights", []):
        unpatch(pw.layer, "call")


@contextlib.contextmanager
def recording_activations(state: Any, criterion: str = "wanda") -> Iterator[None]:
    """Record the inputs of ``state``'s pruned layers in the train step run inside (nothing without sums).

    Raises:
        ValueError: a pruned layer was not called in the step (its inputs cannot be read), named.
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


def window_of(pweights: Sequence[KerasPrunableWeight], sums: Sequence[Any], calls: Sequence[Any],
              criterion: str = "wanda") -> ActivationWindow:
    """The core's window (:class:`sparsify.activation_stats.ActivationWindow`) holding these statistics (NumPy:
    per weight the sums of squares and the call count)."""
    window = ActivationWindow({pw.path: pw.canonical_shape for pw in pweights}, criterion=criterion)
    window.load({pw.path: np.asarray(s) for pw, s in zip(pweights, sums)},
                {pw.path: int(c) for pw, c in zip(pweights, calls)})
    return window


def activation_window(state: Any, criterion: str = "wanda") -> ActivationWindow:
    """The state's statistics since the last update as the core's window (an empty one without statistics)."""
    if not getattr(state, "activation_sums", None):
        return window_of([], [], [], criterion)
    return window_of(state.pweights, [to_numpy(s) for s in state.activation_sums],
                     [to_numpy(c) for c in state.activation_calls], criterion)


def reset_activations(state: Any) -> None:
    """Start a new window (after an update), on the host."""
    for v in [*getattr(state, "activation_sums", []), *getattr(state, "activation_calls", [])]:
        v.assign(np.zeros(tuple(v.shape), getattr(v.dtype, "name", v.dtype)))    # tf-keras: a tf.DType
