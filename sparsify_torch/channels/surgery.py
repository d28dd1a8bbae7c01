"""Physical channel removal: ``prune_model``, all or nothing.

The channel groups found at calibration say, for every selected label, which
positions of which layers go (:class:`~.graph.MemberSlot`); no second trace is
needed, so any copy of the calibrated model can be pruned. Surgery is a
transaction: everything is validated before the first change, and after the
change the pruned model is checked on the calibration sample against the
original with the pruned channels' readers zeroed (:mod:`.verify`). If the
check fails, or anything raises, every module is restored exactly as it was
(the same parameter objects, bit for bit) and :class:`PruningCheckError` names
the group and the layer that broke.

``prune_model(..., inplace=True)`` (the default) changes and returns the
model you pass; ``inplace=False`` prunes and returns a deep copy.

Example:
    >>> import torch
    >>> from sparsify_torch.channels import PruningCalibrator
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
    >>> with PruningCalibrator(net) as c:
    ...     net(torch.randn(2, 3, 8, 8)).sum().backward()
    >>> small = prune_model(net, c.pruning_info, [0, 1], inplace=False)
    >>> small[0].out_channels, net[0].out_channels
    (2, 4)
"""
from __future__ import annotations

import copy
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from .info import ModelPruningInfo
from .removal import remove_channels, remove_from_tensor
from .tracing import STORED_SPLIT_OWNERS, LayerKind, custom_layer, layer_kind
from .verify import compare_outputs, masked_reference, masking, recording_calls, removed_positions, run_entry_point

__all__ = ["prune_model", "PruningCheckError", "select_and_prune"]


class PruningCheckError(RuntimeError):
    """The pruned model did not compute what the original computes with the pruned channels zeroed.

    The model was restored unchanged before this was raised. Attributes:
    ``groups`` (indices of the pruned groups found at the layer that broke; empty
    when it could not be located), ``layer`` (where it broke, or "") and
    ``problem`` (the short description: the exception or the output difference).
    """

    def __init__(self, message: str, groups: Sequence[int] = (), layer: str = "", problem: str = "") -> None:
        super().__init__(message)
        self.groups = list(groups)
        self.layer = layer
        self.problem = problem


def select_and_prune(model: nn.Module, pruning_info: ModelPruningInfo, label_selector,
                     asked_ratio: Optional[float] = None, max_attempts: int = 8) -> nn.Module:
    """``label_selector.select`` then :func:`prune_model` (in place, checked), leaving out what breaks.

    A group whose pruning makes the check fail at a layer the error names (a
    size written into the model code, an op the tracing could not see) is
    marked unprunable in ``pruning_info`` with the reason, a warning says so,
    and the selection is repeated without it, at most ``max_attempts`` times.
    An error that names no group is raised as is. The model is only changed by
    the attempt that passes.
    """
    first: Optional[PruningCheckError] = None
    for attempt in range(max_attempts):
        try:
            labels = label_selector.select(pruning_info)
        except ValueError as err:  # a fixed selection (a per-group config) cannot do without the left-out groups
            if first is None:
                raise
            raise first from err
        try:
            return _prune_model(model, pruning_info, labels, inplace=True, asked_ratio=asked_ratio)
        except PruningCheckError as err:
            first = first or err
            if not err.groups or attempt == max_attempts - 1:
                raise
            where = f" in {err.layer!r}" if err.layer else ""
            reason = f"pruning it breaks the model{where}: {err.problem}"
            pruning_info.mark_unprunable(err.groups, reason)
            warnings.warn(f"structured pruning: {_describe(pruning_info, err.groups)} left unpruned, {reason}",
                          UserWarning, stacklevel=2)
    raise AssertionError("unreachable")  # pragma: no cover


def prune_model(model: nn.Module, pruning_info: ModelPruningInfo, prune_labels: Sequence[int],
                inplace: bool = True, check: bool = True) -> nn.Module:
    """Remove the channels ``prune_labels`` from ``model``.

    Args:
        model: the calibrated model (or a copy of it with the same structure).
        pruning_info: result of calibration on this model.
        prune_labels: global channel labels to remove (see :class:`ModelPruningInfo`).
        inplace: prune ``model`` itself (default); otherwise a deep copy is pruned and returned.
        check: run the pruned model on the calibration sample and compare it with the
            original whose pruned channels are zeroed at their readers (float tolerance);
            on a mismatch the model is restored and :class:`PruningCheckError` raised.

    Returns:
        A plain ``nn.Module`` with fewer channels (no hooks, no gates).

    Raises:
        TypeError: ``model`` or ``pruning_info`` of the wrong type.
        ValueError: a label that does not exist, is repeated, belongs to an
            unprunable group or would empty a group or one of its segments, or a
            model whose layers do not match ``pruning_info``. The model is unchanged.
        PruningCheckError: the pruned model failed the check. The model is unchanged.
    """
    return _prune_model(model, pruning_info, prune_labels, inplace, check=check)


