"""Channel groups: which channels of a model can be removed, and what removing them touches.

One forward pass of the traced method (the *entry point*) is followed op by op
(:mod:`.tracing`). Channels that must be removed together form a *label* (a
residual add joins the channels it adds; a grouped convolution joins the same
position of every block; a channel shuffle joins the positions it pairs). The
labels of one producing layer (and of every layer joined to it) form a
*group*; selection prunes a fraction of each group's labels. Everything is
described in plain data (names and index arrays), so nothing downstream holds
tracing objects. A group is unprunable, with a reason, whenever one of its
channels reaches the traced output, is read by an op that mixes channels (a
matmul, a channel mean, attention), is split or sliced with sizes stored in the
model, or is otherwise not safe to remove.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
    >>> groups = analyze_channel_groups(net, "forward", (torch.zeros(1, 3, 8, 8),), {})
    >>> [(g.root_name, g.n_labels, g.prunable) for g in groups]
    [('0', 4, True), ('2', 2, False)]
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from sparsify.channels.groups import LabelUnionFind, rectangular_dim
from sparsify.channels.selection import segments_from_layer_channels

from .tracing import ChannelTrace, LayerKind, trace_channels

__all__ = ["MemberSlot", "ConsumerSlot", "ChannelGroup", "resolve_entry_point", "analyze_channel_groups",
           "build_dependency_graph", "preserved_state"]


@dataclass(frozen=True)
class MemberSlot:
    """One dimension of one layer (or free parameter) that holds channels of a group.

    Attributes:
        name: module name (or parameter/buffer name for role ``"param"``).
        role: ``"out"`` (output channels of a conv/linear), ``"in"`` (input
            channels of a conv/linear), ``"through"`` (channels a BatchNorm,
            LayerNorm, GroupNorm, PReLU or depthwise convolution passes on) or
            ``"param"`` (a dimension of a free parameter, e.g. a layer scale).
        kind: the :class:`~.tracing.LayerKind` of the layer, or ``"param"``.
        positions: indices in that dimension that belong to the group.
        labels: the group-local label of each position.
        size: size of that dimension when the model was traced.
        dim: the dimension: of the layer input for ``"through"`` (-1 for a
            channels-last LayerNorm), of the tensor for ``"param"``.
    """

    name: str
    role: str
    kind: str
    positions: np.ndarray
    labels: np.ndarray
    size: int
    dim: int = 1


@dataclass(frozen=True)
class ConsumerSlot:
    """A conv/linear layer whose *input* channels carry a group's channels (where gates go).

    Attributes:
        module_name: qualified name in the model.
        input_idxs: positions in the layer's input channel dimension.
        root_idxs: the group-local label each position carries (same length).
    """

    module_name: str
    input_idxs: np.ndarray
    root_idxs: np.ndarray


@dataclass
class ChannelGroup:
    """Channels of one producing layer (and the layers joined to it), in labels removed one at a time.

    Attributes:
        root_name: the first conv/linear (in module order) whose output channels are in the group.
        n_labels: number of labels (prunable units) of the group.
        n_channels: output channels of the root layer.
        width: output channels of the root per label (2 when every label spans two blocks of a
            grouped convolution, ...).
        members: ``"name:role"`` of every layer dimension touched.
        slots: the same, with index arrays (what surgery removes).
        consumers: conv/linear layers reading the channels (where gates go).
        prunable: False when the group cannot be pruned safely.
        reason: why not prunable ("" when prunable).
        segments: segment id of every label (0, 1, ... in order of first label). A
            layer holding only some of the group's labels (one side of a split, a
            concatenated source) must keep one of them: labels are in one segment
            when they belong to the same such layers.
        segment_sources: per segment, the layers whose labels are exactly that segment's.
        split_owners: modules whose stored split sizes change when the group is pruned.
    """

    root_name: str
    n_labels: int
    n_channels: int = 0
    width: int = 1
    members: List[str] = field(default_factory=list)
    slots: List[MemberSlot] = field(default_factory=list)
    consumers: List[ConsumerSlot] = field(default_factory=list)
    prunable: bool = True
    reason: str = ""
    segments: Optional[np.ndarray] = None
    segment_sources: List[str] = field(default_factory=list)
    split_owners: List[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.segments is None:
            self.segments = np.zeros(self.n_labels, dtype=np.int64)


def resolve_entry_point(model: nn.Module, entry_point: str) -> Tuple[nn.Module, str]:
    """Split ``"a.b.method"`` into (submodule ``a.b``, ``"method"``) and check it exists.

    Raises:
        TypeError: ``entry_point`` is not a string.
        ValueError: the submodule or the method does not exist or is not callable.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2))
        >>> resolve_entry_point(net, "0.forward")[1]
        'forward'
    """
    if not isinstance(entry_point, str) or not entry_point:
        raise TypeError(f"entry_point must be a non-empty string like 'forward' or 'backbone.forward', "
                        f"got {entry_point!r}")
    *path, method = entry_point.split(".")
    try:
        owner = model.get_submodule(".".join(path)) if path else model
    except AttributeError:
        raise ValueError(f"entry_point={entry_point!r}: the model has no submodule {'.'.join(path)!r}") from None
    if not callable(getattr(owner, method, None)):
        raise ValueError(f"entry_point={entry_point!r}: {type(owner).__name__} has no callable method {method!r}")
    return owner, method


@contextlib.contextmanager
def preserved_state(model: nn.Module, params_require_grad: Optional[bool] = None) -> Iterator[None]:
    """Restore training flags, buffers and ``requires_grad`` of ``model`` on exit.

    Tracing and checks run forward passes (BatchNorm statistics move in train
    mode); this keeps the user's model exactly as it was. ``params_require_grad``
    temporarily overrides ``requires_grad``.
    """
    modes = {m: m.training for m in model.modules()}
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        if params_require_grad is not None:
            for p, _ in flags:
                p.requires_grad_(params_require_grad)
        yield
    finally:
        for m, mode in modes.items():
            m.training = mode
        with torch.no_grad():
            for b, saved in buffers:
                if b.shape == saved.shape:
                    b.copy_(saved)
        for p, flag in flags:
            p.requires_grad_(flag)


def build_dependency_graph(model: nn.Module, entry_point: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                           call: Optional[Callable] = None, max_ops: int = 2_000_000) -> ChannelTrace:
    """Trace ``entry_point`` once and follow every channel (see :mod:`.tracing`).

    ``call`` replaces the entry-point method (the calibrator passes the original
    while the method is patched). Runs in the model's current mode under
    ``torch.no_grad()``; modes, buffers and ``requires_grad`` flags are restored.

    Raises:
        RuntimeError: more than ``max_ops`` aten ops (the pass is too large to follow).
    """
    owner, method = resolve_entry_point(model, entry_point)
    bound = call if call is not None else getattr(owner, method)
    if not torch.is_grad_enabled():
        raise RuntimeError("channel-group tracing needs autograd: do not run calibration under torch.no_grad()")
    with preserved_state(model):
        return trace_channels(model, bound, args, kwargs, max_ops=max_ops)


def _group_members(trace: ChannelTrace, roots: np.ndarray, group_of: Callable[[np.ndarray], np.ndarray],
                   local: np.ndarray) -> Dict[int, List[MemberSlot]]:
    slots: Dict[int, List[MemberSlot]] = {}

    def add(atoms: np.ndarray, name: str, role: str, kind: str, size: int, dim: int) -> None:
        pos = np.flatnonzero(atoms >= 0)
        if not pos.size:
            return
        lab = roots[atoms[pos]]
        grp = group_of(lab)
        for g in np.unique(grp).tolist():
            sel = grp == g
            slots.setdefault(int(g), []).append(MemberSlot(name, role, kind, pos[sel], local[lab[sel]], size, dim))

    for rec in trace.units.values():
        if rec.kind == LayerKind.OPAQUE:
            continue
        if rec.out_atoms.size:
            add(rec.out_atoms, rec.name, "out", rec.kind, int(rec.out_atoms.size), 1)
        if LayerKind(rec.kind).produces_channels:
            add(rec.in_positions, rec.name, "in", rec.kind, rec.in_size, rec.in_dim)
        elif rec.in_size:
            add(rec.in_positions, rec.name, "through", rec.kind, rec.in_size, rec.in_dim)
    for name, (start, shape) in trace.params.items():
        atoms = np.arange(start, start + int(np.prod(shape)), dtype=np.int64)
        lab = roots[atoms]
        grp = group_of(lab)
        for g in np.unique(grp).tolist():
            sel = np.flatnonzero(grp == g)
            slots.setdefault(int(g), []).append(MemberSlot(name, "param", "param", sel, local[lab[sel]],
                                                           int(np.prod(shape)), -1))
    return slots


def _param_slot(slot: MemberSlot, shape: Tuple[int, ...]) -> Optional[MemberSlot]:
    """Turn a parameter's element slot into a slot along one dimension (None if not whole slices)."""
    dims = set()
    per_label = {}
    for lab in np.unique(slot.labels).tolist():
        elems = slot.positions[slot.labels == lab]
        dim = rectangular_dim(shape, elems)
        if dim is None:
            return None
        dims.add(dim)
        per_label[lab] = np.unique(np.unravel_index(elems, shape)[dim])
    if len(dims) != 1:
        return None
    dim = dims.pop()
    idx = np.concatenate(list(per_label.values()))
    labs = np.concatenate([np.full(v.size, k, dtype=np.int64) for k, v in per_label.items()])
    if np.unique(idx).size != idx.size:
        return None
    order = np.argsort(idx, kind="stable")
    return MemberSlot(slot.name, "param", "param", idx[order], labs[order], int(shape[dim]), dim)


