"""sparsify_tf.common.guarded_update: the one guarded in-graph update (TF graph mode and tf-keras' train step)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from sparsify_tf.common.guarded_update import NEVER, GuardedLayer, GuardVariables, build_guarded_update

tf1 = tf.compat.v1


def _guard(step, next_due=0, statistics=()):
    return GuardVariables(tf.constant(np.int64(step)), tf.Variable(np.int64(-1)), tf.Variable(np.int64(next_due)),
                          tf.Variable(np.zeros(2, np.int64)), statistics)


def _prune_smallest(seen):
    def host(step, done, fp, *arrays):
        seen.append([np.array(a) for a in arrays])
        weight, mask = arrays[0], arrays[1]
        keep = (np.abs(weight) > np.abs(weight).min()).astype(mask.dtype)
        return [keep, keep, np.int64(step), np.int64(NEVER)]
    return host


def test_nothing_runs_before_the_next_due_step_or_while_not_ready():
    seen = []
    w, m, s = tf.Variable([1.0, 2.0]), tf.Variable([1.0, 1.0]), tf.Variable([0.0, 0.0])
    for guard, ready in ((_guard(3, next_due=4), None), (_guard(4, next_due=4), tf.constant(False))):
        due, _ = build_guarded_update(_prune_smallest(seen), [GuardedLayer(w, m, s)], guard, ready=ready)
        assert not bool(due) and int(guard.done.numpy()) == -1
    assert seen == [] and m.numpy().tolist() == [1.0, 1.0]


def test_a_layout_kind_converts_in_the_graph_and_back():
    """A Dense kernel (in, out) reaches the host as the canonical (out, in); the mask comes back in TF layout."""
    seen = []
    kernel = tf.Variable([[1.0, -5.0, 3.0], [4.0, 2.0, 6.0]])                       # (in=2, out=3)
    mask, stored = tf.Variable(tf.ones([2, 3])), tf.Variable(tf.zeros([2, 3]))
    grad = tf.Variable(tf.fill([2, 3], 0.5))
    layer = GuardedLayer(kernel, mask, stored, grad=grad.read_value, kind="dense")
    build_guarded_update(_prune_smallest(seen), [layer], _guard(0))
    weight, canon_mask, canon_grad = seen[0]
    assert weight.shape == canon_mask.shape == canon_grad.shape == (3, 2)
    assert weight.tolist() == [[1.0, 4.0], [-5.0, 2.0], [3.0, 6.0]]
    assert mask.numpy().tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    assert kernel.numpy().tolist() == [[0.0, -5.0, 3.0], [4.0, 2.0, 6.0]]
    assert stored.numpy().tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize("updates", [True, False])
def test_the_statistics_follow_the_arrays_and_restart_after_an_update_only(updates):
    sums, calls = tf.Variable([3.0, 4.0]), tf.Variable(np.int64(2))
    got = []

    def host(step, done, fp, weight, mask, s, c):
        got.append((s.tolist(), int(c)))
        return [mask, mask, np.int64(step if updates else done), np.int64(NEVER)]

    w = tf.Variable([1.0, 2.0])
    guard = _guard(5, statistics=[sums, calls])
    build_guarded_update(host, [GuardedLayer(w, tf.Variable([1.0, 1.0]), tf.Variable([0.0, 0.0]))], guard)
    assert got == [([3.0, 4.0], 2)]
    assert (sums.numpy().tolist(), int(calls.numpy())) == (([0.0, 0.0], 0) if updates else ([3.0, 4.0], 2))
    assert int(guard.next_due.numpy()) == NEVER


def test_a_v1_graph_with_v1_control_flow_and_ref_variables():
    from sparsify_tf.common.graph_utils import v1_cond

    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("w", initializer=[1.0, -2.0, 3.0], use_resource=False)
        m = tf1.get_variable("m", initializer=[1.0, 1.0, 1.0], use_resource=False)
        s = tf1.get_variable("s", initializer=[0.0, 0.0, 0.0], use_resource=False)
        step = tf1.placeholder(tf.int64, [])
        done = tf1.get_variable("done", initializer=np.int64(-1), use_resource=True)
        due = tf1.get_variable("due", initializer=np.int64(2), use_resource=True)
        fp = tf1.get_variable("fp", initializer=np.zeros(2, np.int64), use_resource=True)
        ready, update = build_guarded_update(_prune_smallest([]), [GuardedLayer(w, m, s)],
                                             GuardVariables(step, done, due, fp), cond=v1_cond)
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        assert not sess.run(ready, {step: 1})
        sess.run(update, {step: 1})
        assert sess.run(m).tolist() == [1.0, 1.0, 1.0]
        sess.run(update, {step: 2})
        assert [v.tolist() for v in sess.run([m, w, s])] == [[0.0, 1.0, 1.0], [0.0, -2.0, 3.0], [1.0, 0.0, 0.0]]
        assert sess.run(done) == 2
