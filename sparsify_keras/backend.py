"""The one place where Keras 3's backends differ for sparsify: how a train step holds its variables.

TensorFlow and PyTorch train steps change variables in place (``variable.assign``); the JAX trainer's
step is a pure function of the training state (trainable, non-trainable, optimizer and metrics
variables as arrays) that returns the new state. :func:`wrap_train_step` wraps a model's
``train_step`` for either kind and hands the code that runs inside it a :class:`StepValues`
(:func:`current_step_values`): ``read(variable)`` and ``write(variable, value)`` mean the same on
every backend. Outside ``fit``, :func:`sync_to_variables` makes the variables hold the trainer's
current state (JAX keeps it outside them between steps) so the host can read and assign them.

The rest is how each backend runs the host update's tensor work fastest with the same results: one
compiled call (:func:`compiled`, :func:`compiled_read`, :func:`compiled_assign`) and, on PyTorch, the
writer's selects as bitwise operations (:func:`keep_where`).

Example:
    >>> import keras
    >>> v = keras.Variable([1.0, 2.0])
    >>> values = StatefulValues()
    >>> values.write(v, keras.ops.multiply(values.read(v), 2.0))
    >>> keras.ops.convert_to_numpy(v.value).tolist()
    [2.0, 4.0]
"""
from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Sequence

import keras
import numpy as np

__all__ = ["backend_name", "host_view", "StepValues", "StatefulValues", "JaxStateValues", "current_step_values",
           "using_step_values", "wrap_train_step", "stateful_train_step", "sync_to_variables", "to_numpy", "compiled", "compiled_read",
           "compiled_assign",           "selector", "keep_where", "dense_gradient", "STEP_OPS", "state_scope", "tf_strategy", "add_to"]

_TLS = threading.local()


def backend_name() -> str:
    """``"jax"``, ``"torch"`` or ``"tensorflow"``."""
    return keras.backend.backend()


class StepValues:
    """Read and write variables inside a train step (see the module)."""

    def read(self, variable: Any) -> Any:
        raise NotImplementedError

    def write(self, variable: Any, value: Any) -> None:
        raise NotImplementedError


class StatefulValues(StepValues):
    """TensorFlow and PyTorch: the variables themselves."""

    def read(self, variable: Any) -> Any:
        return variable.value

    def write(self, variable: Any, value: Any) -> None:
        variable.assign(value)


class JaxStateValues(StepValues):
    """JAX: the arrays of one training state ``(trainable, non_trainable, optimizer, metrics)``; writes are
    kept and folded into the state the step returns (:meth:`state`)."""

    def __init__(self, model: Any, state: tuple) -> None:
        self.model = model
        self.lists = [list(part) if part is not None else None for part in state]
        refs = [model.trainable_variables, model.non_trainable_variables,
                model.optimizer.variables if model.optimizer is not None else [], model.metrics_variables]
        self.where = {id(v): (part, i) for part, vs in enumerate(refs) for i, v in enumerate(vs)}

    def _slot(self, variable: Any) -> tuple[int, int]:
        try:
            return self.where[id(variable)]
        except KeyError:
            raise ValueError(f"variable {variable.path!r} is not part of the model's training state") from None

    def read(self, variable: Any) -> Any:
        part, i = self._slot(variable)
        return self.lists[part][i]

    def write(self, variable: Any, value: Any) -> None:
        part, i = self._slot(variable)
        self.lists[part][i] = keras.ops.cast(value, self.lists[part][i].dtype)

    def state(self) -> tuple:
        return tuple(self.lists)


@contextlib.contextmanager
def using_step_values(values: StepValues) -> Iterator[StepValues]:
    """Make ``values`` the :func:`current_step_values` of this thread inside the block."""
    previous = getattr(_TLS, "values", None)
    _TLS.values = values
    try:
        yield values
    finally:
        _TLS.values = previous


def current_step_values() -> StepValues | None:
    """The :class:`StepValues` of the train step being run or traced in this thread (None outside one)."""
    return getattr(_TLS, "values", None)


