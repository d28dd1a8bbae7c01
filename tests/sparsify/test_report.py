"""`sparsify.report`: reading weights of every supported format, sparsity and pattern conformity."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import zipfile

import numpy as np
import pytest

from sparsify import PruningEngine, canonical_to_tf
from sparsify.report import (build_report, detect_format, format_report, guess_tf_kind, pattern_conformity,
                             read_tensors, tensor_stats)


# ----- pattern conformity on literal arrays ------------------------------------------------------
def test_nm_conformity_literal():
    w = np.array([[0.0, 1.0, 0.0, 2.0, 3.0, 0.0, 0.0, 4.0],
                  [5.0, 0.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert pattern_conformity(w, "2:4") == {"fits": True, "conforms": True, "units": 4, "violations": 0,
                                            "reason": None}
    w[1, 1] = 7.0                                   # group (1, 0) now keeps 3 of 4
    assert pattern_conformity(w, "2:4")["violations"] == 1
    assert pattern_conformity(w, "2:4")["conforms"] is False
    # 1:4 needs only one zero per group: still fine
    assert pattern_conformity(w, "1:4")["conforms"] is True


def test_block_conformity_literal():
    w = np.ones((8, 2))
    w[0:4, 0] = 0.0                                 # one whole 4x1 block
    assert pattern_conformity(w, "4x1")["conforms"] is True
    assert pattern_conformity(w, "4x1")["units"] == 4
    w[5, 1] = 0.0                                   # a stray zero inside a kept block
    res = pattern_conformity(w, "4x1")
    assert (res["conforms"], res["violations"]) == (False, 1)
    assert pattern_conformity(w, "1x1")["conforms"] is True
    # whole rows ("1xchannel": one row by all columns)
    rows = np.ones((3, 4)); rows[1] = 0.0
    assert pattern_conformity(rows, "1xchannel")["conforms"] is True
    rows[2, 0] = 0.0
    assert pattern_conformity(rows, "1xchannel")["violations"] == 1


def test_conformity_pattern_does_not_fit():
    res = pattern_conformity(np.ones((3, 6)), "2:4")
    assert res["fits"] is False and res["conforms"] is None and "M=4" in res["reason"]


def test_conformity_uses_the_2d_view_of_conv_weights():
    # canonical conv (out=2, in=4, kh=1, kw=2): 2-D view is (2, kw*in) with the input channel fastest
    w = np.ones((2, 4, 1, 2))
    w[:, 0:2, :, :] = 0.0                 # in channels 0,1 zero at every kernel position -> 2:4 per position
    assert pattern_conformity(w, "2:4")["conforms"] is True
    # a reshape with the kernel axis fastest would see groups [0,0,0,0] and [1,1,1,1]: not 2:4
    assert pattern_conformity(w.reshape(2, -1), "2:4")["violations"] == 2
    w2 = np.ones((2, 4, 1, 2)); w2[:, :, :, 0] = 0.0   # kernel position 0 zero: groups of 4 all-zero or all-kept
    assert pattern_conformity(w2, "2:4")["violations"] == 2
    w3 = np.ones((2, 4, 1, 2)); w3[:, 0, :, :] = 0.0   # only one zero per group
    assert pattern_conformity(w3, "2:4")["violations"] == 4


def test_guess_tf_kind():
    assert guess_tf_kind("dense/kernel", (4, 3)) == "dense"
    assert guess_tf_kind("conv2d/kernel", (3, 3, 4, 8)) == "conv"
    assert guess_tf_kind("dw/depthwise_kernel", (3, 3, 4, 1)) == "depthwise"
    assert guess_tf_kind("embedding/embeddings", (10, 4)) == "embedding"
    assert guess_tf_kind("dense/bias", (4,)) is None


def test_tensor_stats_and_format():
    st = tensor_stats("w", np.array([[0.0, 1.0], [0.0, 0.0]]))
    assert (st.zeros, st.size, st.sparsity, st.shape, st.is_weight) == (3, 4, 0.75, (2, 2), True)
    assert tensor_stats("b", np.zeros(3), pattern="2:4").pattern is None      # 1-D: not checked


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
    assert weights[0]["sparsity"] == 0.5 and weights[0]["pattern"]["conforms"] is True
    model.save_weights(tmp_path / "m.weights.h5")
    assert detect_format(tmp_path / "m.weights.h5") == "hdf5"
    assert build_report(tmp_path / "m.weights.h5").to_dict()["weights_total"]["sparsity"] == 0.5


def test_npz(tmp_path):
    np.savez(tmp_path / "w.npz", a=np.array([[0.0, 1.0, 0.0, 1.0]]), b=np.ones(3))
    fmt, tensors = read_tensors(tmp_path / "w.npz")
    assert fmt == "npz" and set(tensors) == {"a", "b"}
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


def test_report_json_roundtrip(tmp_path):
    np.savez(tmp_path / "w.npz", a=np.zeros((2, 4)))
    d = build_report(tmp_path / "w.npz", pattern="2:4").to_dict()
    assert json.loads(json.dumps(d)) == d
