"""sparsify_tf.core_errors: a refused in-graph update reaches the caller as the core's one-line error."""
from __future__ import annotations

import pytest
import tensorflow as tf

from sparsify_tf.core_errors import reraise_core_errors

LONG = "Graph execution error:\n\nDetected at node 'sparsify_core_masks' ...\n" + "  frame\n" * 50


def _failing(errors, core_error=None):
    def step(x):
        if core_error is not None:
            errors["error"] = core_error
        raise tf.errors.InvalidArgumentError(None, None, LONG)
    return step


def test_the_core_error_replaces_the_long_tf_error():
    errors: dict = {}
    wrapped = reraise_core_errors(_failing(errors, ValueError("pruning update at step 3 refused: NaN")), lambda: errors)
    with pytest.raises(ValueError) as info:
        wrapped(1)
    assert str(info.value) == "pruning update at step 3 refused: NaN" and info.value.__suppress_context__
    assert errors == {}                                   # consumed


def test_other_errors_and_results_pass_through():
    errors: dict = {"error": ValueError("stale: an earlier failure already handled")}
    with pytest.raises(tf.errors.InvalidArgumentError, match="Graph execution error"):
        reraise_core_errors(_failing(errors), lambda: errors)(1)     # the stale error is not raised again
    assert errors == {}
    assert reraise_core_errors(lambda x: x + 1, lambda: None)(1) == 2  # no core yet (traced on the first call)
    with pytest.raises(KeyError):
        reraise_core_errors(lambda: {}["k"], lambda: errors)()


def test_wrapping_is_idempotent_and_none_stays_none():
    once = reraise_core_errors(lambda: 1, lambda: None)
    assert reraise_core_errors(once, lambda: None) is once
    assert reraise_core_errors(None, lambda: None) is None
