"""The parity zoo (Dense, Conv1D/2D/3D, grouped, Depthwise, Separable, transposed convolutions, Embedding,
MultiHeadAttention; every pattern family; local and global scope) on Keras 3's JAX and PyTorch backends:
``tests/parity/test_parity_keras3.py`` (the TensorFlow backend runs it in the main suite) run in a process
per backend, each mask at every step equal to the reference's (torch's masks, bit for bit)."""
from __future__ import annotations

import pytest
from backend_runs import ROOT, run_python

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_keras3_zoo_masks_match_the_reference(backend):
    out = run_python(["-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                      str(ROOT / "tests" / "parity" / "test_parity_keras3.py")], backend, timeout=1200)
    assert "10 passed" in out.stdout, out.stdout[-2000:]
