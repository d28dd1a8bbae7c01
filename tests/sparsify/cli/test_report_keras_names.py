"""`sparsify.cli.report.keras_names`: a `.keras` file's weights under its layers' names (`fc1/kernel`, not
`layers/dense/vars/0`; issue 58 item 6), in the model's order, without running Keras."""
from __future__ import annotations

import json

import pytest

from keras_archives import mlp_weights, write_keras_archive
from sparsify.cli import main
from sparsify.cli.report.keras_names import keras_weight_names, snake_case


def _model(*layers: dict) -> dict:
    return {"class_name": "Sequential", "config": {"layers": list(layers)}}


def _layer(cls: str, name: str, **cfg) -> dict:
    return {"class_name": cls, "config": {"name": name, **cfg}}


def test_report_of_a_keras_file_names_the_layers(tmp_path, capsys):
    path = write_keras_archive(tmp_path / "m.keras", mlp_weights())
    assert main(["report", str(path), "--json"]) == 0
    names = [t["name"] for t in json.loads(capsys.readouterr().out)["tensors"]]
    assert names == ["fc1/kernel", "fc1/bias", "fc2/kernel", "fc2/bias", "out/kernel", "out/bias"]
    assert main(["report", str(path), "--all", "--json"]) == 0
    names = [t["name"] for t in json.loads(capsys.readouterr().out)["tensors"]]
    assert names[6:] == [f"optimizer/vars/{i}" for i in range(1, 14)]       # vars/0, the step counter, is skipped
    assert main(["report", str(path)]) == 0
    assert "\nfc1/kernel                  64x128  float32    90.09%    7380 / 8192\n" in capsys.readouterr().out


def test_variables_named_by_class_and_config():
    config = _model(_layer("InputLayer", "in"), _layer("Conv2D", "stem", use_bias=False),
                    _layer("BatchNormalization", "bn", center=False), _layer("DepthwiseConv2D", "dw"),
                    _layer("Conv2DTranspose", "up"), _layer("Embedding", "emb"), _layer("Dense", "head"))
    paths = ["layers/conv2d/vars/0", "layers/batch_normalization/vars/0", "layers/batch_normalization/vars/1",
             "layers/batch_normalization/vars/2", "layers/depthwise_conv2d/vars/0", "layers/depthwise_conv2d/vars/1",
             "layers/conv2d_transpose/vars/0", "layers/conv2d_transpose/vars/1", "layers/embedding/vars/0",
             "layers/dense/vars/0", "layers/dense/vars/1"]
    assert list(keras_weight_names(config, paths).values()) == [
        "stem/kernel", "bn/gamma", "bn/moving_mean", "bn/moving_variance", "dw/depthwise_kernel", "dw/bias",
        "up/transpose_kernel", "up/bias", "emb/embeddings", "head/kernel", "head/bias"]


def test_unknown_layers_nested_models_and_unexpected_variables():
    inner = {"class_name": "Sequential", "config": {"name": "block", "layers": [_layer("Dense", "proj")]}}
    config = _model(_layer("MyLayer", "custom"), inner, _layer("Dense", "odd", use_bias=False))
    names = keras_weight_names(config, ["layers/my_layer/vars/0", "layers/sequential/layers/dense/vars/0",
                                        "layers/sequential/layers/dense/vars/1", "layers/dense/vars/0",
                                        "layers/dense/vars/1", "vars/0"])
    assert names == {"layers/my_layer/vars/0": "custom/vars/0",              # a class we do not know: positions
                     "layers/sequential/layers/dense/vars/0": "block/proj/kernel",
                     "layers/sequential/layers/dense/vars/1": "block/proj/bias",
                     "layers/dense/vars/0": "odd/vars/0",                   # 2 variables, config says 1: positions
                     "layers/dense/vars/1": "odd/vars/1",
                     "vars/0": "vars/0"}


@pytest.mark.parametrize("config", [None, [], {"config": "x"}, _model({"class_name": 3}, _layer("Dense", ""))])
def test_a_config_that_names_nothing_leaves_the_paths(config):
    paths = ["layers/dense/vars/0", "optimizer/vars/10", "optimizer/vars/2"]
    assert keras_weight_names(config, paths) == {p: p for p in ["layers/dense/vars/0", "optimizer/vars/2",
                                                                 "optimizer/vars/10"]}


def test_two_layers_never_share_a_name():
    config = _model(_layer("Dense", "same"), _layer("Dense", "same"))
    paths = ["layers/dense/vars/0", "layers/dense/vars/1", "layers/dense_1/vars/0", "layers/dense_1/vars/1"]
    assert keras_weight_names(config, paths) == {p: p for p in paths}


def test_snake_case_is_keras_own():
    assert [snake_case(c) for c in ("Dense", "Conv2D", "LSTM", "MultiHeadAttention", "InputLayer")] == \
        ["dense", "conv2d", "lstm", "multi_head_attention", "input_layer"]
