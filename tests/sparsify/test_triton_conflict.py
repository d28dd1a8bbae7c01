"""sparsify.triton_conflict: TensorFlow and torch in one process with triton installed get a warning and the fix
(issue 58), before triton, loaded after TensorFlow, ends the process with a segmentation fault.

A real ``pip install`` of the two extras (the CUDA torch wheel brings triton) is too heavy for the tests, so the
subprocess cases put a stand-in ``triton`` package on ``PYTHONPATH``: it can be found, as an installed triton
can, and it fails loudly (exit 3) if anything imports it, so the check is shown to import nothing. The last case
loads TensorFlow, then torchvision, in this environment as scripts/setup.sh builds it (triton removed)."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from sparsify.triton_conflict import FIX, triton_conflict, warn_if_triton_conflict

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("loaded, installed, warns", [
    ({"tensorflow", "torch"}, True, True),
    ({"tensorflow", "torch"}, False, False),              # no triton: nothing to fear
    ({"tensorflow", "torch", "triton"}, True, False),     # triton already loaded: it was not loaded after TF
    ({"torch"}, True, False), ({"tensorflow"}, True, False), (set(), True, False)])
def test_the_conflict_needs_both_frameworks_and_an_unloaded_triton(loaded, installed, warns):
    message = triton_conflict(loaded=loaded, triton_installed=installed)
    assert (message is not None) is warns
    if warns:
        assert message.endswith("Fix: where triton is not needed (CPU training), pip uninstall triton; else run "
                                "TensorFlow and torch in separate processes")
        assert "segmentation fault" in message and FIX in message


def test_the_warning_is_a_runtime_warning_with_the_fix(tmp_path, monkeypatch):
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text("raise SystemExit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("tensorflow", "torch"):
        if name not in sys.modules:
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    with pytest.warns(RuntimeWarning, match="pip uninstall triton"):
        assert warn_if_triton_conflict() is True
    assert "triton" not in sys.modules                      # found, never imported
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    assert warn_if_triton_conflict() is False


def _run(code: str, fake_triton: Path | None) -> subprocess.CompletedProcess:
    paths = [str(fake_triton)] if fake_triton else []
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(paths + [str(ROOT)]))
    env.pop("KERAS_BACKEND", None)
    return subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.fixture
def fake_triton(tmp_path):
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text("import sys; sys.stderr.write('triton imported\\n'); "
                                                      "raise SystemExit(3)\n")
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("code, warns", [
    ("import tensorflow; import sparsify_torch", True),       # TF first, then our torch adapter
    ("import torch; import sparsify_tf", True),               # torch first, then our TF adapter
    ("import sparsify_torch", False),                         # torch alone: triton is torch's business
])
def test_importing_an_adapter_into_a_mixed_process_warns(fake_triton, code, warns):
    res = _run(code + "; print('done')", fake_triton)
    assert res.returncode == 0 and res.stdout == "done\n", res.stderr[-3000:]
    assert "triton imported" not in res.stderr
    warning = [ln for ln in res.stderr.splitlines() if "RuntimeWarning" in ln]
    if warns:
        assert len(warning) == 1 and warning[0].endswith(f"Fix: {FIX}"), res.stderr[-3000:]
        assert warning[0].startswith("<string>:1: RuntimeWarning: TensorFlow and torch are loaded in one process")
    else:
        assert warning == [], res.stderr[-3000:]


@pytest.mark.slow
def test_tensorflow_then_torchvision_runs_in_this_environment():
    """The issue's crash (exit 139) in this environment, as scripts/setup.sh builds it: no triton, no crash, no
    warning."""
    res = _run("import tensorflow, sparsify_tf; import torchvision, sparsify_torch; print(tensorflow.__version__ > '2')",
               None)
    assert res.returncode == 0 and res.stdout == "True\n", (res.returncode, res.stderr[-3000:])
    assert "RuntimeWarning" not in res.stderr
