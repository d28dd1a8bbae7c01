"""bench/bench_deploy.py: the round-robin timer, and the torch CNN it measures (same 1x1 layers as the Keras
one, converted to sparse with the dense outputs)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import torch  # noqa: E402

import sparsify_torch  # noqa: E402
from bench import bench_deploy  # noqa: E402


def test_round_robin_calls_every_function_in_turn():
    calls = []
    ms = bench_deploy.round_robin({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, runs=3,
                                  warmup=1)
    assert calls == ["a", "b"] * 4 and sorted(ms) == ["a", "b"] and all(v >= 0 for v in ms.values())


def test_torch_cnn_pointwise_layers_are_pruned_and_run_sparse():
    model = bench_deploy.TorchMobileNet().eval()
    shapes = {f"{n}.weight": tuple(m.weight.shape) for n, m in model.named_modules()
              if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (1, 1)}
    assert [s[:2] for s in shapes.values()] == [(64, 32), (128, 64), (128, 128), (256, 128), (256, 256),
                                                (512, 256), (512, 512), (512, 512)]
    pruned = bench_deploy._pruned_torch(model, shapes, "torch-bsr", 0.9, 16)
    # 64x32 in 8 blocks of 16x16: 90% prunes the nearest count, 7 blocks
    assert float((pruned.features[4].weight == 0).float().mean()) == 0.875
    x = torch.randn(1, 3, 33, 33)
    fast = sparsify_torch.to_sparse_inference(pruned, x, "bsr", 16, modules=[n[:-7] for n in shapes])
    assert fast.features[4].weight.layout == torch.sparse_bsr
