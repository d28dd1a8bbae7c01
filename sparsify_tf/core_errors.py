"""The core's one-line error, first, when a mask update inside a compiled step refuses to run.

A mask update that runs inside TensorFlow (``tf.numpy_function`` in a graph or
a ``tf.function``) and is refused by the core (NaN weights, state saved with
another config) reaches the caller as a long ``InvalidArgumentError`` with the
core's line somewhere inside. :func:`core_update_fn
<sparsify_tf.core_update.core_update_fn>` keeps the core's ``ValueError`` in
its ``errors`` dict; :func:`reraise_core_errors` wraps the Python call that runs
the step (Keras's ``train_function``) so that the caller gets that
``ValueError`` itself: its message is the one line.

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
from typing import Any, Callable

import tensorflow as tf

__all__ = ["reraise_core_errors"]


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
