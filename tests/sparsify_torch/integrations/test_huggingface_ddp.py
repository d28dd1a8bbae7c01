"""SparsifyCallback under the Trainer's DDP (2 CPU processes, gloo, ``torchrun``): the masks equal those of one
process on the same global batches (the pruner sums Wanda's input statistics over the processes)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

pytestmark = pytest.mark.slow        # spawns processes

RUN = Path(__file__).with_name("hf_ddp_run.py")


def test_masks_under_two_process_ddp_equal_one_process(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(RUN)]
    subprocess.run(torchrun + [str(tmp_path / "two.pt")], env=env, check=True, capture_output=True, timeout=300)
    subprocess.run([sys.executable, str(RUN), str(tmp_path / "one.pt")], env=env, check=True, capture_output=True,
                   timeout=300)
    one, two = (torch.load(tmp_path / f, weights_only=True) for f in ("one.pt", "two.pt"))
    assert (one["world"], two["world"], one["step"], two["step"]) == (1, 2, 6, 6)
    assert len(one["masks"]) == 14
    for n, m in one["masks"].items():
        assert torch.equal(m, two["masks"][n]), n
        assert float((~m).float().mean()) == 0.5, n
