"""`sparsify.quantization`: symmetric per-channel int8, zeros kept, error within half a step, the zeros check."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sparsify.quantization import (QMAX, LayerZeros, dequantize_int8, format_zeros_report, layer_zeros,
                                   quantize_int8, require_zeros_kept, zeros_check)


def test_literal_per_channel_values():
    w = np.array([[0.0, 1.0, -2.0, 0.5], [0.0, 0.0, 0.0, 0.0], [0.3, 0.0, 0.0, -0.01]], np.float32)
    q, s = quantize_int8(w)
    assert q.dtype == np.int8 and s.dtype == np.float32
    # row 0: scale 2/127; 1/(2/127) = 63.5 -> 64 (ties to even), 0.5 -> 31.75 -> 32
    # row 1: all zero, scale 1.0; row 2: scale 0.3/127, -0.01 -> -4.23 -> -4
    assert q.tolist() == [[0, 64, -127, 32], [0, 0, 0, 0], [127, 0, 0, -4]]
    assert s.tolist() == pytest.approx([2 / 127, 1.0, 0.3 / 127], rel=1e-7)
    assert s[1] == 1.0


def test_conv_weight_is_per_output_channel():
    w = np.zeros((2, 3, 2, 2), np.float32)
    w[0, 0, 0, 0], w[1, 2, 1, 1], w[1, 0, 0, 1] = 4.0, -0.5, 0.25
    q, s = quantize_int8(w)
    assert q.shape == w.shape and s.tolist() == pytest.approx([4 / 127, 0.5 / 127])
    assert q[0, 0, 0, 0] == 127 and q[1, 2, 1, 1] == -127 and q[1, 0, 0, 1] == 64    # 63.5 -> 64
    assert np.count_nonzero(q) == 3


def test_a_small_weight_becomes_a_new_zero_and_is_reported():
    w = np.array([[1.0, 0.003, 0.0, 0.0]], np.float32)   # 0.003 * 127 = 0.381 -> 0
    q, _ = quantize_int8(w)
    assert q.tolist() == [[127, 0, 0, 0]]
    r = zeros_check({"fc": w}, {"fc": q})["fc"]
    assert r == LayerZeros("fc", 4, 2, 3, 1, 0)
    assert r.keeps_zeros and r.sparsity_before == 0.5 and r.sparsity_after == 0.75


def test_negative_zero_stays_zero():
    q, _ = quantize_int8(np.array([[-0.0, 1.0]], np.float32))
    assert q.tolist() == [[0, 127]]


def test_dequantize_literal_and_dtype():
    q = np.array([[1, -127], [0, 3]], np.int8)
    d = dequantize_int8(q, np.array([0.5, 2.0], np.float32), dtype=np.float64)
    assert d.dtype == np.float64 and d.tolist() == [[0.5, -63.5], [0.0, 6.0]]


@pytest.mark.parametrize("w, err, msg", [
    (np.array([[1, 2]], np.int32), TypeError, "floating-point"),
    (np.zeros((0, 3), np.float32), ValueError, "at least one"),
    (np.float32(1.0), ValueError, "at least one"),
    (np.array([[1.0, np.nan]], np.float32), ValueError, "NaN"),
    (np.array([[1.0, np.inf]], np.float32), ValueError, "NaN or infinite"),
])
def test_bad_weights_are_refused_with_the_layer_name(w, err, msg):
    with pytest.raises(err, match=msg) as e:
        quantize_int8(w, name="enc.fc")
    assert "enc.fc" in str(e.value)


def test_bad_dequantize_inputs():
    with pytest.raises(TypeError, match="int8"):
        dequantize_int8(np.zeros((2, 2), np.int16), np.ones(2, np.float32))
    with pytest.raises(ValueError, match=r"one value per output channel, shape \(2,\)"):
        dequantize_int8(np.zeros((2, 2), np.int8), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="positive"):
        dequantize_int8(np.zeros((2, 2), np.int8), np.array([1.0, 0.0], np.float32))


def test_zeros_check_refuses_mismatched_layers_and_shapes():
    with pytest.raises(ValueError, match="differ from layers after"):
        zeros_check({"a": np.zeros(2)}, {"b": np.zeros(2)})
    with pytest.raises(ValueError, match=r"layer 'a': shape before \(2,\) differs"):
        zeros_check({"a": np.zeros(2)}, {"a": np.zeros(3)})


def test_require_zeros_kept_names_each_bad_layer():
    report = zeros_check({"a": np.zeros(3), "b": np.zeros(2), "c": np.ones(2)},
                         {"a": np.array([0, 1, 1]), "b": np.zeros(2), "c": np.zeros(2)})
    assert [r.lost_zeros for r in report.values()] == [2, 0, 0] and report["c"].new_zeros == 2
    with pytest.raises(ValueError, match=r"a \(2 of 3 zeros\)$"):
        require_zeros_kept(report)
    require_zeros_kept({k: v for k, v in report.items() if k != "a"})     # nothing lost: no error


def test_format_zeros_report_one_row_per_layer():
    w = np.array([[0.0, 1.0, 0.001, 0.0]], np.float32)
    text = format_zeros_report(zeros_check({"x": w}, {"x": quantize_int8(w)[0]}))
    assert text.splitlines()[2] == "| x | 4 | 2 (50.00%) | 3 (75.00%) | 1 | 0 |"


_weights = hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=6),
                      elements=st.floats(-1e4, 1e4, width=32, allow_subnormal=False))


@settings(max_examples=100, deadline=None)
@given(w=_weights, pruned=st.data())
def test_zeros_never_become_non_zero_and_error_is_within_half_a_step(w, pruned):
    mask = pruned.draw(hnp.arrays(np.bool_, w.shape))
    w = np.where(mask, w, np.float32(0))
    q, s = quantize_int8(w)
    assert q.dtype == np.int8 and int(np.abs(q.astype(np.int32)).max()) <= QMAX
    assert np.all(q[w == 0] == 0)
    assert zeros_check({"w": w}, {"w": q})["w"].lost_zeros == 0
    deq = dequantize_int8(q, s, dtype=np.float64)
    step = s.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    assert np.all(np.abs(w.astype(np.float64) - deq) <= step / 2 * (1 + 1e-9))
    assert np.all(dequantize_int8(q, s)[w == 0] == 0)
    # the largest magnitude of each non-zero row maps to +-127
    rows = np.abs(q.reshape(q.shape[0], -1)).max(axis=1)
    nonzero_rows = np.abs(w.reshape(w.shape[0], -1)).max(axis=1) > 0
    assert np.all(rows[nonzero_rows] == QMAX)


@settings(max_examples=100, deadline=None)
@given(before=hnp.arrays(np.float32, st.integers(1, 40), elements=st.sampled_from([0.0, 1.0, -2.0])),
       after=st.data())
def test_zeros_report_counts_add_up(before, after):
    a = after.draw(hnp.arrays(np.int8, before.shape, elements=st.sampled_from([0, 1])))
    r = layer_zeros(before, a)
    assert r.zeros_after == r.zeros_before + r.new_zeros - r.lost_zeros
    assert r.lost_zeros == int(np.sum((before == 0) & (a != 0)))


def test_axis_gives_the_channels_of_a_keras_kernel():
    kernel = np.array([[0.0, 2.0], [1.0, 0.0], [-0.5, 0.0]], np.float32)     # (in, out)
    q, s = quantize_int8(kernel, axis=-1)
    qt, st_ = quantize_int8(np.ascontiguousarray(kernel.T))
    assert np.array_equal(q, qt.T) and np.array_equal(s, st_)
    assert q.tolist() == [[0, 127], [127, 0], [-64, 0]]   # -63.5 -> -64 (ties to even)
    assert np.array_equal(dequantize_int8(q, s, axis=1), dequantize_int8(qt, st_).T)
    with pytest.raises(ValueError, match=r"axis of 'k' must be an integer in \[-2, 2\) for a 2-D weight, got 2"):
        quantize_int8(kernel, name="k", axis=2)
