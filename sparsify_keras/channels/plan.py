"""Which channels to remove from a Keras 3 model: channel groups, weight-norm criteria, the core's selection.

A *group* is a set of Dense/Conv2D layers whose output channels are tied (by an ``Add``), or one layer;
a *label* is one channel of the group (the same position of every tied layer), removed as a whole. The
criterion of a label is the L1 or L2 norm of the producers' kernel slices that write it (no data needed);
the selection is the core's (:mod:`sparsify.channels.selection`): each group loses
``min(ceil(ratio * n - 0.5), n - 1)`` channels, least important first, ties to the lower index, as
torch's ``UniformPruningLabelSelector`` does with the same criteria. Groups that reach a model output, are
tied to a model input or feed a softmax are left whole, with the reason.

Example:
    >>> import keras, numpy as np
    >>> L = keras.layers
    >>> model = keras.Sequential([keras.Input((3,)), L.Dense(4, name="a"), L.Dense(2, name="b")])
    >>> model.get_layer("a").set_weights([np.array([[1., 4, 2, 3]] * 3), np.zeros(4)])
    >>> plan = channel_plan(model, 0.5)
    >>> plan.kept["a"].tolist(), plan.widths, plan.unprunable
    ([1, 3], {'a': 2}, {'b': 'model output'})
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real
from typing import Dict, List, Mapping, Tuple, Union

import numpy as np

from sparsify.channels.selection import ChannelScores, least_important_labels, max_prunable_per_group
from sparsify.channels.selection import n_channels_to_prune

from .graph import ChannelGraph, channel_graph

__all__ = ["ChannelPlan", "channel_plan", "CRITERIA"]

CRITERIA = ("l1", "l2")
Sparsity = Union[float, Mapping[str, Union[float, int]]]


@dataclass(frozen=True)
class ChannelPlan:
    """What :func:`remove_channels` removes.

    Attributes:
        groups: per prunable group, the names of its tied Dense/Conv2D layers (the first names the group).
        kept: producer name -> sorted output channels it keeps.
        widths: producer name -> new number of units/filters (only the layers that shrink).
        keep_in: layer name -> input channel positions it keeps (every layer that reads a removed channel).
        keep_out: layer name -> output channel positions it keeps (producers, depthwise convolutions).
        unprunable: first layer of each group left whole -> why.
        graph: the traced :class:`~sparsify_keras.channels.graph.ChannelGraph`.
        scores: the prunable groups' labels (``0 .. n - 1``, in group order) and criteria, as the core's
            selection (and torch's label selectors) take them.
        removed_labels: the labels of ``scores`` chosen for removal.
    """

    groups: List[Tuple[str, ...]]
    kept: Dict[str, np.ndarray]
    widths: Dict[str, int]
    keep_in: Dict[str, np.ndarray]
    keep_out: Dict[str, np.ndarray]
    unprunable: Dict[str, str]
    graph: ChannelGraph
    scores: ChannelScores
    removed_labels: List[int]

    @property
    def removed_fraction(self) -> float:
        """Fraction of the prunable groups' channels removed."""
        total = sum(self.graph.out_atoms[g[0]].size for g in self.groups)
        return 1.0 - sum(self.kept[g[0]].size for g in self.groups) / total if total else 0.0


def _groups(graph: ChannelGraph, roots: np.ndarray) -> List[Tuple[List[str], np.ndarray]]:
    """Producers joined by shared labels, in call order, with the group's labels (roots) in channel order."""
    owner: Dict[int, int] = {}
    members: List[List[str]] = []
    for name in graph.producers:
        r = set(roots[graph.out_atoms[name]].tolist())
        hit = sorted({owner[x] for x in r if x in owner})
        if not hit:
            members.append([name])
            gid = len(members) - 1
        else:
            gid = hit[0]
            members[gid].append(name)
            for other in hit[1:]:
                members[gid].extend(members[other])
                members[other] = []
                owner.update({x: gid for x, g in owner.items() if g == other})
        owner.update({x: gid for x in r})
    out = []
    for names in members:
        if names:
            names = sorted(names, key=graph.producers.index)
            labels = np.unique(np.concatenate([roots[graph.out_atoms[n]] for n in names]))
            out.append((names, labels))
    return out


def _criteria(model, graph: ChannelGraph, roots: np.ndarray, names: List[str], labels: np.ndarray,
              criterion: str) -> np.ndarray:
    """L1 (sum |w|) or L2 (sqrt of sum w^2) of every label's kernel slices, over all its producers."""
    total = np.zeros(labels.size, dtype=np.float64)
    for name in names:
        kernel = np.asarray(model.get_layer(name).get_weights()[0], dtype=np.float64)
        flat = kernel.reshape(-1, kernel.shape[-1])
        per = np.abs(flat).sum(0) if criterion == "l1" else (flat ** 2).sum(0)
        np.add.at(total, np.searchsorted(labels, roots[graph.out_atoms[name]]), per)
    return total if criterion == "l1" else np.sqrt(total)


def _check_args(sparsity, criterion, round_to) -> None:
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    if isinstance(round_to, bool) or not isinstance(round_to, Integral) or round_to < 1:
        raise ValueError(f"round_to must be a positive integer, got {round_to!r}")
    values = sparsity.items() if isinstance(sparsity, Mapping) else [("sparsity", sparsity)]
    for key, v in values:
        where = "sparsity" if key == "sparsity" else f"sparsity[{key!r}]"
        if isinstance(v, bool) or not isinstance(v, Real):
            raise TypeError(f"{where} must be a fraction in [0, 1) or, per layer, a count of channels; got {v!r}")
        if isinstance(v, Integral) and key != "sparsity":
            if v < 0:
                raise ValueError(f"{where} = {v} is negative; a count of channels to remove must be >= 0")
        elif not (np.isfinite(float(v)) and 0.0 <= float(v) < 1.0):
            raise ValueError(f"{where} must be a fraction of channels to remove in [0, 1), got {v!r}")


def _per_group(sparsity: Sparsity, groups, left: Dict[str, str]) -> list:
    """The ratio or count asked for each prunable group (None: leave it whole)."""
    if not isinstance(sparsity, Mapping):
        return [float(sparsity)] * len(groups)
    asked: list = [None] * len(groups)
    index = {n: i for i, (names, _) in enumerate(groups) for n in names}
    for name, value in sparsity.items():
        if name not in index:
            if name in left:
                raise ValueError(f"sparsity names layer {name!r}, whose channels cannot be removed: {left[name]}")
            raise ValueError(f"sparsity names {name!r}, which is not a Dense or Conv2D layer of the model; "
                             f"prunable layers: {sorted(index)}")
        i = index[name]
        if asked[i] is not None and asked[i] != value:
            raise ValueError(f"sparsity gives {asked[i]!r} and {value!r} to layers of one tied group "
                             f"{list(groups[i][0])}: their channels are removed together")
        asked[i] = value
    return asked


def _counts(asked: list, scores: ChannelScores, round_to: int, groups) -> List[int]:
    counts = []
    for value, (names, labels), most in zip(asked, groups, max_prunable_per_group(scores)):
        n = labels.size
        if value is None:
            counts.append(0)
            continue
        k = int(value) if isinstance(value, Integral) else n_channels_to_prune(n, float(value))
        if k > most:
            raise ValueError(f"sparsity asks to remove {k} of the {n} channels of {names[0]!r}; at most {most} "
                             "can go (one channel must stay)")
        keep = min(n, -(-(n - k) // round_to) * round_to)     # kept count rounded up to a multiple of round_to
        counts.append(n - keep)
    return counts


def channel_plan(model, sparsity: Sparsity, criterion: str = "l1", round_to: int = 1) -> ChannelPlan:
    """Choose the channels :func:`~sparsify_keras.remove_channels` removes (nothing is changed).

    Args:
        model: a built Sequential or Functional Keras 3 model.
        sparsity: fraction of every prunable group's channels to remove, in [0, 1); or
            ``{layer name: fraction or count}`` for the named Dense/Conv2D layers only (others stay whole).
        criterion: ``"l1"`` or ``"l2"`` norm of each output channel's kernel slice (summed over tied layers).
        round_to: the kept count of every group is rounded up to a multiple of this (at most the group's size).

    Raises:
        TypeError / ValueError: a bad argument, or a model or layer that is not supported.
    """
    _check_args(sparsity, criterion, round_to)
    graph = channel_graph(model)
    roots = graph.union.roots()
    fixed = graph.fixed_roots()
    prunable, unprunable, left = [], {}, {}
    for names, labels in _groups(graph, roots):
        reasons = [fixed[r] for r in labels.tolist() if r in fixed]
        if reasons:
            unprunable[names[0]] = reasons[0]
            left.update({n: reasons[0] for n in names})
        else:
            prunable.append((names, labels))
    offsets = np.cumsum([0] + [lab.size for _, lab in prunable])
    scores = ChannelScores([np.arange(o, o + lab.size) for o, (_, lab) in zip(offsets, prunable)],
                           [_criteria(model, graph, roots, names, lab, criterion) for names, lab in prunable])
    counts = _counts(_per_group(sparsity, prunable, left), scores, round_to, prunable)
    chosen = np.asarray(least_important_labels(scores, counts), dtype=np.int64)
    removed = np.concatenate([np.zeros(0, np.int64)] + [lab[chosen[(chosen >= o) & (chosen < o + lab.size)] - o]
                                                         for o, (_, lab) in zip(offsets, prunable)])
    return _plan(graph, roots, prunable, unprunable, removed, (scores, chosen.tolist()))


def _plan(graph: ChannelGraph, roots: np.ndarray, prunable, unprunable, removed: np.ndarray,
          selection: Tuple[ChannelScores, List[int]]) -> ChannelPlan:
    keep_in, keep_out, kept, widths = {}, {}, {}, {}
    for name, atoms in graph.in_atoms.items():
        gone = np.isin(roots[atoms], removed)
        if gone.any():
            keep_in[name] = np.flatnonzero(~gone)
    for name, kind in graph.kinds.items():
        gone = np.isin(roots[graph.out_atoms[name]], removed)
        if kind == "producer":
            kept[name] = np.flatnonzero(~gone)
            if gone.any():
                widths[name] = int((~gone).sum())
        if kind in ("producer", "depthwise") and gone.any():
            keep_out[name] = np.flatnonzero(~gone)
    return ChannelPlan([tuple(names) for names, _ in prunable], kept, widths, keep_in, keep_out, unprunable, graph,
                       *selection)
