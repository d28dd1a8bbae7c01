"""`sparsify_tf.xnnpack`: a MobileNet-style Keras model pruned with the "xnnpack" preset (1x1
convolutions, blocks of 4 output channels) meets XNNPACK's sparse-inference rules and exports to a sparse
TFLite flatbuffer with the model's outputs; models that break a rule are named and refused."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from sparsify_tf import export_tflite_xnnpack, xnnpack_report, xnnpack_sparse_on_this_cpu  # noqa: E402
from sparsify_tf.tflite import run_tflite  # noqa: E402
from sparsify.runtime_presets import runtime_config  # noqa: E402


def _mobilenet(size: int = 17):
    import keras
    L = keras.layers
    keras.utils.set_random_seed(0)
    x = inp = keras.Input((size, size, 3))
    x = L.Conv2D(8, 3, strides=2, padding="same", activation="relu", name="stem")(x)
    x = L.DepthwiseConv2D(3, padding="same", activation="relu", name="dw1")(x)
    x = L.Conv2D(16, 1, activation="relu", name="pw1")(x)
    x = L.DepthwiseConv2D(3, strides=2, padding="same", activation="relu", name="dw2")(x)
    x = L.Conv2D(16, 1, activation="relu", name="pw2")(x)
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(4, name="head")(x))


def _pruned(size: int = 17):
    from sparsify_keras import find_prunable_weights, prune_oneshot
    model = _mobilenet(size)
    shapes = {w.path: w.canonical_shape for w in find_prunable_weights(model)}
    cfg = runtime_config("xnnpack", shapes, target_sparsity=0.75)
    assert cfg.op_names == ["^pw1/kernel$", "^pw2/kernel$"]
    return prune_oneshot(model, cfg)


@pytest.mark.slow
def test_preset_pruned_model_is_ready_and_exports_with_its_outputs(tmp_path):
    model = _pruned()
    report = xnnpack_report(model)
    # 1x1 weights 8*16 + 16*16 = 384 in 96 blocks of 4 output channels; 75% of each layer's blocks pruned
    assert (report["ready"], report["problems"], report["pointwise_layers"]) == (True, [], 2)
    assert (report["pointwise_zeros"], report["block4_fraction"]) == (0.75, 1.0)
    res = export_tflite_xnnpack(model, tmp_path / "m.tflite")
    flat = (tmp_path / "m.tflite").read_bytes()
    assert res["bytes"] == len(flat) < res["dense_bytes"] and res["max_abs_diff"] < 1e-5
    x = np.random.default_rng(1).normal(size=(3, 17, 17, 3)).astype(np.float32)
    np.testing.assert_allclose(run_tflite(flat, [x])[0], np.asarray(model(x)), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="already exists; pass overwrite=True"):
        export_tflite_xnnpack(model, tmp_path / "m.tflite")


@pytest.mark.slow
def test_rules_broken_are_named_and_strict_refuses(tmp_path):
    dense = _mobilenet()
    report = xnnpack_report(dense)
    assert report["problems"] == ["0.0% of the 1x1 convolutions' weights are zero; XNNPACK needs at least 66.7% "
                                  "(prune them to 70% or more: runtime_config('xnnpack', ...))"]
    even = _pruned(16)
    assert xnnpack_report(even)["problems"] == [
        "the first layer 'stem' pads 'same' on an even or unknown input size (16, 16): TensorFlow then pads 0 "
        "before and 1 after; XNNPACK needs 1 on each side (use an odd size)"]
    with pytest.raises(ValueError, match=r"cannot take XNNPACK's sparse inference: the first layer 'stem' pads"):
        export_tflite_xnnpack(even, tmp_path / "e.tflite")
    assert not (tmp_path / "e.tflite").exists()
    assert export_tflite_xnnpack(even, tmp_path / "e.tflite", strict=False)["bytes"] > 0
    with pytest.raises(TypeError, match="model must be a Keras model, got int"):
        xnnpack_report(3)


def test_cpu_check_reads_the_avx_flag(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2\n")
    ok, why = xnnpack_sparse_on_this_cpu(str(info))
    import platform
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert (ok, why.split(":")[0]) == (False, "x86 with AVX")
        info.write_text("flags\t\t: fpu sse sse2\n")
        assert xnnpack_sparse_on_this_cpu(str(info)) == (True, "x86 without AVX: XNNPACK's SSE sparse kernels run here")
    else:
        assert ok
