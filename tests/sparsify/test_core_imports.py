"""The core must load without TensorFlow or PyTorch."""
import re
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "sparsify"


def test_import_sparsify_loads_no_framework():
    code = ("import sys, sparsify, sparsify.config, sparsify.engine, sparsify.patterns, sparsify.schedules, "
            "sparsify.selection, sparsify.layout, sparsify.criteria\n"
            "bad = [m for m in ('tensorflow', 'torch', 'keras', 'tf_keras') if m in sys.modules]\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_core_sources_never_import_a_framework():
    """Not even lazily inside a function: framework code belongs in sparsify_tf/ or sparsify_torch/,
    and the core reaches it (e.g. the CLI) through importlib.import_module("sparsify_tf....")."""
    pattern = re.compile(r"^\s*(import|from)\s+(tensorflow|torch|tf_keras|keras)\b")
    offenders = []
    for path in CORE.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.match(line):
                offenders.append(f"{path.relative_to(CORE.parent)}:{number}: {line.strip()}")
    assert offenders == [], "the core imports a framework: " + "; ".join(offenders)
