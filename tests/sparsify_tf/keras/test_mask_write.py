"""write_update: the weights stay dense under the mask; nothing is lost, zeros are exact."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from hypothesis import given, settings, strategies as st

from sparsify_tf.keras.mask_write import dense_value, write_update


def test_release_keeps_the_zeros_of_the_last_masks_and_drops_the_stored_values():
    w, s, m = tf.Variable([0.0, 2.0, 3.0]), tf.Variable([1.0, 0.0, 0.0]), tf.Variable([0.0, 1.0, 1.0])
    slot = tf.Variable([0.0, 0.5, 0.5])
    write_update(w, s, m, [slot], tf.constant([True, True, True]), tf.constant([False, True, True]))
    assert w.numpy().tolist() == [0.0, 2.0, 3.0] and s.numpy().tolist() == [0.0, 0.0, 0.0]
    assert m.numpy().tolist() == [1.0, 1.0, 1.0] and slot.numpy().tolist() == [0.0, 0.5, 0.5]


def test_grown_entries_start_at_zero_in_the_weight_and_the_slots():
    w, s, m = tf.Variable([0.0, 2.0, 3.0]), tf.Variable([1.0, 0.0, 0.0]), tf.Variable([0.0, 1.0, 1.0])
    slot = tf.Variable([0.0, 0.5, 0.5])
    # index 0 grown (kept, not a zero to keep), index 2 dropped
    write_update(w, s, m, [slot], tf.constant([True, True, False]), tf.constant([False, True, False]))
    assert w.numpy().tolist() == [0.0, 2.0, 0.0] and s.numpy().tolist() == [0.0, 0.0, 3.0]
    assert m.numpy().tolist() == [1.0, 1.0, 0.0] and slot.numpy().tolist() == [0.0, 0.5, 0.0]


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
    write_update(w, s, m, [slot], tf.constant(new), tf.constant(new))
    assert np.array_equal(w.numpy() + s.numpy(), dense)                   # nothing lost
    assert not w.numpy()[~new].any() and not s.numpy()[new].any()
    assert np.array_equal(m.numpy() != 0, new)
    assert np.array_equal(slot.numpy(), np.where(new & old, slot0, 0))    # state only where kept throughout
