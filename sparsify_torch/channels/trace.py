"""Channel tracing: follow every channel of a model through one forward pass, op by op.

The entry point runs once under a ``TorchDispatchMode``. Every output channel
of a *producer* (a convolution or linear layer) gets an integer *atom* id, and
every tensor of the pass gets an *origin* tensor of the same shape that says
which atom each element carries (``FREE``: a constant that follows the shape,
``DATA``: anything that cannot be removed, such as the model input). Each
aten op maps the origins of its inputs to the origins of its outputs:

- layout ops (view, permute, cat, split, slice, ...) are replayed on the origin
  tensors, so indices are exact whatever the reshape or shuffle;
- pointwise ops join (union) the atoms meeting in one element: those channels
  must be removed together (a residual add, a gate, a layer scale);
- reductions and pooling keep a channel only if they do not mix channels;
- anything else (matmul, an unknown op, a split with sizes stored in the model,
  a partial slice of the channels) *fixes* the atoms it reads, with a reason:
  they will not be pruned.

Layers are handled as units at their module boundary: conv/linear read input
positions and produce new atoms; BatchNorm, LayerNorm, GroupNorm, PReLU and
depthwise convolutions pass channels through; grouped convolutions tie the
same position of every block together. Attention modules are opaque units:
what goes in is fixed. The result, a :class:`ChannelTrace`, is plain data
(NumPy arrays and names) that :mod:`.graph` turns into channel groups.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Conv2d(4, 2, 1))
    >>> trace = trace_channels(net, "forward", (torch.zeros(1, 3, 8, 8),), {})
    >>> trace.units["2"].in_positions.tolist() == trace.units["0"].out_atoms.tolist()
    True
"""
from __future__ import annotations

import contextlib
import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from sparsify.channel_groups import LabelUnionFind, refine_reshape, shrinking_factor

__all__ = ["FREE", "DATA", "UnitRecord", "ChannelTrace", "trace_channels", "unit_kind", "STORED_SPLIT_OWNERS",
           "TraceBudgetExceeded"]

FREE = -1  # a constant that follows the tensor's shape (zeros_like, a scalar): never constrains a channel
DATA = -2  # an element no channel can remove (the model input, a constant of fixed size)
VIRTUAL = -3  # VIRTUAL - k: element k of the free parameters, not an atom until a pointwise op reads it
MAX_PARAM_ATOMS = 1 << 18  # a free parameter larger than this is treated as DATA


class TraceBudgetExceeded(RuntimeError):
    """The traced pass ran more aten ops than ``max_ops`` allows."""


# --- what each op does to channels --------------------------------------------------------------------------
_IDENTITY = {"clone", "contiguous", "alias", "detach", "lift_fresh", "lift_fresh_copy", "_to_copy", "to",
             "_conj", "resolve_conj", "resolve_neg", "dropout", "feature_dropout", "alpha_dropout"}
_REPLAY = {"permute", "transpose", "t", "expand", "expand_as", "unsqueeze", "squeeze", "repeat", "cat", "stack",
           "flip", "movedim", "swapaxes", "swapdims", "numpy_T", "_unsafe_view", "view", "reshape", "_reshape_alias",
           "view_as", "reshape_as", "flatten", "unflatten", "hstack", "vstack", "concat", "concatenate"}
_RESHAPES = {"view", "_unsafe_view", "reshape", "_reshape_alias", "view_as", "reshape_as", "flatten", "unflatten"}
_FACTORY_FREE = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like"}
_FACTORY_DATA = {"empty", "zeros", "ones", "full", "arange", "rand", "randn", "randint", "scalar_tensor", "linspace",
                 "logspace", "eye", "empty_strided", "new_empty", "new_zeros", "new_ones", "new_full",
                 "new_empty_strided", "tensor", "_efficientzerotensor", "randperm", "zeros_like_", "normal"}
_FILL = {"bernoulli_", "normal_", "uniform_", "random_", "exponential_", "fill_", "zero_", "geometric_", "cauchy_",
         "log_normal_"}
