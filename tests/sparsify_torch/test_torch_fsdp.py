"""FSDP2 (fully_shard, gloo, 1/2/4 CPU processes): sharded masks, bit-identical to the single-process core.

Each rank holds only its rows of every weight and mask. The tests gather full tensors
(``DTensor.full_tensor()``) only to compare them with the single-process ``Pruner``.
"""
from __future__ import annotations

import gc
import importlib
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

from sparsify import PruningEngine, exact_prune_count
from sparsify_torch import prune

CONFIGS = {
    "local_1x1": {"target_sparsity": 0.8, "start_step": 0, "end_step": 4, "pruning_frequency": 1,
                  "init_sparsity": 0.3},
    "global_2in4_clamped": {"target_sparsity": 0.5, "pattern": "2:4", "pruning_scope": "global", "start_step": 1,
                            "end_step": 5, "pruning_frequency": 2, "max_sparsity_ratio_per_layer": 0.45,
                            "skip_incompatible_layers": True},
    "global_2x1_min": {"target_sparsity": 0.7, "pattern": "2x1", "pruning_scope": "global", "start_step": 0,
                       "end_step": 4, "pruning_frequency": 2, "min_sparsity_ratio_per_layer": 0.2,
                       "excluded_op_names": ["fc2"]},
    "rows_release": {"target_sparsity": 0.5, "pattern": "1xchannel", "start_step": 0, "end_step": 3,
                     "pruning_frequency": 1, "monotone": False, "leave_enabled": False},
    "global_revive": {"target_sparsity": 0.6, "pruning_scope": "global", "start_step": 0, "end_step": 5,
                      "pruning_frequency": 1, "monotone": False},
}
STEPS = 6


class Net(nn.Module):
    """2-D views conv (8, 18), fc1 (32, 32), fc2 (30, 32) (uneven on 4 ranks: 8, 8, 8, 6), head (8, 30)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 8, 3)
        self.fc1 = nn.Linear(32, 32)
        self.fc2 = nn.Linear(32, 30)
        self.head = nn.Linear(30, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x.view(-1, 2, 4, 4)))            # (n, 8, 2, 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.head(torch.relu(self.fc2(x)))


NAMES = ["conv.weight", "fc1.weight", "fc2.weight", "head.weight"]


def full_weights(step: int) -> dict[str, torch.Tensor]:
    """The weights every run sets before ``pruner.step()`` at ``step`` (0: before ``prune``)."""
    shapes = {"conv.weight": (8, 2, 3, 3), "fc1.weight": (32, 32), "fc2.weight": (30, 32), "head.weight": (8, 30)}
    out = {}
    for i, (n, s) in enumerate(shapes.items()):
        g = torch.Generator().manual_seed(1000 * step + i)
        w = torch.randn(s, generator=g)
        if step % 2:
            w = torch.round(w * 4) / 4                              # many ties on odd steps
        out[n] = w
    return out


def shard_model(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard
    for m in (model.conv, model.fc1, model.fc2, model.head):
        fully_shard(m)
    fully_shard(model)
    return model


class SetWeights(torch.optim.Optimizer):
    """An "optimizer" whose step writes ``target`` (full weights) into the model: every entry, pruned or not,
    as an optimizer writes the dense weights."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(list(model.parameters()), {})
        self.model = model
        self.target: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def step(self, closure=None) -> None:
        set_weights(self.model, self.target)


