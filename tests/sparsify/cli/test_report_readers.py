"""`sparsify.cli.report.readers`: reading weights of every supported format, without executing code."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import zipfile

import numpy as np
import pytest

from sparsify import PruningEngine, canonical_to_tf
from sparsify.cli import main
from sparsify.cli.report import build_report, format_report, pattern_conformity
from sparsify.cli.report.readers import FORMATS, detect_format, read_tensors


# ----- real files of every format ------------------------------------------------------------------
def _masked(weights: dict[str, np.ndarray], pattern: str, sparsity: float) -> dict[str, np.ndarray]:
    """Weights pruned by the core (canonical layout)."""
    eng = PruningEngine({"pattern": pattern, "target_sparsity": sparsity, "start_step": 0, "end_step": 0})
    masks = eng.compute_masks(weights, step=0)
    return {n: np.where(masks[n], w, 0.0).astype(np.float32) for n, w in weights.items()}


def test_torch_state_dict(tmp_path):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Conv2d(1, 4, (1, 1)))
    pruned = _masked({"0.weight": model[0].weight.detach().numpy()}, "2:4", 0.5)
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(pruned["0.weight"]))
    path = tmp_path / "model.pt"
    torch.save({"model": model.state_dict(), "epoch": 3}, path)
    assert detect_format(path) == "torch"
    fmt, tensors = read_tensors(path)              # nested dicts flattened with dotted names, non-tensors dropped
    assert (fmt, FORMATS[fmt]) == ("torch", "torch")
    assert sorted(tensors) == ["model.0.bias", "model.0.weight", "model.2.bias", "model.2.weight"]
    assert np.array_equal(tensors["model.0.weight"], pruned["0.weight"])
    rep = build_report(path, pattern="2:4")
    d = rep.to_dict()
    by = {t["name"]: t for t in d["tensors"]}
    assert set(by) == {"model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"}
    assert by["model.0.weight"]["sparsity"] == 0.5 and by["model.0.weight"]["zeros"] == 16
    assert by["model.0.weight"]["pattern"]["conforms"] is True
    assert by["model.0.bias"]["pattern"] is None
    assert by["model.2.weight"]["pattern"]["fits"] is False      # 2-D view (4, 1)
    assert d["weights_total"] == {"tensors": 2, "size": 36, "zeros": 16, "sparsity": 16 / 36}
    assert d["pattern_conforms"] is True
    text = format_report(rep)
    assert "model.0.weight" in text and "50.00%" in text and "does not fit" in text


def test_torch_file_code_is_never_executed(tmp_path):
    import pickle

    import torch

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(2, 2), "x": Evil()}, path)
    assert not marker.exists()
    with pytest.raises(ValueError, match="weights_only=True"):
        build_report(path)
    assert not marker.exists()


class Unlisted:
    """A class torch's weights-only unpickler does not allow."""


