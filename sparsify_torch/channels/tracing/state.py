"""The mutable state of one trace: atoms, the union-find that joins them, reasons, and every tensor's origin.

Every output channel of a producing layer gets an integer *atom*; every tensor
of the traced pass gets an *origin* tensor of its shape saying which atom each
element carries (:data:`FREE`: a constant that follows the shape, :data:`DATA`:
anything that cannot be removed). Op rules (:mod:`.op_rules`) and layer
boundaries (:mod:`.units`) read and write origins through :class:`TraceState`.

Example:
    >>> import torch
    >>> state = TraceState(torch.nn.Linear(2, 2), max_ops=10)
    >>> atoms = state.new_atoms(3, "out", "fc")
    >>> state.union(atoms[:1], atoms[2:])
    >>> state.fix(atoms[1:2], "read by a matmul")
    >>> state.uf.roots().tolist(), state.fixed.tolist(), state.reasons
    ([0, 1, 0], [-1, 0, -1], ['read by a matmul'])
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, List, Set, Tuple

import numpy as np
import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from sparsify.channels.groups import LabelUnionFind

from .op_args import flat_tensors
from .records import DATA, FREE, UnitRecord

__all__ = ["VIRTUAL", "MAX_PARAM_ATOMS", "TraceState"]

VIRTUAL = -3  # VIRTUAL - k: element k of the free parameters, not an atom until a pointwise op reads it
MAX_PARAM_ATOMS = 1 << 18  # a free parameter larger than this is treated as DATA


class TraceState:
    """Atoms, reasons, units and origins of one trace (see the module docstring).

    ``stack`` holds the modules being called (innermost last) with whether each was
    entered as a unit; ``suppress`` counts the units being run (their inner ops are
    not followed); ``fn_name`` is the torch function being dispatched.
    """

    def __init__(self, model: nn.Module, max_ops: int) -> None:
        self.uf = LabelUnionFind()
        self.atom_ranges: List[Tuple[int, int, str, str]] = []
        self._fixed_buffer = np.zeros(0, dtype=np.int64)
        self.fixed = self._fixed_buffer
        self.reasons: List[str] = []
        self._reason_index: Dict[str, int] = {}
        self.units: Dict[str, UnitRecord] = {}
        self.params: Dict[str, Tuple[int, Tuple[int, ...]]] = {}
        self.split_owners: Set[str] = set()
        self.origins = WeakIdKeyDictionary()
        self.names = {m: n for n, m in model.named_modules()}
        self.tensor_names: Dict[int, Tuple[str, Any]] = {}
        for n, p in model.named_parameters():
            self.tensor_names[id(p)] = (n, weakref.ref(p))
        for n, b in model.named_buffers():
            if b is not None:
                self.tensor_names[id(b)] = (n, weakref.ref(b))
        self.virtual: List[Tuple[int, int, str, Tuple[int, ...]]] = []  # (first key, numel, name, shape)
        self._vstarts = np.zeros(0, dtype=np.int64)
        self._vnext = 0
        self.param_fixed: Dict[str, str] = {}
        self.stack: List[Tuple[nn.Module, bool]] = []
        self.suppress = 0
        self.fn_name = ""
        self.errors: List[str] = []
        self.n_ops = 0
        self.max_ops = max_ops

    # --- atoms ------------------------------------------------------------------------------------------
    def new_atoms(self, count: int, kind: str, owner: str) -> np.ndarray:
        ids = self.uf.new(count)
        self.atom_ranges.append((int(ids[0]) if count else len(self.uf), int(count), kind, owner))
        if len(self.uf) > self._fixed_buffer.size:
            grown = np.full(max(len(self.uf), 2 * self._fixed_buffer.size), -1, dtype=np.int64)
            grown[:self.fixed.size] = self.fixed
            self._fixed_buffer = grown
        self.fixed = self._fixed_buffer[:len(self.uf)]
        return ids

    def fix(self, values, reason: str) -> None:
        values = np.asarray(values, dtype=np.int64).reshape(-1)
        virtual = values[values <= VIRTUAL]
        if virtual.size:
            for p, keys in self._virtual_by_param(virtual).items():
                name = self.virtual[p][2]
                if name in self.params:
                    values = np.concatenate([values, self._materialized(p, keys)])
                else:
                    self.param_fixed.setdefault(name, reason)
        atoms = np.unique(values[values >= 0])
        if not atoms.size:
            return
        index = self._reason_index.get(reason)
        if index is None:
            index = self._reason_index[reason] = len(self.reasons)
            self.reasons.append(reason)
        unset = self.fixed[atoms] < 0
        self.fixed[atoms[unset]] = index

    def _virtual_by_param(self, virtual: np.ndarray) -> Dict[int, np.ndarray]:
        keys = np.unique(VIRTUAL - virtual)
        owner = np.searchsorted(self._vstarts, keys, side="right") - 1
        return {int(p): keys[owner == p] for p in np.unique(owner)}

    def _materialized(self, p: int, keys: np.ndarray) -> np.ndarray:
        kstart, numel, name, shape = self.virtual[p]
        if name not in self.params:
            ids = self.new_atoms(numel, "param", name)
            self.params[name] = (int(ids[0]), shape)
            if name in self.param_fixed:
                self.fix(ids, self.param_fixed[name])
        return self.params[name][0] + (keys - kstart)

    def materialize(self, values: np.ndarray) -> np.ndarray:
        """Replace virtual parameter elements by atoms (allocating the parameter's atoms on first use)."""
        virtual = values <= VIRTUAL
        if not virtual.any():
            return values
        values = values.copy()
        keys = VIRTUAL - values[virtual]
        owner = np.searchsorted(self._vstarts, keys, side="right") - 1
        mapped = np.empty(keys.size, dtype=np.int64)
        for p in np.unique(owner).tolist():
            sel = owner == p
            mapped[sel] = self._materialized(p, keys[sel])
        values[virtual] = mapped
        return values

    def union(self, a, b) -> None:
        a = np.asarray(a, dtype=np.int64).reshape(-1)
        b = np.asarray(b, dtype=np.int64).reshape(-1)
        keep = (a >= 0) & (b >= 0) & (a != b)
        if keep.any():
            pairs = np.unique(np.stack([a[keep], b[keep]], axis=1), axis=0)
            self.uf.union(pairs[:, 0], pairs[:, 1])

    def where(self) -> str:
        for module, _ in reversed(self.stack):
            name = self.names.get(module)
            if name:
                return f" in {name!r}"
        return ""

    # --- origins ----------------------------------------------------------------------------------------
    def origin(self, t: torch.Tensor) -> torch.Tensor:
        """Origin of ``t``. A free parameter (or buffer) gets *virtual* elements: they turn into atoms only
        when a pointwise op or a layer reads them (:meth:`materialize`), so weights read by a matmul cost
        nothing."""
        o = self.origins.get(t)
        if o is not None:
            return o
        entry = self.tensor_names.get(id(t))
        if entry is not None and entry[1]() is t and t.is_floating_point() and 0 < t.numel() <= MAX_PARAM_ATOMS:
            kstart = self._vnext
            self._vnext += t.numel()
            self.virtual.append((kstart, t.numel(), entry[0], tuple(t.shape)))
            self._vstarts = np.append(self._vstarts, kstart)
            o = (VIRTUAL - torch.arange(kstart, kstart + t.numel(), dtype=torch.int64)).view(t.shape)
        else:
            o = torch.full((), DATA, dtype=torch.int64).expand(t.shape)
        self.origins[t] = o
        return o

    def set_origin(self, t: torch.Tensor, o: torch.Tensor) -> None:
        if tuple(o.shape) != tuple(t.shape):
            o = o.expand(t.shape) if o.dim() <= t.dim() else o.reshape(t.shape)
        self.origins[t] = o

    def canon(self, o: torch.Tensor, materialize: bool = False) -> torch.Tensor:
        """Compact (stride-0 dims squeezed to size 1) origin with atoms replaced by their label root;
        with ``materialize``, virtual parameter elements become atoms first."""
        idx = tuple(slice(0, 1) if (o.stride(d) == 0 and o.shape[d] > 1) else slice(None) for d in range(o.dim()))
        small = o[idx].contiguous().numpy()
        if materialize:
            small = self.materialize(small)
        mask = small >= 0
        if mask.any():
            small = small.copy()
            small[mask] = self.uf.find(small[mask])
        return torch.from_numpy(small)

    # --- reading and writing several tensors -----------------------------------------------------------
    def fix_inputs(self, args, kwargs, reason: str) -> None:
        for t in flat_tensors((args, kwargs)):
            self.fix(self.canon(self.origin(t)).numpy(), reason)

    def set_data(self, out) -> None:
        for t in flat_tensors(out):
            self.set_origin(t, torch.full((), DATA, dtype=torch.int64).expand(t.shape))

    def positions(self, o: torch.Tensor, dim: int, size: int, reason: str) -> np.ndarray:
        """Per position of ``dim``: its one atom (atoms meeting in a position are joined; DATA fixes them)."""
        c = self.canon(o, materialize=True)
        dim = dim % c.dim()
        if c.shape[dim] == 1:
            c = c.expand(*c.shape[:dim], size, *c.shape[dim + 1:])
        rows = c.movedim(dim, 0).reshape(size, -1)
        lo, hi = rows.amin(1), rows.amax(1)
        out = hi.clone().numpy()
        for p in np.flatnonzero((lo != hi).numpy()):
            vals = np.unique(rows[p].numpy())
            atoms = vals[vals >= 0]
            if (vals == DATA).any():
                self.fix(atoms, reason)
            if atoms.size:
                self.union(np.repeat(atoms[:1], atoms.size - 1), atoms[1:])
                out[p] = atoms[0]
            else:
                out[p] = DATA if (vals == DATA).any() else FREE
        return out

