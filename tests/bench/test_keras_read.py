"""bench/keras_read.py: both reads of a small model agree and are timed; the section's table (no timing claims)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.keras_read import report


def test_report_literal():
    text = report([{"backend": "jax", "weights": 1_000_000, "seconds": {"host": 0.02, "device": 0.01}}], 1, 1000, 3)
    assert "| jax | 20 (20.00) | 10 (10.00) | 2.00x |" in text
    assert "1 Dense layers of 1000x1000 float32 (1M weights)" in text
    assert "`.venv/bin/python -m bench.keras_read --layers 1 --width 1000 --rounds 3`" in text


@pytest.mark.slow
def test_one_backend_run_reads_the_same_arrays_both_ways():
    out = subprocess.run([sys.executable, "-m", "bench.keras_read", "--one", "--layers", "2", "--width", "64",
                          "--rounds", "2"], capture_output=True, text=True, check=True,
                         env={**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"})
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["backend"] == "jax" and r["weights"] == 2 * 64 * 64 and set(r["seconds"]) == {"host", "device"}


def test_bad_arguments_are_refused():
    from bench.keras_read import main

    with pytest.raises(SystemExit, match="--rounds must be >= 1, got 0"):
        main(["--rounds", "0"])
    with pytest.raises(SystemExit, match="--backends: unknown"):
        main(["--backends", "mxnet", "--no-write"])
