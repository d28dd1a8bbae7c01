"""The tutorial notebooks: committed with the cells of notebooks/build_notebooks.py and the outputs of a real
run (an image for every plot cell, no TensorFlow start-up noise, no deprecation warnings), and executed again
end to end here (nbclient, kernel ``python3`` = this interpreter's ipykernel); a failing cell fails."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import importlib.util
import re
import sys
from pathlib import Path

import nbformat
import pytest

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(p.name for p in NB_DIR.glob("*.ipynb"))
#: What must never show in a cell's output: TF/absl native start-up lines, Python warnings of deprecations.
NOISE = re.compile(r"absl::InitializeLog|^[IWE]\d{4} \d\d:\d\d|cuda_platform|cudart_stub|oneDNN custom operations|"
                   r"DeprecationWarning|is deprecated", re.M)


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebooks", NB_DIR / "build_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check_outputs(name: str, nb, plot_tag: str) -> None:
    """Every code cell ran; plot cells show an image; nothing noisy and no error in any output."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.execution_count is not None, f"{name} cell {i} was not run"
        for out in cell.outputs:
            assert out.output_type != "error", f"{name} cell {i}: {out.get('ename')}: {out.get('evalue')}"
            text = out.get("text", "") + "".join(str(v) for k, v in out.get("data", {}).items() if k == "text/plain")
            assert not NOISE.search(text), f"{name} cell {i} prints noise: {NOISE.search(text).group(0)!r}"
        if plot_tag in cell.metadata.get("tags", []):
            images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
            assert len(images) == 1, f"{name} cell {i} is a plot cell without its figure"


def test_notebooks_match_their_generator_and_hold_a_real_run():
    builder = _builder()
    assert set(builder.NOTEBOOKS) == set(NOTEBOOKS) and len(NOTEBOOKS) == 4
    for name in NOTEBOOKS:
        committed = nbformat.read(NB_DIR / name, as_version=4)
        fresh = builder.notebook(name)
        assert [(c.cell_type, c.source, c.metadata.get("tags")) for c in committed.cells] == \
            [(c.cell_type, c.source, c.metadata.get("tags")) for c in fresh.cells], \
            f"{name} is out of date: run python notebooks/build_notebooks.py"
        nbformat.validate(committed)
        _check_outputs(name, committed, builder.PLOT)
    plots = [c for n in NOTEBOOKS for c in nbformat.read(NB_DIR / n, as_version=4).cells
             if builder.PLOT in c.metadata.get("tags", [])]
    assert len(plots) == 4             # one figure per notebook at least


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes(name, tmp_path):
    builder = _builder()
    nb = builder.notebook(name)
    # first cell: the kernel must be this interpreter (the venv's ipykernel), not some other Python
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    builder.execute(nb, tmp_path)          # raises CellExecutionError on the first failing cell
    printed = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert os.path.realpath(printed.strip()) == os.path.realpath(sys.executable)
    _check_outputs(name, nb, builder.PLOT)
