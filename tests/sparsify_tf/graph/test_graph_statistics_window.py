"""TF graph mode reads its activation statistics through the core's window: the norms, the unseen error."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify_tf.graph.statistics import UNSEEN, activation_norms, activation_window


def _reference_norms(sums, shape, groups):
    """The norms TF graph mode computed before it used the core (kept here to pin them bit for bit)."""
    norms = np.sqrt(np.asarray(sums, np.float32))
    spatial = (1,) * (len(shape) - 2)
    if groups == 1:
        return norms.reshape(1, norms.size, *spatial)
    rows, per = shape[0] // groups, shape[1]
    idx = (np.arange(shape[0])[:, None] // rows) * per + np.arange(per)[None, :]
    return norms[idx].reshape(shape[0], per, *spatial)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2), st.data())
def test_window_norms_are_the_graphs_former_norms_bit_for_bit(groups, per, rows_per_group, spatial, data):
    shape = (groups * rows_per_group, per, *([3] * spatial))
    sums = np.array(data.draw(st.lists(st.floats(0, 1e6, width=32), min_size=groups * per, max_size=groups * per)),
                    np.float32)
    calls = np.int64(data.draw(st.integers(1, 5)))
    got = activation_window(["w"], [shape], [groups], [sums], [calls]).read()["w"]
    want = _reference_norms(sums, shape, groups)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got, want)
    assert np.array_equal(activation_norms([sums], [shape], [groups])[0], want)


def test_a_weight_without_a_training_step_is_named_with_the_graphs_wording():
    window = activation_window(["a/kernel", "b/kernel", "c/kernel"], [(2, 3)] * 3, [1] * 3,
                               [np.ones(3, np.float32)] * 3, [np.int64(0), np.int64(2), np.int64(0)])
    assert window.unseen() == ["a/kernel", "c/kernel"] and not window.waiting()
    with pytest.raises(ValueError) as err:
        window.read()
    assert str(err.value) == ("criterion 'wanda' needs the inputs of every pruned weight, but the ops of ['a/kernel', "
                              "'c/kernel'] computed no gradient since the last update (not trained)")
    assert UNSEEN.startswith("the ops of {names}")
    idle = activation_window(["a/kernel"], [(2, 3)], [1], [np.zeros(3, np.float32)], [np.int64(0)])
    assert idle.waiting()                  # the update's in-graph guard waits in exactly this case
