"""The demo and the export on each framework's own extra (issue 47 item 5): the digits ship with the package (NumPy
only), `--framework keras` runs Keras 3 on whatever backend is installed, `--framework torch` needs neither
scikit-learn nor TensorFlow, and a Keras 3 model exports without TensorFlow. Each path runs in a subprocess in which
the other frameworks are not installed, as far as the import system can tell (no real venvs needed)."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import re

import numpy as np
import pytest

from sparsify.cli import main
from sparsify.cli.compressed_npz import load_compressed_npz
from sparsify.cli.demo.data import load_digits, load_digits_split
from sparsify.cli.export import default_target, export_model
from without_modules import run_without


def table_row(stdout: str, layer: str) -> list[str]:
    return re.search(rf"^{layer}\s+(.*)$", stdout, re.M).group(1).split()


def test_the_shipped_digits_are_scikit_learns():
    from sklearn.datasets import load_digits as sklearn_digits

    x, y = load_digits()
    want_x, want_y = sklearn_digits(return_X_y=True)
    assert x.dtype == np.uint8 and y.dtype == np.uint8
    assert np.array_equal(x, want_x) and np.array_equal(y, want_y)


def test_the_split_is_stratified_disjoint_and_seeded():
    x, y = load_digits()
    d = load_digits_split(seed=3)
    counts = np.bincount(y)
    # per class round(0.25 * count) test images: 44 of 178 zeros (44.5 rounds to even), 46 of 182 ones, ...
    assert np.bincount(d.y_test).tolist() == [int(round(0.25 * c)) for c in counts] == \
        [44, 46, 44, 46, 45, 46, 45, 45, 44, 45]
    assert len(d.y_train) + len(d.y_test) == 1797 and d.x_train.dtype == np.float32 and d.x_train.max() == 1.0
    rows = {r.tobytes() for r in d.x_test}
    assert sum(r.tobytes() in rows for r in d.x_train) <= 20          # the few duplicate images of the data set
    again, other = load_digits_split(seed=3), load_digits_split(seed=4)
    assert np.array_equal(again.x_test, d.x_test) and not np.array_equal(other.x_test, d.x_test)
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\), got 1.0"):
        load_digits_split(test_fraction=1.0)


@pytest.mark.slow
def test_the_readme_torch_demo_with_the_torch_extra_only(tmp_path):
    """`sparsify demo --framework torch --pattern 2:4 --out runs/torch` (the README's first command) with neither
    TensorFlow, Keras, JAX nor scikit-learn: it reaches its target, 2:4 on every layer."""
    res = run_without(("tensorflow", "tf_keras", "keras", "jax", "sklearn"), "demo", "--framework", "torch",
                      "--pattern", "2:4", "--out", "runs/torch", "--steps", "40", "--no-progress", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert table_row(res.stdout, "fc1") == ["128x64", "50.00%", "50.00%", "4096", "/", "8192", "yes"]
    assert table_row(res.stdout, "total") == ["50.00%", "8512", "/", "17024", "yes"]
    assert (tmp_path / "runs" / "torch" / "model.pt").is_file()


@pytest.mark.slow
def test_keras_3_without_tensorflow_picks_the_installed_backend_and_exports(tmp_path):
    """No KERAS_BACKEND, no keras.json, no TensorFlow: the demo runs on JAX; its model.keras exports to compressed
    weights (.npz) without TensorFlow or torch, says TFLite needs TensorFlow, and `report` reads the .npz back."""
    absent = ("tensorflow", "tf_keras", "sklearn")
    res = run_without(absent, "demo", "--framework", "keras", "--steps", "30", "--out", "K", "--no-progress",
                      cwd=tmp_path, KERAS_HOME=str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "Keras 3 on jax; model.keras: a plain Keras model" in res.stdout
    assert table_row(res.stdout, "total") == ["90.00%", "1702", "/", "17024", "yes"]
    no_torch = (*absent, "torch")
    res = run_without(no_torch, "export", "K/model.keras", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "K/model.keras (keras) -> K/model.sparse.npz (compressed weights .npz)" in res.stdout
    assert "tensorflow is not installed: wrote compressed weights (.npz, NumPy only) instead of TFLite " \
           "(pip install \"sparsify-train[tf]\" for --to tflite)" in res.stdout
    res = run_without(no_torch, "export", "K/model.keras", "--to", "tflite", "--out", "m.tflite", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "--to tflite needs tensorflow, which is not installed (pip install \"sparsify-train[tf]\"); --to npz writes the " \
           "compressed weights with NumPy only" in res.stderr
    res = run_without(no_torch, "report", "K/model.sparse.npz", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["weights_total"]["zeros"] == 15322
    assert not (tmp_path / "m.tflite").exists()


@pytest.mark.slow
def test_keras_backend_is_respected(tmp_path):
    res = run_without(("tensorflow", "tf_keras", "jax", "sklearn"), "demo", "--framework", "keras", "--steps", "20",
                      "--no-progress", cwd=tmp_path, KERAS_BACKEND="torch")
    assert res.returncode == 0, res.stderr
    assert "Keras 3 on torch" in res.stdout and table_row(res.stdout, "total")[-1] == "yes"


@pytest.mark.slow
def test_a_missing_keras_backend_names_the_extra(tmp_path):
    res = run_without(("tensorflow", "tf_keras", "jax", "torch", "sklearn"), "demo", "--framework", "keras",
                      "--steps", "5", "--no-progress", cwd=tmp_path, KERAS_BACKEND="jax")
    err = res.stderr.strip().splitlines()
    assert res.returncode == 1 and err[0].startswith("sparsify demo: error: Keras 3 on the jax backend cannot be "
                                                     "imported"), res.stderr
    assert "pip install \"sparsify-train[jax]\", or set KERAS_BACKEND to an installed backend" in err[0]


@pytest.mark.parametrize("encoding", ["bitmask", "csr"])
def test_npz_export_round_trip_and_report(tmp_path, capsys, encoding):
    w = np.zeros((128, 64), np.float32)
    w[::4, ::4] = np.arange(1, 513, dtype=np.float32).reshape(32, 16)      # 512 non-zeros of 8192
    src = tmp_path / "w.npz"
    np.savez(src, **{"fc/kernel": w, "fc/bias": np.ones(64, np.float32)})
    res = export_model(src, to="npz", encoding=encoding)
    assert res.out == str(tmp_path / "w.sparse.npz") and res.target == "npz"
    assert res.encodings == {encoding: 1, "dense": 1}
    back = load_compressed_npz(res.out)
    assert list(back) == ["fc/kernel", "fc/bias"] and np.array_equal(back["fc/kernel"], w)
    assert res.sparse_bytes < res.dense_bytes / 4
    assert main(["report", res.out, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["weights_total"] == {"tensors": 1, "size": 8192, "zeros": 7680, "sparsity": 7680 / 8192}


def test_default_target_follows_what_is_installed(monkeypatch):
    import sparsify.cli.export as export

    assert default_target("keras") == ("tflite", []) and default_target("torch") == ("torch", [])
    monkeypatch.setattr(export, "installed", lambda module: False)
    assert default_target("keras")[0] == default_target("npz")[0] == "npz"
    assert default_target("torch")[1] == [
        "torch is not installed: wrote compressed weights (.npz, NumPy only) instead of a torch state_dict "
        "(pip install \"sparsify-train[torch]\" for --to torch)"]
