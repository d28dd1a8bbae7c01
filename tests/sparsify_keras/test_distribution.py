"""Keras 3 on JAX with ``keras.distribution``: data and model parallel runs give the single-device masks."""
from __future__ import annotations

import pytest

from backend_runs import HERE, run_python

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")


def test_data_and_model_parallel_masks_equal_one_device():
    res = _distributed()
    assert res["distributed"]["devices"] == 4
    for name in ("magnitude_global", "wanda", "nm"):
        runs = res["distributed"][name]
        assert len(runs["single"]["history"]) == 8
        for other in ("data_parallel_2", "data_parallel_4", "model_parallel"):
            assert runs[other]["history"] == runs["single"]["history"], f"{name}: {other}"
        assert runs["model_parallel"]["dense_kernel_spec"] == [None, "model"]     # the kernel really is sharded
        assert runs["single"]["dense_kernel_spec"] is None


def _distributed():
    import json
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        run_python([str(HERE / "scenarios.py"), "jax", out, "distributed"], "jax",
                   extra_env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
        with open(out) as f:
            return json.load(f)