_EXTRA_POINTWISE = {"hardswish", "hardswish_", "hardtanh", "hardtanh_", "relu6", "leaky_relu", "leaky_relu_", "elu",
                    "elu_", "celu", "celu_", "selu", "selu_", "mish", "mish_", "softplus", "softshrink", "hardshrink",
                    "gelu", "gelu_", "silu", "silu_", "threshold", "threshold_", "native_dropout", "bernoulli",
                    "rrelu_with_noise", "masked_fill", "masked_fill_", "where", "clamp", "clamp_", "clamp_min",
                    "clamp_max", "clamp_min_", "clamp_max_", "lerp", "addcmul", "addcdiv", "nan_to_num",
                    "hardsigmoid", "hardsigmoid_", "logit", "_masked_scale", "glu_jvp", "softsign", "tanhshrink",
                    "_prelu_kernel", "prelu", "log_sigmoid_forward", "rrelu", "rrelu_"}
_SHAPE_KEEPING_REDUCTIONS = {"_softmax", "_log_softmax", "softmax", "log_softmax", "cumsum", "cumprod",
                             "logcumsumexp", "cummax", "cummin", "_safe_softmax"}
_REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "prod",
               "logsumexp", "linalg_vector_norm", "norm", "nansum", "nanmean", "argmax", "argmin", "any", "all",
               "count_nonzero", "median", "nanmedian", "mode", "aminmax"} | _SHAPE_KEEPING_REDUCTIONS
_SELECTING = {"slice", "select", "narrow", "split", "split_with_sizes", "unbind", "chunk", "index", "index_select",
              "gather", "roll", "unfold", "_unsafe_index", "tensor_split"}
_SPATIAL_PREFIXES = ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "_adaptive_avg_pool",
                     "upsample_", "_upsample_", "reflection_pad", "replication_pad", "fractional_max_pool",
                     "lp_pool", "max_unpool")
_SHUFFLES = {"pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle"}
_NO_READ = {"sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "dim", "is_contiguous",
            "numel", "is_same_size", "_has_compatible_shallow_copy_type", "set_"}


# --- modules with split sizes stored in the module: how to keep them consistent --------------------------------
def _fix_mixed_conv(module: nn.Module) -> None:
    convs = list(module.values())
    module.splits = [int(c.in_channels) for c in convs]
    module.in_channels = sum(module.splits)
    module.out_channels = sum(int(c.out_channels) for c in convs)


def _fix_cross_stage(module: nn.Module) -> None:
    conv = getattr(module.conv_exp, "conv", module.conv_exp)
    module.expand_chs = int(conv.out_channels)


#: class name -> (split policy, function that updates the stored sizes after surgery). "sizes": the pieces may
#: shrink independently (the stored list is rewritten); "equal": the pieces shrink equally (channel i of every
#: piece goes together) and the stored piece size is rewritten.
STORED_SPLIT_OWNERS: Dict[str, Tuple[str, Callable[[nn.Module], None]]] = {
    "MixedConv2d": ("sizes", _fix_mixed_conv),
    "CrossStage": ("equal", _fix_cross_stage),
    "CrossStage3": ("equal", _fix_cross_stage),
}


def unit_kind(module: nn.Module) -> str:
    """How tracing treats ``module`` at its boundary.

    ``"conv"``, ``"linear"``, ``"convt"``: read input channels, produce new ones;
    ``"gconv"``: a grouped convolution (every block keeps the same positions);
    ``"dw"``: a convolution with one input channel per group (depthwise, maybe
    with a multiplier), passes channels through; ``"norm"``: per-channel layers
    (BatchNorm, InstanceNorm, PReLU); ``"lnorm"``/``"gnorm"``: LayerNorm/RMSNorm
    and GroupNorm (pass channels through, statistics over several channels);
    ``"opaque"``: not followed inside (attention, recurrent layers, embeddings);
    ``""``: traced through (containers, activations, anything else).

    Example:
        >>> unit_kind(nn.Conv2d(4, 4, 3, groups=4)), unit_kind(nn.Conv2d(4, 8, 3, groups=2)), unit_kind(nn.ReLU())
        ('dw', 'gconv', '')
    """
    if isinstance(module, nn.modules.conv._ConvNd):
        if module.transposed:
            return "convt" if module.groups == 1 else "opaque"
        if module.groups == 1:
            return "conv"
        if module.in_channels == module.groups:
            return "dw"
        return "gconv"
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
        return "norm"
    if isinstance(module, nn.PReLU):
        return "norm" if module.num_parameters > 1 else ""
    rms = getattr(nn, "RMSNorm", ())
    if isinstance(module, (nn.LayerNorm,) + ((rms,) if rms else ())):
        return "lnorm" if len(module.normalized_shape) == 1 else "opaque"
    if isinstance(module, nn.GroupNorm):
        return "gnorm"
    if isinstance(module, (nn.MultiheadAttention, nn.RNNBase, nn.Embedding, nn.EmbeddingBag, nn.LocalResponseNorm,
                           nn.modules.rnn.RNNCellBase, nn.Bilinear)):
        return "opaque"
    return ""