@torch.no_grad()
def set_weights(model: nn.Module, full: dict[str, torch.Tensor]) -> None:
    from torch.distributed.tensor import DTensor
    params = dict(model.named_parameters())
    for n, w in full.items():
        key = n if n in params else n.replace(".weight", ".parametrizations.weight.original")
        p = params[key]
        if isinstance(p, DTensor):
            local = p.to_local()
            rows = local.shape[0]
            start = min(p.device_mesh.get_local_rank() * -(-w.shape[0] // p.device_mesh.size()), w.shape[0])
            local.copy_(w[start:start + rows])
        else:
            p.copy_(w)


# ----------------------------------------------------------------------------------------------
# process plumbing
# ----------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, module: str, name: str, out_dir: str, args: tuple) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = getattr(importlib.import_module(module), name)(rank, world, *args)
        torch.save(result, os.path.join(out_dir, f"{name}-{world}-rank{rank}.pt"))
        # Every rank's result is on disk before any rank tears down. Not what prevents the teardown abort:
        # sparsify's collectives are waited before they return, and the measured scripts without a barrier
        # (docs/distributed.md, "Teardown": prune, one step, destroy_process_group: 0 of 40) need none.
        dist.barrier()
    finally:
        # gloo aborts ("terminate called without an active exception") when a process group outlives
        # destroy_process_group() into interpreter exit, as FSDP2's device mesh makes it: free the models,
        # optimizers and pruners (reference cycles) first (docs/distributed.md, "Teardown")
        result = None
        gc.collect()
        dist.destroy_process_group()
        gc.collect()


def spawn(fn, world: int, tmp_path, *args, timeout: float = 240) -> list:
    """Run ``fn(rank, world, *args)`` (a module-level function) in ``world`` gloo processes; their results."""
    ctx = mp.spawn(_entry, args=(world, _free_port(), fn.__module__, fn.__name__, str(tmp_path), args),
                   nprocs=world, join=False)
    deadline = time.time() + timeout
    while not ctx.join(timeout=1):
        assert time.time() < deadline, f"{fn.__name__} on {world} ranks did not finish in {timeout} s"
    return [torch.load(tmp_path / f"{fn.__name__}-{world}-rank{r}.pt", weights_only=False) for r in range(world)]


def spawned_runs(fn, tmp_path, *args, before: dict[int, int] | None = None):
    """``get(world)``: the results of :func:`spawn` of ``fn`` on ``world`` ranks, spawned on first use and
    kept; ``before`` maps a world size to one run first (whose checkpoints it loads)."""
    cache: dict[int, list] = {}

    def get(world: int) -> list:
        if before and world in before:
            get(before[world])
        if world not in cache:
            cache[world] = spawn(fn, world, tmp_path, *args)
        return cache[world]
    return get


# ----------------------------------------------------------------------------------------------
# workers
# ----------------------------------------------------------------------------------------------
def schedule_run(rank: int, world: int) -> dict:
    """Every config: an optimizer step sets the same dense weights at every step; record the full masks,
    the weights the model computes with and the dense weights under the masks."""
    out = {}
    for key, cfg in CONFIGS.items():
        torch.manual_seed(0)
        model = shard_model(Net())
        set_weights(model, full_weights(0))
        setter = SetWeights(model)
        pruner = prune(model, cfg, optimizer=setter)
        local = {n: tuple(m.shape) for n, m in pruner.local_masks().items()}
        history = []
        for step in range(1, STEPS + 1):
            setter.target = full_weights(step)
            setter.step()
            pruner.step()
            history.append({"masks": {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()},
                            "weights": {n: p.full_tensor().detach().numpy().copy()
                                        for n, p in model.named_parameters() if n in pruner.names},
                            "dense": {n: w.full_tensor().numpy().copy() for n, w in pruner.dense_weights().items()},
                            "sparsity": pruner.sparsity()})
        out[key] = {"history": history, "local": local, "type": type(pruner).__name__}
    return out


def errors_run(rank: int, world: int) -> dict:
    cfg = {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}
    out = {}
    attempts = {
        "crossing": lambda: prune(shard_model(Net()), {**cfg, "pattern": "4x1", "op_names": ["conv"]}),
        "group": lambda: prune(shard_model(Net()), cfg, process_group=dist.group.WORLD),
        "mixed": lambda: prune(_partly_sharded(), cfg),
        "no_optimizer": lambda: prune(shard_model(Net()), {**cfg, "monotone": False,
                                                           "pruned_gradient": "straight_through"}),
    }
    for key, attempt in attempts.items():
        try:
            attempt()
            out[key] = "no error"
        except ValueError as e:
            out[key] = str(e)
    return out


def engines_run(rank: int, world: int) -> dict:
    """prune() on FSDP2 weights: the config coerced and the core's engine built once (the sharded protocol's)."""
    built, init = [], PruningEngine.__init__

    def counting(self, *args, **kwargs):
        built.append(args[0] if args else kwargs.get("config"))
        init(self, *args, **kwargs)

    PruningEngine.__init__ = counting
    try:
        pruner = prune(shard_model(Net()), {"target_sparsity": 0.5, "start_step": 0, "end_step": 0,
                                            "op_names": ["fc"]})
    finally:
        PruningEngine.__init__ = init
    return {"type": type(pruner).__name__, "built": len(built), "coerced_once": built[0] is pruner.config,
            "names": pruner.names}


SUMMARY_CFG = {"target_sparsity": 0.5, "op_names": ["fc", "conv"], "excluded_op_names": ["fc2"], "start_step": 0,
               "end_step": 0}


def summary_run(rank: int, world: int) -> dict:
    """ShardedPruner.summary() and the line prune() logs (logger "sparsify_torch", INFO)."""
    import logging
    logged: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: logged.append(record.getMessage())
    logger = logging.getLogger("sparsify_torch")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        torch.manual_seed(0)
        pruner = prune(shard_model(Net()), SUMMARY_CFG)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    summary = pruner.summary()
    return {"type": type(pruner).__name__, "rows": [r.to_dict() for r in summary], "text": str(summary),
            "line": summary.line(), "logged": logged}


def _partly_sharded() -> nn.Module:
    from torch.distributed.fsdp import fully_shard
    model = Net()
    fully_shard(model.fc1)                     # the root and the other layers stay plain
    return model


def train_run(rank: int, world: int, ckpt: str, mode: str) -> dict:
    """Train with SGD (momentum, weight decay); ``mode``: "full" saves at step 6 and runs to 10,
    "resume" loads step 6 and runs to 10, "reshard" loads step 6 and updates the masks without training."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    cfg = {"target_sparsity": 0.8, "start_step": 0, "end_step": 8, "pruning_frequency": 2, "init_sparsity": 0.2}
    torch.manual_seed(0)
    model = shard_model(Net())
    set_weights(model, full_weights(0))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    pruner = prune(model, cfg)
    grads_zero = []
    for n, p in model.named_parameters():
        if n in pruner.names:
            p.register_post_accumulate_grad_hook(
                lambda p, n=n: grads_zero.append(bool((p.grad.to_local()[~pruner.local_masks()[n]] == 0).all())))

    def state():
        m, o = get_state_dict(model, opt)
        return {"model": m, "optim": o, "pruner": pruner.state_dict()}

    first = 1
    if mode != "full":
        sd = state()
        dcp.load(sd, checkpoint_id=ckpt)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        pruner.load_state_dict(sd["pruner"])
        first = 7
    loaded = {"masks": {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()},
              "weights": {n: p.full_tensor().detach().numpy().copy() for n, p in model.named_parameters()
                          if n in pruner.names}, "step": pruner.step_count, "done": pruner.done_step}
    if mode == "reshard":
        pruner.step(2)                                  # the update at step 8, on the loaded weights
        return {"loaded": loaded, "after": {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()},
                "sparsity": pruner.sparsity()}
    g = torch.Generator().manual_seed(123)
    data = [(torch.randn(16, 32, generator=g), torch.randint(0, 8, (16,), generator=g)) for _ in range(11)]
    zero_after_step = []
    saved = None
    for step in range(first, 11):
        x, y = data[step]
        part = slice(rank * 16 // world, (rank + 1) * 16 // world)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[part]), y[part]).backward()
        opt.step()
        pruner.step()
        zero_after_step.append(all(bool((p.to_local()[~pruner.local_masks()[n]] == 0).all())
                                   for n, p in model.named_parameters() if n in pruner.names))
        if mode == "full" and step == 6:
            dcp.save(state(), checkpoint_id=ckpt)
            saved = {"masks": {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()},
                     "weights": {n: p.full_tensor().detach().numpy().copy() for n, p in model.named_parameters()
                                 if n in pruner.names}}
    return {"saved": saved, "loaded": loaded, "zero_after_step": zero_after_step, "grads_zero": grads_zero,
            "masks": {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()},
            "weights": {n: p.full_tensor().detach().numpy().copy() for n, p in model.named_parameters()},
            "sparsity": pruner.sparsity(), "local": {n: tuple(m.shape) for n, m in pruner.local_masks().items()}}


def momentum_run(rank: int, world: int, ckpt: str, mode: str) -> dict:
    """snip_momentum: masks equal the core's on the full (reduced-gradient) scores; scores reshard on load."""
    import torch.distributed.checkpoint as dcp

    cfg = {"target_sparsity": 0.5, "criterion": "snip_momentum", "start_step": 1, "end_step": 3,
           "pruning_frequency": 1, "pattern": "2:4", "skip_incompatible_layers": True}
    torch.manual_seed(0)
    model = shard_model(Net())
    set_weights(model, full_weights(0))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    pruner = prune(model, cfg)
    if mode == "load":
        sd = {"pruner": pruner.state_dict()}
        dcp.load(sd, checkpoint_id=ckpt)
        pruner.load_state_dict(sd["pruner"])
        return {"scores": {n: s.full_tensor().numpy().copy() for n, s in pruner.state_dict()["scores"].items()},
                "masks": {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()}}
    g = torch.Generator().manual_seed(7)
    checks = []
    for step in range(1, 4):
        x, y = torch.randn(8, 32, generator=g), torch.randint(0, 8, (8,), generator=g)
        before = {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()}
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[rank::world]), y[rank::world]).backward()
        opt.step()
        pruner.step()
        scores = {n: s.full_tensor().numpy().copy() for n, s in pruner.state_dict()["scores"].items()}
        want = PruningEngine(cfg).compute_masks(scores, step, pre_masks=before, scores=scores)
        checks.append(all(np.array_equal(pruner.masks()[n].full_tensor().numpy(), want[n]) for n in want))
    dcp.save({"pruner": pruner.state_dict()}, checkpoint_id=ckpt)
    return {"checks": checks, "scores": {n: s.full_tensor().numpy().copy()
                                         for n, s in pruner.state_dict()["scores"].items()},
            "masks": {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()}}