def _prune_model(model: nn.Module, pruning_info: ModelPruningInfo, prune_labels: Sequence[int], inplace: bool,
                 traced: Any = None, check: bool = True, asked_ratio: Optional[float] = None) -> nn.Module:
    """``prune_model``; ``asked_ratio`` is the ``pruning_ratio`` a caller asked for (warned about when the
    model cannot reach it). ``traced`` is accepted for callers that still pass the calibration's trace."""
    del traced  # surgery works from the groups alone
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(pruning_info, ModelPruningInfo):
        raise TypeError(f"pruning_info must be a ModelPruningInfo, got {type(pruning_info).__name__}")
    if isinstance(prune_labels, (str, bytes)) or not hasattr(prune_labels, "__iter__"):
        raise TypeError(f"prune_labels must be a sequence of integer labels, got {prune_labels!r}")
    if not isinstance(check, bool):
        raise TypeError(f"check must be a bool, got {check!r}")
    labels = list(prune_labels)
    per_group = pruning_info.split_labels(labels)
    if not inplace:
        model = copy.deepcopy(model)
    if not per_group:
        if check:
            pruning_info.record_pruning([], asked_ratio)
        return model
    plan = _plan(model, pruning_info, per_group)
    reference = masked_reference(model, pruning_info, per_group) if check else None
    snapshot = _snapshot(model)
    try:
        _apply(model, plan, pruning_info, per_group)
        if check:
            _check(model, pruning_info, per_group, reference, plan, snapshot)
    except BaseException:
        _restore(snapshot)
        raise
    if check:
        pruning_info.record_pruning(labels, asked_ratio)
        left = pruning_info.unpruned_summary()
        if left and not (asked_ratio is not None and pruning_info.achieved_ratio < asked_ratio - 0.05):
            warnings.warn(f"structured pruning {left} (see ModelPruningInfo.summary())", UserWarning, stacklevel=3)
    return model


# --- plan: what goes where, validated before any change ----------------------------------------------------
def _size(module: Any, role: str, kind: str) -> Optional[int]:
    spec = custom_layer(module)
    if spec is not None:
        return spec.n_out(module) if role == "out" else spec.n_in(module)
    if role == "out":
        return getattr(module, "out_channels", getattr(module, "out_features", None))
    if role == "in" or kind == LayerKind.DEPTHWISE:
        return getattr(module, "in_channels", getattr(module, "in_features", None))
    for attr in ("num_features", "num_channels", "num_parameters"):
        if hasattr(module, attr):
            return int(getattr(module, attr))
    shape = getattr(module, "normalized_shape", None)
    return int(shape[0]) if shape else None


def _plan(model: nn.Module, info: ModelPruningInfo, per_group: Dict[int, np.ndarray]) -> Dict[Tuple[str, str], set]:
    modules = dict(model.named_modules())
    params = dict(model.named_parameters())
    params.update(dict(model.named_buffers()))
    for g in per_group:
        group = info.groups[g]
        root = modules.get(group.root_name)
        n_now = _size(root, "out", layer_kind(root)) if root is not None else None
        if root is None or n_now != group.n_channels:
            raise ValueError(f"model does not match pruning_info: group {g} root {group.root_name!r} should have "
                             f"{group.n_channels} output channels, found {n_now}")
        for slot in group.slots:
            if slot.role == "param":
                t = params.get(slot.name)
                found = None if t is None else int(t.shape[slot.dim]) if t.dim() > slot.dim else None
            else:
                m = modules.get(slot.name)
                found = None if m is None or layer_kind(m) != slot.kind else _size(m, slot.role, slot.kind)
            if found != slot.size:
                raise ValueError(f"model does not match pruning_info: {slot.name!r} ({slot.role}) should have "
                                 f"{slot.size} channels, found {found}")
    return removed_positions(info, per_group)


def _apply(model: nn.Module, plan: Dict[Tuple[str, str], set], info: ModelPruningInfo,
           per_group: Dict[int, np.ndarray]) -> None:
    modules = dict(model.named_modules())
    by_module: Dict[str, Dict[str, set]] = {}
    for (name, role), positions in plan.items():
        if role.startswith("param:"):
            owner, _, attr = name.rpartition(".")
            remove_from_tensor(modules[owner], attr, int(role.split(":")[1]), sorted(positions))
        else:
            by_module.setdefault(name, {})[role] = positions
    for name, roles in by_module.items():
        remove_channels(modules[name], out_positions=roles.get("out", ()), in_positions=roles.get("in", ()),
                        through_positions=roles.get("through", ()))
    owners = {o for g in per_group for o in info.groups[g].split_owners}
    for owner in sorted(owners):
        module = modules[owner]
        STORED_SPLIT_OWNERS[type(module).__name__][1](module)


