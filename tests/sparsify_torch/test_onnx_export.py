"""`sparsify_torch.onnx_export`: ONNX files whose pruned weights are sparse initializers, run by onnxruntime
with the torch model's outputs."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

import sparsify_torch
from sparsify_torch.onnx_export import export_onnx, sparse_initializers

from torch_helpers import digits, mlp


def _pruned_mlp(sparsity: float) -> nn.Module:
    model = mlp()
    sparsify_torch.prune(model, {"target_sparsity": sparsity, "start_step": 0, "end_step": 0}).remove()
    return model


def test_pruned_mlp_exports_sparse_and_runs_in_onnxruntime(tmp_path):
    model = _pruned_mlp(0.9)
    x, _ = digits(16)
    res = export_onnx(model, x[:4], tmp_path / "m.onnx")
    assert res["sparse"] == ["fc1.weight", "fc2.weight", "head.weight"]
    assert res["check"] == "onnxruntime gives the torch model's 1 output(s) (rtol=0.0001, atol=1e-05)"
    assert res["bytes"] == os.path.getsize(tmp_path / "m.onnx") < 0.45 * res["dense_bytes"]
    stored = onnx.load(tmp_path / "m.onnx")
    assert [list(s.dims) for s in stored.graph.sparse_initializer] == [[32, 64], [16, 32], [10, 16]]
    # 90% of 2048, 512, 160 weights pruned: 205, 51, 16 values kept, with their int64 positions
    assert [len(onnx.numpy_helper.to_array(s.values)) for s in stored.graph.sparse_initializer] == [205, 51, 16]
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input_0": x.numpy()})[0]                   # another batch size than the export's
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_half_sparse_weights_stay_dense(tmp_path):
    model = _pruned_mlp(0.5)                      # 50%: values + int64 positions cost more than the zeros save
    res = export_onnx(model, torch.zeros(2, 64), tmp_path / "h.onnx", min_sparsity=0.3)
    assert res["sparse"] == [] and len(onnx.load(tmp_path / "h.onnx").graph.initializer) == 6


class _Noisy(nn.Module):
    """Random noise on its output: onnxruntime draws other numbers than torch, so the check must fail."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = self.fc(x)
        return y + torch.rand_like(y)


def test_outputs_that_differ_are_an_error_and_nothing_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"onnxruntime's output 0 of the sparse ONNX model differs"):
        export_onnx(_Noisy(), torch.ones(64, 4), tmp_path / "d.onnx")
    assert not (tmp_path / "d.onnx").exists()


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"min_sparsity must be a number in \[0, 1\), got 1.5"):
        sparse_initializers(onnx.ModelProto(), 1.5)
    with pytest.raises(TypeError, match=r"model must be an onnx.ModelProto, got bytes"):
        sparse_initializers(b"", 0.5)


def test_bitmask_encoding_is_smaller_and_gives_the_same_outputs(tmp_path):
    model = _pruned_mlp(0.9)
    x, _ = digits(8)
    bits = export_onnx(model, x, tmp_path / "bits.onnx", encoding="bitmask")
    assert bits["sparse"] == ["fc1.weight", "fc2.weight"]     # head: 160 weights, the decoder costs more
    # fc1: 2048 bits in 256 bytes + 206 float32 values (a leading 0, then the 205 kept) = 1080 bytes, not 8192
    stored = onnx.load(tmp_path / "bits.onnx")
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in stored.graph.initializer}
    assert inits["fc1.weight.sparsify_mask"].shape == (256,) and inits["fc1.weight.sparsify_values"].shape == (206,)
    assert "fc1.weight" not in inits and len(stored.graph.sparse_initializer) == 0
    sess = ort.InferenceSession(str(tmp_path / "bits.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"input_0": x.numpy()})[0], model(x).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"encoding must be one of \('sparse_initializer', 'bitmask'\), got 'csr'"):
        export_onnx(model, x, tmp_path / "bad.onnx", encoding="csr")


def test_bitmask_file_of_a_larger_layer_is_an_eighth_of_dense(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(256, 256)
    sparsify_torch.prune(model, {"target_sparsity": 0.9, "start_step": 0, "end_step": 0}).remove()
    bits = export_onnx(model, torch.randn(2, 256), tmp_path / "b.onnx", encoding="bitmask")
    coo = export_onnx(model, torch.randn(2, 256), tmp_path / "c.onnx")
    # dense 262 KB; bitmask 8 KB of bits + 26 KB of values (+ the bias); int64 COO 79 KB
    assert round(bits["bytes"] / bits["dense_bytes"], 2) == 0.14 and round(coo["bytes"] / coo["dense_bytes"], 2) == 0.3