DENSE_CFGS = {
    "revive": {"target_sparsity": 0.7, "start_step": 0, "end_step": 8, "pruning_frequency": 2, "init_sparsity": 0.3,
               "monotone": False},
    "straight_through": {"target_sparsity": 0.5, "pattern": "2:4", "pruning_scope": "global", "start_step": 0,
                         "end_step": 8, "pruning_frequency": 2, "monotone": False,
                         "pruned_gradient": "straight_through", "skip_incompatible_layers": True},
    "sr_ste": {"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 8, "pruning_frequency": 1,
               "monotone": False, "pruned_gradient": "straight_through", "pruned_decay": 0.05,
               "skip_incompatible_layers": True},
    "rigl": {"target_sparsity": 0.6, "regrowth": "rigl", "start_step": 0, "end_step": 8, "pruning_frequency": 2},
    "set": {"target_sparsity": 0.6, "regrowth": "set", "pruning_scope": "global", "start_step": 0, "end_step": 8,
            "pruning_frequency": 2},
}


def _train_data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(321)
    return [(torch.randn(16, 32, generator=g), torch.randint(0, 8, (16,), generator=g)) for _ in range(11)]


def _record(model: nn.Module, pruner) -> dict:
    """Full masks, the weights the model computes with, and the dense weights under the masks."""
    full = (lambda t: t.full_tensor()) if type(pruner).__name__ == "ShardedPruner" else (lambda t: t)
    layers = {n: model.get_submodule(n.rsplit(".", 1)[0]) for n in pruner.names}
    if type(pruner).__name__ == "ShardedPruner":
        dense = {n: w.full_tensor() for n, w in pruner.dense_weights().items()}
        weights = {n: full(m.weight) for n, m in layers.items()}
    else:
        dense = {n: m.parametrizations.weight.original for n, m in layers.items()}
        weights = {n: m.weight for n, m in layers.items()}
    return {"masks": {n: full(m).numpy().copy() for n, m in pruner.masks().items()},
            "weights": {n: w.detach().numpy().copy() for n, w in weights.items()},
            "dense": {n: w.detach().numpy().copy() for n, w in dense.items()}}


