"""One-shot arms of the LM benchmark: magnitude, Wanda and SparseGPT on a trained dense model.

Every arm prunes the blocks' linear weights (:data:`bench.lm.model.PRUNABLE`; not the
embeddings or the tied head, as llm-compressor's recipes leave ``lm_head``) of a copy
of the same trained model, with the same calibration windows. Settings: unstructured
50/60/70 % (every layer the same ratio) and 2:4, the latter also after
:func:`sparsify_torch.permute_for_nm` (``2:4+perm``: it permutes the MLP's hidden channels,
fc1's rows and fc2's columns, by weight magnitude; the residual stream and the attention's
channels are left alone, see its report) and after the bench's activation-aware permutation
of the residual stream and the MLP's hidden channels (``2:4+aperm``,
:mod:`bench.lm.permutation`).

Example:
    >>> sorted(ARMS), SETTINGS
    (['magnitude', 'sparsegpt', 'wanda'], ('50', '60', '70', '2:4', '2:4+perm', '2:4+aperm'))
"""
from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import torch
from torch import nn

import sparsify_torch

from .model import PRUNABLE, CharLM
from .permutation import permute_whole_model

__all__ = ["ARMS", "SETTINGS", "setting_config", "permuted_base", "prune_arm", "calibration_batches"]

ARMS: dict[str, dict[str, Any]] = {
    "magnitude": {"config": {"criterion": "magnitude"}},
    "wanda": {"config": {"criterion": "wanda", "pruning_scope": "row"}},
    "sparsegpt": {"config": {}, "method": "sparsegpt"},
}
"""Arm -> config keys and ``prune_oneshot`` method (Wanda compares within output rows, as the paper)."""

SETTINGS = ("50", "60", "70", "2:4", "2:4+perm", "2:4+aperm")


def setting_config(setting: str) -> dict[str, Any]:
    """``target_sparsity``/``pattern`` of a setting name."""
    if setting.startswith("2:4"):   # N:M groups lie within a row: every scope gives the same masks
        return {"target_sparsity": 0.5, "pattern": "2:4", "pruning_scope": "local"}
    return {"target_sparsity": int(setting) / 100}


def calibration_batches(windows: np.ndarray, batch_size: int = 16) -> list[torch.Tensor]:
    """The calibration windows as a list of ``(batch_size, context)`` token tensors."""
    return [torch.from_numpy(windows[i:i + batch_size]) for i in range(0, len(windows), batch_size)]


def permuted_base(dense: CharLM, setting: str, calib: list[torch.Tensor]) -> tuple[CharLM, dict]:
    """The dense model a setting starts from: ``dense`` itself, or a permuted copy (``+perm``, ``+aperm``),
    and what the permutation reported. Compute it once per setting and hand it to :func:`prune_arm`."""
    if setting.endswith("+perm"):
        model = copy.deepcopy(dense)
        report = sparsify_torch.permute_for_nm(model, (calib[0],), "2:4")
        return model, {"permuted": report.permuted, "kept_magnitude": [report.total_before, report.total_after]}
    if setting.endswith("+aperm"):
        model = copy.deepcopy(dense)
        return model, {"kept_wanda_score": permute_whole_model(model, calib)}
    return dense, {}


def prune_arm(base: CharLM, arm: str, setting: str, calib: list[torch.Tensor]) -> tuple[nn.Module, dict]:
    """A pruned copy of ``base`` (the model :func:`permuted_base` gives for ``setting``) and its seconds."""
    model = copy.deepcopy(base)
    spec = ARMS[arm]
    start = time.perf_counter()
    cfg = {**spec["config"], **setting_config(setting), "op_names": [PRUNABLE]}
    kwargs = {"method": spec["method"]} if "method" in spec else {}
    sparsify_torch.prune_oneshot(model, cfg, calib, **kwargs)
    return model.eval(), {"seconds": time.perf_counter() - start}
