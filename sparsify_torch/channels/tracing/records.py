"""What a trace produces: plain data (NumPy arrays and names), no reference to the model.

Example:
    >>> rec = UnitRecord("fc", LayerKind.LINEAR, 3, -1, np.array([0, 1, FREE]))
    >>> rec.kind == "linear", rec.out_atoms.size, rec.blocks
    (True, 0, 1)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Set, Tuple

import numpy as np

from sparsify.channels.groups import LabelUnionFind

from .kinds import LayerKind

__all__ = ["FREE", "DATA", "UnitRecord", "ChannelTrace", "TraceBudgetExceeded"]

FREE = -1  # a constant that follows the tensor's shape (zeros_like, a scalar): never constrains a channel
DATA = -2  # an element no channel can remove (the model input, a constant of fixed size)


class TraceBudgetExceeded(RuntimeError):
    """The traced pass ran more aten ops than ``max_ops`` allows."""


@dataclass
class UnitRecord:
    """What tracing learned about one layer.

    Attributes:
        name: qualified module name.
        kind: see :class:`~.kinds.LayerKind`.
        in_size: size of the channel dimension the layer reads (or passes through).
        in_dim: that dimension in the layer's input (-1: last; 1: channels first).
        in_positions: per input position, the atom it carries (or FREE/DATA).
        out_atoms: per output channel of a producer, its atom (empty otherwise).
        multiplier: output channels per input channel of a depthwise layer.
        blocks: groups of a grouped convolution or GroupNorm (1 otherwise).
    """

    name: str
    kind: LayerKind
    in_size: int
    in_dim: int
    in_positions: np.ndarray
    out_atoms: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    multiplier: int = 1
    blocks: int = 1


@dataclass
class ChannelTrace:
    """Result of :func:`trace_channels` (plain data; no reference to the model).

    Attributes:
        uf: union-find over atoms; a label is a set of atoms removed together.
        atom_ranges: ``(first atom, count, kind, owner)`` of every block of atoms: kind ``"out"`` (the
            output channels of the layer ``owner``) or ``"param"`` (the elements of a free parameter).
        fixed: per atom, index into ``reasons`` of why it must stay (-1: free to prune).
        reasons: the reasons, in the order they were found.
        units: every layer met, by name, in call order.
        params: free parameters and buffers with atoms: name -> (first atom, shape).
        split_owners: modules whose stored split sizes surgery must update.
        n_ops: number of aten ops traced.
        errors: ops the tracer failed to follow (their channels were fixed instead).
    """

    uf: LabelUnionFind
    atom_ranges: List[Tuple[int, int, str, str]]
    fixed: np.ndarray
    reasons: List[str]
    units: Dict[str, UnitRecord]
    params: Dict[str, Tuple[int, Tuple[int, ...]]]
    split_owners: Set[str]
    n_ops: int
    errors: List[str] = field(default_factory=list)
