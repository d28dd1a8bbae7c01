"""`sparsify export`: TFLite of Keras models and SavedModels (outputs checked), compressed torch state_dicts
(round trip, sizes), the 2:4 semi-structured check, and bad input (issue 14)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gzip
import json
import re

import numpy as np
import pytest

from sparsify import PruningEngine
from sparsify.cli import main
from sparsify.cli.demo import default_config, run_demo
from sparsify.cli.export import default_output, export_model, format_export
from sparsify_tf.tflite import load_interpreter, run_tflite


def _one_line_error(capsys, *args: str) -> str:
    rc = main(list(args))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "internal error" not in err[0], err
    return err[0]


@pytest.fixture(scope="module")
def keras_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras") / "run"
    run_demo("keras", default_config(steps=30), steps=30, out=out, progress=False)
    return out


@pytest.mark.slow
def test_tflite_from_keras_matches_the_model_and_is_smaller(keras_run, capsys):
    import keras

    assert main(["export", str(keras_run / "model.keras"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["target"] == "tflite" and d["out"] == str(keras_run / "model.tflite")
    assert d["check"].startswith("outputs match the pruned model on 8 random inputs")
    assert d["sparse_bytes"] * 4 < d["dense_bytes"]              # 90% zeros stored sparse
    flat = (keras_run / "model.tflite").read_bytes()
    assert len(flat) == d["sparse_bytes"] and len(gzip.compress(flat, 9, mtime=0)) == d["sparse_gzip"]
    # the written flatbuffer, run again here, gives the Keras model's outputs
    model = keras.saving.load_model(keras_run / "model.keras", compile=False)
    x = np.random.default_rng(1).normal(size=(5, 64)).astype(np.float32)
    np.testing.assert_allclose(run_tflite(flat, [x])[0], np.asarray(model(x)), atol=1e-4)
    # a second export refuses to replace it, unless asked
    assert "already exists; pass --overwrite" in _one_line_error(capsys, "export", str(keras_run / "model.keras"))
    assert main(["export", str(keras_run / "model.keras"), "--overwrite"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^dense/sparse\s+\d+\.\d\dx\s+\d+\.\d\dx$", text, flags=re.M), text


@pytest.mark.slow
def test_tflite_from_the_tf_graph_saved_model(tmp_path, capsys):
    out = tmp_path / "tfg"
    run_demo("tf-graph", default_config(pattern="2:4", steps=20), steps=20, out=out, progress=False)
    res = export_model(out / "saved_model")
    assert res.target == "tflite" and res.out == str(out / "saved_model.tflite") and res.sparse_bytes < res.dense_bytes
    assert "outputs match the pruned model" in res.check
    assert load_interpreter((out / "saved_model.tflite").read_bytes()).get_input_details()[0]["shape"][-1] == 64


def test_compressed_state_dict_round_trip_and_sizes(tmp_path, capsys):
    import torch

    from sparsify_torch.export import load_compressed_state_dict

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16))
    weights = {"0.weight": model[0].weight.detach().numpy(), "2.weight": model[2].weight.detach().numpy()}
    masks = PruningEngine({"target_sparsity": 0.9, "start_step": 0, "end_step": 0}).compute_masks(weights, 0)
    with torch.no_grad():
        model[0].weight.mul_(torch.from_numpy(masks["0.weight"]))
        model[2].weight.mul_(torch.from_numpy(masks["2.weight"]))
    torch.save(model.state_dict(), tmp_path / "m.pt")
    for encoding in ("bitmask", "csr"):
        dest = tmp_path / f"m.{encoding}.pt"
        assert main(["export", str(tmp_path / "m.pt"), "--encoding", encoding, "--out", str(dest), "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["encodings"] == {encoding: 2, "dense": 2}
        assert d["sparse_bytes"] == dest.stat().st_size and d["dense_bytes"] > 3 * d["sparse_bytes"]
        raw = torch.load(dest, weights_only=True)                  # plain tensors, strings, ints: no code
        assert raw["format"] == "sparsify.compressed_state_dict"
        fresh = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16))
        fresh.load_state_dict(load_compressed_state_dict(dest))
        x = torch.randn(4, 256)
        assert torch.equal(fresh(x), model(x))
    assert default_output(tmp_path / "m.pt", "torch") == str(tmp_path / "m.sparse.pt")


def test_semi_structured_check_for_2_4_models(tmp_path, capsys):
    import torch

    res = run_demo("torch", default_config(pattern="2:4", steps=20), steps=20, out=tmp_path / "r", progress=False)
    assert res.total_exact
    assert main(["export", str(tmp_path / "r" / "model.pt")]) == 0
    text = capsys.readouterr().out
    # fc1 (128x64) and fc2 (64x128) fit float16 tiles; the 10-row classifier does not
    assert "2:4 semi-structured (torch.sparse.to_sparse_semi_structured, float16): 2 of 3 2-D weights qualify" in text
    assert "out.weight: shape 10x64: cutlass needs rows and columns multiples of 32x64" in text


def test_export_bad_input(tmp_path, capsys):
    np.savez(tmp_path / "w.npz", w=np.zeros((8, 8), np.float32))
    err = _one_line_error(capsys, "export", str(tmp_path / "w.npz"), "--to", "tflite")
    assert "--to tflite needs a model (a .keras file or a SavedModel directory)" in err and "use --to torch" in err
    assert "does not exist" in _one_line_error(capsys, "export", str(tmp_path / "missing.pt"))
    assert "is a directory; pass a file path" in _one_line_error(capsys, "export", str(tmp_path / "w.npz"),
                                                                  "--out", str(tmp_path))
    (tmp_path / "model.keras").write_bytes(b"PK\x03\x04not a zip")
    assert "corrupt" in _one_line_error(capsys, "export", str(tmp_path / "model.keras"))
    assert format_export.__doc__


def test_a_failed_round_trip_leaves_the_previous_artifact(tmp_path, capsys, monkeypatch):
    # the compressed file used to be renamed into place before its round trip was checked
    import sparsify_torch.export as torch_export

    w = np.where(np.arange(64 * 64).reshape(64, 64) % 10 == 0, 1.0, 0.0).astype(np.float32)
    np.savez(tmp_path / "w.npz", w=w)
    out = tmp_path / "w.sparse.pt"
    out.write_bytes(b"previous artifact")
    real = torch_export.load_compressed_state_dict

    def corrupted(path, *a, **k):
        sd = real(path, *a, **k)
        sd["w"][0, 0] += 1
        return sd

    monkeypatch.setattr(torch_export, "load_compressed_state_dict", corrupted)
    err = _one_line_error(capsys, "export", str(tmp_path / "w.npz"), "--overwrite")
    assert f"{str(out)!r}: the compressed state_dict does not give back ['w']; nothing was written" in err
    assert out.read_bytes() == b"previous artifact"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.npz", "w.sparse.pt"]     # no temporary file left
    monkeypatch.setattr(torch_export, "load_compressed_state_dict", real)
    assert main(["export", str(tmp_path / "w.npz"), "--overwrite"]) == 0
    assert np.array_equal(real(out)["w"].numpy(), w)


def test_an_unwritable_destination_is_refused_before_the_source_is_read(tmp_path, capsys, monkeypatch):
    import sparsify.cli.export as export

    np.savez(tmp_path / "w.npz", w=np.zeros((4, 4), np.float32))

    def never(*a, **k):
        raise AssertionError("the source was read")

    monkeypatch.setattr(export, "read_tensors", never)
    err = _one_line_error(capsys, "export", str(tmp_path / "w.npz"), "--out", str(tmp_path / "no" / "w.pt"))
    assert err == (f"sparsify export: error: cannot write {str(tmp_path / 'no' / 'w.pt')!r}: "
                   f"directory {str(tmp_path / 'no')!r} does not exist")


# ----- a .keras file's optimizer state (issue 58 item 6) -----------------------------------------------------
def test_keras_export_writes_the_weights_only_unless_asked(tmp_path, capsys):
    """`model.save` of a trained Keras model holds the optimizer's variables too (Adam: 2 counters, 2 moments a
    weight); the export leaves them out by default and says so; --with-optimizer writes them."""
    from keras_archives import mlp_weights, write_keras_archive

    from sparsify.cli.compressed_npz import load_compressed_npz

    weights = mlp_weights()
    src = write_keras_archive(tmp_path / "m.keras", weights)
    res = export_model(src, to="npz")
    back = load_compressed_npz(res.out)
    assert list(back) == list(weights) and all(np.array_equal(back[n], w) for n, w in weights.items())
    assert res.notes[0] == ("left out 14 optimizer tensors (optimizer/vars/0, ...): the model's weights only "
                            "(--with-optimizer writes them too)")
    assert main(["export", str(src), "--to", "npz", "--out", str(tmp_path / "all.npz"), "--with-optimizer"]) == 0
    assert "left out" not in capsys.readouterr().out
    back = load_compressed_npz(tmp_path / "all.npz")
    assert len(back) == 20 and list(back)[6:] == [f"optimizer/vars/{i}" for i in range(14)]
    assert back["optimizer/vars/0"] == 30 and np.all(back["optimizer/vars/2"] == 0.5)


def test_with_optimizer_bad_uses(tmp_path, capsys):
    from keras_archives import write_keras_archive

    src = write_keras_archive(tmp_path / "m.keras", {"fc/kernel": np.ones((4, 2), np.float32),
                                                     "fc/bias": np.ones(2, np.float32)})
    assert _one_line_error(capsys, "export", str(src), "--to", "tflite", "--with-optimizer") == (
        "sparsify export: error: with_optimizer (--with-optimizer) applies to --to torch and --to npz: a TFLite "
        "model holds no optimizer")
    with pytest.raises(TypeError, match=r"^with_optimizer must be a bool, got 'yes'$"):
        export_model(src, to="npz", with_optimizer="yes")
    only = tmp_path / "slots.npz"
    np.savez(only, **{"dense/kernel/Adam": np.ones((2, 2)), "global_step": np.int64(3)})
    assert _one_line_error(capsys, "export", str(only), "--to", "npz") == (
        f"sparsify export: error: {str(only)!r} (npz) holds only optimizer state (2 tensors); pass --with-optimizer "
        "to export it")
    assert not (tmp_path / "slots.sparse.npz").exists() and not (tmp_path / "m.tflite").exists()