# --- the transaction --------------------------------------------------------------------------------------
def _snapshot(model: nn.Module) -> List[Tuple[nn.Module, Dict[str, Any]]]:
    saved = []
    for m in model.modules():
        state = dict(m.__dict__)
        state["_parameters"] = dict(m._parameters)
        state["_buffers"] = dict(m._buffers)
        state["_modules"] = dict(m._modules)
        saved.append((m, state))
    return saved


def _restore(snapshot: List[Tuple[nn.Module, Dict[str, Any]]]) -> None:
    for m, state in snapshot:
        m.__dict__.clear()
        m.__dict__.update(state)


def _groups_at(info: ModelPruningInfo, per_group: Dict[int, np.ndarray], layer: str) -> List[int]:
    """Pruned groups with a member at ``layer``, inside it or around it."""
    return [g for g in per_group if any(s.name == layer or s.name.startswith(layer + ".") or
                                        layer.startswith(s.name + ".") for s in info.groups[g].slots)]


def _describe(info: ModelPruningInfo, groups: List[int]) -> str:
    shown = ", ".join(f"{g} (root {info.groups[g].root_name!r})" for g in groups[:4])
    more = f" and {len(groups) - 4} more" if len(groups) > 4 else ""
    return f"channel group{'s' if len(groups) > 1 else ''} {shown}{more}"


def _check(model: nn.Module, info: ModelPruningInfo, per_group: Dict[int, np.ndarray], reference: Any,
           plan: Dict[Tuple[str, str], set], snapshot) -> None:
    units = sorted({name for name, role in plan if not role.startswith("param:")})
    with recording_calls(model, units) as record:
        try:
            output = run_entry_point(model, info)
        except Exception as err:
            layer = record["__stack__"][-1] if record["__stack__"] else ""
            groups = _groups_at(info, per_group, layer) if layer else []
            where = f" in {layer!r}" if layer else ""
            problem = f"{type(err).__name__}: {err}"
            raise PruningCheckError(f"the pruned model fails{where} ({problem}) after pruning "
                                    f"{_describe(info, groups or list(per_group))}; the model was restored unchanged",
                                    groups, layer, problem) from err
    problem = compare_outputs(reference, output)
    if problem is None:
        return
    layer = _first_divergent_layer(model, info, per_group, plan, record, snapshot)
    groups = _groups_at(info, per_group, layer) if layer else []
    where = f"; the first layer that differs is {layer!r}" if layer else ""
    raise PruningCheckError(f"the pruned model is not equivalent to the original with the pruned channels zeroed: "
                            f"{problem}{where}, holding {_describe(info, groups or list(per_group))}; the model was "
                            "restored unchanged", groups, layer, problem)


def _out_dim(module: nn.Module, output: torch.Tensor) -> int:
    spec = custom_layer(module)
    if spec is not None:
        return spec.channel_dim % output.dim()
    if isinstance(module, nn.Linear):
        return output.dim() - 1
    return 1 if output.dim() >= 2 else 0


def _first_divergent_layer(model, info, per_group, plan, pruned_record, snapshot) -> str:
    """The first planned layer (in call order) whose kept outputs differ from the masked original's."""
    current = _snapshot(model)
    _restore(snapshot)
    try:
        with recording_calls(model, pruned_record["__order__"]) as ref_record:
            with masking(model, info, per_group):
                run_entry_point(model, info)
    finally:
        _restore(current)
    modules = dict(model.named_modules())
    for name in pruned_record["__order__"]:
        got, want = pruned_record.get(name), ref_record.get(name)
        if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
            continue
        module = modules[name]
        removed = plan.get((name, "out"), set()) | plan.get((name, "through"), set())
        if layer_kind(module) is LayerKind.DEPTHWISE and plan.get((name, "through")):
            mult = module.out_channels // module.in_channels if module.in_channels else 1
            removed = {p * mult + j for p in plan[(name, "through")] for j in range(mult)}
        dim = _out_dim(module, want)
        if removed:
            keep = torch.tensor([i for i in range(want.shape[dim]) if i not in removed], dtype=torch.long)
            want = want.index_select(dim, keep)
        if want.shape != got.shape or compare_outputs(want, got) is not None:
            return name
    return ""
