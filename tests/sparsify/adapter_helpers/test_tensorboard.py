"""The one TensorBoard writer of the adapters: tags, steps, values, the checks before any file, and the
adapters' public classes being that writer."""
from __future__ import annotations

import subprocess
import sys

import pytest

from sparsify.adapter_helpers.tensorboard import SparsityWriter, read_scalars


def test_writes_total_and_per_weight_scalars_at_each_step(tmp_path):
    w = SparsityWriter(tmp_path)
    w.write({"sparsity": 0.25, "sparsity/a": 0.5, "sparsity/b": 0.0}, step=0)
    w.write({"sparsity": 0.75, "sparsity/a": 1.0, "sparsity/b": 0.5}, step=7)
    w.close()
    assert read_scalars(tmp_path) == {"sparsity/total": [(0, 0.25), (7, 0.75)],
                                      "sparsity/a": [(0, 0.5), (7, 1.0)],
                                      "sparsity/b": [(0, 0.0), (7, 0.5)]}


def test_write_leaves_the_callers_figures_alone(tmp_path):
    figures = {"sparsity": 0.5, "sparsity/a": 0.5}
    w = SparsityWriter(tmp_path)
    w.write(figures, step=1)
    w.close()
    assert figures == {"sparsity": 0.5, "sparsity/a": 0.5}


@pytest.mark.parametrize("log_dir", [3, None, b"runs"])
def test_a_log_dir_that_is_not_a_path_is_a_type_error(log_dir):
    with pytest.raises(TypeError, match=f"log_dir must be a directory path or None, got {log_dir!r}"):
        SparsityWriter(log_dir)


@pytest.mark.slow
def test_no_tensorboard_names_what_to_install(tmp_path):
    code = ("import sys; sys.modules['tensorboard'] = None\n"
            "from sparsify.adapter_helpers.tensorboard import SparsityWriter\n"
            "try:\n    SparsityWriter(sys.argv[1])\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("log_dir needs TensorBoard (") and out.stdout.rstrip().endswith(
        "pip install tensorboard")
    assert list(tmp_path.iterdir()) == []


def test_the_adapters_writers_are_the_one_writer():
    from sparsify_keras.tensorboard import SparsityWriter as KerasWriter
    from sparsify_torch.tensorboard import SparsityWriter as TorchWriter
    from sparsify_torch.tensorboard import read_scalars as torch_read_scalars

    assert issubclass(KerasWriter, SparsityWriter) and issubclass(TorchWriter, SparsityWriter)
    assert KerasWriter.write is SparsityWriter.write and TorchWriter.write is SparsityWriter.write
    assert torch_read_scalars is read_scalars
