"""The core's one-line error, first, when a mask update inside TensorFlow refuses to run.

A mask update that runs inside TensorFlow (``tf.numpy_function`` in a graph or
a ``tf.function``) and is refused by the core (NaN weights, state saved with
another config) reaches the caller as a long ``InvalidArgumentError`` whose
first line is TensorFlow's "Graph execution error:" and whose core line comes
after the op's definition traceback; TensorFlow builds that message itself, so
nothing inside the graph can change its first line. :func:`core_update_fn
<sparsify_tf.common.guarded_update.core_update_fn>` keeps the core's ``ValueError`` in
its ``errors`` dict, and the Python call that ran the step raises it instead:

* :func:`reraise_core_errors` wraps a callable that runs the step (Keras's ``train_function``);
* :func:`raise_core_errors_from_session_runs` registers the ``errors`` of a graph's update
  (:func:`sparsify_tf.prune_graph` does it): a ``tf.compat.v1.Session.run`` of that graph
  whose failing op is a ``numpy_function``/``py_func`` holding a core error raises that
  error (a plain ``sess.run(pruning.wrap_train_op(train_op))``, ``MonitoredSession``, hooks).
  For that, ``tf.compat.v1.Session.run`` and ``InteractiveSession.run`` are wrapped once, by
  a function that only looks at the graph's registered ``errors`` when ``run`` fails.

Either way the caller gets the core's ``ValueError`` itself: its message is the one line.

Example:
    >>> import tensorflow as tf
    >>> errors = {}
    >>> def step():
    ...     errors["error"] = ValueError("pruning update at step 3 refused: layer 'fc1': scores contain NaN")
    ...     raise tf.errors.InvalidArgumentError(None, None, "Graph execution error: ... (56 lines)")
    >>> try:
    ...     reraise_core_errors(step, lambda: errors)()
    ... except ValueError as e:
    ...     print(e)
    pruning update at step 3 refused: layer 'fc1': scores contain NaN
"""
from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

import tensorflow as tf

from sparsify.patching import patch

__all__ = ["reraise_core_errors", "raise_core_errors_from_session_runs"]

# op types of ``tf.numpy_function`` / ``tf.compat.v1.py_func`` in a graph: the ops that can run the core.
_PY_FUNC_OP_TYPES = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})

# graph -> the ``errors`` dicts of the core updates built in it (dicts hold no reference to the graph)
_GRAPH_ERRORS: "weakref.WeakKeyDictionary[tf.Graph, list[dict]]" = weakref.WeakKeyDictionary()


def reraise_core_errors(fn: Callable | None, errors_of: Callable[[], dict | None]) -> Callable | None:
    """``fn`` wrapped so that a TF error caused by a refused core update is raised as the core's error.

    Args:
        fn: the Python callable running a compiled step (None and an already wrapped callable
            come back as they are).
        errors_of: returns the ``errors`` dict of the update's core function (None while there
            is none yet: the step is traced on its first call).

    Returns:
        A callable with ``fn``'s signature; other errors pass through unchanged.
    """
    if fn is None or getattr(fn, "reraises_core_errors", False):
        return fn

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        errors = errors_of()
        if errors:
            errors.pop("error", None)            # an error of an earlier, handled failure
        try:
            return fn(*args, **kwargs)
        except tf.errors.OpError:
            errors = errors_of()
            err = errors.pop("error", None) if errors else None
            if err is None:
                raise
            raise err from None

    call.reraises_core_errors = True             # type: ignore[attr-defined]
    return call


def raise_core_errors_from_session_runs(graph: tf.Graph, errors: dict) -> None:
    """Make a failed ``tf.compat.v1`` session run of ``graph`` raise the core error left in ``errors``.

    After this, when ``Session.run`` on ``graph`` fails at a ``numpy_function`` op while
    ``errors`` holds ``"error"`` (left there by :func:`~sparsify_tf.common.guarded_update.core_update_fn`
    just before it raised), the run raises that error (``from None``) instead of TensorFlow's
    long error, and ``errors`` is emptied. Other failures pass through unchanged. Registering
    the same dict twice is harmless.

    Args:
        graph: the graph the update's ``numpy_function`` op lives in.
        errors: the ``errors`` dict of that update's core function.

    Example:
        >>> g = tf.Graph()
        >>> raise_core_errors_from_session_runs(g, {})
        >>> getattr(tf.compat.v1.Session.run, "raises_core_errors", False)
        True
    """
    registered = _GRAPH_ERRORS.setdefault(graph, [])
    if not any(e is errors for e in registered):
        registered.append(errors)
    # Installed once, on the first registration, for every session, and never removed (intentionally
    # permanent: it only acts on graphs with registered errors); through the one monkeypatch helper.
    for cls in (tf.compat.v1.Session, tf.compat.v1.InteractiveSession):
        if not getattr(cls.run, "raises_core_errors", False):
            patch(cls, "run", _run_raising_core_errors)


def _run_raising_core_errors(run: Callable) -> Callable:
    """``Session.run`` that raises a registered core error when the failing op is a ``numpy_function``."""

    @functools.wraps(run)
    def run_raising_core_errors(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return run(self, *args, **kwargs)
        except tf.errors.OpError as e:
            err = _pop_core_error(self.graph, e)
            if err is None:
                raise
            raise err from None

    run_raising_core_errors.raises_core_errors = True        # type: ignore[attr-defined]
    return run_raising_core_errors


def _pop_core_error(graph: tf.Graph, error: tf.errors.OpError) -> BaseException | None:
    """The core error behind ``error`` (a failed run of ``graph``), removed from its dict; None if none."""
    if error.op is None or error.op.type not in _PY_FUNC_OP_TYPES:
        return None
    for errors in _GRAPH_ERRORS.get(graph, ()):
        err = errors.pop("error", None)
        if err is not None:
            return err
    return None
