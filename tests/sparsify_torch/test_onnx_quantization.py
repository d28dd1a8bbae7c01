"""`sparsify_torch.onnx_quantization`: onnxruntime int8 (dynamic and QDQ static) of the ONNX files export_onnx
writes keeps every pruned zero, read back from the quantized initializers (issue 60)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

import sparsify_torch
from sparsify_torch.onnx_export import export_onnx
from sparsify_torch.onnx_quantization import dense_initializers, quantize_onnx_int8, quantized_weights

from torch_helpers import cnn, digits, mlp


def _pruned(model: nn.Module, sparsity: float = 0.9) -> nn.Module:
    sparsify_torch.prune(model, {"target_sparsity": sparsity, "start_step": 0, "end_step": 0}).remove()
    return model.eval()


@pytest.fixture(scope="module")
def mlp_onnx(tmp_path_factory):
    model = _pruned(mlp())
    path = tmp_path_factory.mktemp("onnx") / "m.onnx"
    export_onnx(model, digits(4)[0], path)                     # sparse initializers (SparseTensorProto)
    return model, path


def test_dynamic_int8_keeps_zeros_and_outputs(mlp_onnx, tmp_path):
    model, path = mlp_onnx
    x, _ = digits(64)
    res = quantize_onnx_int8(path, tmp_path / "m.int8.onnx", check_inputs=[x[:32], x[32:]])
    assert [(n, r.size, r.zeros_before, r.lost_zeros) for n, r in res.report.items()] == [
        ("fc1.weight", 2048, 1843, 0), ("fc2.weight", 512, 461, 0), ("head.weight", 160, 144, 0)]
    assert res.float_weights == []
    for name, p in model.named_parameters():
        if name.endswith("weight"):
            q, scales, axis = res.weights[name]                # back in torch's (out, in) layout
            w = p.detach().numpy()
            assert q.shape == w.shape and axis == 0 and scales.shape == (w.shape[0],)
            assert np.all(q[w == 0] == 0)
            np.testing.assert_allclose(q * scales[:, None], w, atol=float(scales.max()) / 2 + 1e-7)
    stored = onnx.load(tmp_path / "m.int8.onnx")
    assert "MatMulInteger" in {n.op_type for n in stored.graph.node}
    assert set(quantized_weights(stored, res.weights)) == set(res.weights)
    sess = ort.InferenceSession(str(tmp_path / "m.int8.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input_0": x.numpy()})[0]
    with torch.no_grad():
        want = model(x).numpy()
    assert res.max_abs_diff is not None and res.max_abs_diff < 0.05 * np.abs(want).max()
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def test_qdq_static_int8_keeps_zeros(mlp_onnx):
    model, path = mlp_onnx
    x, _ = digits(64)
    res = quantize_onnx_int8(onnx.load(path), mode="qdq", calibration=[x[i:i + 16] for i in range(0, 64, 16)],
                             check_inputs=[{"input_0": x.numpy()}])
    assert [r.lost_zeros for r in res.report.values()] == [0, 0, 0]
    assert res.weights["fc1.weight"][0].shape == (32, 64) and res.weights["fc1.weight"][2] == 0
    ops = {n.op_type for n in onnx.load_from_string(res.content).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    with torch.no_grad():
        want = model(x).numpy()
    assert res.max_abs_diff < 0.1 * np.abs(want).max()


def test_cnn_conv_weights_dynamic_and_qdq(tmp_path):
    model = _pruned(cnn(), 0.75)
    x, _ = digits(32)
    export_onnx(model, x[:2], tmp_path / "c.onnx")
    for mode, calib in (("dynamic", None), ("qdq", [x[:16], x[16:]])):
        res = quantize_onnx_int8(tmp_path / "c.onnx", mode=mode, calibration=calib, check_inputs=[x])
        assert sorted(res.report) == ["conv1.weight", "conv2.weight", "fc.weight", "head.weight"]
        q, scales, axis = res.weights["conv2.weight"]
        w = model.conv2.weight.detach().numpy()
        assert q.shape == w.shape == (16, 8, 3, 3) and axis == 0
        assert scales.shape == ((1,) if mode == "dynamic" else (16,))     # ConvInteger takes one scale
        assert np.all(q[w == 0] == 0) and all(r.lost_zeros == 0 for r in res.report.values())


def test_dense_initializers_roundtrip(mlp_onnx):
    _, path = mlp_onnx
    sparse = onnx.load(path)
    dense = dense_initializers(sparse)
    assert len(sparse.graph.sparse_initializer) == 3 and len(dense.graph.sparse_initializer) == 0
    w = {i.name: onnx.numpy_helper.to_array(i) for i in dense.graph.initializer}
    assert w["fc1.weight"].shape == (32, 64) and int((w["fc1.weight"] == 0).sum()) == 1843


def test_bad_input_errors(mlp_onnx, tmp_path):
    _, path = mlp_onnx
    x, _ = digits(8)
    with pytest.raises(ValueError, match=r"mode must be one of \('dynamic', 'qdq'\), got 'static'"):
        quantize_onnx_int8(path, mode="static")
    with pytest.raises(ValueError, match="calibration must be a non-empty sequence"):
        quantize_onnx_int8(path, mode="qdq")
    with pytest.raises(ValueError, match="calibration is for mode='qdq' only"):
        quantize_onnx_int8(path, calibration=[x])
    with pytest.raises(ValueError, match=r"a batch names inputs \['x'\]; the model takes \['input_0'\]"):
        quantize_onnx_int8(path, check_inputs=[{"x": x.numpy()}])
    with pytest.raises(ValueError, match="is not a file"):
        quantize_onnx_int8(tmp_path / "missing.onnx")
    with pytest.raises(TypeError, match="model must be an .onnx path or an onnx.ModelProto, got int"):
        quantize_onnx_int8(3)
    assert not (tmp_path / "missing.onnx").exists()