def dense_train_run(rank: int, world: int, key: str, ckpt: str, mode: str) -> dict:
    """AdamW (weight decay) steps the dense weights under the masks; ``mode``: "full" trains 10 steps and saves
    at step 5, "resume" loads step 5 and trains to 10, "load" only loads."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    torch.manual_seed(0)
    model = Net() if world == 0 else shard_model(Net())     # world 0: the single-process reference
    set_weights(model, full_weights(0))
    opt = torch.optim.AdamW(model.parameters(), lr=0.02, weight_decay=0.1)
    pruner = prune(model, DENSE_CFGS[key], optimizer=opt)

    def state():
        m, o = get_state_dict(model, opt)
        return {"model": m, "optim": o, "pruner": pruner.state_dict()}

    first, saved, revived, zero_after_step, frozen = 1, None, False, [], []
    if mode != "full":
        sd = state()
        dcp.load(sd, checkpoint_id=ckpt)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        pruner.load_state_dict(sd["pruner"])
        first = 6
    loaded = now = _record(model, pruner)
    if mode == "load":
        return {"loaded": loaded}
    data = _train_data()
    for step in range(first, 11):
        x, y = data[step]
        part = slice(rank * 16 // max(world, 1), (rank + 1) * 16 // max(world, 1))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[part]), y[part]).backward()
        opt.step()
        stepped = _record(model, pruner)
        # the optimizer step left every pruned dense value as it was (pruned_gradient="none")
        frozen.append(all(np.array_equal(stepped["dense"][n][~now["masks"][n]], now["dense"][n][~now["masks"][n]])
                          for n in now["masks"]))
        before = stepped["masks"]
        pruner.step()
        now = _record(model, pruner)
        revived |= any(bool((~before[n] & now["masks"][n]).any()) for n in before)
        zero_after_step.append(all(bool((now["weights"][n][~now["masks"][n]] == 0).all()) for n in now["masks"]))
        if mode == "full" and step == 5:
            if world:
                dcp.save(state(), checkpoint_id=ckpt)
            saved = now
    return {"saved": saved, "loaded": loaded, "final": _record(model, pruner), "revived": revived,
            "zero_after_step": zero_after_step, "frozen": frozen}


def failed_step_run(rank: int, world: int) -> dict:
    """NaN weights (on every rank) at an update point: step() raises and changes nothing; the
    retry after the fix gives the masks of a run that never failed."""
    cfg = CONFIGS["local_1x1"]
    out = {}
    gc.collect()
    pruners = sum(type(o).__name__ == "ShardedPruner" for o in gc.get_objects())
    model = shard_model(Net())
    set_weights(model, {**full_weights(0), "fc1.weight": torch.full((32, 32), float("nan"))})
    try:
        prune(model, cfg)                                   # fails at its step-0 update
        out["prune_error"] = "no error"
    except ValueError as e:
        out["prune_error"] = str(e)
    del model
    gc.collect()
    out["leaked"] = sum(type(o).__name__ == "ShardedPruner" for o in gc.get_objects()) - pruners  # by grad hooks
    for poison in (False, True):
        torch.manual_seed(0)
        model = shard_model(Net())
        set_weights(model, full_weights(0))
        pruner = prune(model, cfg)
        set_weights(model, full_weights(1))
        if poison:
            before = {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()}
            nan = {**full_weights(1), "fc1.weight": torch.full((32, 32), float("nan"))}
            set_weights(model, nan)
            try:
                pruner.step()
                out["error"] = "no error"
            except ValueError as e:
                out["error"] = str(e)
            out["unchanged"] = (pruner.step_count == 0 and pruner.done_step == 0
                                and all(np.array_equal(m.full_tensor().numpy(), before[n])
                                        for n, m in pruner.masks().items()))
            set_weights(model, full_weights(1))
        pruner.step()
        out["retry" if poison else "uninterrupted"] = {
            "step": (pruner.step_count, pruner.done_step),
            "masks": {n: m.full_tensor().numpy().copy() for n, m in pruner.masks().items()}}
    return out


def load_errors_run(rank: int, world: int) -> dict:
    """ShardedPruner.load_state_dict errors name what is wrong, and change nothing."""
    model = shard_model(Net())
    set_weights(model, full_weights(0))
    pruner = prune(model, {**CONFIGS["local_1x1"], "criterion": "snip_momentum", "start_step": 1})
    good = pruner.state_dict()
    masks = good["masks"]
    out = {}
    for key, bad in {"masks_missing": {"masks": {n: m for n, m in masks.items() if n != "fc2.weight"}},
                     "masks_type": {"masks": [masks[n] for n in NAMES]},
                     "scored_string": {"scored": "fc1.weight"},
                     "scored_unknown": {"scored": ["fc9.weight"]},
                     "scored_lacking": {"scored": ["fc1.weight"], "scores": {}}}.items():
        try:
            pruner.load_state_dict({**good, **bad})
            out[key] = "no error"
        except ValueError as e:
            out[key] = str(e)
    out["unchanged"] = pruner.step_count == 0 and all(
        bool(m.full_tensor().all()) for m in pruner.masks().values())
    return out


# ----------------------------------------------------------------------------------------------
# single-process reference
# ----------------------------------------------------------------------------------------------
def single_process_history(cfg: dict) -> list[dict]:
    torch.manual_seed(0)
    model = Net()
    set_weights(model, full_weights(0))
    setter = SetWeights(model)
    pruner = prune(model, cfg, optimizer=setter)
    history = []
    for step in range(1, STEPS + 1):
        setter.target = full_weights(step)          # the stored weights, dense under the masks (pruned: frozen)
        setter.step()
        pruner.step()
        layers = {n: model.get_submodule(n.rsplit(".", 1)[0]) for n in pruner.names}
        history.append({"masks": {n: m.numpy().copy() for n, m in pruner.masks().items()},
                        "weights": {n: m.weight.detach().numpy().copy() for n, m in layers.items()},
                        "dense": {n: m.parametrizations.weight.original.detach().numpy().copy()
                                  for n, m in layers.items()},
                        "sparsity": pruner.sparsity()})
    return history


def _check_against_single(results: list[dict], world: int) -> None:
    for key, cfg in CONFIGS.items():
        want = single_process_history(cfg)
        for rank, res in enumerate(results):
            got = res["schedule"][key]
            assert got["type"] == "ShardedPruner"
            for step, (g, w) in enumerate(zip(got["history"], want), start=1):
                assert g["sparsity"] == w["sparsity"], (key, step)
                for n in w["masks"]:
                    assert np.array_equal(g["masks"][n], w["masks"][n]), (key, world, rank, step, n)
                    assert np.array_equal(g["weights"][n], w["weights"][n]), (key, world, rank, step, n)
                    assert np.array_equal(g["dense"][n], w["dense"][n]), (key, world, rank, step, n)
            for n, shape in got["local"].items():     # each rank holds only its rows of every mask
                rows = -(-want[0]["masks"][n].shape[0] // world)
                assert shape[0] == max(0, min(rows, want[0]["masks"][n].shape[0] - rank * rows)), (n, shape)


def suite(rank: int, world: int, ckpt: str) -> dict:
    """Everything one process group runs (few process starts: each costs seconds of imports)."""
    out = {"schedule": schedule_run(rank, world), "failed_step": failed_step_run(rank, world)}
    if world == 1:
        out["load_errors"] = load_errors_run(rank, world)
        out["engines"] = engines_run(rank, world)
        out["dense_train"] = {k: dense_train_run(rank, world, k, ckpt + "/unused", "full") for k in DENSE_CFGS}
    if world == 2:
        out["summary"] = summary_run(rank, world)
        out["train_full"] = train_run(rank, world, ckpt + "/train", "full")
        out["train_resume"] = train_run(rank, world, ckpt + "/train", "resume")
        out["reshard"] = train_run(rank, world, ckpt + "/train", "reshard")
        out["momentum"] = momentum_run(rank, world, ckpt + "/momentum", "train")
        out["dense_full"] = dense_train_run(rank, world, "revive", ckpt + "/dense", "full")
        out["dense_resume"] = dense_train_run(rank, world, "revive", ckpt + "/dense", "resume")
    elif world == 4:
        out["errors"] = errors_run(rank, world)
        out["reshard"] = train_run(rank, world, ckpt + "/train", "reshard")
        out["momentum"] = momentum_run(rank, world, ckpt + "/momentum", "load")
        out["dense_load"] = dense_train_run(rank, world, "revive", ckpt + "/dense", "load")
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Results per world size, spawned on first use (4 ranks load the checkpoints 2 ranks saved)."""
    tmp = tmp_path_factory.mktemp("fsdp")
    return spawned_runs(suite, tmp, str(tmp / "ckpt"), before={4: 2})