def analyze_channel_groups(model: nn.Module, entry_point: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                           max_prunable_labels: int = 4096,
                           graph_and_outputs: Optional[ChannelTrace] = None) -> List[ChannelGroup]:
    """Find the channel groups of the traced part of ``model``, in module order of their roots.

    ``graph_and_outputs`` is a trace from :func:`build_dependency_graph` of this
    very model (the calibrator passes its own to trace only once).

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 1))
        >>> [(g.n_labels, g.reason) for g in analyze_channel_groups(net, "forward", (torch.zeros(2, 3),), {})]
        [(5, ''), (1, 'channels reach the traced output')]
    """
    trace = graph_and_outputs if graph_and_outputs is not None else \
        build_dependency_graph(model, entry_point, args, kwargs)
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    roots = trace.uf.roots()
    if not roots.size:
        return []
    reason_of = _first_reasons(trace, roots)
    group_root, has_out = _join_labels(trace, roots)
    group_of = lambda labels: group_root[labels]  # noqa: E731
    labels, label_groups = _produced_labels(roots, group_of, has_out)
    root_units = _root_units(trace, roots, group_of, labels, label_groups, order)
    local, members = _label_order(roots, root_units, labels, label_groups)
    slots = _group_members(trace, roots, group_of, local)
    param_shapes = {name: shape for name, (_, shape) in trace.params.items()}
    groups = [_channel_group(trace, rec, members[g], reason_of, slots.get(g, []), param_shapes, max_prunable_labels)
              for g, rec in root_units.items()]
    return sorted(groups, key=lambda c: order.get(c.root_name, len(order)))


