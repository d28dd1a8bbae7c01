"""bench/bench_quant.py: the size rows, the section it writes, and a tiny accuracy run that keeps every zero."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bench import bench_quant  # noqa: E402


def test_file_sizes_of_a_small_model():
    rows = bench_quant.file_sizes({"tiny": lambda key: torch.nn.Sequential(torch.nn.Linear(128, 128))},
                                  ["0", "90"])
    assert [(r["model"], r["setting"]) for r in rows] == [("tiny", "0"), ("tiny", "90")]
    dense, sparse = rows
    assert dense["sparsity"] == 0 and sparse["sparsity"] == round(0.9 * 128 * 128) / (128 * 128)
    assert 0.25 < dense["int8"] < 0.3                    # int8 values + scales + the float32 bias
    assert sparse["int8"] < sparse["fp32_sparse"] / 2 < 0.1     # a small layer: the scales and bias weigh more


def test_render_writes_both_tables_and_the_paired_differences():
    sizes = [{"model": "m", "setting": "90", "dense_bytes": 2048, "fp32_sparse": 0.14, "int8": 0.05,
              "sparsity": 0.9, "new_zeros": 0.0}]
    runs = [{"seed": 0, "fp32": 0.80, "ptq": 0.79, "qat": 0.81, "lost_zeros": 0},
            {"seed": 1, "fp32": 0.70, "ptq": 0.70, "qat": 0.70, "lost_zeros": 0}]
    text = bench_quant.render(sizes, runs, "python -m bench.bench_quant", 3000, 500)
    assert "| m | 90 | 2 KiB | 0.140x | 0.050x | 90.00% | 0.00% |" in text
    assert "| 0 | 0.8000 | 0.7900 | 0.8100 | 0 |" in text
    assert "PTQ int8 - fp32 -0.50 +- 0.71; QAT int8 - fp32 +0.50 +- 0.71; sparse fp32 mean 75.00%." in text
    assert bench_quant.render(sizes, [], "cmd", 1, 1).count("\n|---") == 1


@pytest.mark.slow
def test_a_short_accuracy_run_keeps_every_pruned_zero():
    (run,) = bench_quant.accuracy_runs([0], steps=100, finetune=10)
    assert run["lost_zeros"] == 0 and run["pruned_zero"]
    assert all(0 <= run[k] <= 1 for k in ("trained", "fp32", "ptq", "qat"))