def test_a_torch_load_failure_is_quoted_whole_without_escape_codes(tmp_path, capsys):
    import torch

    path = tmp_path / "m.pt"
    torch.save({"w": torch.zeros(2, 2), "x": Unlisted()}, path)
    try:
        torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001
        raw = str(e)
    assert "\x1b[1m" in raw and "\n" in raw          # what torch says: bold on a terminal, several lines
    assert main(["report", str(path)]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.count("\n") == 1
    assert err.startswith(f"sparsify report: error: {str(path)!r} cannot be read as a torch state_dict "
                          "(weights_only=True): Weights only load failed. ")
    assert "do those steps only if you trust the source of the checkpoint." in err
    assert f"Unsupported global: GLOBAL {Unlisted.__module__}.Unlisted was not an allowed global" in err
    assert err.endswith(" ".join(raw.split()[-3:]) + "\n")          # the last words torch wrote: nothing cut


def test_tf_checkpoint_converts_layouts(tmp_path):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    canon = _masked({"conv": rng.normal(size=(8, 4, 3, 3)), "dense": rng.normal(size=(6, 8))}, "2:4", 0.5)
    conv_tf = canonical_to_tf(canon["conv"], "conv", (3, 3, 4, 8))
    dense_tf = canonical_to_tf(canon["dense"], "dense", (8, 6))
    # the TF layout is not 2:4 along its own last axis: only the conversion makes it conform
    assert pattern_conformity(conv_tf.reshape(-1, 8), "2:4")["conforms"] is False
    ckpt = tf.train.Checkpoint(conv=tf.Variable(conv_tf), dense=tf.Variable(dense_tf),
                               bias=tf.Variable(np.zeros(6, np.float32)))
    prefix = ckpt.write(str(tmp_path / "ckpt" / "model"))
    for p in (prefix, prefix + ".index"):
        rep = build_report(p, pattern="2:4").to_dict()
        by = {t["name"]: t for t in rep["tensors"]}
        assert set(by) == {"conv", "dense", "bias"}
        assert by["conv"]["shape"] == [3, 3, 4, 8] and by["conv"]["sparsity"] == 0.5
        assert by["conv"]["pattern"]["conforms"] and by["dense"]["pattern"]["conforms"]
        assert rep["pattern_conforms"] is True
    # a directory with a 'checkpoint' file
    tf.train.CheckpointManager(ckpt, str(tmp_path / "managed"), max_to_keep=1).save()
    assert detect_format(tmp_path / "managed") == "tf-checkpoint"
    assert build_report(tmp_path / "managed").to_dict()["weights_total"]["sparsity"] == 0.5


def test_tf1_saver_checkpoint_skips_optimizer_slots(tmp_path):
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        w = tf.compat.v1.get_variable("dense/kernel", initializer=np.array([[0.0, 1.0], [2.0, 0.0]], np.float32))
        step = tf.compat.v1.train.get_or_create_global_step()
        loss = tf.reduce_sum(tf.square(w))
        train = tf.compat.v1.train.AdamOptimizer(0.0).minimize(loss, global_step=step)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            prefix = saver.save(sess, str(tmp_path / "model.ckpt"))
    names = [t.name for t in build_report(prefix).tensors]
    assert names == ["dense/kernel"]
    all_names = {t.name for t in build_report(prefix, include_optimizer=True).tensors}
    assert {"dense/kernel", "dense/kernel/Adam", "dense/kernel/Adam_1"} <= all_names


def test_savedmodel(tmp_path):
    import tensorflow as tf

    m = tf.Module()
    m.kernel = tf.Variable(np.array([[0.0, 0.0], [1.0, 2.0]], np.float32))
    m.f = tf.function(lambda x: tf.matmul(x, m.kernel), input_signature=[tf.TensorSpec([None, 2])])
    tf.saved_model.save(m, str(tmp_path / "sm"))
    assert detect_format(tmp_path / "sm") == "savedmodel"
    rep = build_report(tmp_path / "sm").to_dict()
    assert [(t["name"], t["sparsity"]) for t in rep["tensors"]] == [("kernel", 0.5)]


def test_keras_archive_and_h5(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="fc")])
    canon = _masked({"fc": np.arange(1.0, 33.0).reshape(4, 8)}, "2:4", 0.5)
    kernel = canonical_to_tf(canon["fc"], "dense", (8, 4))
    model.get_layer("fc").set_weights([kernel, np.zeros(4, np.float32)])
    path = tmp_path / "m.keras"
    model.save(path)
    assert detect_format(path) == "keras"
    rep = build_report(path, pattern="2:4").to_dict()
    weights = [t for t in rep["tensors"] if len(t["shape"]) == 2]
    assert len(weights) == 1 and weights[0]["shape"] == [8, 4]
    assert [t["name"] for t in rep["tensors"]] == ["fc/kernel", "fc/bias"]       # the layer's name, as Keras has it
    assert weights[0]["sparsity"] == 0.5 and weights[0]["pattern"]["conforms"] is True
    model.save_weights(tmp_path / "m.weights.h5")
    assert detect_format(tmp_path / "m.weights.h5") == "hdf5"
    assert build_report(tmp_path / "m.weights.h5").to_dict()["weights_total"]["sparsity"] == 0.5


def test_npz(tmp_path):
    np.savez(tmp_path / "w.npz", a=np.array([[0.0, 1.0, 0.0, 1.0]]), b=np.ones(3))
    fmt, tensors = read_tensors(tmp_path / "w.npz")
    assert fmt == "npz" and FORMATS[fmt] == "canonical" and set(tensors) == {"a", "b"}
    assert tensors["a"].tolist() == [[0.0, 1.0, 0.0, 1.0]]
    assert build_report(tmp_path / "w.npz").to_dict()["total"] == {"tensors": 2, "size": 7, "zeros": 2,
                                                                 "sparsity": 2 / 7}


# ----- bad input -------------------------------------------------------------------------------------
def test_bad_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        build_report(tmp_path / "missing.pt")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="unknown format"):
        build_report(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="neither a SavedModel"):
        build_report(tmp_path / "empty")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("readme.txt", "x")
    with pytest.raises(ValueError, match="zip archive but neither"):
        build_report(tmp_path / "other.zip")
    (tmp_path / "broken.keras").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match="corrupt"):
        build_report(tmp_path / "broken.keras")
    (tmp_path / "bad.index").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read as a TensorFlow checkpoint"):
        build_report(tmp_path / "bad.index")
    with pytest.raises(ValueError, match="pattern"):
        build_report(tmp_path / "notes.txt", pattern="3:2")
    with pytest.raises(ValueError, match="fmt must be one of"):
        read_tensors(tmp_path / "notes.txt", fmt="onnx")
