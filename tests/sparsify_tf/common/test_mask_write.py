"""write_update: the one TF writer; weights dense under the mask, exact zeros, the seed's weight * mask."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings, strategies as st

from sparsify_tf.common.mask_write import SLOT_ZERO_OP, dense_value, write_update
from sparsify_tf.common.pruning_scope import PruningScope

tf1 = tf.compat.v1


def test_release_keeps_the_zeros_of_the_last_masks_and_drops_the_stored_values():
    w, s, m = tf.Variable([0.0, 2.0, 3.0]), tf.Variable([1.0, 0.0, 0.0]), tf.Variable([0.0, 1.0, 1.0])
    slot = tf.Variable([0.0, 0.5, 0.5])
    write_update(w, m, tf.constant([True, True, True]), tf.constant([False, True, True]), stored=s, slots=[slot])
    assert w.numpy().tolist() == [0.0, 2.0, 3.0] and s.numpy().tolist() == [0.0, 0.0, 0.0]
    assert m.numpy().tolist() == [1.0, 1.0, 1.0] and slot.numpy().tolist() == [0.0, 0.5, 0.5]


def test_grown_entries_start_at_zero_in_the_weight_and_the_slots():
    w, s, m = tf.Variable([0.0, 2.0, 3.0]), tf.Variable([1.0, 0.0, 0.0]), tf.Variable([0.0, 1.0, 1.0])
    slot = tf.Variable([0.0, 0.5, 0.5])
    # index 0 grown (kept, not a zero to keep), index 2 dropped
    write_update(w, m, tf.constant([True, True, False]), tf.constant([False, True, False]), stored=s, slots=[slot])
    assert w.numpy().tolist() == [0.0, 2.0, 0.0] and s.numpy().tolist() == [0.0, 0.0, 3.0]
    assert m.numpy().tolist() == [1.0, 1.0, 0.0] and slot.numpy().tolist() == [0.0, 0.5, 0.0]


def test_a_float_mask_is_written_as_given_and_read_as_nonzero():
    w, s, m = tf.Variable([1.0, 2.0]), tf.Variable([0.0, 0.0]), tf.Variable([1.0, 1.0], dtype=tf.float64)
    write_update(w, m, tf.constant([0.0, 1.0], tf.float64), stored=s)
    assert m.numpy().tolist() == [0.0, 1.0] and m.dtype == tf.float64
    assert w.numpy().tolist() == [0.0, 2.0] and s.numpy().tolist() == [1.0, 0.0]


def test_without_stored_values_the_weight_is_multiplied_by_the_mask_as_the_seed_api_does():
    values = np.array([-1.5, np.inf, np.nan, 2.0, -3.0], np.float32)
    new = np.array([0.0, 0.0, 1.0, 1.0, 0.0], np.float32)
    w, m = tf.Variable(values), tf.Variable(np.ones(5, np.float32))
    slot = tf.Variable(np.full(5, 0.5, np.float32))
    write_update(w, m, tf.constant(new), slots=[slot])
    with np.errstate(invalid="ignore"):
        expected = values * new                   # -0.0, nan (inf * 0), nan, 2.0, -0.0
    got = w.numpy()
    assert np.array_equal(got, expected, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(expected))
    assert m.numpy().tolist() == new.tolist()
    assert slot.numpy().tolist() == [0.0, 0.0, 0.5, 0.5, 0.0]


def test_in_a_v1_graph_the_ops_carry_the_seed_names_and_the_mask_is_written_after_the_reads():
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("w", initializer=np.array([[3.0, 0.0], [0.5, 2.0]], np.float32), use_resource=True)
        ref = tf1.get_variable("r", initializer=np.array([4.0, -2.0], np.float32), use_resource=False)
        m = tf1.get_variable("m", initializer=np.array([[1.0, 0.0], [1.0, 1.0]], np.float32), use_resource=True)
        mr = tf1.get_variable("mr", initializer=np.array([1.0, 1.0], np.float32), use_resource=False)
        s = tf1.get_variable("s", initializer=np.array([[0.0, 7.0], [0.0, 0.0]], np.float32), use_resource=True)
        slot = tf1.get_variable("slot", initializer=np.full((2, 2), 0.25, np.float32), use_resource=True)
        with tf1.name_scope("upd/"):
            # keep every entry: index (0, 1) comes back from the stored values with zeroed slot state
            ops = write_update(w, m, tf.ones([2, 2]), stored=s, slots=[slot])
            ops += write_update(ref, mr, tf.constant([0.0, 1.0]))
        names = {op.name for op in g.get_operations()}
        assert {f"upd/{PruningScope.OP_MASK_ASSIGN}", f"upd/{PruningScope.OP_WEIGHT_UPDATE}",
                f"upd/{SLOT_ZERO_OP}", f"upd/{PruningScope.OP_MASK_ASSIGN}_1",
                f"upd/{PruningScope.OP_WEIGHT_UPDATE}_1"} <= names
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(tf.group(*ops))
            got = sess.run([w, m, s, slot, ref, mr])
    assert got[0].tolist() == [[3.0, 7.0], [0.5, 2.0]] and got[1].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert got[2].tolist() == [[0.0, 0.0], [0.0, 0.0]] and got[3].tolist() == [[0.25, 0.0], [0.25, 0.25]]
    assert got[4].tolist() == [0.0, -2.0] and got[5].tolist() == [0.0, 1.0]


def test_in_a_tf_function_reads_see_the_old_mask():
    w, s, m = tf.Variable([1.0, 2.0]), tf.Variable([0.0, 0.0]), tf.Variable([0.0, 1.0])
    slot = tf.Variable([0.5, 0.5])

    @tf.function(autograph=False)
    def write() -> None:
        write_update(w, m, tf.constant([True, True]), stored=s, slots=[slot])

    write()
    assert slot.numpy().tolist() == [0.0, 0.5] and m.numpy().tolist() == [1.0, 1.0]


@pytest.mark.parametrize("stored", [True, False])
def test_dense_value_adds_the_stored_values_when_there_are_some(stored):
    w = tf.Variable([0.0, 2.0])
    s = tf.Variable([1.0, 0.0]) if stored else None
    assert dense_value(w, s).numpy().tolist() == ([1.0, 2.0] if stored else [0.0, 2.0])


@settings(max_examples=30, deadline=None)
# no subnormals: TF's CPU kernels may flush them to zero (a denormal stored value reads back as 0)
@given(st.lists(st.tuples(st.floats(-4, 4, width=32, allow_subnormal=False), st.booleans(), st.booleans(),
                          st.floats(-1, 1, width=32, allow_subnormal=False)),
                min_size=1, max_size=12))
def test_an_update_loses_no_value_and_leaves_exact_zeros(entries):
    dense = np.array([e[0] for e in entries], np.float32)
    old = np.array([e[1] for e in entries])
    new = np.array([e[2] for e in entries])
    slot0 = np.array([e[3] for e in entries], np.float32)
    w = tf.Variable(np.where(old, dense, 0).astype(np.float32))
    s = tf.Variable(np.where(old, 0, dense).astype(np.float32))
    m, slot = tf.Variable(old.astype(np.float32)), tf.Variable(slot0)
    assert np.array_equal(dense_value(w, s).numpy(), dense)
    write_update(w, m, tf.constant(new), tf.constant(new), stored=s, slots=[slot])
    assert np.array_equal(w.numpy() + s.numpy(), dense)                   # nothing lost
    assert not w.numpy()[~new].any() and not s.numpy()[new].any()
    assert np.array_equal(m.numpy() != 0, new)
    assert np.array_equal(slot.numpy(), np.where(new & old, slot0, 0))    # state only where kept throughout