@pytest.mark.slow
def test_fsdp_one_and_two_ranks_give_the_single_process_masks_bit_for_bit(runs):
    _check_against_single(runs(1), 1)
    _check_against_single(runs(2), 2)


def test_fsdp_monotone_false_ranks_pruned_weights_by_the_values_they_keep():
    """The schedule runs above compare dense weights too; here: pruned weights do come back in them."""
    for key in ("rows_release", "global_revive"):
        history = single_process_history(CONFIGS[key])
        assert any((~a["masks"][n] & b["masks"][n]).any() for a, b in zip(history, history[1:]) for n in a["masks"]), key


def _assert_records_equal(got: dict, want: dict, what: str) -> None:
    for part in ("masks", "weights", "dense"):
        for n in want[part]:
            assert np.array_equal(got[part][n], want[part][n]), (what, part, n)


@pytest.mark.slow
def test_fsdp_optimizer_steps_the_dense_weights_as_the_single_process_pruner(runs):
    """One rank: AdamW with weight decay, monotone=False (and straight-through gradients, with and without
    SR-STE's pruned_decay) train exactly like the single-process Pruner: same masks, weights and dense weights bit for bit; pruned weights come back."""
    for key in DENSE_CFGS:
        want = dense_train_run(0, 0, key, "", "full")
        got = runs(1)[0]["dense_train"][key]
        assert want["revived"] and got["revived"], key          # regrowth: pruned weights come back too
        none = DENSE_CFGS[key].get("pruned_gradient", "none") == "none"    # pruned values do not move (rule 8)
        assert all(want["frozen"]) == all(got["frozen"]) == none and len(got["frozen"]) == 10, key
        assert all(got["zero_after_step"]) and len(got["zero_after_step"]) == 10
        _assert_records_equal(got["saved"], want["saved"], key)
        _assert_records_equal(got["final"], want["final"], key)