def wrap_train_step(model: Any, inner: Callable, after_step: Callable[[StepValues], None]) -> Callable:
    """``inner`` (the model's own ``train_step``) run with :func:`current_step_values` set, then
    ``after_step(values)`` on the state the step produced; returns the function to install on the model.

    JAX: writes made during the step (the optimizer hook's) and after it are folded into the returned
    state, so they are part of the compiled step (no host round trip, no retracing).
    """
    if backend_name() == "jax":
        def train_step(state: tuple, data: Any) -> Any:
            during = JaxStateValues(model, state)
            with using_step_values(during):
                logs, new_state = inner(state, data)
            after = JaxStateValues(model, new_state)
            for key, value in _pending(during, state):
                after.lists[key[0]][key[1]] = value
            with using_step_values(after):
                after_step(after)
            return logs, after.state()
        return train_step

    return stateful_train_step(inner, after_step)


def stateful_train_step(inner: Callable, after_step: Callable[[StepValues], None],
                        values: Callable[[], StepValues] = StatefulValues) -> Callable:
    """The train step of a Keras whose step assigns variables in place (TensorFlow, PyTorch, tf-keras): ``inner``
    then ``after_step``, with ``values()`` (a new :class:`StepValues` per call) as :func:`current_step_values`."""
    def train_step(data: Any) -> Any:
        step_values = values()
        with using_step_values(step_values):
            logs = inner(data)
            after_step(step_values)
        return logs
    return train_step


def _pending(values: JaxStateValues, state: tuple) -> Iterator[tuple[tuple[int, int], Any]]:
    """The entries ``values`` wrote during the step (changed from the step's input state)."""
    for part, (now, before) in enumerate(zip(values.lists, state)):
        if now is None:
            continue
        for i, (a, b) in enumerate(zip(now, before)):
            if a is not b:
                yield (part, i), a


def sync_to_variables(model: Any) -> None:
    """Make the variables hold the trainer's current state (JAX: ``model.jax_state_sync()``; the next step then
    starts from what the host assigns). Nothing to do on the other backends."""
    sync = getattr(model, "jax_state_sync", None)
    if backend_name() == "jax" and callable(sync):
        sync()


def to_numpy(variable_or_tensor: Any) -> np.ndarray:
    """A variable's (or tensor's) value as a NumPy array on the host (Keras 3 variables and tensors of every
    backend; tf-keras's ``tf.Variable``)."""
    x = variable_or_tensor
    if isinstance(x, keras.Variable):
        x = x.value
    if hasattr(x, "numpy") and not hasattr(x, "detach"):        # TF tensors and variables (mirrored ones too)
        return np.asarray(x.numpy())
    return np.asarray(keras.ops.convert_to_numpy(x))


def host_view(tensor: Any) -> np.ndarray:
    """A tensor's value as a NumPy array without a copy where the backend allows it (a CPU tensor: JAX and
    PyTorch hand over their buffer, read-only for JAX), else one transfer; for arrays only read.

    Example:
        >>> import keras
        >>> host_view(keras.ops.ones((2,))).tolist()
        [1.0, 1.0]
    """
    name = backend_name()
    if name == "jax" and not isinstance(tensor, keras.Variable):
        return np.asarray(tensor)
    if name == "torch" and hasattr(tensor, "detach"):
        return tensor.detach().cpu().numpy()
    return to_numpy(tensor)


def compiled(fn: Callable) -> Callable:
    """``fn``, a pure function of (nested lists of) tensors written with ``keras.ops``, compiled once per
    input structure: ``jax.jit`` on JAX, ``tf.function`` on TensorFlow (its arguments read as tensors first, so
    a ``tf.distribute`` strategy's mirrored variables pass their value), ``fn`` eagerly under
    ``torch.no_grad()`` on PyTorch (its eager ops are cheap). One dispatch instead of one per op.

    Example:
        >>> import keras
        >>> double = compiled(lambda xs: [keras.ops.multiply(x, 2.0) for x in xs])
        >>> [keras.ops.convert_to_numpy(y).tolist() for y in double([keras.ops.ones((2,))])]
        [[2.0, 2.0]]
    """
    if backend_name() == "jax":
        import jax

        return jax.jit(fn)
    if backend_name() == "tensorflow":
        import tensorflow as tf

        traced = tf.function(fn)      # shapes fixed per model: one trace each
        return lambda *args: traced(*_as_tf_tensors(args))
    import torch

    def eager(*args: Any) -> Any:
        with torch.no_grad():        # values between steps: no autograd graph to record
            return fn(*args)
    return eager


