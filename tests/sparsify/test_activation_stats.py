"""sparsify.activation_stats: per-channel sums of squares, their norms per canonical shape, the wait-for-data rule."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sparsify.activation_stats import ActivationWindow, sum_of_squares


def test_sum_of_squares_literal_channels_last_and_first():
    x = np.array([[[1.0, 2.0], [3.0, -4.0]]])                 # (1, 2, 2)
    assert sum_of_squares(x).tolist() == [10.0, 20.0]          # channels last
    assert sum_of_squares(x, channel_axis=1).tolist() == [5.0, 25.0]
    assert sum_of_squares(np.array([1, 2], dtype=np.int8), channel_axis=0).dtype == np.float32


def test_sum_of_squares_accumulates_in_float32():
    big = np.full((3, 1), 2.0 ** 12 + 1, dtype=np.float64)     # squares not exact in float32
    want = np.float32(np.float32(2.0 ** 12 + 1) ** 2) * np.float32(3)
    assert sum_of_squares(big).dtype == np.float32
    assert sum_of_squares(big)[0] == np.sum(np.square(big.astype(np.float32)), dtype=np.float32) != 3 * (2 ** 12 + 1) ** 2
    assert abs(float(sum_of_squares(big)[0]) - float(want)) <= float(want) * 1e-6


@pytest.mark.parametrize("x, axis, message", [
    (np.float32(1.0), -1, "x must have at least one axis"),
    (np.ones((2, 3)), 2, "channel_axis=2 is out of range for x of shape (2, 3)"),
])
def test_sum_of_squares_bad_input_names_it(x, axis, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sum_of_squares(x, axis)


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=5),
                  elements=st.floats(-8, 8, width=32)), st.data())
def test_sum_of_squares_matches_the_definition(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    other = tuple(a for a in range(x.ndim) if a != axis % x.ndim)
    np.testing.assert_allclose(sum_of_squares(x, axis), (x.astype(np.float64) ** 2).sum(axis=other), rtol=1e-5,
                               atol=1e-5)


def test_window_norms_are_shaped_per_canonical_shape():
    w = ActivationWindow({"fc": (3, 2), "conv": (4, 2, 3, 3), "grouped": (4, 1, 1, 1)}, groups={"grouped": 2})
    w.add("fc", [9.0, 16.0])
    w.add("conv", [1.0, 0.0])
    w.add("conv", [3.0, 4.0], calls=2)
    w.add("grouped", [4.0, 9.0])
    norms = w.read()
    assert norms["fc"].tolist() == [[3.0, 4.0]]
    assert norms["conv"].shape == (1, 2, 1, 1) and norms["conv"].reshape(-1).tolist() == [2.0, 2.0]
    assert norms["grouped"].shape == (4, 1, 1, 1) and norms["grouped"].reshape(-1).tolist() == [2.0, 2.0, 3.0, 3.0]
    assert dict(w.calls) == {"fc": 1, "conv": 3, "grouped": 1}
    assert all(v.dtype == np.float32 for v in norms.values())


def test_window_waits_for_data_and_names_every_unseen_weight():
    w = ActivationWindow({"a": (2, 2), "b": (2, 3), "c": (2, 4)}, criterion="wanda")
    assert w.waiting()
    w.add("b", np.ones(3))
    assert not w.waiting() and w.unseen() == ["a", "c"]
    with pytest.raises(ValueError) as err:
        w.read()
    assert str(err.value) == ("criterion 'wanda' needs the inputs of every pruned weight, but ['a', 'c'] saw no input "
                              "since the last update: run the model on data before the update")
    w.reset()
    assert w.waiting() and w.sums["b"].tolist() == [0.0, 0.0, 0.0]
    assert not ActivationWindow({}).waiting()                 # no weights: nothing to wait for


def test_window_load_replaces_and_checks_before_changing():
    w = ActivationWindow({"a": (1, 2), "b": (1, 2)})
    w.add("a", [1.0, 1.0])
    w.load({"b": [4.0, 9.0]}, {"b": 2})
    assert dict(w.calls) == {"a": 0, "b": 2} and w.sums["a"].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match=r"sums of 'a' must be a real array of shape \(2,\), got float64 of shape "
                                         r"\(3,\)"):
        w.load({"a": np.ones(3)}, {"a": 1})
    with pytest.raises(ValueError, match=r"calls\['a'\] must be a non-negative integer, got -1"):
        w.load({}, {"a": -1})
    with pytest.raises(ValueError, match=r"sums/calls name \['z'\], which are not weights"):
        w.load({"z": [1.0]}, {})
    assert dict(w.calls) == {"a": 0, "b": 2} and w.sums["b"].tolist() == [4.0, 9.0]


def test_window_views_are_read_only_and_errors_name_the_value():
    w = ActivationWindow({"a": (1, 2)})
    with pytest.raises(ValueError, match="read-only"):
        w.sums["a"][0] = 1.0
    with pytest.raises(TypeError):
        w.calls["a"] = 3
    with pytest.raises(ValueError, match=r"calls must be a positive integer, got 0"):
        w.add("a", [1.0, 1.0], calls=0)
    with pytest.raises(ValueError, match=r"name 'x' is not a weight of this window"):
        w.add("x", [1.0])
    with pytest.raises(ValueError, match=r"groups\['a'\]=3 does not divide the 1 output rows"):
        ActivationWindow({"a": (1, 2)}, groups={"a": 3})
    with pytest.raises(ValueError, match=r"shapes\['b'\] must have at least 2 axes"):
        ActivationWindow({"b": (4,)})


@settings(max_examples=30, deadline=None)
@given(st.lists(hnp.arrays(np.float32, (3,), elements=st.floats(0, 100, width=32)), min_size=1, max_size=5))
def test_window_sum_of_calls_is_the_sum_of_their_sums(parts):
    w = ActivationWindow({"fc": (2, 3)})
    for p in parts:
        w.add("fc", p)
    want = np.zeros(3, np.float32)
    for p in parts:
        want += p
    assert w.sums["fc"].tolist() == want.tolist() and w.calls["fc"] == len(parts)
    np.testing.assert_array_equal(w.read()["fc"], np.sqrt(want).reshape(1, 3))


def test_window_unseen_wording_is_the_adapters_and_the_default_is_unchanged():
    from sparsify.activation_stats import UNSEEN
    w = ActivationWindow({"a": (1, 2), "b": (1, 2)}, "wanda", unseen="the ops of {names} ran no step")
    w.add("b", [1.0, 1.0])
    with pytest.raises(ValueError) as err:
        w.read()
    assert str(err.value) == "criterion 'wanda' needs the inputs of every pruned weight, but the ops of ['a'] ran no step"
    assert UNSEEN.format(names=["a"]) == ("['a'] saw no input since the last update: run the model on data before "
                                          "the update")