_NO_REASON = np.iinfo(np.int64).max


def _first_reasons(trace: ChannelTrace, roots: np.ndarray) -> np.ndarray:
    """Per label (root atom), the index of the first reason fixing one of its atoms (``_NO_REASON``: none):
    a label is fixed when any of its atoms is."""
    reason_of = np.full(roots.size, _NO_REASON, dtype=np.int64)
    fixed = trace.fixed >= 0
    np.minimum.at(reason_of, roots[fixed], trace.fixed[fixed])
    return reason_of


def _join_labels(trace: ChannelTrace, roots: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Join labels into groups: those sharing a producing layer or a layer that passes them through (a
    BatchNorm or depthwise convolution after a concatenation holds all of its sources: one group, one
    segment each). Returns each label's group root, and which labels a layer produces."""
    has_out = np.zeros(roots.size, dtype=bool)
    guf = LabelUnionFind()
    guf.new(roots.size)
    for start, count, kind, _owner in trace.atom_ranges:
        if kind == "out" and count:
            r = roots[start:start + count]
            has_out[r] = True
            guf.union(np.repeat(r[:1], count - 1), r[1:])
    for rec in trace.units.values():
        if LayerKind(rec.kind).passes_channels:
            r = roots[rec.in_positions[rec.in_positions >= 0]]
            if r.size > 1:
                guf.union(np.repeat(r[:1], r.size - 1), r[1:])
    return guf.roots(), has_out


def _produced_labels(roots: np.ndarray, group_of: Callable[[np.ndarray], np.ndarray],
                     has_out: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The labels of groups some layer produces, and the group of each."""
    labels = np.unique(roots)
    groups = group_of(labels)
    produced = np.isin(groups, list(set(group_of(labels[has_out[labels]]).tolist())))
    return labels[produced], groups[produced]


def _root_units(trace: ChannelTrace, roots: np.ndarray, group_of: Callable[[np.ndarray], np.ndarray],
                labels: np.ndarray, label_groups: np.ndarray, order: Dict[str, int]) -> Dict[int, Any]:
    """Each group's root layer: the first producer or depthwise layer (module order) holding every label
    of the group, else the first producer."""
    producer_groups = set(label_groups.tolist())
    n_in_group = dict(zip(*np.unique(label_groups, return_counts=True)))
    candidates = sorted((rec for rec in trace.units.values() if rec.out_atoms.size or rec.kind == LayerKind.DEPTHWISE),
                        key=lambda r: (order.get(r.name, len(order)), r.name))
    root_units: Dict[int, Any] = {}
    fallback: Dict[int, Any] = {}
    for rec in candidates:
        lab = _unit_labels(rec, roots)
        if not lab.size:
            continue
        g = int(group_of(lab[:1])[0])
        if g not in producer_groups:
            continue
        if rec.out_atoms.size:
            fallback.setdefault(g, rec)
        if g not in root_units and np.unique(lab).size == n_in_group.get(g, -1) and (group_of(lab) == g).all():
            root_units[g] = rec
    for g, rec in fallback.items():
        root_units.setdefault(g, rec)
    return root_units


def _unit_labels(rec: Any, roots: np.ndarray) -> np.ndarray:
    """The labels of a layer's channels: its outputs, or the inputs it passes on."""
    atoms = rec.out_atoms if rec.out_atoms.size else rec.in_positions
    return roots[atoms[atoms >= 0]]


def _label_order(roots: np.ndarray, root_units: Dict[int, Any], labels: np.ndarray,
                 label_groups: np.ndarray) -> Tuple[np.ndarray, Dict[int, np.ndarray]]:
    """The group-local index of every label (-1: in no group), and each group's labels in that order:
    by the root layer's channel, then by label id."""
    local = np.full(roots.size, -1, dtype=np.int64)
    key = np.full(roots.size, _NO_REASON, dtype=np.int64)
    for rec in root_units.values():
        lab = _unit_labels(rec, roots)
        np.minimum.at(key, lab, np.arange(lab.size, dtype=np.int64))
    members: Dict[int, np.ndarray] = {}
    for g in root_units:
        labs = labels[label_groups == g]
        labs = labs[np.lexsort((labs, key[labs]))]
        local[labs] = np.arange(labs.size)
        members[g] = labs
    return local, members


def _channel_group(trace: ChannelTrace, rec: Any, labs: np.ndarray, reason_of: np.ndarray,
                   slots: List[MemberSlot], param_shapes: Dict[str, Tuple[int, ...]],
                   max_prunable_labels: int) -> ChannelGroup:
    """The :class:`ChannelGroup` rooted at ``rec`` with labels ``labs``: its slots, and why it is not
    prunable (the first reason)."""
    n = int(labs.size)
    reasons = []
    first_reason = int(reason_of[labs].min()) if n else _NO_REASON
    if first_reason != _NO_REASON:
        reasons.append(trace.reasons[first_reason])
    group_slots = []
    for slot in slots:
        if slot.role == "param":
            shaped = _param_slot(slot, param_shapes[slot.name])
            if shaped is None:
                reasons.append(f"parameter {slot.name!r} would lose a part that is not whole slices")
                continue
            slot = shaped
        group_slots.append(slot)
    root_role = "out" if rec.out_atoms.size else "through"
    root_slot = next(s for s in group_slots if s.name == rec.name and s.role == root_role)
    width = int(np.bincount(root_slot.labels, minlength=n).max()) if n else 0
    n_channels = int(rec.out_atoms.size) if rec.out_atoms.size else rec.in_size * rec.multiplier
    consumers = [ConsumerSlot(s.name, s.positions, s.labels) for s in group_slots if s.role == "in"]
    if n < 2:
        reasons.append(f"only {n} channel" if width <= 1 else f"only {n} label")
    if n > max_prunable_labels:
        reasons.append(f"{n} labels > max_prunable_labels={max_prunable_labels}")
    if not consumers and not reasons:
        reasons.append("no conv/linear consumes these channels")
    cg = ChannelGroup(root_name=rec.name, n_labels=n, n_channels=n_channels, width=width,
                      members=[f"{s.name}:{s.role}" for s in group_slots], slots=group_slots,
                      consumers=consumers, prunable=not reasons, reason=reasons[0] if reasons else "")
    cg.segments, cg.segment_sources = _segments(n, group_slots)
    cg.split_owners = sorted(o for o in trace.split_owners if any(s.name.startswith(o + ".") for s in group_slots))
    return cg


def _segments(n: int, slots: List[MemberSlot]) -> Tuple[np.ndarray, List[str]]:
    """Segments of a group's labels and the layer dimensions behind each (see ``segments_from_layer_channels``)."""
    whole = []
    for s in slots:
        if s.positions.size >= s.size and s.role != "param":
            whole.append((f"{s.name}:{s.role}", frozenset(s.labels.tolist())))
    segments = segments_from_layer_channels(n, [labels for _, labels in whole])
    if segments.max(initial=0) == 0:
        return segments, []
    sources = []
    for seg in range(int(segments.max()) + 1):
        chans = frozenset(np.flatnonzero(segments == seg).tolist())
        exact = [k for k, c in whole if c == chans]
        exact = [k for k in exact if k.endswith(":out")] or exact
        sources.append(", ".join(dict.fromkeys(exact)) or "(part of " + " & ".join(
            dict.fromkeys(k for k, c in whole if chans <= c and len(c) < n)) + ")")
    return segments, sources
