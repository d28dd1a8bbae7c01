"""sparsify_tf.common.core_errors: a refused in-graph update reaches the caller as the core's one-line error."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import sparsify_tf
from sparsify_tf.common.core_errors import raise_core_errors_from_session_runs, reraise_core_errors
from tf_graph_models import batch, build_mlp, session_config

tf1 = tf.compat.v1

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


# ----- a plain tf.compat.v1 session run of a pruned graph ---------------------------------------------
NAN_LINE = (r"^pruning update at step 1 refused: layer 'fc1/kernel': scores contain NaN; fix the weights or "
            r"gradients before pruning; the weights and masks are unchanged$")


def _poisoned_wrapped_mlp():
    """An MLP pruned at step 1 through ``wrap_train_op``, and an op writing a NaN into fc1's kernel."""
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
        train = pr.wrap_train_op(tf1.train.GradientDescentOptimizer(0.1).minimize(m["loss"],
                                                                                 global_step=pr.global_step))
        poison = tf1.assign(m["w1"], tf.tensor_scatter_nd_update(m["w1"], [[3, 4]], [np.nan]))
    bx, by = batch(0)
    return g, pr, train, poison, {m["x"]: bx, m["y"]: by}


@pytest.mark.parametrize("session", ["Session", "InteractiveSession"])
def test_a_plain_sess_run_of_a_wrapped_train_op_raises_the_core_line_first(session):
    g, pr, train, poison, feed = _poisoned_wrapped_mlp()
    sess = getattr(tf1, session)(graph=g, config=session_config())
    try:
        with g.as_default():
            sess.run(tf1.global_variables_initializer())
            heal = tf.group(*[v.assign(value) for v, value in zip(tf1.trainable_variables(),
                                                                  sess.run(tf1.trainable_variables()))])
        sess.run(poison)
        with pytest.raises(ValueError, match=NAN_LINE) as info:
            sess.run(train, feed)
        assert str(info.value).splitlines() == [str(info.value)]      # one line, nothing of TF's error
        assert not isinstance(info.value, tf.errors.OpError) and info.value.__suppress_context__
        assert pr.core_errors == {}                                   # consumed
        # nothing was written; with the weights fixed the same op trains and prunes
        assert np.all(sess.run(pr.masks["fc1/kernel"]) == 1) and int(sess.run(pr.last_update_step)) == -1
        sess.run(heal)                             # the train op ran before the update: every weight is NaN
        sess.run(train, feed)
        assert int(sess.run(pr.last_update_step)) == 2
        assert (sess.run(pr.masks["fc1/kernel"]) == 0).sum() == 64 * 32 // 2
    finally:
        sess.close()


def test_a_monitored_session_run_of_a_wrapped_train_op_raises_the_core_line_first():
    g, pr, train, poison, feed = _poisoned_wrapped_mlp()
    with g.as_default():
        with pytest.raises(ValueError, match=NAN_LINE):
            with tf1.train.MonitoredSession(session_creator=tf1.train.ChiefSessionCreator(config=session_config())) \
                    as sess:
                sess.run(poison)
                sess.run(train, feed)


def test_other_failures_of_a_pruned_graph_keep_tensorflows_error():
    g = tf.Graph()
    with g.as_default():
        m = build_mlp()
        pr = sparsify_tf.prune_graph({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
        bad_check = tf.debugging.check_numerics(tf.constant(np.nan), "not finite")          # not a py_func
        bad_py_func = tf.numpy_function(lambda: np.float32(1.0 / 0.0), [], tf.float32)      # not the core
    stale = ValueError("an earlier refusal nobody read")
    with tf1.Session(graph=g, config=session_config()) as sess:
        sess.run(tf1.global_variables_initializer())
        pr.core_errors["error"] = stale
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"^Graph execution error:"):
            sess.run(bad_check)
        assert pr.core_errors == {"error": stale}           # untouched: the failing op is not a numpy_function
        pr.core_errors.clear()
        with pytest.raises(tf.errors.OpError, match=r"^Graph execution error:(.|\n)*ZeroDivisionError"):
            sess.run(bad_py_func)
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"You must feed a value for placeholder"):
            sess.run(m["loss"])


def test_registering_twice_keeps_one_entry_and_run_is_wrapped_once():
    g, errors = tf.Graph(), {}
    raise_core_errors_from_session_runs(g, errors)
    run = tf1.Session.run
    raise_core_errors_from_session_runs(g, errors)
    assert tf1.Session.run is run and getattr(run, "raises_core_errors")
    with tf1.Session(graph=g) as sess:
        with g.as_default():
            out = tf.numpy_function(lambda: np.float32(2.0), [], tf.float32)
        errors["error"] = ValueError("only raised when the failing op is a numpy_function that failed")
        assert sess.run(out) == 2.0 and "error" in errors