@pytest.mark.slow
def test_fsdp_failed_update_changes_nothing_and_the_retry_gives_the_masks(runs):
    for world in (1, 2):
        for res in [r["failed_step"] for r in runs(world)]:
            assert "layer 'fc1.weight'" in res["error"] and "NaN" in res["error"], res["error"]
            assert "layer 'fc1.weight'" in res["prune_error"] and "NaN" in res["prune_error"], res["prune_error"]
            assert res["leaked"] == 0
            assert res["unchanged"]
            assert res["retry"]["step"] == res["uninterrupted"]["step"] == (1, 1)
            for n, m in res["uninterrupted"]["masks"].items():
                assert np.array_equal(res["retry"]["masks"][n], m), (world, n)


@pytest.mark.slow
def test_fsdp_load_state_dict_errors_name_the_problem(runs):
    res = runs(1)[0]["load_errors"]
    names = "['conv.weight', 'fc1.weight', 'fc2.weight', 'head.weight']"
    assert res["masks_missing"] == (f"state['masks'] must hold a mask per pruned weight {names}, got "
                                    "['conv.weight', 'fc1.weight', 'head.weight']")
    assert res["masks_type"] == f"state['masks'] must hold a mask per pruned weight {names}, got list"
    assert res["scored_string"] == ("state['scored'] must be a list of pruned weight names (of "
                                    f"{names}), got 'fc1.weight'")
    assert res["scored_unknown"].endswith("got ['fc9.weight']")
    assert res["scored_lacking"] == "state['scores'] lacks the scores of 'fc1.weight' named in state['scored']"
    assert res["unchanged"]


