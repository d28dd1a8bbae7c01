"""`sparsify.sparse_format`: exact round trips, the smaller encoding chosen, hostile documents refused."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.sparse_format import FORMAT, compress_tensors, decode, decompress_tensors, encode, entry_nbytes


def test_literal_bitmask_and_csr():
    w = np.array([[0, 2, 0, 0, 0, 0, 0, 0, 5], [0, 0, 0, 0, 0, 0, 0, 0, 0]], np.float32)
    e = encode(w, "bitmask")
    # bit i of the packed mask (little-endian) is element i: elements 1 and 8 are non-zero
    assert e["mask"].tolist() == [0b00000010, 0b00000001, 0] and e["values"].tolist() == [2.0, 5.0]
    c = encode(w, "csr")
    assert c["crow_indices"].tolist() == [0, 2, 2] and c["col_indices"].tolist() == [1, 8]
    assert c["crow_indices"].dtype == np.int32
    for entry in (e, c):
        assert np.array_equal(decode(entry), w)


def test_dense_when_not_smaller():
    w = np.ones((4, 4), np.float32)
    assert encode(w, "bitmask")["encoding"] == "dense" and encode(w, "csr")["encoding"] == "dense"
    half = np.tile(np.array([1, 1, 0, 0], np.float32), (8, 8))     # 2:4: bitmask wins, CSR does not
    assert encode(half, "bitmask")["encoding"] == "bitmask" and encode(half, "csr")["encoding"] == "dense"
    assert entry_nbytes(encode(half, "bitmask")) == half.size // 8 + half.size // 2 * 4


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 33), density=st.floats(0, 1), seed=st.integers(0, 999),
       dtype=st.sampled_from([np.float32, np.float16, np.float64, np.int8, np.int64]),
       encoding=st.sampled_from(["bitmask", "csr"]))
def test_round_trip_is_exact(rows, cols, density, seed, dtype, encoding):
    rng = np.random.default_rng(seed)
    w = (rng.normal(size=(rows, cols)) * 10 * (rng.random((rows, cols)) < density)).astype(dtype)
    doc = compress_tensors({"w": w, "w3": w.reshape(rows, 1, cols)}, encoding, min_elements=1)
    back = decompress_tensors(doc)
    assert back["w"].dtype == w.dtype and np.array_equal(back["w"], w)
    assert np.array_equal(back["w3"], w.reshape(rows, 1, cols))
    assert all(entry_nbytes(e) <= w.nbytes for e in doc["tensors"].values())


def test_hostile_documents_are_refused():
    w = np.zeros((8, 8), np.float32)
    w[0, 0] = 1
    e = encode(w)
    with pytest.raises(ValueError, match="mask marks 1 non-zeros but 2 values"):
        decode({**e, "values": np.ones(2, np.float32)}, "fc")
    with pytest.raises(ValueError, match="mask must hold 9 uint8 bytes for 72 elements, got 8"):
        decode({**e, "shape": [8, 9]}, "fc")
    with pytest.raises(ValueError, match="declares 10000000000 elements"):
        decode({**e, "shape": [100000, 100000]}, "fc", max_elements=10 ** 6)
    c = encode(w, "csr")
    with pytest.raises(ValueError, match=r"column index out of range \[0, 8\)"):
        decode({**c, "col_indices": np.array([9], np.int32)}, "fc")
    with pytest.raises(ValueError, match="row pointers"):
        decode({**c, "crow_indices": np.array([0, 5, 0, 0, 0, 0, 0, 0, 1], np.int32)}, "fc")
    two = w.copy()
    two[0, 3] = 2
    c2 = encode(two, "csr")
    with pytest.raises(ValueError, match="CSR column indices must increase within each row"):
        decode({**c2, "col_indices": np.array([3, 3], np.int32)}, "fc")
    with pytest.raises(ValueError, match="unknown encoding 'zip'"):
        decode({**e, "encoding": "zip"})
    with pytest.raises(ValueError, match="not a compressed state_dict"):
        decompress_tensors({"format": "other"})
    with pytest.raises(ValueError, match="version 9"):
        decompress_tensors({"format": FORMAT, "version": 9, "tensors": {}})
    with pytest.raises(ValueError, match="encoding must be one of"):
        encode(w, "rle")


def test_negative_zero_is_a_zero_and_comes_back_as_zero():
    w = np.zeros((16, 64), np.float32)
    w[:, 0], w[:, 1], w[:, 3] = -0.0, 1.0, -2.0
    for encoding in ("bitmask", "csr"):
        e = encode(w, encoding)
        assert e["encoding"] == encoding and e["values"].tolist() == [1.0, -2.0] * 16   # -0.0 is not stored
        back = decode(e)
        np.testing.assert_array_equal(back, w)
        assert not np.signbit(back[:, 0]).any()                  # it returns as +0.0
