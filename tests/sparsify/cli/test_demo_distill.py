"""`sparsify demo --distill`: the dense model teaches the pruned one in the torch, Keras 3 and tf-keras demos."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsify.cli.demo import run_demo
from sparsify.cli.demo.plan import DISTILLING_FRAMEWORKS

SPARSIFY = str(Path(sys.executable).with_name("sparsify"))


def test_torch_demo_distills_and_saves_the_student_only(tmp_path):
    plain = run_demo("torch", steps=30, progress=False)
    taught = run_demo("torch", steps=30, progress=False, distillation={"temperature": 2.0}, out=tmp_path / "o")
    # the same dense phase (same seed), a different pruning phase: the teacher's term changed the training
    assert taught.dense_accuracy == plain.dense_accuracy
    assert [r.kept for r in taught.layers] == [r.kept for r in plain.layers] == [819, 819, 64]
    state = torch.load(tmp_path / "o" / "model.pt")
    assert sorted(state) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "out.bias", "out.weight"]
    assert "distilled from the dense model (temperature 2, weight fading 1 -> 0 over the first half of pruning); the teacher is not saved" in taught.notes
    manifest = json.loads((tmp_path / "o" / "sparsify-run.json").read_text())
    assert manifest["distillation"]["temperature"] == 2.0 and manifest["distillation"]["teacher"] == "dense_at_start"
    assert "distilled" not in " ".join(plain.notes)


def test_the_distillation_term_changes_the_pruned_weights():
    from sparsify.cli.demo import torch_backend
    from sparsify.cli.demo.common import DemoProgress
    from sparsify.cli.demo.data import load_digits_split
    from sparsify.cli.demo import default_config
    from sparsify import DistillationConfig

    data, cfg = load_digits_split(0), default_config(steps=30)
    with DemoProgress(60, False) as bar:
        plain = torch_backend.train(cfg, data, 30, 0, bar)
    with DemoProgress(60, False) as bar:
        taught = torch_backend.train(cfg, data, 30, 0, bar, distillation=DistillationConfig())
    assert plain.dense_accuracy == taught.dense_accuracy
    assert not np.array_equal(plain.weights["fc1"], taught.weights["fc1"])


def test_demo_refuses_distillation_it_cannot_do():
    assert DISTILLING_FRAMEWORKS == ("torch", "keras", "tf-keras")
    with pytest.raises(ValueError, match=r"^distillation: the 'tf-graph' demo does not distill; use a framework of "
                                         r"\('torch', 'keras', 'tf-keras'\)"):
        run_demo("tf-graph", steps=5, progress=False, distillation={})
    with pytest.raises(ValueError, match=r"^distillation: the demo's teacher is its dense model and it matches "
                                         r"logits only; got teacher='user', features=\[\]$"):
        run_demo("torch", steps=5, progress=False, distillation={"teacher": "user"})
    with pytest.raises(ValueError, match="temperature must be a finite number > 0, got 0"):
        run_demo("torch", steps=5, progress=False, distillation={"temperature": 0})


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["keras", "tf-keras"])
def test_keras_demos_distill_from_the_command_line(framework, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="jax" if framework == "keras" else "tensorflow")
    out = tmp_path / "out"
    res = subprocess.run([SPARSIFY, "demo", "--framework", framework, "--steps", "30", "--distill", "--no-progress",
                          "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    assert "distilled from the dense model (temperature 2, weight fading 1 -> 0 over the first half of pruning)" in res.stdout
    assert "total                    90.00%  1702 / 17024  yes" in res.stdout
    code = "import keras, sys; m = keras.saving.load_model(sys.argv[1]); print(len(m.weights), m.count_params())"
    if framework == "tf-keras":
        code = code.replace("import keras", "import tf_keras as keras")
    loaded = subprocess.run([sys.executable, "-c", code, str(out / "model.keras")], capture_output=True, text=True,
                            timeout=300, env=env)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["6", str(8192 + 128 + 8192 + 64 + 640 + 10)]   # the student's weights only