@pytest.mark.slow
def test_fsdp_prune_checks_coerces_and_builds_one_engine(runs):
    assert runs(1)[0]["engines"] == {"type": "ShardedPruner", "built": 1, "coerced_once": True,
                                     "names": ["fc1.weight", "fc2.weight"]}


@pytest.mark.slow
def test_fsdp_four_ranks_uneven_shards_give_the_single_process_masks(runs):
    _check_against_single(runs(4), 4)
    for res in runs(4):                                 # every rank raises the same clear errors
        m = res["errors"]["crossing"]
        assert "layer 'conv.weight'" in m and "blocks of 4 rows" in m and "[2, 2, 2, 2]" in m, m
        assert "process_group is for DistributedDataParallel" in res["errors"]["group"]
        assert "are plain tensors while other weights of the model are FSDP2 shards" in res["errors"]["mixed"]
        assert res["errors"]["no_optimizer"] == (
            "monotone=False, pruned_gradient='straight_through' on FSDP2 (DTensor) weights needs the values of the "
            "pruned weights, which the optimizer steps: pass it, prune(model, config, optimizer=opt)")


@pytest.mark.slow
def test_fsdp_training_keeps_zeros_and_resumes_exactly_also_on_four_ranks(runs):
    full = [r["train_full"] for r in runs(2)]
    for res in full:
        assert all(res["zero_after_step"]) and len(res["zero_after_step"]) == 10
        assert res["grads_zero"] and all(res["grads_zero"])
        assert res["sparsity"] == {n: exact_prune_count(0.8, s) / s
                                   for n, s in (("conv.weight", 144), ("fc1.weight", 1024), ("fc2.weight", 960),
                                                ("head.weight", 240))}
    assert full[0]["local"] == {"conv.weight": (4, 2, 3, 3), "fc1.weight": (16, 32), "fc2.weight": (15, 32),
                                "head.weight": (4, 30)}
    for a, b in zip(full, [r["train_resume"] for r in runs(2)]):
        for n in a["saved"]["masks"]:
            assert np.array_equal(b["loaded"]["masks"][n], a["saved"]["masks"][n])
            assert np.array_equal(b["loaded"]["weights"][n], a["saved"]["weights"][n])
            assert np.array_equal(b["masks"][n], a["masks"][n])
        for n in a["weights"]:
            assert np.array_equal(b["weights"][n], a["weights"][n]), n          # the resumed run is exact
        assert all(b["zero_after_step"])
    cfg = {"target_sparsity": 0.8, "start_step": 0, "end_step": 8, "pruning_frequency": 2, "init_sparsity": 0.2}
    saved = full[0]["saved"]
    want = PruningEngine(cfg).compute_masks(saved["weights"], 8, pre_masks=saved["masks"])
    for res in [r["reshard"] for r in runs(4) + runs(2)]:
        assert res["loaded"]["step"] == 6 and res["loaded"]["done"] == 6
        for n in saved["masks"]:
            assert np.array_equal(res["loaded"]["masks"][n], saved["masks"][n])
            assert np.array_equal(res["loaded"]["weights"][n], saved["weights"][n])
            assert np.array_equal(res["after"][n], want[n]), n


