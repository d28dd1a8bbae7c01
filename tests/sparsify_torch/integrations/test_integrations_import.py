"""The integrations are imported only when used: ``sparsify_torch`` and ``sparsify_torch.integrations`` load
neither ``transformers`` nor ``lightning``; an integration module loads its library."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow          # spawns a Python process


def test_neither_transformers_nor_lightning_is_imported_until_an_integration_is():
    code = ("import sys, sparsify_torch, sparsify_torch.integrations, sparsify_torch.integrations.training_state\n"
            "print(sorted(m for m in ('transformers', 'lightning') if m in sys.modules))\n"
            "import sparsify_torch.integrations.lightning\n"
            "print(sorted(m for m in ('transformers', 'lightning') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and "'lightning'" in out[1]      # (lightning may load transformers itself)
