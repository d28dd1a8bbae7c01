"""`sparsify.int8_encoding`: exact int8 entries, dense where smaller, malformed documents refused by name."""
from __future__ import annotations

import numpy as np
import pytest

from sparsify.int8_encoding import (FORMAT, channel_axes, checked_entries, compress_int8, decode_int8_values,
                                    decompress_int8, encode_int8, encode_int8_values, int8_tensors)
from sparsify.quantization import dequantize_int8, quantize_int8


def test_literal_bitmask_int8_entry():
    w = np.zeros((2, 9), np.float32)
    w[0, 1], w[0, 8], w[1, 4] = 2.0, -1.0, 0.5
    e = encode_int8(w)
    # bit i of the packed mask (little-endian) is element i: elements 1, 8 and 9 + 4 = 13
    assert e["encoding"] == "bitmask_int8" and e["mask"].tolist() == [0b00000010, 0b00100001, 0b00000000]
    assert e["values"].tolist() == [127, -64, 127] and e["values"].dtype == np.int8     # -63.5 -> -64
    assert e["scales"].tolist() == pytest.approx([2 / 127, 0.5 / 127]) and e["scales"].dtype == np.float32
    assert e["shape"] == [2, 9] and e["dtype"] == "float32" and e["axis"] == 0
    q, s, axis = decode_int8_values(e)
    assert np.array_equal(q, quantize_int8(w)[0]) and axis == 0


def test_dense_int8_when_the_bitmask_is_not_smaller():
    w = np.arange(1, 17, dtype=np.float32).reshape(2, 8)
    e = encode_int8(w)
    assert e["encoding"] == "int8" and e["values"].shape == (2, 8) and "mask" not in e
    assert np.array_equal(decode_int8_values(e)[0], quantize_int8(w)[0])


def test_document_keeps_the_other_tensors_exact_and_dequantizes_the_weights():
    rng = np.random.default_rng(0)
    w = (rng.normal(size=(8, 16)) * (rng.random((8, 16)) < 0.2)).astype(np.float32)
    t = {"fc.weight": w, "fc.bias": rng.normal(size=8).astype(np.float32), "step": np.array(7, np.int64),
         "emb": np.zeros((4, 32), np.float16)}
    doc = compress_int8(t)
    kinds = {k: e["encoding"] for k, e in doc["tensors"].items()}
    assert kinds == {"fc.weight": "bitmask_int8", "fc.bias": "dense", "step": "dense", "emb": "bitmask_int8"}
    back = decompress_int8(doc)
    assert np.array_equal(back["fc.bias"], t["fc.bias"]) and back["step"] == 7 and back["emb"].dtype == np.float16
    q, s = quantize_int8(w)
    assert np.array_equal(back["fc.weight"], dequantize_int8(q, s)) and back["fc.weight"].dtype == np.float32
    assert np.array_equal(back["fc.weight"] == 0, q == 0)
    assert set(int8_tensors(doc)) == {"fc.weight", "emb"}


def test_quantize_and_axes_choose_tensors_and_channels():
    kernel = np.array([[0.0, 2.0], [1.0, 0.0], [-0.5, 0.0]], np.float32)       # Keras Dense (in, out)
    doc = compress_int8({"k": kernel, "b": np.ones(2, np.float32)}, quantize=["k"], axes={"k": -1})
    q, s, axis = int8_tensors(doc)["k"]
    assert axis == 1 and q.tolist() == [[0, 127], [127, 0], [-64, 0]] and s.shape == (2,)
    assert doc["tensors"]["b"]["encoding"] == "dense"
    with pytest.raises(ValueError, match=r"quantize names tensors that are not given: \['x'\]"):
        compress_int8({"k": kernel}, quantize=["x"])
    with pytest.raises(ValueError, match=r"axes names tensors that are not given: \['x'\]"):
        compress_int8({"k": kernel}, axes={"x": 0})
    with pytest.raises(ValueError, match="tensor 'i' is int64, only floating-point"):
        compress_int8({"i": np.ones((2, 2), np.int64)}, quantize=["i"])
    with pytest.raises(ValueError, match="min_elements must be an integer >= 1, got 0"):
        compress_int8({"k": kernel}, min_elements=0)
    with pytest.raises(ValueError, match="NaN"):
        compress_int8({"k": np.full((8, 8), np.nan, np.float32)})