_PRODUCERS = {"conv", "linear", "convt", "gconv"}
_CONSUMERS = {"conv", "linear", "convt", "gconv"}
_THROUGH = {"dw", "norm", "lnorm", "gnorm"}


@dataclass
class UnitRecord:
    """What tracing learned about one layer.

    Attributes:
        name: qualified module name.
        kind: see :func:`unit_kind`.
        in_size: size of the channel dimension the layer reads (or passes through).
        in_dim: that dimension in the layer's input (-1: last; 1: channels first).
        in_positions: per input position, the atom it carries (or FREE/DATA).
        out_atoms: per output channel of a producer, its atom (empty otherwise).
        multiplier: output channels per input channel of a ``"dw"`` layer.
        blocks: groups of a ``"gconv"``/``"gnorm"`` layer (1 otherwise).
    """

    name: str
    kind: str
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


class _State:
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

    def owner_policy(self) -> Tuple[Optional[str], Optional[str]]:
        for module, _ in reversed(self.stack):
            entry = STORED_SPLIT_OWNERS.get(type(module).__name__)
            if entry is not None:
                return entry[0], self.names.get(module)
            if unit_kind(module) == "" and not isinstance(module, (nn.Sequential, nn.ModuleList, nn.ModuleDict)):
                return None, None  # the innermost real module decides
        return None, None

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


