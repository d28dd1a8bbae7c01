"""DistributedDataParallel (gloo, 2 processes on localhost): every rank computes the same masks."""
from __future__ import annotations

import gc
import os
import socket
import time
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from sparsify import PruningEngine, criteria
from sparsify_torch import prune
from torch_helpers import batch, digits, expected_pruned, mlp

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

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
        if step == 1 and engine.scored_every_step:
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
        result = None
        gc.collect()          # free what holds the group before teardown (docs/distributed.md, "Teardown")
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


# ----------------------------------------------------------------------------------------------
# one rule: statistics reduced over ranks before scores (docs/distributed.md)
# ----------------------------------------------------------------------------------------------
HALF = 4          # rows per rank; rank 1's inputs are 3x rank 0's
STATS = {"wanda": {"criterion": "wanda", "target_sparsity": 0.5, "start_step": 0, "end_step": 0},
         "snip": {"criterion": "snip", "target_sparsity": 0.5, "start_step": 0, "end_step": 0}}


def stats_mlp() -> nn.Module:
    """Linear(8, 16)-ReLU-Linear(16, 4), small integer weights: every sum below is exact in float32."""
    model = nn.Sequential(nn.Linear(8, 16, bias=False), nn.ReLU(), nn.Linear(16, 4, bias=False))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-4, 5, p.shape, generator=g).float())
    return model


def stats_batch() -> torch.Tensor:
    """Two halves of one batch that differ in scale (rank r gets rows r*HALF:(r+1)*HALF)."""
    x = torch.randint(-2, 3, (2 * HALF, 8), generator=torch.Generator().manual_seed(4)).float()
    x[HALF:] *= 3
    return x


def stats_masks(key: str, x: torch.Tensor, wrap=None) -> dict[str, np.ndarray]:
    """Prune, one forward/backward (loss = sum of squared outputs / rows of the *whole* batch), a step."""
    model = stats_mlp()
    pruner = prune(model, STATS[key])
    net = model if wrap is None else wrap(model)
    loss = net(x).pow(2).sum() / (2 * HALF) * (1 if wrap is None else 2)   # DDP averages the ranks' gradients
    loss.backward()
    pruner.step()
    return {n: (m.full_tensor() if hasattr(m, "full_tensor") else m).numpy().copy()
            for n, m in pruner.masks().items()}


def stats_run(rank: int, world: int) -> dict:
    from torch.distributed.fsdp import fully_shard
    part = stats_batch()[rank * HALF:(rank + 1) * HALF]

    def ddp(model):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return DDP(model, broadcast_buffers=False)

    def fsdp(key: str) -> dict[str, np.ndarray]:
        model = stats_mlp()
        for layer in (model[0], model[2]):
            fully_shard(layer)
        fully_shard(model)
        pruner = prune(model, STATS[key])
        if key == "wanda":
            with torch.no_grad():
                model(part)
        else:                   # FSDP2 averages the ranks' gradients, as DDP does
            (model(part).pow(2).sum() / (2 * HALF) * 2).backward()
        pruner.step()
        return {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()}

    return {"ddp_wanda": stats_masks("wanda", part, ddp), "ddp_snip": stats_masks("snip", part, ddp),
            "fsdp_wanda": fsdp("wanda"), "fsdp_snip": fsdp("snip")}


def old_rule_masks(key: str) -> dict[str, np.ndarray]:
    """What averaging each rank's *scores* gave (the rule before): per-half norms or gradients, scores averaged."""
    from sparsify.activation_stats import sum_of_squares
    x = stats_batch()
    model = stats_mlp()
    w = {"0.weight": model[0].weight.detach().numpy(), "2.weight": model[2].weight.detach().numpy()}
    scores = {n: np.zeros_like(v) for n, v in w.items()}
    for r in range(WORLD):
        h = x[r * HALF:(r + 1) * HALF]
        if key == "wanda":
            hidden = torch.relu(model[0](h)).detach().numpy()
            norms = {"0.weight": np.sqrt(sum_of_squares(h.numpy())), "2.weight": np.sqrt(sum_of_squares(hidden))}
            part = {n: np.abs(w[n]) * norms[n][None, :] for n in w}
        else:
            model.zero_grad()
            (model(h).pow(2).sum() / HALF).backward()
            part = {"0.weight": np.abs(w["0.weight"] * model[0].weight.grad.numpy()),
                    "2.weight": np.abs(w["2.weight"] * model[2].weight.grad.numpy())}
        for n in w:
            scores[n] += part[n] / WORLD
    return PruningEngine(STATS[key]).compute_masks(w, step=0, scores=scores)


def test_ddp_and_fsdp2_statistics_give_the_masks_of_one_process_on_the_whole_batch(tmp_path):
    from test_torch_fsdp import spawn
    ranks = spawn(stats_run, WORLD, tmp_path)
    for key in ("wanda", "snip"):
        want = stats_masks(key, stats_batch())
        # the old rule (mean of the ranks' scores) differs here, so this comparison decides something
        assert sum(int((old_rule_masks(key)[n] != want[n]).sum()) for n in want) > 0, key
        for res in ranks:
            for n, m in want.items():
                np.testing.assert_array_equal(res[f"ddp_{key}"][n], m, err_msg=f"ddp {key} {n}")
    for key in ("wanda", "snip"):
        for res in ranks:
            for n, m in stats_masks(key, stats_batch()).items():
                np.testing.assert_array_equal(res[f"fsdp_{key}"][n], m, err_msg=f"fsdp2 {key} {n}")