def _as_tf_tensors(args: tuple) -> tuple:
    """``args`` with every leaf read as a TF tensor (a strategy's mirrored variables pass their value)."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda x: None if x is None else tf.convert_to_tensor(x), args)


def compiled_read(fn: Callable, sources: Sequence[Any]) -> Callable[[], Any]:
    """A function of no arguments returning ``fn([s.value for s in sources])`` (``fn`` written with
    ``keras.ops``), compiled once: on TensorFlow one ``tf.function`` that reads the variables inside the graph
    (no argument to convert and match at each call: about a third of the cost of :func:`compiled` there);
    ``jax.jit`` of the values on JAX; eagerly on PyTorch.

    Example:
        >>> import keras
        >>> a, b = keras.Variable([1.0]), keras.Variable([2.0])
        >>> total = compiled_read(lambda values: keras.ops.add(values[0], values[1]), [a, b])
        >>> keras.ops.convert_to_numpy(total()).tolist()
        [3.0]
    """
    sources = list(sources)
    if backend_name() == "tensorflow":
        import tensorflow as tf

        @tf.function
        def graph() -> Any:                  # no arguments: one trace
            return fn([tf.convert_to_tensor(s.value) for s in sources])

        return graph
    compute = compiled(fn)
    return lambda: compute([s.value for s in sources])


def compiled_assign(fn: Callable, targets: Sequence[Any]) -> Callable[..., None]:
    """A function of ``*args`` that assigns ``fn([t.value for t in targets], *args)`` (new values, one per
    target, in order) to the variables ``targets``, in one compiled call where the backend has one:
    ``jax.jit`` then the assigns on JAX; on TensorFlow one ``tf.function`` that reads and assigns the
    variables inside the graph (no eager op per variable); eagerly on PyTorch, each value copied into its
    variable's tensor in place (as Keras's ``assign`` does after converting and checking the value).

    Example:
        >>> import keras
        >>> a, b = keras.Variable([1.0]), keras.Variable([2.0])
        >>> swap = compiled_assign(lambda values, k: [keras.ops.multiply(values[1], k), values[0]], [a, b])
        >>> swap(3.0)
        >>> [keras.ops.convert_to_numpy(v.value).tolist() for v in (a, b)]
        [[6.0], [1.0]]
    """
    targets = list(targets)
    if backend_name() == "tensorflow":
        import tensorflow as tf

        @tf.function
        def graph(*args: Any) -> None:       # shapes fixed per writer: one trace
            values = [tf.convert_to_tensor(t.value) for t in targets]      # read all before any assign
            for variable, value in zip(targets, fn(values, *args)):
                variable.assign(value)

        return lambda *args: graph(*_as_tf_tensors(args))
    if backend_name() == "torch":
        import torch

        def copy_in(*args: Any) -> None:
            with torch.no_grad():        # the values and the in-place copies into parameters that require grad
                for variable, value in zip(targets, fn([t.value for t in targets], *args)):
                    _copy_into(variable, value)
        return copy_in
    compute = compiled(fn)

    def call(*args: Any) -> None:
        for variable, value in zip(targets, compute([t.value for t in targets], *args)):
            variable.assign(value)
    return call


def _copy_into(variable: Any, value: Any) -> None:
    """PyTorch: ``variable.assign(value)`` for a ``value`` computed from the variable (same shape and dtype) as
    Keras's own assign ends, an in-place copy into the variable's tensor, without its conversions and checks
    (about 40 microseconds a variable)."""
    raw = variable.value
    if raw.dtype != value.dtype or raw.shape != value.shape:    # pragma: no cover - another layout: Keras's path
        variable.assign(value)
    else:
        raw.copy_(value)


def selector(mask: Any, like: Any) -> Any:
    """``mask`` (bool, a tensor or NumPy array) prepared for :func:`keep_where` on tensors of ``like``'s type: on
    PyTorch the integers as wide as ``like``'s float type, all bits set where True (0 elsewhere); else the
    bool mask itself."""
    bits = _torch_bits(like)
    if bits is None:
        return keras.ops.convert_to_tensor(mask)
    import torch

    m = torch.as_tensor(mask, device=like.device)
    return torch.neg(m.to(bits))


def keep_where(selected: Any, x: Any) -> Any:
    """``where(mask, x, +0.0)`` with ``selected = selector(mask, x)``, bit for bit (``-0.0``, NaN and inf kept
    where the mask holds). On PyTorch a bitwise AND of ``x``'s bit pattern: its CPU select kernel takes
    about 5 times as long (0.17 ms for 131,072 floats against 0.03 ms); a select elsewhere.

    Example:
        >>> import keras, numpy as np
        >>> x = keras.ops.convert_to_tensor(np.array([-1.5, -0.0, 2.0], np.float32))
        >>> y = keep_where(selector(np.array([False, True, True]), x), x)
        >>> keras.ops.convert_to_numpy(y).tolist(), np.signbit(keras.ops.convert_to_numpy(y)).tolist()
        ([0.0, -0.0, 2.0], [False, True, False])
    """
    bits = _torch_bits(x)
    if bits is None:
        return keras.ops.where(selected, x, keras.ops.zeros_like(x))
    import torch

    return torch.bitwise_and(x.view(bits), selected).view(x.dtype)


def _torch_bits(x: Any) -> Any:
    """The signed integer dtype as wide as ``x``'s float dtype on PyTorch (None elsewhere, or not a float)."""
    if backend_name() != "torch":
        return None
    import torch

    return {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
            torch.float64: torch.int64}.get(getattr(x, "dtype", None))


