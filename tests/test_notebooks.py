"""The tutorial notebooks: in sync with notebooks/build_notebooks.py, committed without outputs, and
executed end to end (nbclient, kernel ``python3`` = this interpreter's ipykernel); a failing cell fails."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import importlib.util
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(p.name for p in NB_DIR.glob("*.ipynb"))


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebooks", NB_DIR / "build_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_notebooks_match_their_generator(tmp_path):
    built = {p.name for p in _builder().build(tmp_path)}
    assert built == set(NOTEBOOKS) and len(built) == 4
    for name in NOTEBOOKS:
        committed = nbformat.read(NB_DIR / name, as_version=4)
        fresh = nbformat.read(tmp_path / name, as_version=4)
        assert [c.source for c in committed.cells] == [c.source for c in fresh.cells], \
            f"{name} is out of date: run python notebooks/build_notebooks.py"
        nbformat.validate(committed)
        for cell in committed.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{name}: outputs are committed"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes(name, tmp_path, monkeypatch):
    nb = nbformat.read(NB_DIR / name, as_version=4)
    # first cell: the kernel must be this interpreter (the venv's ipykernel), not some other Python
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    # inherited by the kernel: the venv's `sparsify` command on PATH inside notebooks
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    client = NotebookClient(nb, timeout=240, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()                 # raises CellExecutionError on the first failing cell
    printed = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert os.path.realpath(printed.strip()) == os.path.realpath(sys.executable)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
