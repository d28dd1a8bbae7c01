"""Run :mod:`scenarios` under a Keras backend in its own process and cache what it returns (per test process)."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BACKENDS = ("jax", "torch", "tensorflow")


def run_python(code_or_file: list[str], backend: str, extra_env: dict | None = None, timeout: int = 900
               ) -> subprocess.CompletedProcess:
    """``python ARGS`` with ``KERAS_BACKEND=backend`` from the repository root; raises with its output on failure."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT),
           **(extra_env or {})}
    done = subprocess.run([sys.executable, *code_or_file], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{backend}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


@functools.lru_cache(maxsize=None)
def scenarios(backend: str, names: str) -> dict:
    """The JSON the scenarios ``names`` (comma-separated) return under ``backend``."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        run_python([str(HERE / "scenarios.py"), backend, out, names], backend)
        with open(out) as f:
            results = json.load(f)
    assert results["backend"] == backend
    return results