def dense_gradient(gradient: Any) -> Any:
    """A dense tensor for a gradient (TensorFlow hands embeddings ``IndexedSlices``)."""
    if type(gradient).__name__ == "IndexedSlices":
        return keras.ops.convert_to_tensor(gradient)
    return gradient


#: The tensor operations the train step's masking uses (:mod:`sparsify_keras.train_step`), Keras 3's; the
#: tf-keras driver passes TensorFlow's under the same names.
STEP_OPS = SimpleNamespace(add=keras.ops.add, multiply=keras.ops.multiply, cast=keras.ops.cast, ones=keras.ops.ones,
                           greater=keras.ops.greater, where=keras.ops.where, dense_gradient=dense_gradient)


def tf_strategy(model: Any) -> Any:
    """The ``tf.distribute`` strategy a Keras 3 model trains under on the TensorFlow backend (None: none, or
    another backend; JAX's ``keras.distribution`` needs nothing of sparsify)."""
    if backend_name() != "tensorflow":
        return None
    strategy = getattr(model, "distribute_strategy", None)
    if strategy is None or type(strategy).__name__.startswith("_Default"):
        return None
    return strategy


def state_scope(model: Any) -> Any:
    """Where the pruning state is created and written: a TensorFlow strategy's scope (mirrored variables,
    sums aggregated over replicas), else nothing."""
    strategy = tf_strategy(model)
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


def add_to(variable: Any, value: Any) -> None:
    """``variable += value`` inside a train step. On TensorFlow through the backend variable's own
    ``assign_add``: Keras's ``assign_add`` assigns ``variable + value``, which a ``tf.distribute`` strategy
    sums over replicas for a sum-aggregated variable (doubling the old value on two replicas)."""
    if backend_name() == "tensorflow":
        inner = variable.value
        if hasattr(inner, "assign_add"):
            inner.assign_add(keras.ops.cast(value, inner.dtype), read_value=False)
            return
    variable.assign_add(value)
