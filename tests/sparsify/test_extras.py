"""sparsify.extras and the adapters' import errors (issue 47): without its framework, an adapter's import says
which extra of our distribution to install. Each case runs in a fresh process whose framework import is blocked
(``sys.modules[name] = None``), as in an environment where the framework is not installed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparsify.extras import install_command, missing_framework

ROOT = Path(__file__).resolve().parents[2]
KERAS_HINT = ('pip install "sparsify-train[jax]" (Keras 3 on JAX), "sparsify-train[keras-torch]" (on PyTorch) or '
              '"sparsify-train[tf]" (on TensorFlow); set KERAS_BACKEND (jax, torch, tensorflow) to the installed '
              'backend before Keras is first imported')


def _import_without(blocked: str, package: str) -> str:
    """The last line of stderr when ``package`` is imported in a process where ``blocked`` cannot be."""
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    res = subprocess.run([sys.executable, "-c", f"import sys; sys.modules[{blocked!r}] = None; import {package}"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 1, res.stderr
    return res.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("blocked, package, message", [
    ("torch", "sparsify_torch", 'ImportError: sparsify_torch needs torch, which cannot be imported (import of torch '
                                'halted; None in sys.modules): pip install "sparsify-train[torch]"'),
    ("tensorflow", "sparsify_tf", "ImportError: sparsify_tf needs tensorflow, which cannot be imported (import of "
                                  'tensorflow halted; None in sys.modules): pip install "sparsify-train[tf]"; for Keras 3 on JAX or '
                                  'PyTorch use sparsify_keras (from sparsify_keras import PruningCallback)'),
    ("keras", "sparsify_keras", "ImportError: sparsify_keras needs keras, which cannot be imported (import of keras "
                                f"halted; None in sys.modules): {KERAS_HINT}"),
])
def test_an_adapter_without_its_framework_names_the_extra(blocked, package, message):
    assert _import_without(blocked, package) == message


def test_keras_without_the_backend_it_defaults_to_says_to_set_keras_backend():
    """Keras 3 with no KERAS_BACKEND imports TensorFlow: without it, the message names the variable."""
    last = _import_without("tensorflow", "sparsify_keras")
    assert last.startswith("ImportError: sparsify_keras needs keras, which cannot be imported (") and \
        last.endswith(KERAS_HINT)


def test_missing_framework_names_user_module_reason_and_extra():
    try:
        import no_such_framework_47  # noqa: F401
    except ImportError as e:
        error = missing_framework("sparsify_torch.channels", "torch_pruning", "structured", e, "; see docs/channels.md")
    assert isinstance(error, ImportError) and error.name == "torch_pruning"
    assert str(error) == ("sparsify_torch.channels needs torch_pruning, which cannot be imported (No module named "
                          "'no_such_framework_47'): pip install \"sparsify-train[structured]\"; see docs/channels.md")
    with pytest.raises(ValueError, match=r"^extra must be one of tf, jax, keras-torch, torch, structured, deploy, "
                                         r"plot, test, docs, all, got 'pytorch'$"):
        missing_framework("x", "torch", "pytorch", ImportError("no"))
    assert install_command("tf") == 'pip install "sparsify-train[tf]"'
