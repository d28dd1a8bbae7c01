"""`sparsify.int8_format`: exact int8 values and zeros back, dense where smaller, the file a twentieth of dense."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.int8_format import (FORMAT, compress_int8, decode_int8_values, decompress_int8, document_nbytes,
                                  channel_axes, encode_int8_values, save_checked_int8_npz,
                                  encode_int8, int8_npz_bytes, int8_tensors, load_int8_npz, save_int8_npz)
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


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 40), density=st.floats(0, 1), seed=st.integers(0, 999),
       dtype=st.sampled_from([np.float32, np.float16, np.float64]))
def test_round_trip_through_the_file_gives_exact_int8_values_and_zeros(rows, cols, density, seed, dtype):
    rng = np.random.default_rng(seed)
    w = (rng.normal(size=(rows, cols)) * (rng.random((rows, cols)) < density)).astype(dtype)
    w3 = w.reshape(rows, 1, cols)
    doc = compress_int8({"w": w, "w3": w3, "b": w[0]}, quantize=["w", "w3"])
    back_doc = load_int8_npz(io.BytesIO(int8_npz_bytes(doc)))
    exact = int8_tensors(back_doc)
    for name, a in (("w", w), ("w3", w3)):
        q, s = quantize_int8(a)
        assert np.array_equal(exact[name][0], q) and np.array_equal(exact[name][1], s)
        assert not np.any(exact[name][0][a == 0])               # every zero is still a zero
    back = decompress_int8(back_doc)
    assert np.array_equal(back["b"], w[0]) and back["w"].dtype == dtype
    assert np.array_equal(back["w"], dequantize_int8(*quantize_int8(w), dtype=dtype))


def _pruned_mlp(sparsity: float, seed: int = 0) -> dict[str, np.ndarray]:
    """The tensors of the bench MLP (bench.bench_torch.TokenMLP: 2 blocks 128-512-128 + LayerNorms + head 128->10),
    each weight magnitude-pruned to ``sparsity``."""
    rng = np.random.default_rng(seed)
    t = {}
    for b in range(2):
        t[f"blocks.{b}.0.weight"], t[f"blocks.{b}.0.bias"] = np.ones(128, np.float32), np.zeros(128, np.float32)
        t[f"blocks.{b}.1.weight"] = rng.uniform(-0.09, 0.09, (512, 128)).astype(np.float32)
        t[f"blocks.{b}.1.bias"] = rng.uniform(-0.09, 0.09, 512).astype(np.float32)
        t[f"blocks.{b}.3.weight"] = rng.uniform(-0.045, 0.045, (128, 512)).astype(np.float32)
        t[f"blocks.{b}.3.bias"] = rng.uniform(-0.045, 0.045, 128).astype(np.float32)
    t["head.weight"], t["head.bias"] = rng.uniform(-0.09, 0.09, (10, 128)).astype(np.float32), np.zeros(10, np.float32)
    for k, a in t.items():
        if a.ndim == 2:
            keep = np.argsort(np.abs(a), axis=None, kind="stable")[round(sparsity * a.size):]
            flat = np.zeros(a.size, np.float32)
            flat[keep] = a.reshape(-1)[keep]
            t[k] = flat.reshape(a.shape)
    return t


def test_bench_mlp_file_at_90_percent_is_under_six_hundredths_of_dense(tmp_path):
    t = _pruned_mlp(0.9)
    dense = io.BytesIO()
    np.savez(dense, **t)                     # the dense float32 file
    path = tmp_path / "mlp.int8.npz"
    n = save_int8_npz(path, compress_int8(t))
    assert n == path.stat().st_size
    ratio = n / len(dense.getvalue())
    assert ratio <= 0.06, ratio                # measured 0.054
    doc = load_int8_npz(path)
    for name, (q, _, _) in int8_tensors(doc).items():
        assert np.array_equal(q == 0, quantize_int8(t[name])[0] == 0)
        assert np.all(q[t[name] == 0] == 0)
    assert document_nbytes(doc) == document_nbytes(compress_int8(t))


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


def test_malformed_files_are_refused(tmp_path):
    doc = compress_int8({"w": np.eye(16, dtype=np.float32)})
    good = dict(np.load(io.BytesIO(int8_npz_bytes(doc))))
    assert set(good) == {"__format__", "__version__", "__index__", "__blob__"} and str(good["__format__"]) == FORMAT
    index = json.loads(str(good["__index__"]))
    index[0]["arrays"]["values"]["offset"] = int(good["__blob__"].size)
    for members, msg in [({**good, "__format__": np.array("x")}, "is not a compressed int8 .npz"),
                         ({**good, "__index__": np.array("{")}, "is not valid JSON"),
                         ({**good, "__index__": np.array(json.dumps(index))}, "does not fit the stored bytes"),
                         ({k: v for k, v in good.items() if k != "__blob__"}, "missing or malformed")]:
        p = tmp_path / "bad.npz"
        np.savez(p, **members)
        with pytest.raises(ValueError, match=msg):
            load_int8_npz(p)


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


def test_save_checked_writes_only_a_file_that_reads_back(tmp_path):
    t = _pruned_mlp(0.9)
    path = tmp_path / "mlp.int8.npz"
    n, report = save_checked_int8_npz(path, t)
    assert n == path.stat().st_size and set(report) == {k for k, a in t.items() if a.ndim == 2}
    assert all(r.lost_zeros == 0 and r.zeros_before == round(0.9 * r.size) for r in report.values())
    assert np.array_equal(decompress_int8(load_int8_npz(path))["blocks.0.1.bias"], t["blocks.0.1.bias"])
    with pytest.raises(ValueError, match="NaN"):
        save_checked_int8_npz(tmp_path / "bad.npz", {"w": np.full((8, 8), np.nan, np.float32)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.int8.npz"]      # nothing left behind
    k = {"d/kernel": np.eye(8, dtype=np.float32)}
    _, rk = save_checked_int8_npz(tmp_path / "k.npz", k, axes=channel_axes(k, "keras"))
    assert int8_tensors(load_int8_npz(tmp_path / "k.npz"))["d/kernel"][2] == 1 and rk["d/kernel"].zeros_before == 56


def test_zero_dimensional_tensors_come_back_with_their_shape(tmp_path):
    """A BatchNorm's ``num_batches_tracked`` (or an optimizer's step counter) is a 0-d tensor: stored exactly,
    read back as shape ``()``, not ``(1,)``."""
    t = {"fc.weight": _pruned_mlp(0.9)["blocks.0.1.weight"], "bn.num_batches_tracked": np.array(5, np.int64)}
    save_checked_int8_npz(tmp_path / "bn.int8.npz", t)
    back = decompress_int8(load_int8_npz(tmp_path / "bn.int8.npz"))["bn.num_batches_tracked"]
    assert back.shape == () and back.dtype == np.int64 and int(back) == 5
