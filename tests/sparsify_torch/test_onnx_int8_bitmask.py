"""`sparsify_torch.onnx_int8_bitmask`: pruned int8 ONNX weights stored as bitmask + int8 values, decoded by standard
ops that onnxruntime folds at load (the session computes exactly as with the dense int8 file), and back (issue 60)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

import sparsify_torch
from sparsify_torch.onnx_export import export_onnx
from sparsify_torch.onnx_int8_bitmask import (BITMASK_INT8_SUFFIXES, bitmask_int8_initializers, bitmask_int8_names,
                                              expand_bitmask_int8)
from sparsify_torch.onnx_quantization import quantize_onnx_int8, quantized_weights

H, NH, TP = onnx.helper, onnx.numpy_helper, onnx.TensorProto


def _dq_model(q: np.ndarray, opset: int = 17) -> onnx.ModelProto:
    """y = x @ DequantizeLinear(q, 0.5)^T: an int8 weight (out, in) as the QDQ format stores it."""
    g = H.make_graph([H.make_node("DequantizeLinear", ["q", "s", "zp"], ["w"]),
                      H.make_node("Transpose", ["w"], ["wt"]), H.make_node("MatMul", ["x", "wt"], ["y"])], "g",
                     [H.make_tensor_value_info("x", TP.FLOAT, [2, q.shape[1]])],
                     [H.make_tensor_value_info("y", TP.FLOAT, [2, q.shape[0]])],
                     [NH.from_array(q, "q"), NH.from_array(np.array(0.5, np.float32), "s"),
                      NH.from_array(np.array(0, np.int8), "zp")])
    return H.make_model(g, opset_imports=[H.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_literal_weight_is_stored_as_bits_and_values_and_decodes_exactly():
    q = np.zeros((64, 64), np.int8)
    q[np.arange(64), (np.arange(64) * 7) % 64] = np.arange(1, 65) * np.where(np.arange(64) % 2, -1, 1)
    q[0, 1] = -127
    small, names = bitmask_int8_initializers(_dq_model(q))
    assert names == ["q"] == bitmask_int8_names(small)
    inits = {i.name: NH.to_array(i) for i in small.graph.initializer}
    assert "q" not in inits
    mask, values, size, shape = (inits["q" + s] for s in BITMASK_INT8_SUFFIXES)
    assert mask.dtype == np.uint8 and mask.size == 64 * 64 // 8
    assert values.dtype == np.int8 and values[0] == 0 and values.size == 1 + 65
    assert values[1:].tolist() == q.reshape(-1)[q.reshape(-1) != 0].tolist()      # row-major order
    assert size.tolist() == [4096] and shape.tolist() == [64, 64]
    x = np.random.default_rng(0).normal(size=(2, 64)).astype(np.float32)
    assert np.array_equal(_run(small, x), _run(_dq_model(q), x))            # the same computation, bit for bit
    back = expand_bitmask_int8(small)
    assert np.array_equal(NH.to_array({i.name: i for i in back.graph.initializer}["q"]), q)
    assert [n.op_type for n in back.graph.node] == ["DequantizeLinear", "Transpose", "MatMul"]
    assert len(back.graph.initializer) == 3 and bitmask_int8_names(back) == []
    assert small.ByteSize() < 0.5 * _dq_model(q).ByteSize()          # 512 + 66 bytes and ~1.3 kB of decoder


def test_what_is_not_worth_it_or_not_int8_stays_as_it_is():
    dense = np.arange(1, 4097).reshape(64, 64).astype(np.int8) | 1            # no zero
    small_q = np.zeros((8, 8), np.int8)                                     # below min_elements
    for q in (dense, small_q):
        out, names = bitmask_int8_initializers(_dq_model(q))
        assert names == [] and out == _dq_model(q)
    q = np.zeros((64, 64), np.int8)
    q[:, :40] = 3                                                            # 37.5% zeros < min_sparsity
    assert bitmask_int8_initializers(_dq_model(q))[1] == []
    assert bitmask_int8_initializers(_dq_model(q), min_sparsity=0.3)[1] == ["q"]


def test_bad_arguments_are_refused():
    q = np.zeros((64, 64), np.int8)
    q[0, 0] = 1
    with pytest.raises(ValueError, match=r"min_sparsity must be a number in \[0, 1\), got 1"):
        bitmask_int8_initializers(_dq_model(q), min_sparsity=1)
    with pytest.raises(ValueError, match="min_elements must be a positive integer, got 0"):
        bitmask_int8_initializers(_dq_model(q), min_elements=0)
    with pytest.raises(TypeError, match="model must be an onnx.ModelProto, got bytes"):
        bitmask_int8_initializers(b"model")
    with pytest.raises(ValueError, match="opset is 12; the bitmask decoder needs 13 or later"):
        bitmask_int8_initializers(_dq_model(q, opset=12))
    small, _ = bitmask_int8_initializers(_dq_model(q))
    with pytest.raises(ValueError, match=r"already stores \['q'\]"):
        bitmask_int8_initializers(small)
    broken = onnx.ModelProto()
    broken.CopyFrom(small)
    for init in broken.graph.initializer:
        if init.name == "q" + BITMASK_INT8_SUFFIXES[1]:
            init.CopyFrom(NH.from_array(np.zeros(5, np.int8), init.name))
    with pytest.raises(ValueError, match=r"weight 'q': its bitmask \(1 kept of 4096\), values \(4\)"):
        expand_bitmask_int8(broken)


@pytest.mark.parametrize("mode", ["dynamic", "qdq"])
def test_compressed_int8_onnx_of_a_pruned_model(mode, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    sparsify_torch.prune(model, {"target_sparsity": 0.9, "start_step": 0, "end_step": 0}).remove()
    model.eval()
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    export_onnx(model, x[:2], tmp_path / "m.onnx")
    calib = [x[:32], x[32:]] if mode == "qdq" else None
    dense = quantize_onnx_int8(tmp_path / "m.onnx", mode=mode, calibration=calib)
    res = quantize_onnx_int8(tmp_path / "m.onnx", tmp_path / "m.int8.onnx", mode=mode, calibration=calib,
                             compress=True, check_inputs=[x])
    assert len(res.compressed) == 2 and all(n.endswith("_quantized") for n in res.compressed)
    assert res.dense_int8_bytes == len(dense.content)
    assert (tmp_path / "m.int8.onnx").stat().st_size == len(res.content) < 0.35 * len(dense.content)
    assert [r.lost_zeros for r in res.report.values()] == [0, 0]
    stored = onnx.load(tmp_path / "m.int8.onnx")
    back = quantized_weights(stored, res.weights)                  # read through the decoders
    for name, p in model.named_parameters():
        if name.endswith("weight"):
            q, scales, axis = back[name]
            assert np.array_equal(q, dense.weights[name][0]) and np.array_equal(scales, dense.weights[name][1])
            assert not np.any(q[p.detach().numpy() == 0])               # every pruned zero
    feed = {"input_0": x.numpy()}
    got = ort.InferenceSession(str(tmp_path / "m.int8.onnx"), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    want = ort.InferenceSession(dense.content, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert np.array_equal(got, want)                                 # onnxruntime computes exactly the same
    with torch.no_grad():
        ref = model(x).numpy()
    assert res.max_abs_diff < 0.1 * np.abs(ref).max()
    with pytest.raises(TypeError, match="compress must be True or False, got 1"):
        quantize_onnx_int8(tmp_path / "m.onnx", compress=1)