def _flat_tensors(obj, out: Optional[List[torch.Tensor]] = None) -> List[torch.Tensor]:
    out = [] if out is None else out
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _flat_tensors(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _flat_tensors(x, out)
    return out


def _map_tensors(obj, fn):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, list):
        return [_map_tensors(x, fn) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_map_tensors(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def _arg(func, args, kwargs, name: str, default=None):
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            if name in kwargs:
                return kwargs[name]
            if i < len(args):
                return args[i]
            return default
    return default


def _varies(c: torch.Tensor, dim: int) -> bool:
    if c.shape[dim] <= 1:
        return False
    return bool((c.amax(dim) != c.amin(dim)).any())


def _norm_dims(dims, ndim: int) -> List[int]:
    if dims is None:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    dims = [d % ndim if ndim else 0 for d in dims]
    return sorted(set(dims)) if dims else list(range(ndim))


class _Tracer:
    def __init__(self, state: _State) -> None:
        self.s = state

    # --- helpers -----------------------------------------------------------------------------------------
    def fix_inputs(self, args, kwargs, reason: str) -> None:
        for t in _flat_tensors((args, kwargs)):
            self.s.fix(self.s.canon(self.s.origin(t)).numpy(), reason)

    def set_data(self, out) -> None:
        for t in _flat_tensors(out):
            self.s.set_origin(t, torch.full((), DATA, dtype=torch.int64).expand(t.shape))

    def positions(self, o: torch.Tensor, dim: int, size: int, reason: str) -> np.ndarray:
        """Per position of ``dim``: its one atom (atoms meeting in a position are joined; DATA fixes them)."""
        c = self.s.canon(o, materialize=True)
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
                self.s.fix(atoms, reason)
            if atoms.size:
                self.s.union(np.repeat(atoms[:1], atoms.size - 1), atoms[1:])
                out[p] = atoms[0]
            else:
                out[p] = DATA if (vals == DATA).any() else FREE
        return out

    # --- op handling -------------------------------------------------------------------------------------
    def handle(self, func, args, kwargs, out) -> None:
        s = self.s
        name = func.overloadpacket.__name__
        outs = _flat_tensors(out)
        if name in _NO_READ:
            return
        if not outs:
            if name not in ("_local_scalar_dense", "equal", "is_nonzero", "allclose"):
                return
            self.fix_inputs(args, kwargs, f"{func} reads channel values{s.where()}")
            return
        tags = set(func.tags)
        if name in _FACTORY_FREE:
            for t in outs:
                s.set_origin(t, torch.full((), FREE, dtype=torch.int64).expand(t.shape))
            return
        if name in _FACTORY_DATA:
            self.set_data(out)
            return
        if name in _FILL:
            return  # values replaced in place, positions unchanged
        if name == "copy_":
            self.copy_(args)
            return
        if name == "as_strided_" and isinstance(args[0], torch.Tensor) and \
                tuple(_arg(func, args, kwargs, "size")) == tuple(s.origin(args[0]).shape) and \
                not _arg(func, args, kwargs, "storage_offset"):
            return  # re-strides a result in place (memory format); logical layout unchanged
        if name in _IDENTITY:
            src = args[0]
            if isinstance(src, torch.Tensor):
                for t in outs:
                    if t.shape == src.shape:
                        s.set_origin(t, s.origin(src))
                    else:
                        self.set_data(t)
            return
        if name in _SHUFFLES:
            self.shuffle(func, name, args, kwargs, out)
            return
        if name in _RESHAPES:
            self.reshape(func, args, kwargs, out)
            return
        if name in _SELECTING:
            self.select(func, name, args, kwargs, out)
            return
        if name in _REPLAY:
            self.replay(func, args, kwargs, out)
            return
        if name == "constant_pad_nd":
            o = s.origin(args[0])
            pad = _arg(func, args, kwargs, "pad")
            res = torch.constant_pad_nd(o.contiguous(), pad, DATA)
            s.set_origin(outs[0], res)
            return
        if name.startswith(_SPATIAL_PREFIXES) or name == "grid_sampler_2d" or name == "grid_sampler":
            self.spatial(func, name, args, kwargs, out)
            return
        if name in _REDUCTIONS or torch.Tag.reduction in tags:
            self.reduction(func, name, args, kwargs, out)
            return
        if torch.Tag.pointwise in tags or name in _EXTRA_POINTWISE:
            self.pointwise(func, name, args, kwargs, out)
            return
        self.fix_inputs(args, kwargs, f"op {name} may mix channels{s.where()}")
        self.set_data(out)

    def copy_(self, args) -> None:
        s = self.s
        dst, src = args[0], args[1]
        so = s.origin(src)
        if dst._is_view():
            base = dst._base
            reason = f"in-place write into a view of a tensor{s.where()}"
            s.fix(s.canon(so).numpy(), reason)
            if base is not None:
                s.fix(s.canon(s.origin(base)).numpy(), reason)
            s.fix(s.canon(s.origin(dst)).numpy(), reason)
            return
        s.set_origin(dst, so.expand(dst.shape) if so.dim() <= dst.dim() else so)

    def replay(self, func, args, kwargs, out) -> None:
        s = self.s

        def sub(t):
            return s.origin(t)

        def call(materialize: bool):
            a = _map_tensors(args, (lambda t: sub(t).contiguous()) if materialize else sub)
            k = _map_tensors(kwargs, (lambda t: sub(t).contiguous()) if materialize else sub)
            return func(*a, **k)

        try:
            res = call(False)
        except RuntimeError:
            res = call(True)
        for t, o in zip(_flat_tensors(out), _flat_tensors(res)):
            s.set_origin(t, o)

    def reshape(self, func, args, kwargs, out) -> None:
        s = self.s
        src = args[0]
        dst = _flat_tensors(out)[0]
        c = s.canon(s.origin(src)).expand(src.shape)
        if c.numel() and (c >= 0).any():
            runs = refine_reshape(tuple(src.shape), tuple(dst.shape))
            if runs is None:
                s.fix(c.numpy(), f"reshape {tuple(src.shape)} -> {tuple(dst.shape)} re-deals channels{s.where()}")
            else:
                refined = [size for run in runs for size in run.sizes]
                cr = c.contiguous().reshape(refined)
                offset = 0
                for run in runs:
                    axes = list(range(offset, offset + len(run.sizes)))
                    varying = [k for k, ax in enumerate(axes) if _varies(cr, ax)]
                    if len(varying) >= 2:
                        keep = shrinking_factor(run, varying)
                        others = [axes[k] for k in varying if k != keep]
                        rest = [ax for ax in range(cr.dim()) if ax not in others]
                        cols = cr.permute(rest + others).reshape(-1, int(np.prod([cr.shape[a] for a in others])))
                        cols = cols.numpy()
                        if (cols == DATA).any():
                            bad = (cols == DATA).any(axis=1)
                            s.fix(cols[bad], f"reshape of channels mixed with fixed data{s.where()}")
                        for j in range(1, cols.shape[1]):
                            s.union(cols[:, 0], cols[:, j])
                    offset += len(run.sizes)
        self.replay(func, args, kwargs, out)

    def shuffle(self, func, name, args, kwargs, out) -> None:
        s = self.s
        src = args[0]
        if name in ("channel_shuffle", "native_channel_shuffle") and src.dim() >= 2:
            groups = int(_arg(func, args, kwargs, "groups"))
            size = src.shape[1]
            pos = self.positions(s.origin(src), 1, size, f"channel shuffle{s.where()}")
            blocks = pos.reshape(groups, size // groups)
            for j in range(1, groups):
                s.union(blocks[0], blocks[j])
        self.replay(func, args, kwargs, out)

    def select(self, func, name, args, kwargs, out) -> None:
        s = self.s
        src = args[0]
        if not isinstance(src, torch.Tensor) or src.dim() == 0:
            self.replay(func, args, kwargs, out)
            return
        c = s.canon(s.origin(src))
        if not (c >= 0).any():
            self.replay(func, args, kwargs, out)
            return
        nd = src.dim()
        where = s.where()
        if name == "slice":
            dim = int(_arg(func, args, kwargs, "dim", 0)) % nd
            start, end = _arg(func, args, kwargs, "start"), _arg(func, args, kwargs, "end")
            step = _arg(func, args, kwargs, "step", 1) or 1
            size = src.shape[dim]
            full = (start is None or start == 0 or start <= -size) and (end is None or end >= size) and step == 1
            if not full and _varies(c, dim):
                s.fix(c.numpy(), f"slice [{start}:{end}:{step}] of channels (dim {dim}){where}")
        elif name in ("select", "unfold", "roll"):
            dims = _arg(func, args, kwargs, "dims" if name == "roll" else "dim", 0)
            for d in _norm_dims(dims, nd):
                if _varies(c, d):
                    s.fix(c.numpy(), f"{name} along channels (dim {d}){where}")
                    break
        elif name in ("index_select", "gather"):
            d = int(_arg(func, args, kwargs, "dim")) % nd
            if _varies(c, d):
                s.fix(c.numpy(), f"{name} of channels (dim {d}){where}")
        elif name in ("index", "_unsafe_index"):
            indices = _arg(func, args, kwargs, "indices")
            for d, idx in enumerate(indices or []):
                if idx is not None and d < nd and _varies(c, d):
                    s.fix(c.numpy(), f"indexing channels (dim {d}){where}")
                    break
        elif name in ("split", "split_with_sizes", "unbind", "chunk", "tensor_split"):
            d = int(_arg(func, args, kwargs, "dim", 0)) % nd
            if _varies(c, d):
                self.split(func, name, src, d, c, _flat_tensors(out))
        self.replay(func, args, kwargs, out)

    def split(self, func, name, src, dim, c, pieces) -> None:
        s = self.s
        sizes = [int(p.shape[dim]) for p in pieces]
        policy, owner = s.owner_policy()
        equal = len(set(sizes)) == 1 and len(sizes) > 1
        if equal and (s.fn_name == "chunk" or policy == "equal"):
            pos = self.positions(s.origin(src), dim, int(src.shape[dim]), f"split{s.where()}")
            blocks = pos.reshape(len(sizes), sizes[0])
            if (blocks == DATA).any(axis=0).any():
                s.fix(blocks[:, (blocks == DATA).any(axis=0)], f"split of channels mixed with fixed data{s.where()}")
            for j in range(1, len(sizes)):
                s.union(blocks[0], blocks[j])
            if policy == "equal" and owner:
                s.split_owners.add(owner)
        elif policy == "sizes" and name == "split_with_sizes" and owner:
            s.split_owners.add(owner)
        else:
            what = f"sizes {sizes}" if name == "split_with_sizes" or not equal else f"size {sizes[0]}"
            s.fix(c.numpy(), f"split of channels with {what} stored in the model{s.where()}")

    def spatial(self, func, name, args, kwargs, out) -> None:
        s = self.s
        src = args[0]
        outs = _flat_tensors(out)
        if name.startswith("grid_sampler"):
            s.fix(s.canon(s.origin(args[1])).numpy(), f"{name} grid{s.where()}")
        match = re.search(r"(\d)d", name)
        k = int(match.group(1)) if match else max(src.dim() - 2, 0)
        nd = src.dim()
        spatial = list(range(max(nd - k, 0), nd))
        c = s.canon(s.origin(src))
        res = self.reduce_origin(c, spatial, f"{name} over channels{s.where()}")
        for t in outs:
            if t.dim() == nd and all(t.shape[d] == src.shape[d] for d in range(nd - k)):
                s.set_origin(t, res.expand(*t.shape[:nd - k], *([1] * k)).expand(t.shape) if k else res.expand(t.shape))
            else:
                self.fix_inputs(args[:1], {}, f"{name} changes the channel layout{s.where()}")
                self.set_data(t)

    def reduce_origin(self, c: torch.Tensor, dims: List[int], reason: str) -> torch.Tensor:
        """keepdim reduction of a canonical origin: the common value, or DATA (and fixed atoms) where mixed."""
        if not dims or c.dim() == 0:
            return c
        hi, lo = c, c
        for d in dims:
            hi = hi.amax(d, keepdim=True)
            lo = lo.amin(d, keepdim=True)
        mixed = hi != lo
        if mixed.any():
            self.s.fix(c[mixed.expand_as(c)].numpy(), reason)
            hi = torch.where(mixed, torch.full_like(hi, DATA), hi)
        return hi

    def reduction(self, func, name, args, kwargs, out) -> None:
        s = self.s
        src = args[0]
        outs = _flat_tensors(out)
        if not isinstance(src, torch.Tensor):
            self.set_data(out)
            return
        nd = src.dim()
        c = s.canon(s.origin(src))
        dims = _arg(func, args, kwargs, "dim", None)
        if dims is None and nd and name in _SHAPE_KEEPING_REDUCTIONS:
            dims = nd - 1
        dims = _norm_dims(dims, nd) if nd else []
        keep = self.reduce_origin(c, dims, f"{name} over channels (dim {dims}){s.where()}")
        full_keep = keep.expand(*[1 if d in dims else src.shape[d] for d in range(nd)]) if nd else keep
        for t in outs:
            if tuple(t.shape) == tuple(src.shape):
                s.set_origin(t, keep.expand(src.shape))
            elif t.numel() == full_keep.numel():
                s.set_origin(t, full_keep.reshape(t.shape))
            else:
                self.set_data(t)

    def pointwise(self, func, name, args, kwargs, out) -> None:
        s = self.s
        outs = _flat_tensors(out)
        shape = tuple(outs[0].shape)
        nd = len(shape)
        operands = [t for t in _flat_tensors((args, kwargs)) if t.dim() <= nd]
        where = s.where()
        expanded = []
        for t in operands:
            c = s.canon(s.origin(t), materialize=True)
            c = c.reshape([1] * (nd - c.dim()) + list(c.shape))
            bdims = [d for d in range(nd) if (d < nd - t.dim() or t.shape[d - (nd - t.dim())] == 1) and shape[d] > 1]
            expanded.append((t, c, bdims))
        included = []
        for i, (t, c, bdims) in enumerate(expanded):
            if bdims and (c >= 0).any():
                others_vary = any(_varies(oc.expand(shape), d) if oc.shape[d] > 1 else False
                                  for j, (_, oc, obd) in enumerate(expanded) if j != i for d in bdims)
                if others_vary:
                    s.fix(c.numpy(), f"{name}: one operand is broadcast across channels{where}")
                    continue
            included.append(c)
        if not included:
            for t in outs:
                s.set_origin(t, torch.full((), FREE, dtype=torch.int64).expand(t.shape))
            return
        compact = [max(c.shape[d] for c in included) for d in range(nd)]
        vals = np.stack([c.expand(compact).contiguous().numpy().reshape(-1) for c in included])
        first = np.full(vals.shape[1], FREE, dtype=np.int64)
        for row in vals:
            first = np.where((first < 0) & (row >= 0), row, first)
        has_data = (vals == DATA).any(axis=0)
        if (has_data & (first >= 0)).any():
            s.fix(vals[:, has_data], f"{name} combines channels with fixed data{where}")
        for row in vals:
            s.union(first, row)
        result = np.where(first >= 0, first, np.where(has_data, DATA, FREE))
        res = torch.from_numpy(result.reshape(compact)).expand(shape)
        for t in outs:
            if tuple(t.shape) == shape:
                # in place on a view: the base keeps its origin; the atoms that met here are joined, so it stays
                # valid (and DATA meeting a channel fixed it)
                s.set_origin(t, res)
            else:
                self.set_data(t)

    # --- units ------------------------------------------------------------------------------------------
    def unit_input(self, module: nn.Module, name: str, kind: str, args, kwargs) -> None:
        s = self.s
        x = args[0] if args else next(iter(kwargs.values()), None)
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            s.units.setdefault(name, UnitRecord(name, "opaque", 0, 0, np.zeros(0, np.int64)))
            self.fix_inputs(args, kwargs, f"{type(module).__name__} {name!r} called on unusual inputs")
            return
        size, dim = self.channel_dim(module, kind, x)
        if size is None:
            self.fix_inputs(args, kwargs, f"cannot tell the channel dimension of {type(module).__name__} {name!r}")
            kind = "opaque"
            s.units[name] = UnitRecord(name, "opaque", 0, 0, np.zeros(0, np.int64))
            return
        pos = self.positions(s.origin(x), dim, size, f"{name!r} reads channels mixed with fixed data")
        rec = s.units.get(name)
        if rec is None:
            blocks = int(getattr(module, "groups", 1)) if kind == "gconv" else \
                int(getattr(module, "num_groups", 1)) if kind == "gnorm" else 1
            mult = int(module.out_channels // module.in_channels) if kind == "dw" else 1
            rec = UnitRecord(name, kind, size, dim, pos, multiplier=mult, blocks=blocks)
            if kind in _PRODUCERS:
                n_out = self.out_size(module, kind)
                rec.out_atoms = s.new_atoms(n_out, "out", name)
                if kind == "gconv":
                    ob = rec.out_atoms.reshape(blocks, n_out // blocks)
                    for j in range(1, blocks):
                        s.union(ob[0], ob[j])
            s.units[name] = rec
        else:
            both = (rec.in_positions >= 0) & (pos >= 0)
            s.union(rec.in_positions[both], pos[both])
            mixed = ((rec.in_positions == DATA) & (pos >= 0)) | ((pos == DATA) & (rec.in_positions >= 0))
            if mixed.any():
                s.fix(np.concatenate([pos[mixed], rec.in_positions[mixed]]),
                      f"{name!r} is called on fixed data and on channels at the same positions")
            rec.in_positions = np.where(rec.in_positions >= 0, rec.in_positions, pos)
        if kind in ("gconv", "gnorm") and rec.blocks > 1:
            if size % rec.blocks:
                s.fix(pos, f"{name!r}: {size} channels in {rec.blocks} groups")
            else:
                b = rec.in_positions.reshape(rec.blocks, size // rec.blocks)
                for j in range(1, rec.blocks):
                    s.union(b[0], b[j])

    @staticmethod
    def out_size(module, kind) -> int:
        return int(module.out_features if kind == "linear" else module.out_channels)

    @staticmethod
    def channel_dim(module: nn.Module, kind: str, x: torch.Tensor) -> Tuple[Optional[int], int]:
        if kind == "linear":
            return (int(module.in_features), -1) if x.shape[-1] == module.in_features else (None, 0)
        if kind == "lnorm":
            size = int(module.normalized_shape[0])
            standard = type(module).forward in (nn.LayerNorm.forward,) + \
                ((nn.RMSNorm.forward,) if hasattr(nn, "RMSNorm") else ())
            if x.shape[-1] == size and (standard or x.dim() < 2 or x.shape[1] != size):
                return size, -1
            if x.dim() >= 3 and x.shape[1] == size:
                return size, 1
            return None, 0
        if kind in ("conv", "gconv", "dw", "convt"):
            size = int(module.in_channels)
            batched = x.dim() == len(module.kernel_size) + 2
            dim = 1 if batched else 0
            return (size, dim) if x.shape[dim] == size else (None, 0)
        if kind == "norm":
            size = int(getattr(module, "num_features", getattr(module, "num_parameters", 0)))
        else:  # gnorm
            size = int(module.num_channels)
        dim = 1 if x.dim() >= 2 else 0
        return (size, dim) if x.shape[dim] == size else (None, 0)

    def unit_output(self, module: nn.Module, name: str, kind: str, output) -> None:
        s = self.s
        rec = s.units.get(name)
        outs = _flat_tensors(output)
        if rec is None or rec.kind == "opaque" or not outs:
            self.set_data(output)
            return
        t = outs[0]
        if kind in _PRODUCERS:
            values = rec.out_atoms
        elif kind == "dw":
            values = np.repeat(rec.in_positions, rec.multiplier)
        else:
            values = rec.in_positions
        dim = rec.in_dim if kind in _THROUGH else (-1 if kind == "linear" else (1 if t.dim() >= 2 and
                                                                                 rec.in_dim == 1 else 0))
        dim %= t.dim()
        if t.shape[dim] != values.size:
            self.set_data(output)
            s.fix(values, f"unexpected output shape of {name!r}")
            return
        shape = [1] * t.dim()
        shape[dim] = values.size
        s.set_origin(t, torch.from_numpy(np.ascontiguousarray(values)).view(shape).expand(t.shape))
        for extra in outs[1:]:
            self.set_data(extra)


class _Annotate(TorchFunctionMode):
    def __init__(self, state: _State) -> None:
        super().__init__()
        self.s = state

    def __torch_function__(self, func, types, args=(), kwargs=None):
        previous = self.s.fn_name
        self.s.fn_name = getattr(func, "__name__", "")
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.s.fn_name = previous


class _Dispatch(TorchDispatchMode):
    def __init__(self, tracer: _Tracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        s = self.tracer.s
        if s.suppress == 0:
            s.n_ops += 1
            if s.n_ops > s.max_ops:
                raise TraceBudgetExceeded(f"tracing stopped after {s.max_ops} aten ops (max_ops)")
            with _disabled_modes():
                try:
                    self.tracer.handle(func, args, kwargs, out)
                except Exception as err:  # never break the user's forward: what cannot be followed stays
                    reason = f"op {func} could not be followed ({type(err).__name__}: {err})"
                    s.errors.append(reason)
                    self.tracer.fix_inputs(args, kwargs, reason)
                    self.tracer.set_data(out)
        return out


@contextlib.contextmanager
def _disabled_modes():
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield


def trace_channels(model: nn.Module, entry_point_call: Callable[..., Any], args: Tuple[Any, ...],
                   kwargs: Dict[str, Any], max_ops: int = 2_000_000) -> ChannelTrace:
    """Run ``entry_point_call(*args, **kwargs)`` once and follow every channel of ``model``.

    ``entry_point_call`` is the bound method to trace (``model.forward``,
    ``model.backbone.forward``, ...). Runs under ``torch.no_grad()`` in the
    model's current mode; the caller restores buffers and modes.

    Raises:
        TraceBudgetExceeded: more than ``max_ops`` aten ops.

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> t = trace_channels(net, net.forward, (torch.zeros(2, 3),), {})
        >>> sorted(t.units), t.units["2"].in_positions.tolist()
        (['0', '2'], [0, 1, 2, 3])
    """
    state = _State(model, max_ops)
    tracer = _Tracer(state)
    handles = []

    def pre(module, a, k):
        kind = unit_kind(module)
        name = state.names.get(module, "")
        suppressed = state.suppress > 0
        state.stack.append((module, not suppressed and kind != ""))
        if suppressed or not kind:
            return None
        with _disabled_modes():
            if kind == "opaque":
                tracer.fix_inputs(a, k, f"inputs of {type(module).__name__} {name!r} (its channels are not "
                                        "followed inside it)")
                state.units.setdefault(name, UnitRecord(name, "opaque", 0, 0, np.zeros(0, np.int64)))
            else:
                tracer.unit_input(module, name, kind, a, k)
        state.suppress += 1
        return None

    def post(module, a, k, output):
        _, entered = state.stack.pop() if state.stack else (None, False)
        if not entered:
            return None
        state.suppress -= 1
        kind = unit_kind(module)
        with _disabled_modes():
            tracer.unit_output(module, state.names.get(module, ""), kind, output)
        return None

    for m in model.modules():
        handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(m.register_forward_hook(post, with_kwargs=True))
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]), _Annotate(state), _Dispatch(tracer):
            output = entry_point_call(*args, **kwargs)
        with _disabled_modes():
            for t in _flat_tensors(output):
                state.fix(state.canon(state.origin(t)).numpy(), "channels reach the traced output")
    finally:
        for h in handles:
            h.remove()
    return ChannelTrace(state.uf, state.atom_ranges, state.fixed, state.reasons, state.units, state.params,
                        state.split_owners, state.n_ops, state.errors)
