"""Issue 10 point 1: every value that decides a mask has the same bits on any CPU, with or without SIMD.

The battery (:mod:`machine_battery`: schedule values of every registered kind,
masks and unit scores of every pattern family in local and global scope, with
ties, three dtypes, +inf scores, large layers that take the sampled-bracket
path of the selection kernel, global allocation, criteria, channel selection)
runs here and in a subprocess with NumPy's SIMD dispatch turned off; the
SHA-256 of every case must match.
"""
import hashlib
import io
import json
import os
import subprocess
import sys
import tokenize
from pathlib import Path

import numpy as np
import pytest

from machine_battery import all_digests, dispatch_targets_on, schedule_digests

ROOT = Path(__file__).resolve().parents[2]


def run_battery(env_extra: dict) -> dict:
    env = {**os.environ, **env_extra, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("machine_battery.py"))], env=env,
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout)


@pytest.mark.slow
def test_same_bytes_with_numpy_simd_dispatch_turned_off():
    on_here = dispatch_targets_on()
    # With NumPy 2.4 on x86-64 these are "X86_V3 X86_V4 AVX512_ICL AVX512_SPR" (the AVX2/AVX-512 levels).
    disabled = " ".join(np._core._multiarray_umath.__cpu_dispatch__)
    child = run_battery({"NPY_DISABLE_CPU_FEATURES": disabled})
    assert child["dispatch_targets_on"] == [], f"the subprocess still dispatches to {child['dispatch_targets_on']}"
    if on_here:                                     # this machine has SIMD levels: the child really runs without
        assert set(on_here) - set(child["dispatch_targets_on"]) == set(on_here)
    here = all_digests()
    differ = sorted(k for k in here if here[k] != child["digests"].get(k))
    assert set(here) == set(child["digests"]) and not differ, f"{len(differ)} cases differ without SIMD: {differ[:10]}"
    assert len(here) > 200


def test_schedule_values_have_the_recorded_bits():
    """The same schedule values on every machine: a change here is a change of a formula (update on purpose)."""
    d = schedule_digests()
    combined = hashlib.sha256("".join(f"{k}={v};" for k, v in sorted(d.items())).encode()).hexdigest()
    assert combined == "61a0703727ad4d6f4fbb6a550a7077e0935505eb1b02e3c9d7b2f63c8c1698c9"


def test_schedules_compute_only_with_portable_math():
    """No libm in the schedule code: no ``**``, no math.exp/log/cos/pow, no NumPy transcendental."""
    for path in sorted((ROOT / "sparsify" / "schedules").glob("*.py")):
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
                  if t.type not in (tokenize.COMMENT, tokenize.STRING)]
        powers = [t for prev, t in zip(tokens, tokens[1:]) if t.string == "**"        # binary **, not **kwargs
                  and (prev.type in (tokenize.NAME, tokenize.NUMBER) or prev.string in (")", "]"))]
        assert not powers, (path.name, powers)
        calls = {f"{tokens[i].string}.{tokens[i + 2].string}" for i in range(len(tokens) - 2)
                 if tokens[i].string in ("math", "np", "numpy") and tokens[i + 1].string == "."}
        banned = {f"{m}.{f}" for m in ("math", "np") for f in ("exp", "log", "cos", "sin", "pow", "power", "expm1",
                                                              "log1p", "sqrt", "tan", "tanh")}
        assert not calls & banned, (path.name, calls & banned)
