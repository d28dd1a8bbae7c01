"""bench/bench_quant_lm.py: bits/char of a pruned LM in float32 and PTQ int8 (zeros checked), and its table."""
from __future__ import annotations

import numpy as np

import sparsify_torch
from bench import bench_quant_lm
from bench.lm.model import PRUNABLE, LMConfig, build_model


def test_int8_bpc_of_a_small_pruned_lm():
    model = build_model(LMConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2, context=8), seed=0).eval()
    sparsify_torch.prune(model, {"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 0,
                                 "op_names": [PRUNABLE]}).remove()
    rng = np.random.default_rng(0)
    val = rng.integers(0, 16, (8, 8)), rng.integers(0, 16, (8, 8))
    out = bench_quant_lm.int8_bpc(model, val)
    assert sorted(out) == ["dynamic", "fp32", "weight_only"]
    assert abs(out["weight_only"] - out["fp32"]) < 0.01 and abs(out["dynamic"] - out["fp32"]) < 0.02
    assert float((model.blocks[0].fc1.weight == 0).float().mean()) == 0.5          # the copies were quantized


def test_render_pairs_by_seed():
    rows = [{"lm": "d64", "seed": s, "setting": "2:4", "arm": "sparsegpt", "dense": 2.0, "fp32": 2.2,
             "weight_only": 2.2 + d, "dynamic": 2.21} for s, d in ((0, 0.001), (1, 0.003))]
    body = bench_quant_lm.render(rows, "python -m bench.bench_quant_lm", 1800, 180, 12.0)
    assert "| d64 | 0 | 2:4 | sparsegpt | 2.0000 | 2.2000 | 2.2010 | 2.2100 | +0.0010 | +0.0100 |" in body
    assert "* d64 2:4 sparsegpt: weight-only +0.0020 +- 0.0014, dynamic +0.0100 +- 0.0000 (2 seeds)" in body
