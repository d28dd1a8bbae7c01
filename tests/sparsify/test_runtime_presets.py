"""`sparsify.runtime_presets`: a runtime's layers and pattern as a PruningConfig, from names and shapes."""
from __future__ import annotations

import pytest

from sparsify.runtime_presets import RUNTIME_PRESETS, runtime_config, runtime_layers

SHAPES = {"stem.weight": (32, 3, 3, 3), "dw.weight": (32, 1, 3, 3), "pw.weight": (64, 32, 1, 1), "pw.bias": (64,),
          "odd.weight": (30, 64, 1, 1), "fc.weight": (10, 30)}


def test_each_runtime_selects_its_layers():
    assert sorted(RUNTIME_PRESETS) == ["onnx", "torch-bsr", "torch-csr", "xnnpack"]
    assert runtime_layers("xnnpack", SHAPES) == {
        "stem.weight": "not a 1x1 convolution (canonical shape (32, 3, 3, 3))",
        "dw.weight": "not a 1x1 convolution (canonical shape (32, 1, 3, 3))",
        "pw.weight": None, "pw.bias": "not a 1x1 convolution (canonical shape (64,))",
        "odd.weight": None, "fc.weight": "not a 1x1 convolution (canonical shape (10, 30))"}
    assert [n for n, why in runtime_layers("torch-csr", SHAPES).items() if why is None] == [
        "pw.weight", "odd.weight", "fc.weight"]
    assert [n for n, why in runtime_layers("onnx", SHAPES).items() if why is None] == [
        "stem.weight", "dw.weight", "pw.weight", "odd.weight", "fc.weight"]


def test_configs():
    cfg = runtime_config("xnnpack", SHAPES, target_sparsity=0.9)
    assert (cfg.pattern, cfg.op_names, cfg.skip_incompatible_layers) == (
        "4x1", [r"^pw\.weight$", r"^odd\.weight$"], True)        # 30 rows: not blocks of 4, left dense
    bsr = runtime_config("torch-bsr", {"fc.weight": (32, 64)}, pattern="8x8", target_sparsity=0.9)
    assert (bsr.pattern, bsr.op_names, bsr.target_sparsity) == ("8x8", [r"^fc\.weight$"], 0.9)
    assert runtime_config("torch-csr", {"fc.weight": (32, 64)}).pattern == "1x1"


def test_bad_input():
    with pytest.raises(ValueError, match=r"runtime must be one of \('xnnpack', 'torch-csr', 'torch-bsr', 'onnx'\)"):
        runtime_config("tensorrt", SHAPES)
    with pytest.raises(ValueError, match=r"target_sparsity 0.5 is below 0.667: xnnpack runs sparse only"):
        runtime_config("xnnpack", SHAPES, target_sparsity=0.5)
    with pytest.raises(ValueError, match=r"runtime 'xnnpack' takes 1x1 convolutions, and none of the weights"):
        runtime_config("xnnpack", {"fc.weight": (10, 30)})
    with pytest.raises(ValueError, match=r"op_names is chosen by the runtime preset"):
        runtime_config("onnx", SHAPES, op_names=[".*"])
    with pytest.raises(TypeError, match=r"shapes must be a non-empty mapping"):
        runtime_layers("onnx", [("a", (1, 2))])
