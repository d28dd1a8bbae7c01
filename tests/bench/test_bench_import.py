"""bench/bench_import.py reads ``-X importtime`` output and writes its section (no timing here: the bench does)."""
from __future__ import annotations

import pytest

from bench.bench_import import compile_bytecode, cumulative_us, report

IMPORTTIME = """import time: self [us] | cumulative | imported package
import time:       120 |       3456 |   sparsify_torch.entry
import time:        80 |      41000 | sparsify_torch
import time:         5 |          5 | sparsify_torch_other
"""


def test_cumulative_us_reads_the_top_level_line_only():
    assert cumulative_us(IMPORTTIME, "sparsify_torch") == 41000
    with pytest.raises(ValueError, match="no import line for 'sparsify_torch.entry'"):
        cumulative_us(IMPORTTIME, "sparsify_torch.entry")       # imported inside another, not at top level


def test_report_states_the_overhead_and_the_baseline():
    text = report({"torch": 1.25, "both": 1.375, "importtime": 0.08, "heavy": [], "runs": 5, "paired": 0.1,
                   "baseline": ("/old", 0.6)})
    assert "| overhead of `sparsify_torch` (wall, difference of the medians) | 0.125 |" in text
    assert "| overhead of `sparsify_torch` (wall, median of the paired differences) | 0.100 |" in text
    assert "| the same, from the checkout `/old` | 0.600 |" in text
    assert "--baseline /old` (median of 5 fresh processes each" in text
    assert "Heavy modules loaded by the import: none (of torch.distributed.tensor," in text


def test_compile_bytecode_writes_pycache_as_pip_install_does_and_fails_loudly(tmp_path):
    for package in ("sparsify", "sparsify_torch"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("X = 1\n")
    compile_bytecode(tmp_path)
    assert [p.name.split(".")[0] for p in (tmp_path / "sparsify_torch" / "__pycache__").iterdir()] == ["__init__"]
    (tmp_path / "sparsify" / "broken.py").write_text("def (:\n")
    with pytest.raises(RuntimeError, match="compiling .*sparsify failed"):
        compile_bytecode(tmp_path)