def _corrupt(doc, name, key, value):
    entry = dict(doc["tensors"][name])
    entry[key] = value
    return {**doc, "tensors": {**doc["tensors"], name: entry}}


def test_malformed_documents_are_refused_naming_the_tensor():
    w = np.zeros((4, 16), np.float32)
    w[:, 3] = 1.0
    doc = compress_int8({"w": w})
    e = doc["tensors"]["w"]
    cases = [
        (_corrupt(doc, "w", "values", e["values"][:-1]), "mask marks 4 non-zeros but 3"),
        (_corrupt(doc, "w", "values", e["values"].astype(np.int16)), "values must be int8"),
        (_corrupt(doc, "w", "values", np.zeros(4, np.int8)), "a stored value is 0"),
        (_corrupt(doc, "w", "mask", e["mask"][:-1]), "mask must hold 8 uint8 bytes"),
        (_corrupt(doc, "w", "scales", e["scales"][:2]), "scales must be 4 positive finite float32"),
        (_corrupt(doc, "w", "scales", -e["scales"]), "scales must be 4 positive"),
        (_corrupt(doc, "w", "axis", 2), r"axis must be an integer in \[0, 2\)"),
        (_corrupt(doc, "w", "shape", [4, -16]), "shape must be a non-empty list"),
        (_corrupt(doc, "w", "dtype", "int32"), "must be a NumPy floating-point dtype"),
    ]
    for bad, msg in cases:
        with pytest.raises(ValueError, match=msg) as err:
            decompress_int8(bad)
        assert "'w'" in str(err.value)
    with pytest.raises(ValueError, match="declares 64 elements, more than the 10 allowed"):
        decompress_int8(doc, max_elements=10)
    with pytest.raises(ValueError, match="not a compressed int8 document"):
        decompress_int8({"format": "other"})
    with pytest.raises(ValueError, match="version 2 is not supported"):
        decompress_int8({**doc, "version": 2})


def test_encode_int8_values_keeps_given_values_and_checks_them():
    q = np.array([[0, 3, 0, -7]], np.int8)
    e = encode_int8_values(q, np.array([0.25], np.float32), axis=0, dtype="float16")
    doc = {"format": FORMAT, "version": 1, "tensors": {"w": e}}
    assert np.array_equal(int8_tensors(doc)["w"][0], q)
    back = decompress_int8(doc)["w"]
    assert back.dtype == np.float16 and back.tolist() == [[0.0, 0.75, 0.0, -1.75]]
    with pytest.raises(ValueError, match="q must be an int8 array"):
        encode_int8_values(q.astype(np.int16), np.array([0.25], np.float32))
    with pytest.raises(ValueError, match="scales must be 1 positive finite float32"):
        encode_int8_values(q, np.array([0.25, 1.0], np.float32))
    with pytest.raises(ValueError, match="must be a NumPy floating-point dtype, got 'int8'"):
        encode_int8_values(q, np.array([0.25], np.float32), dtype="int8")
    with pytest.raises(ValueError, match=r"axis must be an integer in \[-2, 2\), got 5"):
        encode_int8_values(q, np.array([0.25], np.float32), axis=5)


def test_channel_axes_per_layout():
    t = {"fc.weight": np.zeros((4, 3)), "conv.weight": np.zeros((4, 3, 2, 2)), "fc.bias": np.zeros(4)}
    assert channel_axes(t, "torch") == {"fc.weight": 0, "conv.weight": 0}
    k = {"d/kernel": np.zeros((3, 4)), "c/kernel": np.zeros((2, 2, 3, 4)), "e/embeddings": np.zeros((9, 4))}
    axes = channel_axes(k, "keras")
    assert axes == {"d/kernel": -1, "c/kernel": -1, "e/embeddings": 0}
    doc = compress_int8({n: np.ones(a.shape, np.float32) for n, a in k.items()}, axes=axes, min_elements=1)
    assert [e["scales"].shape for e in doc["tensors"].values()] == [(4,), (4,), (9,)]
    with pytest.raises(ValueError, match="layout must be one of"):
        channel_axes(k, "tf")
