"""bench/bench_quant_latency.py: the interleaved timer, the tf-keras copy of the bench MLP (same outputs as
torch), and one short run of the whole table (issue 60)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from bench import bench_quant_latency as bql  # noqa: E402


def test_per_call_interleaves_rounds():
    calls = []
    times = bql.per_call([lambda: calls.append("a"), lambda: calls.append("b")], rounds=2, calls=2)
    assert len(times) == 2 and all(t >= 0 for t in times)
    assert calls == ["a"] * 3 + ["b"] * 3 + ["a", "a", "b", "b"] * 2        # 3 warm-up calls each, then rounds


@pytest.mark.slow
def test_keras_copy_matches_torch_pruned_mlp():
    model = bql._pruned("1x16")
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [round(float((w == 0).float().mean()), 2) for w in weights] == [0.9] * 5
    x = np.random.default_rng(0).standard_normal(bql.SHAPE).astype(np.float32)
    km = bql._keras_copy(model)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(km(x).numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_short_run_renders_every_case():
    body = bql.main(["--rounds", "1", "--calls", "1", "--no-write"])
    rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| runtime")]
    assert len(rows) == 26 + 12 + 4     # the MLP's cases, the CNN's (torch, onnxruntime, TFLite), the LM's (torch)
    assert "zeros lost 0" in body and "| TFLite | 90% 1x16 | int8 | sparse kernel |" in body
    assert "MNIST-1D CNN (25 channels), input (100, 40):" in body
    assert "| onnxruntime | 90% 1x1 | int8 | ConvInteger" in body
    assert "| torch | 90% 1x1 | fp32 | CSR Linear |" in body


def test_render_has_one_table_per_model_with_ratios_within_it():
    def case(family, runtime, model, precision):
        return {"family": family, "runtime": runtime, "model": model, "precision": precision, "how": "k",
                "rel_err": 0.0, "bytes": None}
    cases = [case("cnn", "torch", "dense", "fp32"), case("cnn", "torch", "dense", "int8"),
             case("cnn", "torch", "90% 1x1", "int8"), case("lm", "torch", "dense", "fp32"),
             case("lm", "torch", "dense", "int8")]
    body = bql.render(cases, [0.002, 0.004, 0.001, 0.010, 0.005], {}, "cmd", 1.0, 3, 5)
    assert body.count("| runtime | model |") == 2 and "LM (CharLM d128 x2, vocab 96), input (1, 64) tokens:" in body
    assert "| torch | 90% 1x1 | int8 | k | 1.000 | 0.50 | 0.25 | 0.000 | - |" in body
    assert "| torch | dense | int8 | k | 5.000 | 0.50 | 1.00 | 0.000 | - |" in body
    assert "TFLite int8 files" not in body


@pytest.mark.slow
def test_the_cnn_cases_keep_every_zero_and_agree_with_fp32():
    cases = bql.model_cases("cnn")
    assert [(c["runtime"], c["model"], c["precision"]) for c in cases][:4] == [
        ("torch", "dense", "fp32"), ("torch", "dense", "int8"), ("onnxruntime", "dense", "fp32"),
        ("onnxruntime", "dense", "int8")]
    assert [(c["runtime"], c["precision"]) for c in cases][4:6] == [("TFLite", "fp32"), ("TFLite", "int8")]
    assert len(cases) == 12 and all(c["rel_err"] < 0.05 for c in cases)
    assert [c["how"] for c in cases if c["runtime"] == "TFLite"] == ["dense", "dense", "DENSIFY then dense",
                                                                      "DENSIFY then dense"]
