"""DistributedDataParallel (gloo, 2 processes on localhost): every rank computes the same masks."""
from __future__ import annotations

import os
import socket
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from sparsify import PruningEngine, criteria
from sparsify_torch import prune
from torch_helpers import batch, digits, expected_pruned, mlp

WORLD = 2
SNIP = {"target_sparsity": 0.7, "criterion": "snip", "start_step": 0, "end_step": 6, "pruning_frequency": 2}
MAGNITUDE = {"target_sparsity": 0.7, "start_step": 0, "end_step": 6, "pruning_frequency": 2}


def _run(rank: int, cfg: dict, seed: int) -> dict:
    x, y = digits(512)
    torch.manual_seed(seed)
    model = mlp(seed)
    pruner = prune(model, cfg)                      # before wrapping, as documented
    local_grads = {}
    orig = model.fc1.parametrizations.weight.original
    orig.register_post_accumulate_grad_hook(lambda p: local_grads.__setitem__("g", p.grad.detach().clone()))
    with warnings.catch_warnings():                 # torch 2.14 deprecates the name, not the behaviour we need
        warnings.simplefilter("ignore", FutureWarning)
        ddp = DDP(model, broadcast_buffers=False)   # masks are not synced by DDP: ranks must agree on their own
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    history, local_masks = [], []
    engine = PruningEngine(cfg)
    for step in range(1, 9):
        xb, yb = batch(x, y, step * WORLD + rank, size=32)   # different data on each rank
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(xb), yb).backward()
        if step == 1 and engine.needs_gradients:
            # what this rank alone would choose from its local gradient
            w = orig.detach().numpy()
            local_masks.append(engine.compute_masks({"fc1.weight": w}, cfg["end_step"],
                                                    scores={"fc1.weight": criteria.snip(w, local_grads["g"].numpy())})
                               ["fc1.weight"])
        opt.step()
        pruner.step()
        history.append({n: m.numpy().copy() for n, m in pruner.masks().items()})
    return {"history": history, "local": local_masks, "sparsity": pruner.sparsity(),
            "weight": model.fc1.weight.detach().numpy().copy()}


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        result = {"snip": _run(rank, SNIP, seed=0),
                  "magnitude": _run(rank, MAGNITUDE, seed=rank)}   # even from different initial weights
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_ranks_compute_identical_masks(tmp_path):
    ctx = mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=False)
    deadline = time.time() + 120
    while not ctx.join(timeout=1):
        assert time.time() < deadline, "DDP workers did not finish in 120 s"
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD))
    for crit in ("snip", "magnitude"):
        assert len(r0[crit]["history"]) == 8
        for h0, h1 in zip(r0[crit]["history"], r1[crit]["history"]):
            for n in h0:
                np.testing.assert_array_equal(h0[n], h1[n])
        assert r0[crit]["sparsity"] == r1[crit]["sparsity"]
        assert r0[crit]["sparsity"]["fc1.weight"] == expected_pruned(0.7, 32 * 64) / (32 * 64)
        np.testing.assert_array_equal(r0[crit]["weight"], r1[crit]["weight"])
    # The ranks' local gradients alone would have given different masks: the score reduction matters.
    assert (r0["snip"]["local"][0] != r1["snip"]["local"][0]).any()
