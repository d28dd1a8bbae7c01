"""Channel-group analysis: our interface over torch-pruning's DependencyGraph.

Traces one method of a model (the *entry point*), finds every group of coupled
channels and describes it in plain data (module names and index arrays), so
nothing downstream holds torch-pruning objects. A group is marked unprunable,
with a reason, whenever the graph cannot be trusted with it: channels that
reach the traced outputs, grouped convolutions, unwrapped parameters, layer
types other than conv/linear/BatchNorm/PReLU, unknown or layout-changing ops.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
    >>> groups = analyze_channel_groups(net, "forward", (torch.zeros(1, 3, 8, 8),), {})
    >>> [(g.root_name, g.n_channels, g.prunable) for g in groups]
    [('0', 4, True), ('2', 2, False)]
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from sparsify.channel_selection import segments_from_layer_channels

__all__ = ["ConsumerSlot", "ChannelGroup", "resolve_entry_point", "analyze_channel_groups",
           "build_dependency_graph", "preserved_state"]

_SAFE_TYPES = None  # filled lazily: torch-pruning OPTYPEs we trust
# autograd ops (name without "Backward<n>", lower case) that may move or mix channels
_UNSAFE_GRAD_FNS = frozenset({"permute", "transpose", "t", "mm", "bmm", "baddbmm", "matmul", "softmax", "logsoftmax",
                              "einsum", "unknown", "gather", "index", "indexselect", "roll", "flip", "pixelshuffle",
                              "pixelunshuffle", "channelshuffle", "sort", "topk", "norm", "linalgvectornorm",
                              "cumsum", "cumprod", "std", "var", "stdmean", "varmean", "scatter", "take"})


def _tp():
    try:
        import torch_pruning
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError("structured channel pruning needs the 'torch-pruning' package: "
                          "pip install 'sparsify[structured]'") from err
    return torch_pruning


@dataclass(frozen=True)
class ConsumerSlot:
    """A module whose *input* channels carry a group's channels.

    Attributes:
        module_name: qualified name in the model.
        input_idxs: positions in the module's input channel dimension.
        root_idxs: the group channel each position carries (same length).
    """

    module_name: str
    input_idxs: np.ndarray
    root_idxs: np.ndarray


@dataclass
class ChannelGroup:
    """Channels that can only be removed together.

    Attributes:
        root_name: the conv/linear whose output channels define the group.
        n_channels: number of channels (the root's output channels).
        members: ``"name:out"`` / ``"name:in"`` entries of every layer touched.
        consumers: conv/linear layers reading the channels (where gates go).
        prunable: False when the graph cannot prune this group safely.
        reason: why not prunable ("" when prunable).
        segments: segment id of every channel (0, 1, ... in order of first
            channel). A group spanning a concatenation (or a split) has one
            segment per source layer: each must keep a channel, or that layer
            would be emptied. A plain group is one segment (all zeros).
        segment_sources: per segment, the layers whose channels are exactly
            that segment's, e.g. ``"side:out"`` (empty for a one-segment group).
    """

    root_name: str
    n_channels: int
    members: List[str] = field(default_factory=list)
    consumers: List[ConsumerSlot] = field(default_factory=list)
    prunable: bool = True
    reason: str = ""
    segments: Optional[np.ndarray] = None
    segment_sources: List[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.segments is None:
            self.segments = np.zeros(self.n_channels, dtype=np.int64)


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

    Tracing runs a forward pass in eval mode; this keeps the user's model exactly
    as it was. ``params_require_grad`` temporarily overrides ``requires_grad``.
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
                           call: Optional[Callable] = None):
    """Trace ``entry_point`` with torch-pruning; return (graph, output grad_fns).

    ``call`` replaces the entry-point method (the calibrator passes the original
    while the method is patched). The model's modes, buffers and
    ``requires_grad`` flags are restored afterwards.
    """
    tp = _tp()
    owner, method = resolve_entry_point(model, entry_point)
    bound = call if call is not None else getattr(owner, method)
    outputs: List[Any] = []

    def forward_fn(_model, _inputs):
        return bound(*args, **kwargs)

    def output_transform(out):
        outputs.append(out)
        return out

    if not torch.is_grad_enabled():
        raise RuntimeError("channel-group tracing needs autograd: do not run calibration under torch.no_grad()")
    with preserved_state(model, params_require_grad=True):
        graph = tp.DependencyGraph().build_dependency(model, example_inputs=None, forward_fn=forward_fn,
                                                      output_transform=output_transform, verbose=False)
    out_fns = set()
    for out in outputs:
        for t in tp.utils.flatten_as_list(out):
            if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                out_fns.add(t.grad_fn)
    return graph, out_fns


@contextlib.contextmanager
def frozen_index_mapping(graph) -> Iterator[None]:
    """Compute torch-pruning's concat/split index maps once while the graph does not change.

    ``DependencyGraph.get_pruning_group`` recomputes every index map on each
    call, which is quadratic on DenseNets (tens of seconds). Inside this context
    the maps are computed once; the module-level function is restored on exit.
    """
    from torch_pruning.dependency import index_mapping
    original = index_mapping.update_index_mapping
    original(graph)
    index_mapping.update_index_mapping = lambda _graph: None
    try:
        yield
    finally:
        index_mapping.update_index_mapping = original


def prune_groups(graph, roots_and_idxs: List[Tuple[nn.Module, List[int]]]) -> None:
    """Prune several groups at once: every (layer, dimension) is cut once with original indices."""
    merged: Dict[Tuple[int, Any], Tuple[Any, set]] = {}
    order: List[Tuple[int, Any]] = []
    groups = []
    with frozen_index_mapping(graph):
        for root, idxs in roots_and_idxs:
            group = graph.get_pruning_group(root, root_pruner(graph, root), list(idxs))
            if not graph.check_pruning_group(group):
                emptied = []
                for item in group.items:
                    out = graph.is_out_channel_pruning_fn(item.dep.handler)
                    n = graph.get_out_channels(item.dep.target) if out else graph.get_in_channels(item.dep.target)
                    if n is not None and len(item.idxs) >= n:
                        emptied.append(item.dep.target.name.split(" ")[0])
                raise ValueError(f"pruning {len(idxs)} channels of the group of {graph._module2name[root]!r} would "
                                 f"remove every channel of {', '.join(emptied) or 'one of its layers'}; keep at "
                                 "least one channel of each layer")
            groups.append(group)
    for group in groups:
        for item in group.items:
            key = (id(item.dep.target), item.dep.handler)
            if key not in merged:
                merged[key] = (item.dep, set())
                order.append(key)
            merged[key][1].update(int(i) for i in item.idxs)
    for key in order:
        dep, idxs = merged[key]
        dep(sorted(idxs))


def _segments(n: int, coverage: Dict[str, Tuple[Optional[int], set, set]]) -> Tuple[np.ndarray, List[str]]:
    """Segments of a group (see ``segments_from_layer_channels``) and the layers behind each.

    ``coverage`` maps ``"name:out"``/``"name:in"`` to (that dimension's size,
    positions the group touches, group channels they carry). A layer whose whole
    dimension is carried by the group constrains the selection: it must keep one
    of those channels.
    """
    whole = [(key, frozenset(r for r in roots if 0 <= r < n)) for key, (size, positions, roots) in coverage.items()
             if size is not None and len(positions) >= size]
    segments = segments_from_layer_channels(n, [s for _, s in whole])
    if segments.max(initial=0) == 0:
        return segments, []
    sources = []
    for s in range(int(segments.max()) + 1):
        channels = frozenset(np.flatnonzero(segments == s).tolist())
        exact = [key for key, chans in whole if chans == channels]
        exact = [key for key in exact if key.endswith(":out")] or exact
        sources.append(", ".join(exact) or "(part of " + " & ".join(k for k, c in whole if channels <= c
                                                                     and len(c) < n) + ")")
    return segments, sources


def _unsafe_reason(graph, node, out_fns, reads_only: bool) -> str:
    tp = _tp()
    op = tp.ops.OPTYPE
    safe = (op.CONV, op.DEPTHWISE_CONV, op.LINEAR, op.BN, op.PRELU, op.ELEMENTWISE, op.CONCAT, op.SPLIT,
            op.RESHAPE)
    module = node.module
    if node.type == op.OUTPUT or (not reads_only and node.grad_fn is not None and node.grad_fn in out_fns):
        return f"channels reach the traced output ({node.name.split(' ')[0]})"
    if node.type not in safe:
        return f"unsupported layer {node.name.split(' ')[0]} ({node.type.name})"
    if node.type == op.ELEMENTWISE and node.inputs:  # an op fed by parameters only (Linear's weight.t()) is harmless
        name = re.sub(r"backward\d*$", "", str(getattr(module, "_grad_fn", "")).lower())
        if name in _UNSAFE_GRAD_FNS:
            return f"op {getattr(module, '_grad_fn', '?')} may mix channels"
    if isinstance(module, nn.modules.conv._ConvNd) and module.groups > 1 and node.type != op.DEPTHWISE_CONV:
        return f"grouped convolution {node.name.split(' ')[0]} (groups={module.groups})"
    if isinstance(module, nn.modules.conv._ConvNd) and node.type == op.DEPTHWISE_CONV \
            and module.in_channels != module.out_channels:
        return f"depthwise convolution with channel multiplier {node.name.split(' ')[0]}"
    return ""


def analyze_channel_groups(model: nn.Module, entry_point: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                           max_prunable_labels: int = 4096, graph_and_outputs=None) -> List[ChannelGroup]:
    """Find the channel groups of the traced part of ``model``, in a stable order.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 1))
        >>> [g.n_channels for g in analyze_channel_groups(net, "forward", (torch.zeros(2, 3),), {})]
        [5, 1]
    """
    tp = _tp()
    graph, out_fns = graph_and_outputs or build_dependency_graph(model, entry_point, args, kwargs)
    names = graph._module2name
    groups: List[ChannelGroup] = []
    with frozen_index_mapping(graph):
        all_groups = list(graph.get_all_groups())
    for group in all_groups:
        root_node = group[0].dep.target
        root = root_node.module
        n = len(group[0].idxs)
        cg = ChannelGroup(root_name=names[root], n_channels=n)
        reasons = []
        coverage: Dict[str, Tuple[Optional[int], set, set]] = {}
        for item in group.items:
            dep, idxs = item.dep, item.idxs
            node = dep.target
            module = node.module
            pruner = graph.get_pruner_of_module(module) if isinstance(module, nn.Module) else None
            is_in = pruner is not None and dep.handler == pruner.prune_in_channels \
                and dep.handler != pruner.prune_out_channels
            is_dw = node.type == tp.ops.OPTYPE.DEPTHWISE_CONV
            reason = _unsafe_reason(graph, node, out_fns, reads_only=is_in)
            if reason:
                reasons.append(reason)
            if not isinstance(module, nn.Module) or module not in names:
                continue
            key = f"{names[module]}:{'in' if is_in else 'out'}"
            cg.members.append(key)
            root_idxs = getattr(item, "root_idxs", None) or list(idxs)
            size = graph.get_in_channels(module) if is_in else graph.get_out_channels(module)
            entry = coverage.setdefault(key, (size, set(), set()))
            entry[1].update(int(i) for i in idxs)
            entry[2].update(int(i) for i in root_idxs)
            if (is_in or is_dw) and isinstance(module, (nn.modules.conv._ConvNd, nn.Linear)):
                cg.consumers.append(ConsumerSlot(names[module], np.asarray(idxs, dtype=np.int64),
                                                 np.asarray(root_idxs, dtype=np.int64)))
        if n < 2:
            reasons.append(f"only {n} channel")
        if n > max_prunable_labels:
            reasons.append(f"{n} channels > max_prunable_labels={max_prunable_labels}")
        if not cg.consumers and not reasons:
            reasons.append("no conv/linear consumes these channels")
        if reasons:
            cg.prunable, cg.reason = False, reasons[0]
        cg.segments, cg.segment_sources = _segments(n, coverage)
        groups.append(cg)
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    return sorted(groups, key=lambda g: order.get(g.root_name, len(order)))


def named_modules_dict(model: nn.Module) -> Dict[str, nn.Module]:
    """``dict(model.named_modules())`` (helper kept here so callers share one definition)."""
    return dict(model.named_modules())


def root_pruner(graph, module: nn.Module) -> Callable:
    """torch-pruning's out-channel pruning function for a group root."""
    return graph.get_pruner_of_module(module).prune_out_channels
