"""One-shot arms of the LM benchmark: magnitude, Wanda and SparseGPT on a trained dense model.

Every arm prunes the blocks' linear weights (:data:`bench.lm_model.PRUNABLE`; not the
embeddings or the tied head, as llm-compressor's recipes leave ``lm_head``) of a copy
of the same trained model, with the same calibration windows. Settings: unstructured
50/60/70 % (every layer the same ratio) and 2:4, the latter also after
:func:`sparsify_torch.permute_for_nm` (which permutes the MLP's hidden channels: fc1's
rows and fc2's columns; the attention's channels are left alone, see its report).

Example:
    >>> sorted(ARMS), SETTINGS
    (['magnitude', 'sparsegpt', 'wanda'], ('50', '60', '70', '2:4', '2:4+perm'))
"""
from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import torch
from torch import nn

import sparsify_torch

from .lm_model import PRUNABLE, CharLM

__all__ = ["ARMS", "SETTINGS", "setting_config", "prune_arm", "calibration_batches"]

ARMS: dict[str, dict[str, Any]] = {
    "magnitude": {"config": {"criterion": "magnitude"}},
    "wanda": {"config": {"criterion": "wanda", "pruning_scope": "row"}},
    "sparsegpt": {"config": {}, "method": "sparsegpt"},
}
"""Arm -> config keys and ``prune_oneshot`` method (Wanda compares within output rows, as the paper)."""

SETTINGS = ("50", "60", "70", "2:4", "2:4+perm")


def setting_config(setting: str) -> dict[str, Any]:
    """``target_sparsity``/``pattern`` of a setting name."""
    if setting.startswith("2:4"):   # N:M groups lie within a row: every scope gives the same masks
        return {"target_sparsity": 0.5, "pattern": "2:4", "pruning_scope": "local"}
    return {"target_sparsity": int(setting) / 100}


def calibration_batches(windows: np.ndarray, batch_size: int = 16) -> list[torch.Tensor]:
    """The calibration windows as a list of ``(batch_size, context)`` token tensors."""
    return [torch.from_numpy(windows[i:i + batch_size]) for i in range(0, len(windows), batch_size)]


def prune_arm(dense: CharLM, arm: str, setting: str, calib: list[torch.Tensor]) -> tuple[nn.Module, dict]:
    """A pruned copy of ``dense`` and ``{"seconds", "permuted"}`` for one arm and setting."""
    model = copy.deepcopy(dense)
    spec = ARMS[arm]
    start = time.perf_counter()
    info: dict[str, Any] = {}
    if setting.endswith("+perm"):
        report = sparsify_torch.permute_for_nm(model, (calib[0],), "2:4")
        info["permuted"] = report.permuted
        info["kept_magnitude"] = [report.total_before, report.total_after]
    cfg = {**spec["config"], **setting_config(setting), "op_names": [PRUNABLE]}
    kwargs = {"method": spec["method"]} if "method" in spec else {}
    sparsify_torch.prune_oneshot(model, cfg, calib, **kwargs)
    info["seconds"] = time.perf_counter() - start
    return model.eval(), info
