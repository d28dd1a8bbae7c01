"""What every demo backend shares: the model shape, hyper-parameters and the result record.

A backend module exposes ``train(config, data, steps, seed, bar, out) -> BackendRun``:
it trains the MLP ``64 -> 128 -> 64 -> 10`` dense for ``steps`` steps, then
prunes and fine-tunes it for ``steps`` more with its framework's adapter,
calling ``bar.update(1)`` once per step, and writes the pruned model into the
directory ``out`` when it is not None.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["LAYERS", "SIZES", "BATCH_SIZE", "LEARNING_RATE", "BackendRun", "set_bar_sparsity"]

#: Layer names of the demo MLP and its widths (input, hidden..., classes).
LAYERS: tuple[str, ...] = ("fc1", "fc2", "out")
SIZES: tuple[int, ...] = (64, 128, 64, 10)
BATCH_SIZE = 64
LEARNING_RATE = 0.01


@dataclass
class BackendRun:
    """What a backend hands back.

    Attributes:
        dense_accuracy: test accuracy after the dense phase.
        pruned_accuracy: test accuracy after pruning + fine-tuning.
        weights: final weights of the layers the adapter pruned, canonical layout, keyed by ``LAYERS`` name.
        final_step: the adapter's step count at the end of the pruning phase.
        files: paths of the pruned model files written into ``out``.
        extra: backend-specific notes printed under the table.
    """

    dense_accuracy: float
    pruned_accuracy: float
    weights: dict[str, np.ndarray]
    final_step: int
    files: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)


def set_bar_sparsity(bar: Any, phase: str, sparsity: float | None = None) -> None:
    """Show the phase (and current sparsity) on the progress bar."""
    bar.set_description_str(phase)
    if sparsity is not None:
        bar.set_postfix_str(f"sparsity {100 * sparsity:.1f}%", refresh=False)
