"""Channel permutations for N:M sparsity, applied to a torch model without changing what it computes.

Permuting the input channels of a layer changes which weights share a group
of M, so an N:M mask can keep more magnitude; the layer that produces those
channels (and every layer that passes them on or reads them) must be permuted
the same way. The channel tracer (:func:`sparsify_torch.channels.graph.analyze_channel_groups`)
gives exactly those sets: each group lists its producers' output rows, the
layers that pass channels through (BatchNorm, depthwise convolutions, ...) and
its consumers' input columns. One permutation per group is chosen by the core
(:func:`sparsify.nm_channel_permutation` on the group's consumer weights
stacked along the output axis, since every consumer shares it) and applied in
place; the model's outputs on ``example_inputs`` are checked before returning.

Example:
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    >>> report = permute_for_nm(net, (torch.randn(2, 8),), "2:4", rounds=5)
    >>> report.permuted, report.total_after >= report.total_before
    (['0'], True)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from sparsify import nm_channel_permutation, nm_kept_magnitude
from sparsify.patterns import PatternNInM, get_pattern

if TYPE_CHECKING:
    from .channels.graph import ChannelGroup, MemberSlot

__all__ = ["permute_for_nm", "PermutationReport"]

# tensors that hold a channel along dim 0, per role and layer kind (the "in" role of conv/linear: dim 1)
_THROUGH_TENSORS = {"norm": ("weight", "bias", "running_mean", "running_var"), "dw": ("weight", "bias"),
                    "lnorm": ("weight", "bias")}


@dataclass
class PermutationReport:
    """What :func:`permute_for_nm` did.

    Attributes:
        pattern: the N:M pattern.
        layers: per consumer weight (``"name.weight"``), the magnitude the pattern keeps ``(before, after)``.
        permuted: root layers of the channel groups that were permuted.
        permutations: per permuted group (root layer), the order of its channels: new channel ``j`` is old ``perm[j]``.
        skipped: root layer -> why its group was left alone.
        max_rel_diff: largest ``max|after - before| / max|before|`` over the model's output tensors.
    """

    pattern: str
    layers: Dict[str, Tuple[float, float]] = field(default_factory=dict)
    permuted: List[str] = field(default_factory=list)
    permutations: Dict[str, np.ndarray] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)
    max_rel_diff: float = 0.0

    @property
    def total_before(self) -> float:
        """Kept magnitude over all reported layers before permuting."""
        return float(sum(b for b, _ in self.layers.values()))

    @property
    def total_after(self) -> float:
        """Kept magnitude over all reported layers after permuting."""
        return float(sum(a for _, a in self.layers.values()))


def _positions_by_label(slot: MemberSlot, n_labels: int) -> Optional[np.ndarray]:
    """``(labels, k)`` positions of each label in ascending order, or None when labels differ in count."""
    counts = np.bincount(slot.labels, minlength=n_labels)
    if counts.size != n_labels or counts.min() != counts.max() or counts[0] == 0:
        return None
    order = np.lexsort((slot.positions, slot.labels))
    return slot.positions[order].reshape(n_labels, counts[0])


def _linear_layout(module: nn.Module) -> Optional[Tuple[str, int, int]]:
    """``(tensor name, out dim, in dim)`` of a linear layer registered with the channel tracer (``transformers``'
    ``Conv1D``, stored ``(in, out)``: ``("weight", 1, 0)``; a ``register_layer_kind`` linear layer with one 2-D
    tensor holding both its channels), else None."""
    from .channels.tracing.kinds import LayerKind, custom_layer

    spec = custom_layer(module)
    if spec is None or spec.kind != LayerKind.LINEAR:
        return None
    for name, in_dim in spec.in_dims.items():
        tensor = getattr(module, name, None)
        out_dim = spec.out_dims.get(name)
        if isinstance(tensor, torch.Tensor) and tensor.dim() == 2 and out_dim is not None \
                and {in_dim % 2, out_dim % 2} == {0, 1}:
            return name, out_dim % 2, in_dim % 2
    return None


def _consumer_weight(module: nn.Module) -> Optional[Tuple[str, np.ndarray]]:
    """``(tensor name, weight in the core's (out, in, ...) layout)`` of a layer that reads the channels, or None."""
    layout = _linear_layout(module)
    if layout is not None:
        name, out_dim, _ = layout
        weight = getattr(module, name).detach().cpu().numpy().astype(np.float64)
        return name, (weight.T if out_dim == 1 else weight)
    return "weight", module.weight.detach().cpu().numpy().astype(np.float64)


def _tensors(model: nn.Module, slot: MemberSlot) -> Optional[List[Tuple[torch.Tensor, int]]]:
    """``(tensor, dim)`` pairs holding the slot's channels, or None when the slot is not supported."""
    if slot.role == "param":
        obj = dict(model.named_parameters()).get(slot.name)
        if obj is None:
            obj = dict(model.named_buffers()).get(slot.name)
        return None if obj is None else [(obj, slot.dim % obj.ndim)]
    module = model.get_submodule(slot.name)
    layout = _linear_layout(module) if slot.role in ("out", "in") else None
    if layout is not None:       # Conv1D (weight (in, out)), a registered linear layer: its own dims
        from .channels.tracing.kinds import custom_layer

        dims = custom_layer(module).in_dims if slot.role == "in" else custom_layer(module).out_dims
        out = [(getattr(module, n, None), d) for n, d in dims.items()]
        out = [(t, d) for t, d in out if t is not None]          # an absent bias
        if any(not isinstance(t, torch.Tensor) or not -t.dim() <= d < t.dim() for t, d in out):
            return None
        return [(t, d % t.dim()) for t, d in out]
    if slot.role in ("out", "in"):
        if not ((isinstance(module, nn.modules.conv._ConvNd) and module.groups == 1 and not module.transposed)
                or isinstance(module, nn.Linear)):
            return None
        if slot.role == "in":
            return [(module.weight, 1)]
        return [(module.weight, 0)] + ([(module.bias, 0)] if module.bias is not None else [])
    names = _THROUGH_TENSORS.get(slot.kind)
    if names is None or (slot.kind == "dw" and module.out_channels != module.in_channels):
        return None
    out = [(getattr(module, n), 0) for n in names if isinstance(getattr(module, n, None), torch.Tensor)]
    return [(t, d) for t, d in out if t.shape[0] == slot.size]


def _consumer_matrix(model: nn.Module, group: ChannelGroup, by_label: Dict[int, np.ndarray],
                     pattern: PatternNInM) -> Dict[str, np.ndarray]:
    """Canonical weights of the consumers the pattern will prune, input channels in label order."""
    out = {}
    for i, slot in enumerate(group.slots):
        if slot.role != "in" or by_label[i].shape[1] != 1 or slot.positions.size != slot.size:
            continue
        tensor_name, weight = _consumer_weight(model.get_submodule(slot.name))
        if weight.shape[1] % pattern.M or pattern.fits((weight.shape[0], weight[0].size)) is not None:
            continue
        out[f"{slot.name}.{tensor_name}"] = weight[:, by_label[i][:, 0]]
    return out


def _plan(model: nn.Module, group: ChannelGroup, pattern: PatternNInM):
    """(slots with their tensors and positions, consumer weights) or a reason the group is left alone."""
    if not group.prunable:
        return f"not prunable: {group.reason}"
    if group.width != 1:
        return f"{group.width} channels per label"
    if int(np.max(group.segments, initial=0)) > 0:
        return "channels are split or concatenated"
    plan, by_label = [], {}
    for i, slot in enumerate(group.slots):
        tensors = _tensors(model, slot)
        positions = _positions_by_label(slot, group.n_labels)
        if tensors is None or positions is None:
            return f"{slot.name}:{slot.role} ({slot.kind}) cannot be permuted"
        by_label[i] = positions
        plan.append((tensors, positions))
    consumers = _consumer_matrix(model, group, by_label, pattern)
    if not consumers:
        return (f"no consumer that pattern {pattern.pattern!r} prunes reads one input column per channel "
                f"with input channels a multiple of M={pattern.M}")
    return plan, consumers


def _flat_tensors(value: Any) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value.detach().clone()]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat_tensors(v)]
    return []