@pytest.mark.slow
def test_fsdp_dense_weights_resume_exactly_and_reshard(runs):
    full = [r["dense_full"] for r in runs(2)]
    for a, b in zip(full, [r["dense_resume"] for r in runs(2)]):
        assert a["revived"] and all(a["zero_after_step"]) and all(b["zero_after_step"])
        _assert_records_equal(b["loaded"], a["saved"], "loaded")
        _assert_records_equal(b["final"], a["final"], "resumed")          # bit for bit the uninterrupted run
    for res in [r["dense_load"] for r in runs(4)]:                       # stored values reshard onto 4 ranks
        _assert_records_equal(res["loaded"], full[0]["saved"], "resharded")


@pytest.mark.slow
def test_fsdp_snip_momentum_scores_are_exact_and_reshard(runs):
    trained = [r["momentum"] for r in runs(2)]
    assert all(all(r["checks"]) and len(r["checks"]) == 3 for r in trained)
    for res in [r["momentum"] for r in runs(4)]:
        for n in trained[0]["scores"]:
            assert np.array_equal(res["scores"][n], trained[0]["scores"][n])
            assert np.array_equal(res["masks"][n], trained[0]["masks"][n])


@pytest.mark.slow
def test_fsdp_summary_and_its_logged_line_are_the_plain_models(runs):
    torch.manual_seed(0)
    plain = prune(Net(), SUMMARY_CFG).summary()
    for res in [r["summary"] for r in runs(2)]:          # every rank: the full weights' shapes and counts
        assert res["type"] == "ShardedPruner"
        assert res["rows"] == [r.to_dict() for r in plain]
        assert res["text"] == str(plain) and res["logged"] == [plain.line()]
    assert [(r["name"], r["selected"], r["sparsity"] if r["selected"] else r["reason"]) for r in res["rows"]] == [
        ("conv.weight", True, 0.5), ("fc1.weight", True, 0.5), ("fc2.weight", False,
         "excluded by excluded_op_names ('fc2')"), ("head.weight", False, "not matched by op_names ['fc', 'conv']")]
    assert res["line"] == "pruning 2 weights (1.2K of 2.4K parameters); 2 tensors with 2+ dimensions left dense: " \
                          "see Pruner.summary()"


def test_plain_models_keep_the_single_process_pruner():
    assert type(prune(Net(), CONFIGS["local_1x1"])).__name__ == "Pruner"
