"""What a pruned model must compute, and the check that it does.

Removing a channel must equal *zeroing its readers*: every conv/linear that
reads the channel sees a zero there, and a LayerNorm/RMSNorm/GroupNorm that
normalises over several channels takes its statistics over the kept ones only.
:func:`masked_reference` runs the unpruned model that way (hooks, nothing
changed); :func:`compare_outputs` compares a pruned model's output with it.

Example:
    >>> import torch
    >>> from sparsify_torch.channels import PruningCalibrator, prune_model
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
    >>> with PruningCalibrator(net) as c:
    ...     net(torch.randn(1, 3, 4, 4)).sum().backward()
    >>> removed = c.pruning_info.split_labels([1, 2])
    >>> reference = masked_reference(net, c.pruning_info, removed)
    >>> small = prune_model(net, c.pruning_info, [1, 2], inplace=False, check=False)
    >>> compare_outputs(reference, run_entry_point(small, c.pruning_info)) is None
    True
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from .graph import preserved_state, resolve_entry_point
from .info import ModelPruningInfo
from .tracing import LayerKind

__all__ = ["run_entry_point", "masked_reference", "masking", "compare_outputs", "removed_positions", "tolerance",
           "recording_calls"]


def run_entry_point(model: nn.Module, info: ModelPruningInfo) -> Any:
    """Call the traced method on the calibration sample, in eval mode without gradients.

    The model's modes and buffers are restored; the output is detached.
    """
    owner, method = resolve_entry_point(model, info.entry_point)
    args, kwargs = info.example_inputs
    with preserved_state(model), torch.no_grad():
        model.eval()
        out = getattr(owner, method)(*args, **kwargs)
    return out


def removed_positions(info: ModelPruningInfo, removed: Dict[int, np.ndarray]) -> Dict[Tuple[str, str], set]:
    """``{(name, role): positions}`` that the labels ``removed`` (``{group: local labels}``) take away."""
    out: Dict[Tuple[str, str], set] = {}
    for g, local in removed.items():
        gone = set(np.asarray(local).tolist())
        for slot in info.groups[g].slots:
            key = (slot.name, slot.role if slot.role != "param" else f"param:{slot.dim}")
            hit = [int(p) for p, lab in zip(slot.positions.tolist(), slot.labels.tolist()) if lab in gone]
            if hit:
                out.setdefault(key, set()).update(hit)
    return out


def _masked_norm(module: nn.Module, x: torch.Tensor, dim: int, keep: torch.Tensor) -> torch.Tensor:
    k = keep.to(x.dtype)
    if isinstance(module, nn.GroupNorm):
        n, c = x.shape[0], x.shape[1]
        g = module.num_groups
        xs = x.reshape(n, g, c // g, -1)
        kk = k.view(1, g, c // g, 1)
        count = kk.sum(dim=(2, 3), keepdim=True) * xs.shape[-1]
        mean = (xs * kk).sum(dim=(2, 3), keepdim=True) / count
        var = (((xs - mean) ** 2) * kk).sum(dim=(2, 3), keepdim=True) / count
        y = ((xs - mean) * torch.rsqrt(var + module.eps)).reshape(x.shape)
        shape = [1] * x.dim()
        shape[1] = c
        if module.affine:
            y = y * module.weight.view(shape) + module.bias.view(shape)
        return y
    xd = x.movedim(dim, -1)
    count = k.sum()
    eps = getattr(module, "eps", None)
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    if isinstance(module, nn.LayerNorm):
        mean = (xd * k).sum(-1, keepdim=True) / count
        centered = xd - mean
        y = centered * torch.rsqrt(((centered ** 2) * k).sum(-1, keepdim=True) / count + eps)
    else:  # RMSNorm
        y = xd * torch.rsqrt(((xd ** 2) * k).sum(-1, keepdim=True) / count + eps)
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.movedim(-1, dim)


@contextlib.contextmanager
def masking(model: nn.Module, info: ModelPruningInfo, removed: Dict[int, np.ndarray]) -> Iterator[None]:
    """Hooks that zero the removed channels at their readers and mask multi-channel normalisations."""
    modules = dict(model.named_modules())
    zero: Dict[str, Tuple[int, set]] = {}
    norms: Dict[str, Tuple[int, set]] = {}
    for g, local in removed.items():
        gone = set(np.asarray(local).tolist())
        for slot in info.groups[g].slots:
            hit = {int(p) for p, lab in zip(slot.positions.tolist(), slot.labels.tolist()) if lab in gone}
            if not hit:
                continue
            if slot.role == "in":
                zero.setdefault(slot.name, (slot.dim, set()))[1].update(hit)
            elif slot.role == "through" and slot.kind in (LayerKind.LAYER_NORM, LayerKind.GROUP_NORM):
                norms.setdefault(slot.name, (slot.dim, set()))[1].update(hit)
    handles = []

    def zero_hook(dim, positions):
        def hook(module, args):
            x = args[0]
            mask = torch.ones(x.shape[dim], dtype=x.dtype, device=x.device)
            mask[sorted(positions)] = 0
            shape = [1] * x.dim()
            shape[dim] = -1
            return (x * mask.view(shape),) + tuple(args[1:])
        return hook

    def norm_hook(dim, positions):
        def hook(module, args, output):
            x = args[0]
            keep = torch.ones(x.shape[dim % x.dim()], dtype=torch.bool, device=x.device)
            keep[sorted(positions)] = False
            return _masked_norm(module, x, dim % x.dim(), keep)
        return hook

    try:
        for name, (dim, positions) in zero.items():
            handles.append(modules[name].register_forward_pre_hook(zero_hook(dim, positions)))
        for name, (dim, positions) in norms.items():
            handles.append(modules[name].register_forward_hook(norm_hook(dim, positions)))
        yield
    finally:
        for h in handles:
            h.remove()


def masked_reference(model: nn.Module, info: ModelPruningInfo, removed: Dict[int, np.ndarray]) -> Any:
    """Output of the unpruned ``model`` with the channels of ``removed`` (``{group: local labels}``) zeroed
    at their readers and left out of multi-channel normalisation statistics."""
    with masking(model, info, removed):
        return run_entry_point(model, info)


def tolerance(dtype: torch.dtype) -> float:
    """Largest error, relative to the largest reference magnitude, a check accepts for ``dtype``."""
    return {torch.float64: 1e-9, torch.float32: 1e-4}.get(dtype, 2e-2)


def compare_outputs(reference: Any, output: Any) -> Optional[str]:
    """None when ``output`` matches ``reference`` (structure, shapes, finiteness, values); else what differs.

    Example:
        >>> compare_outputs({"a": torch.ones(2)}, {"a": torch.ones(2) + 1e-7}) is None
        True
        >>> compare_outputs(torch.ones(2), torch.ones(3))
        'output 0 has shape (3,), expected (2,)'
    """
    ref_leaves, ref_spec = tree_flatten(reference)
    out_leaves, out_spec = tree_flatten(output)
    if ref_spec != out_spec:
        return f"the output structure changed: {out_spec} instead of {ref_spec}"
    for i, (r, o) in enumerate(zip(ref_leaves, out_leaves)):
        if not isinstance(r, torch.Tensor):
            if isinstance(o, torch.Tensor) or (type(r) in (int, float, bool, str) and r != o):
                return f"output {i} is {o!r}, expected {r!r}"
            continue
        if not isinstance(o, torch.Tensor):
            return f"output {i} is a {type(o).__name__}, expected a tensor"
        if tuple(r.shape) != tuple(o.shape):
            return f"output {i} has shape {tuple(o.shape)}, expected {tuple(r.shape)}"
        if not r.is_floating_point():
            if not torch.equal(r, o):
                return f"output {i} (integer) differs"
            continue
        r64, o64 = r.detach().double(), o.detach().double()
        finite = torch.isfinite(r64)
        if not torch.equal(finite, torch.isfinite(o64)) or not torch.equal(r64[~finite].nan_to_num(),
                                                                            o64[~finite].nan_to_num()):
            return f"output {i} has non-finite values where the original has none (or the other way round)"
        if not finite.any():
            continue
        scale = float(r64[finite].abs().max())
        err = float((r64[finite] - o64[finite]).abs().max())
        rel = err / scale if scale > 0 else err
        if rel > tolerance(r.dtype):
            return (f"output {i} differs from the original with the pruned channels zeroed by {rel:.3g} relative "
                    f"to its largest magnitude (tolerance {tolerance(r.dtype):g})")
    return None


@contextlib.contextmanager
def recording_calls(model: nn.Module, names: List[str]) -> Iterator[Dict[str, Any]]:
    """Record ``{name: (input, output)}`` of the first call of each module in ``names`` and the call order.

    The dictionary also holds ``"__order__"`` (names in call order) and
    ``"__stack__"`` (the modules entered but not left: where a failing forward stopped).
    """
    modules = dict(model.named_modules())
    record: Dict[str, Any] = {"__order__": [], "__stack__": []}
    handles = []
    watched = set(names)

    def pre(name):
        def hook(module, args):
            record["__stack__"].append(name)
        return hook

    def post(name):
        def hook(module, args, output):
            if record["__stack__"] and record["__stack__"][-1] == name:
                record["__stack__"].pop()
            if name in watched and name not in record:
                record[name] = output.detach().clone() if isinstance(output, torch.Tensor) else None
                record["__order__"].append(name)
        return hook

    try:
        for name, m in modules.items():
            if name:
                handles.append(m.register_forward_pre_hook(pre(name)))
                handles.append(m.register_forward_hook(post(name)))
        yield record
    finally:
        for h in handles:
            h.remove()