def _outputs(model: nn.Module, args: Tuple[Any, ...]) -> List[torch.Tensor]:
    """Outputs in eval mode (dropout off, BatchNorm on its statistics); modes and buffers are restored."""
    from .channels.graph import preserved_state

    with preserved_state(model), torch.no_grad():
        model.eval()
        return _flat_tensors(model(*args))


def _max_rel_diff(before: List[torch.Tensor], after: List[torch.Tensor]) -> float:
    worst = 0.0
    for b, a in zip(before, after):
        if not b.is_floating_point():
            worst = max(worst, 0.0 if torch.equal(a, b) else float("inf"))
            continue
        scale = float(b.abs().max()) if b.numel() else 0.0
        diff = float((a.double() - b.double()).abs().max()) if b.numel() else 0.0
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def permute_for_nm(model: nn.Module, example_inputs, pattern="2:4", *, entry_point: str = "forward",
                   rounds: int = 200, time_limit: Optional[float] = None, seed: int = 0, max_rows: int = 2048,
                   tolerance: float = 1e-5) -> PermutationReport:
    """Permute channels of ``model`` in place so that ``pattern`` keeps more weight magnitude.

    Args:
        model: the model (plain weights: remove pruning parametrizations first). Channels pass through
            ``nn.Linear``, convolutions (``groups=1``), normalisations, depthwise convolutions, ``transformers``'
            ``Conv1D`` (GPT-2; its ``(in, out)`` weight is permuted along its input dimension, as the
            ``nn.Linear`` holding its transpose is) and linear layers registered with
            :func:`sparsify_torch.channels.tracing.register_layer_kind`.
        example_inputs: a tensor or a tuple of positional inputs of ``entry_point``.
        pattern: an N:M pattern name (``"2:4"`` prunes 2 of every 4).
        entry_point: the traced method (``"forward"`` or ``"sub.method"``); outputs are checked on ``model(...)``.
        rounds, time_limit, seed, max_rows: search budget per channel group
            (see :func:`sparsify.nm_channel_permutation`; ``time_limit`` in seconds per group).
        tolerance: largest allowed ``max|after - before| / max|before|`` of every output tensor
            (outputs are compared in eval mode; the model's modes and buffers are left as they were).

    Returns:
        A :class:`PermutationReport`.

    Raises:
        TypeError: ``model`` is not a module.
        ValueError: ``pattern`` is not N:M, or the model holds parametrizations.
        RuntimeError: the outputs changed by more than ``tolerance`` (the model is restored first).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    p = get_pattern(pattern) if isinstance(pattern, str) else pattern
    if not isinstance(p, PatternNInM):
        raise ValueError(f"pattern must be an N:M pattern such as '2:4', got {pattern!r}")
    if any(parametrize.is_parametrized(m) for m in model.modules()):
        raise ValueError("model holds parametrizations (e.g. pruning masks): call pruner.remove() or "
                         "torch.nn.utils.parametrize.remove_parametrizations before permute_for_nm")
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not tolerance >= 0:
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    from .channels.graph import analyze_channel_groups   # the channel tracer (torch.fx): imported on use

    groups = analyze_channel_groups(model, entry_point, args, {})
    report = PermutationReport(pattern=p.pattern)
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    reference = _outputs(model, args)
    try:
        for group in groups:
            planned = _plan(model, group, p)
            if isinstance(planned, str):
                report.skipped[group.root_name] = planned
                continue
            plan, consumers = planned
            stacked = np.concatenate([np.moveaxis(w, 1, -1).reshape(-1, w.shape[1]) for w in consumers.values()])
            perm = nm_channel_permutation(stacked, p, rounds=rounds, time_limit=time_limit, seed=seed,
                                          max_rows=max_rows)
            for name, w in consumers.items():
                report.layers[name] = (nm_kept_magnitude(w, p), nm_kept_magnitude(w, p, perm))
            if np.array_equal(perm, np.arange(perm.size)):
                report.skipped[group.root_name] = "no permutation keeps more"
                continue
            with torch.no_grad():
                for tensors, positions in plan:
                    src = torch.as_tensor(positions[perm].reshape(-1))
                    dst = torch.as_tensor(positions.reshape(-1))
                    for tensor, dim in tensors:
                        tensor.index_copy_(dim, dst.to(tensor.device), tensor.index_select(dim, src.to(tensor.device)))
            report.permuted.append(group.root_name)
            report.permutations[group.root_name] = perm
        report.max_rel_diff = _max_rel_diff(reference, _outputs(model, args))
        if report.max_rel_diff > tolerance:
            raise RuntimeError(f"permuted channels changed the model's outputs (max relative difference "
                               f"{report.max_rel_diff:.3g} > tolerance={tolerance}); the model was restored")
    except BaseException:
        model.load_state_dict(saved)
        raise
    return report
