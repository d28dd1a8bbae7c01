"""`sparsify.int8_format`: the .npz file (version 2, one member; version 1 still read), exact int8 values and
zeros back, the file a twentieth of dense."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify import int8_encoding, int8_format
from sparsify.int8_format import (FILE_VERSION, FORMAT, channel_axes, compress_int8, decompress_int8, document_nbytes,
                                  int8_npz_bytes, int8_tensors, load_int8_npz, save_checked_int8_npz, save_int8_npz)
from sparsify.quantization import dequantize_int8, quantize_int8


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
    assert ratio <= 0.06, ratio                # measured 0.053 (file version 2)
    doc = load_int8_npz(path)
    for name, (q, _, _) in int8_tensors(doc).items():
        assert np.array_equal(q == 0, quantize_int8(t[name])[0] == 0)
        assert np.all(q[t[name] == 0] == 0)
    assert document_nbytes(doc) == document_nbytes(compress_int8(t))

def _v1_npz_bytes(doc) -> bytes:
    """A version-1 file, as the version-1 writer made it: four members (format, version, a JSON index with the
    offset and byte count of every array, one blob of every array)."""
    index, chunks, offset = [], [], 0
    for name, entry in doc["tensors"].items():
        item = {"name": name, "arrays": {}}
        for key, v in entry.items():
            if isinstance(v, np.ndarray):
                item["arrays"][key] = {"dtype": v.dtype.str, "shape": list(v.shape), "offset": offset,
                                       "nbytes": int(v.nbytes)}
                chunks.append(np.asarray(v, order="C").reshape(-1).view(np.uint8))
                offset += int(v.nbytes)
            else:
                item[key] = v
        index.append(item)
    buf = io.BytesIO()
    np.savez_compressed(buf, __format__=np.array(FORMAT), __version__=np.array(doc["version"], np.int64),
                        __index__=np.array(json.dumps(index)), __blob__=np.concatenate(chunks))
    return buf.getvalue()


def test_the_file_is_one_member_a_json_index_then_the_arrays():
    w = np.zeros((2, 9), np.float32)
    w[0, 1], w[1, 4] = 2.0, -0.5
    data = int8_npz_bytes(compress_int8({"w": w, "b": np.array([1.5, -2.0], np.float32)}, quantize=["w"]))
    assert FILE_VERSION == 2 and [m.filename for m in zipfile.ZipFile(io.BytesIO(data)).infolist()] == ["int8.npy"]
    raw = np.load(io.BytesIO(data), allow_pickle=False)["int8"].tobytes()
    head, blob = raw.split(b"\n", 1)
    assert json.loads(head) == {"format": FORMAT, "version": 1, "file_version": 2, "tensors": [
        ["w", {"encoding": "bitmask_int8", "shape": [2, 9], "dtype": "float32", "axis": 0},
         [["scales", "<f4", [2]], ["mask", "|u1", [3]], ["values", "|i1", [2]]]],
        ["b", {"encoding": "dense", "shape": [2], "dtype": "float32"}, [["values", "<f4", [2]]]]]}
    scales = np.array([2 / 127, 0.5 / 127], np.float32).tobytes()
    bias = np.array([1.5, -2.0], "<f4").tobytes()
    assert blob == scales + bytes([0b10, 0b100000, 0]) + bytes([127, 256 - 127]) + bias
    assert int8_npz_bytes(compress_int8({"w": w, "b": np.array([1.5, -2.0], np.float32)}, quantize=["w"])) == data
    assert len(data) < 400                                    # one member: ~110 bytes of zip around it


def test_a_version_1_file_still_loads_exactly(tmp_path):
    rng = np.random.default_rng(3)
    w = (rng.normal(size=(6, 20)) * (rng.random((6, 20)) < 0.1)).astype(np.float32)
    t = {"fc.weight": w, "fc.bias": rng.normal(size=6).astype(np.float32), "steps": np.array(4, np.int64)}
    doc = compress_int8(t)
    (tmp_path / "v1.npz").write_bytes(_v1_npz_bytes(doc))
    back = load_int8_npz(tmp_path / "v1.npz")
    assert back["version"] == 1 and set(np.load(tmp_path / "v1.npz").files) == {"__format__", "__version__",
                                                                                 "__index__", "__blob__"}
    q, s, axis = int8_tensors(back)["fc.weight"]
    assert np.array_equal(q, quantize_int8(w)[0]) and np.array_equal(s, quantize_int8(w)[1]) and axis == 0
    assert not np.any(q[w == 0])
    dense = decompress_int8(back)
    assert np.array_equal(dense["fc.bias"], t["fc.bias"]) and dense["steps"].shape == () and int(dense["steps"]) == 4
    assert int8_npz_bytes(back) == int8_npz_bytes(doc)          # read as version 1, written again as version 2
    assert len(int8_npz_bytes(doc)) < len(_v1_npz_bytes(doc)) - 500


def test_malformed_files_are_refused(tmp_path):
    doc = compress_int8({"w": np.eye(16, dtype=np.float32)})
    raw = np.load(io.BytesIO(int8_npz_bytes(doc)))["int8"].tobytes()
    head, blob = raw.split(b"\n", 1)
    index = json.loads(head)

    def member(h, b=blob):
        return {"int8": np.frombuffer(json.dumps(h).encode() + b"\n" + b, np.uint8)}

    short = json.loads(head)
    short["tensors"][0][2][1][2] = [33]                        # a mask of 33 bytes: the rest no longer fits
    for members, msg in [({"int8": np.frombuffer(b"{" + b"\n" + blob, np.uint8)}, "index is not valid JSON"),
                         ({"int8": np.frombuffer(b"[" * 100_000 + b"\n", np.uint8)}, "index is not valid JSON"),
                         (member({**index, "format": "x"}), "is not a compressed int8 .npz"),
                         (member({**index, "file_version": 3}), "file version 3 is not supported"),
                         (member(index, blob[:-1]), "array 'values' does not fit the stored bytes"),
                         (member(index, blob + b"\0"), "1 stored bytes are not in the index"),
                         (member(short), "array 'values' does not fit the stored bytes"),
                         (member({**index, "tensors": [["w", {}, [["mask", "object", [2]]]]]}), "malformed index"),
                         ({"int8": np.zeros(3, np.int16)}, "must be a 1-D uint8 array")]:
        p = tmp_path / "bad.npz"
        np.savez(p, **members)
        with pytest.raises(ValueError, match=msg):
            load_int8_npz(p)
    good = {k: v for k, v in np.load(io.BytesIO(_v1_npz_bytes(doc))).items()}
    v1_index = json.loads(str(good["__index__"]))
    v1_index[0]["arrays"]["values"]["offset"] = int(good["__blob__"].size)
    for members, msg in [({**good, "__format__": np.array("x")}, "is not a compressed int8 .npz"),
                         ({**good, "__index__": np.array("{")}, "is not valid JSON"),
                         ({**good, "__index__": np.array(json.dumps(v1_index))}, "does not fit the stored bytes"),
                         ({k: v for k, v in good.items() if k != "__blob__"}, "missing or malformed")]:
        p = tmp_path / "bad1.npz"
        np.savez(p, **members)
        with pytest.raises(ValueError, match=msg):
            load_int8_npz(p)


def test_the_module_reexports_the_encoding():
    assert set(int8_encoding.__all__) - {"checked_entries"} <= set(int8_format.__all__)
    assert all(getattr(int8_format, n) is getattr(int8_encoding, n) for n in int8_encoding.__all__)
    assert channel_axes is int8_encoding.channel_axes


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
