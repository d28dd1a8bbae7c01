"""Demo backend: PyTorch with ``sparsify_torch.prune`` (mask parametrizations + ``Pruner.step()``).

Ctrl-C (:mod:`sparsify.cli.interrupts`) is looked at before each step and before the model is saved.

torch is imported when :func:`train` runs, so choosing another backend never loads it.
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

from sparsify.config import PruningConfig
from sparsify.distillation import DistillationConfig

from .. import interrupts
from ..frameworks import import_torch
from .common import BATCH_SIZE, LAYERS, LEARNING_RATE, SIZES, BackendRun, DemoProgress, distillation_note, writing
from .data import Digits, batch_indices

__all__ = ["IMPORT_FRAMEWORK", "OUTPUTS", "train"]

#: Imports the framework :func:`train` needs (ImportError naming the extra to install when it is missing).
IMPORT_FRAMEWORK = import_torch
#: What :func:`train` writes into ``out``.
OUTPUTS: tuple[str, ...] = ("model.pt",)


def train(config: PruningConfig, data: Digits, steps: int, seed: int, progress: DemoProgress,
          out: Path | None = None, distillation: DistillationConfig | None = None) -> BackendRun:
    """Train dense, then prune with ``sparsify_torch.prune`` for ``steps`` steps each (``distillation``:
    the dense model, frozen when pruning begins, teaches the pruned one through ``pruner.distill_loss``)."""
    torch = import_torch()
    import sparsify_torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)            # a tiny MLP: one thread is fastest and leaves the other cores alone
    try:
        return _train(torch, sparsify_torch, config, data, steps, seed, progress, out, distillation)
    finally:
        torch.set_num_threads(threads)


def _train(torch: Any, sparsify_torch: Any, config: PruningConfig, data: Digits, steps: int, seed: int,
           progress: DemoProgress, out: Path | None, distillation: DistillationConfig | None) -> BackendRun:
    nn = torch.nn
    torch.manual_seed(seed)
    layers: list[tuple[str, Any]] = []
    for i, name in enumerate(LAYERS):
        layers.append((name, nn.Linear(SIZES[i], SIZES[i + 1])))
        if name != LAYERS[-1]:
            layers.append((f"relu{i + 1}", nn.ReLU()))
    model = nn.Sequential(OrderedDict(layers))
    xtr, ytr = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    xte, yte = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)

    def accuracy() -> float:
        with torch.no_grad():
            return float((model(xte).argmax(1) == yte).float().mean())

    def fit(n: int, phase_seed: int, pruner: Any = None) -> None:
        opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
        for i, idx in enumerate(batch_indices(len(xtr), BATCH_SIZE, n, phase_seed)):
            interrupts.check()          # a step boundary: Ctrl-C stops the run here
            logits = model(xtr[idx])
            loss = nn.functional.cross_entropy(logits, ytr[idx])
            if pruner is not None and distillation is not None:
                loss = loss + pruner.distill_loss(xtr[idx], logits)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sparsity = None
            if pruner is not None:
                pruner.step()
                if i % 10 == 0 or i == n - 1:
                    sparsity = pruner.total_sparsity()
            progress.step(sparsity)

    progress.phase("dense")
    fit(steps, seed)
    dense_acc = accuracy()
    pruner = sparsify_torch.prune(model, config, distillation=distillation)
    progress.phase("pruning", pruner.total_sparsity())
    fit(steps, seed + 1, pruner)
    pruned_acc = accuracy()
    final_step = pruner.step_count
    pruned = [n.rsplit(".", 1)[0] for n in pruner.names]
    pruner.remove()
    weights = {name: model.get_submodule(name).weight.detach().numpy().copy() for name in LAYERS}

    files = []
    interrupts.check()
    if out is not None:
        path = Path(out) / "model.pt"
        with writing(path) as watch, open(path, "wb") as fh:   # torch's zip writer hides the file's OSError
            torch.save(model.state_dict(), watch(fh))
        files.append(str(path))
    notes = ["model.pt: a plain torch state_dict (Pruner.remove() baked the masks in)"] if files else []
    if distillation is not None:
        notes.append(distillation_note(distillation) + "; the teacher is not saved")
    return BackendRun(dense_acc, pruned_acc, weights, pruned, final_step, files, notes)
