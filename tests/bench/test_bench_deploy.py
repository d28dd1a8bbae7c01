"""bench/bench_deploy.py: the round-robin timer, and the torch CNN it measures (same 1x1 layers as the Keras
one, converted to sparse with the dense outputs)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402
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


def _tiny_cnn():
    import keras
    L = keras.layers
    keras.utils.set_random_seed(0)
    x = inp = keras.Input((9, 9, 3))
    x = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
    x = L.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = L.Conv2D(16, 1, activation="relu")(x)
    return keras.Model(inp, L.GlobalAveragePooling2D()(x))


@pytest.mark.slow
def test_keras_structured_section_has_latency_params_and_file_rows(tmp_path):
    from bench import deploy_keras
    body = deploy_keras.keras_structured_section(_tiny_cnn, bench_deploy.round_robin, (1,), 1, str(tmp_path))
    rows = [line for line in body.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows] == ["| runtime", "| Keras 3.15.1 (tensorflow), `model(x, training=False)`",
                                                 "| TFLite (XNNPACK, 1 thread)", "| params", "| .keras file",
                                                 "| .tflite file"]
    assert rows[3] == "| params | - | 0 k | 0 k | 0 k |"         # 448, 232 and 124 weights: under 1 k each
    assert rows[4].startswith("| .keras file | - | ") and rows[4].count("KiB") == 3
    assert "dense [8, 16], 50%: [4, 16], 75%: [2, 16]" in body
