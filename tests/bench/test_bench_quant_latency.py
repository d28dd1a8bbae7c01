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
    assert len(rows) == 26
    assert "zeros lost 0" in body and "| TFLite | 90% 1x16 | int8 | sparse kernel |" in body
