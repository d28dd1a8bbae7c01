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


def test_render_writes_the_size_table_and_one_accuracy_table_per_setting():
    sizes = [{"model": "m", "setting": "90", "params": 5295, "dense_bytes": 2048, "fp32_sparse": 0.14, "int8": 0.05,
              "int8_bytes": 102, "sparsity": 0.9, "new_zeros": 0.0}]
    runs = [{"setting": "90", "channels": 25, "seed": 0, "fp32": 0.80, "ptq": 0.79, "qat": 0.81, "lost_zeros": 0},
            {"setting": "90", "channels": 25, "seed": 1, "fp32": 0.70, "ptq": 0.70, "qat": 0.70, "lost_zeros": 0},
            {"setting": "2:4", "channels": 32, "seed": 0, "fp32": 0.90, "ptq": 0.90, "qat": 0.92, "lost_zeros": 0}]
    text = bench_quant.render(sizes, runs, "python -m bench.bench_quant", 3000, 500)
    assert "| m | 90 | 5,295 | 2 KiB | 0.140x | 0.050x | 102 B | 90.00% | 0.00% |" in text
    assert "MNIST-1D CNN at 90, 25 channels (3000 training steps" in text and "at 2:4, 32 channels" in text
    assert "| 0 | 0.8000 | 0.7900 | 0.8100 | 0 |" in text and "| 0 | 0.9000 | 0.9000 | 0.9200 | 0 |" in text
    assert ("90, over 2 seeds (accuracy points, mean +- sample std of the paired difference): PTQ int8 - fp32 "
            "-0.50 +- 0.71; QAT int8 - fp32 +0.50 +- 0.71; sparse fp32 mean 75.00%.") in text
    assert "2:4, over 1 seeds" in text and "QAT int8 - fp32 +2.00 +- 0.00" in text
    assert bench_quant.render(sizes, [], "cmd", 1, 1).count("\n|---") == 1


def test_main_refuses_an_unknown_accuracy_setting(capsys):
    with pytest.raises(SystemExit):
        bench_quant.main(["--accuracy", "33", "--no-write"])
    assert "--accuracy: unknown ['33']" in capsys.readouterr().err


@pytest.mark.slow
def test_a_short_accuracy_run_keeps_every_pruned_zero():
    (run,) = bench_quant.accuracy_runs([0], steps=100, finetune=10)
    assert run["lost_zeros"] == 0 and run["pruned_zero"]
    assert all(0 <= run[k] <= 1 for k in ("trained", "fp32", "ptq", "qat"))


@pytest.mark.slow
def test_a_short_2_4_accuracy_run_keeps_the_pattern_zeros():
    (run,) = bench_quant.accuracy_runs([0], steps=100, finetune=10, setting_name="2:4")
    assert (run["setting"], run["channels"]) == ("2:4", 32) and run["lost_zeros"] == 0 and run["pruned_zero"]
