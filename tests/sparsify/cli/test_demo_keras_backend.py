"""Which framework and Keras backend `sparsify demo` runs (issue 58 item 2): `--backend` or KERAS_BACKEND, else a
keras.json backend that is installed, else the installed one; a bare `sparsify demo` runs the installed framework.
Keras's first import writes ~/.keras/keras.json with "tensorflow" whatever is installed: the second run in a
JAX-only (or torch-only) environment with a fresh HOME must not take that file as the user's choice."""
from __future__ import annotations

import inspect
import json
import re

import numpy as np
import pytest

from sparsify.cli import main
from sparsify.cli.demo import default_framework, run_demo
from sparsify.cli.demo.data import batch_indices, load_digits_split
from sparsify.cli.demo.keras_backend import BACKEND_ORDER, batch_stream, pick_keras_backend
from without_modules import run_without


def test_the_keras_demos_batches_come_one_at_a_time():
    """What the Keras demos hand fit: a generator of (x, y) batches in batch_indices' order, not every batch of
    the run built up front (100,000 steps of 64 x 64 float32 would be 1.6 GB)."""
    data = load_digits_split()
    stream = batch_stream(data, steps=100_000, seed=3)
    assert inspect.isgenerator(stream)
    for idx, (x, y) in zip(batch_indices(len(data.x_train), 64, 50, seed=3), stream):
        assert x.shape == (64, 64) and x.dtype == np.float32
        assert np.array_equal(x, data.x_train[idx]) and np.array_equal(y, data.y_train[idx])
    assert sum(1 for _ in batch_stream(data, steps=30, seed=0)) == 30


def only(*modules: str):
    return lambda module: module in modules


@pytest.mark.parametrize("explicit, env, json_backend, present, want", [
    (None, None, None, ("tensorflow", "jax", "torch"), "tensorflow"),      # Keras's own default, when installed
    (None, None, "tensorflow", ("jax",), "jax"),               # the keras.json Keras wrote itself: TF not installed
    (None, None, "tensorflow", ("torch",), "torch"),
    (None, None, "torch", ("tensorflow", "torch"), "torch"),   # the user's keras.json, installed: respected
    (None, None, "numpy", ("jax",), "jax"),                    # a backend the demo cannot train on: skipped
    (None, "torch", "jax", ("jax",), "torch"),                 # KERAS_BACKEND as given (its import names the extra)
    ("jax", "torch", "torch", ("torch",), "jax"),              # --backend over KERAS_BACKEND
    (None, None, None, (), "tensorflow"),                      # nothing installed: the error names [tf]
])
def test_pick_keras_backend(explicit, env, json_backend, present, want):
    assert pick_keras_backend(explicit, env, json_backend, only(*present)) == want


def test_default_framework_is_the_installed_one():
    assert default_framework(only("tensorflow", "torch", "keras", "jax")) == "tf-graph"
    assert default_framework(only("torch", "keras", "jax")) == "torch"
    assert default_framework(only("keras", "jax")) == "keras"
    with pytest.raises(ImportError, match=r'^sparsify demo needs TensorFlow, PyTorch or Keras 3 with JAX, and none '
                                          r'is installed: pip install "sparsify-train\[torch\]" \(or the extra tf or '
                                          r'jax\)$'):
        default_framework(only("keras"))


def test_backend_is_refused_with_another_framework_before_anything_runs(capsys):
    assert BACKEND_ORDER == ("tensorflow", "jax", "torch")
    with pytest.raises(ValueError, match=r"^backend applies to the 'keras' framework only \(Keras 3\), got "
                                         r"backend='jax' with framework 'torch'$"):
        run_demo("torch", backend="jax", steps=2, progress=False)
    with pytest.raises(ValueError, match=r"^backend must be one of \('tensorflow', 'jax', 'torch'\), got 'mxnet'$"):
        run_demo("keras", backend="mxnet", steps=2, progress=False)
    assert main(["demo", "--framework", "torch", "--backend", "jax", "--steps", "2"]) == 1
    assert capsys.readouterr().err == ("sparsify demo: error: backend applies to the 'keras' framework only (Keras 3), "
                                       "got backend='jax' with framework 'torch'\n")


class _Chosen(Exception):
    pass


def test_backend_option_reaches_the_choice_and_implies_keras(monkeypatch, capsys):
    """`sparsify demo --backend jax` runs the keras demo and hands "jax" to the backend choice (stopped there:
    Keras is imported only in a process of its own)."""
    import sparsify.cli.demo.keras_backend as kb

    seen = []

    def choose(explicit=None):
        seen.append(explicit)
        raise _Chosen("stop")
    monkeypatch.setattr(kb, "choose_keras_backend", choose)
    assert main(["demo", "--backend", "jax", "--steps", "2", "--no-progress"]) == 1
    assert seen == ["jax"] and "internal error: _Chosen: stop" in capsys.readouterr().err


def _ran_on(stdout: str) -> str:
    return re.search(r"^Keras 3 on (\w+)", stdout, re.M).group(1)


@pytest.mark.slow
def test_jax_only_the_second_run_with_a_fresh_home_succeeds(tmp_path):
    """No TensorFlow, no torch, HOME a new directory: the first run's Keras writes keras.json naming tensorflow;
    the second run still picks JAX."""
    absent = ("tensorflow", "tf_keras", "torch", "sklearn")
    home = tmp_path / "home"
    home.mkdir()
    for run in (1, 2):
        res = run_without(absent, "demo", "--framework", "keras", "--steps", "3", "--no-progress", cwd=tmp_path,
                          HOME=str(home))
        assert res.returncode == 0, (run, res.stderr)
        assert _ran_on(res.stdout) == "jax"
        assert json.loads((home / ".keras" / "keras.json").read_text())["backend"] == "tensorflow"


@pytest.mark.slow
def test_torch_only_a_bare_demo_runs_torch_and_keras_runs_on_torch_twice(tmp_path):
    absent = ("tensorflow", "tf_keras", "jax", "sklearn")
    home = tmp_path / "home"
    home.mkdir()
    res = run_without(absent, "demo", "--steps", "3", "--no-progress", cwd=tmp_path, HOME=str(home))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("sparsify demo: torch, digits MLP 64-128-64-10")
    for run in (1, 2):
        res = run_without(absent, "demo", "--framework", "keras", "--steps", "3", "--no-progress", cwd=tmp_path,
                          HOME=str(home))
        assert res.returncode == 0, (run, res.stderr)
        assert _ran_on(res.stdout) == "torch"
    assert json.loads((home / ".keras" / "keras.json").read_text())["backend"] == "tensorflow"


@pytest.mark.slow
def test_the_install_hint_names_the_extra_for_the_installed_backend(tmp_path):
    """torch installed, Keras not, keras.json naming tensorflow (as Keras writes it): the hint is [keras-torch]."""
    (tmp_path / ".keras").mkdir()
    (tmp_path / ".keras" / "keras.json").write_text('{"backend": "tensorflow"}')
    res = run_without(("tensorflow", "tf_keras", "jax", "keras", "sklearn"), "demo", "--framework", "keras",
                      "--steps", "2", "--no-progress", cwd=tmp_path, HOME=str(tmp_path))
    assert res.returncode == 1
    assert res.stderr.splitlines()[0] == (
        "sparsify demo: error: Keras 3 on the torch backend cannot be imported (No module named 'keras'); "
        'pip install "sparsify-train[keras-torch]", or set KERAS_BACKEND to an installed backend')
