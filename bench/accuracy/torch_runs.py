"""One torch accuracy run: dense, sparsify (``sparsify_torch.prune``) or torch.ao's ``WeightNormSparsifier``.

A sparsify arm whose config holds ``"distillation"`` (a :class:`sparsify.DistillationConfig` dict) is a teacher
arm: the dense model of the seed is trained first (the ``dense`` arm's run; its time is not in the record's
seconds) and teaches the pruned one through ``pruner.distill_loss`` at every step.

Plain tensors, no DataLoader, one thread, ``torch.set_flush_denormal(True)``. torch.ao only handles 2-D
weights, so its model holds every conv weight as sparsify's 2-D view ``(out, prod(kernel) * in)`` (input
channel fastest) and reshapes it in ``forward``: the same function and the same initial numbers, and
torch.ao's ``(4, 1)`` / ``(1, 4)`` blocks group the same weights as our ``4x1`` / ``2:4``.

Example:
    >>> from bench.accuracy.problems import problem, setting, sparsify_config
    >>> spec, s = problem("digits").scaled(20), setting("90")
    >>> r = run_torch(spec, s, "default", sparsify_config(spec, s, {}), seed=0)
    >>> r["status"], r["sparsity"] > 0.89
    ('ok', True)
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .problems import (Layer, Problem, Setting, batch_order, init_weights, load_data, schedule, selected_layers,
                       summarize)

__all__ = ["Net", "run_torch"]


class Net(nn.Module):
    """The CNN of a problem; ``flat=True`` stores conv weights as their 2-D view (for torch.ao)."""

    def __init__(self, layers: list[Layer], weights: dict[str, np.ndarray], flat: bool = False) -> None:
        super().__init__()
        self.specs, self.flat = layers, flat
        for layer in layers:
            if layer.kind == "linear":
                m: nn.Module = nn.Linear(layer.cin, layer.cout)
            elif layer.kind == "conv1d":
                m = nn.Conv1d(layer.cin, layer.cout, layer.kernel, layer.stride, layer.padding)
            else:
                m = nn.Conv2d(layer.cin, layer.cout, layer.kernel, layer.stride, layer.padding)
            w = weights[f"{layer.name}.weight"]
            if flat and layer.kind != "linear":
                w = np.moveaxis(w, 1, -1).reshape(layer.view)
                m.weight = nn.Parameter(torch.empty(layer.view))
            with torch.no_grad():
                m.weight.copy_(torch.from_numpy(w))
                m.bias.copy_(torch.from_numpy(weights[f"{layer.name}.bias"]))
            self.add_module(layer.name, m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.unsqueeze(1)                          # one input channel
        for layer in self.specs:
            m = getattr(self, layer.name)
            if layer.kind == "linear":
                x = m(x.flatten(1))
                continue
            if not self.flat:                       # the module itself (its hooks see the input: Wanda)
                x = F.relu(m(x))
                continue
            w = m.weight
            if self.flat:                           # 2-D view -> (out, in, *kernel)
                w = w.view(layer.cout, *layer.shape[2:], layer.cin).movedim(-1, 1)
            conv = F.conv1d if layer.kind == "conv1d" else F.conv2d
            x = F.relu(conv(x, w, m.bias, layer.stride, layer.padding))
        return x


def _ao_sparsifier(model: Net, spec: Problem, s: Setting):
    from torch.ao.pruning import WeightNormSparsifier

    block, zeros = {"1x1": ((1, 1), 1), "4x1": ((4, 1), 4), "2:4": ((1, 4), 2)}[s.pattern]
    sp = WeightNormSparsifier(sparsity_level=0.0, sparse_block_shape=block, zeros_per_block=zeros)
    sp.prepare(model, config=[{"tensor_fqn": f"{name}.weight"} for name in selected_layers(spec, s)])
    return sp


def run_torch(spec: Problem, s: Setting, arm: str, config: dict[str, Any] | None, seed: int) -> dict[str, Any]:
    """Train one run; returns test accuracy, final sparsity (selected layers), pruned layers and seconds.

    Subnormals are flushed during the run only (the flag is process-wide: it is cleared afterwards, so a
    caller in the same process, e.g. the test suite, keeps IEEE arithmetic).
    """
    torch.set_flush_denormal(True)
    try:
        return _run_torch(spec, s, arm, config, seed)
    finally:
        torch.set_flush_denormal(False)


def _dense_teacher(spec: Problem, s: Setting, seed: int, x: torch.Tensor, y: torch.Tensor,
                   order: torch.Tensor) -> Net:
    """The dense model of ``seed`` (the ``dense`` arm's run: same initial weights and batches), trained here."""
    model = Net(spec.layers(s), init_weights(spec, s, seed))
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr)
    for step in range(1, spec.steps + 1):
        idx = order[step - 1]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


def _run_torch(spec: Problem, s: Setting, arm: str, config: dict[str, Any] | None, seed: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    x, y, xt, yt = (torch.from_numpy(a) for a in load_data(spec.name))
    order = torch.from_numpy(batch_order(spec, len(x), seed))
    config = dict(config or {})
    distillation = config.pop("distillation", None)     # a teacher arm: the trained dense model of the seed
    teacher = None if distillation is None else _dense_teacher(spec, s, seed, x, y, order)
    model = Net(spec.layers(s), init_weights(spec, s, seed), flat=arm == "torch.ao")
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr)
    t0, c0 = time.perf_counter(), time.process_time()
    pruner = ao = None
    if arm == "torch.ao":
        ao, sched = _ao_sparsifier(model, spec, s), schedule(spec, s)
        scale = 1.0 / s.target if s.pattern == "2:4" else 1.0      # 2:4: the level is the share of 2:4 blocks

        def ao_update(step: int) -> None:
            if bool(sched.update_ready(step)):
                for group in ao.groups:
                    group["sparsity_level"] = float(sched.sparsity(step)) * scale
                ao.step()
        ao_update(0)
    elif arm != "dense":
        from sparsify_torch import prune

        pruner = prune(model, config, optimizer=opt, teacher=teacher,
                       distillation=None if distillation is None else {**distillation, "teacher": "user"})
    for step in range(1, spec.steps + 1):
        idx = order[step - 1]
        out = model(x[idx])
        loss = F.cross_entropy(out, y[idx])
        if teacher is not None:
            loss = loss + pruner.distill_loss(x[idx], out)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if pruner is not None:
            pruner.step()
        elif ao is not None:
            ao_update(step)
    if ao is not None:
        ao.squash_mask()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    with torch.no_grad():
        acc = float((model(xt).argmax(1) == yt).float().mean())
        weights = {layer.name: getattr(model, layer.name).weight.detach().numpy() for layer in spec.layers(s)}
    if pruner is not None:
        pruner.remove()
    return summarize(weights, spec, s, acc, seconds, cpu)
