"""Op rules: what each aten op does to channels, as a table from op name to rule.

:func:`apply_op_rule` looks the op up by name in :data:`OP_RULES`, then by
name prefix (:data:`PREFIX_RULES`), then by the op's tags (reductions, then
pointwise ops); an op found nowhere may mix channels and fixes what it reads.
Every rule has the signature ``rule(state, func, name, args, kwargs, out)``:
it reads the origins of the inputs from ``state`` (a :class:`.TraceState`)
and sets the origins of the outputs ``out`` (joining or fixing atoms on the
way). The rule families:

- layout ops (view, permute, cat, split, slice, ...) are replayed on the origin
  tensors, so indices are exact whatever the reshape or shuffle (:mod:`.layout_rules`);
- pointwise ops join the atoms meeting in one element; reductions and pooling
  keep a channel only if they do not mix channels (:mod:`.value_rules`);
- factories make constants (``FREE`` when they follow a tensor's shape, else
  ``DATA``); identities pass origins on; anything else fixes what it reads.

Example:
    >>> OP_RULES["permute"].__name__, rule_for("add", [torch.Tag.pointwise]).__name__
    ('replay', 'pointwise')
    >>> rule_for("max_pool2d_with_indices", ()).__name__, rule_for("mm", ()).__name__
    ('spatial', 'mixes_channels')
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, Tuple

import torch

from .layout_rules import replay, reshape, select, shuffle
from .op_args import flat_tensors, schema_arg
from .records import DATA, FREE
from .state import TraceState
from .value_rules import SHAPE_KEEPING_REDUCTIONS, pointwise, reduction, spatial

__all__ = ["OpRule", "OP_RULES", "PREFIX_RULES", "NO_READ", "READS_VALUES", "rule_for", "apply_op_rule",
           "mixes_channels"]

OpRule = Callable[..., None]

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
_REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "prod",
               "logsumexp", "linalg_vector_norm", "norm", "nansum", "nanmean", "argmax", "argmin", "any", "all",
               "count_nonzero", "median", "nanmedian", "mode", "aminmax"} | SHAPE_KEEPING_REDUCTIONS
_SELECTING = {"slice", "select", "narrow", "split", "split_with_sizes", "unbind", "chunk", "index", "index_select",
              "gather", "roll", "unfold", "_unsafe_index", "tensor_split"}
_SPATIAL_PREFIXES = ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "_adaptive_avg_pool",
                     "upsample_", "_upsample_", "reflection_pad", "replication_pad", "fractional_max_pool",
                     "lp_pool", "max_unpool")
_SHUFFLES = {"pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle"}
_NO_READ = {"sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "dim", "is_contiguous",
            "numel", "is_same_size", "_has_compatible_shallow_copy_type", "set_"}

#: ops without tensor outputs that read channel values (their inputs are fixed)
READS_VALUES = frozenset({"_local_scalar_dense", "equal", "is_nonzero", "allclose"})
#: ops that read no channel value (shapes, strides)
NO_READ = frozenset(_NO_READ)


def make_free(state: TraceState, func, name, args, kwargs, out) -> None:
    """A factory following a tensor's shape (``zeros_like``): a constant that never constrains a channel."""
    for t in flat_tensors(out):
        state.set_origin(t, torch.full((), FREE, dtype=torch.int64).expand(t.shape))


def make_data(state: TraceState, func, name, args, kwargs, out) -> None:
    """A factory of fixed size (``zeros``, ``arange``): data no channel can remove."""
    state.set_data(out)


def fill(state: TraceState, func, name, args, kwargs, out) -> None:
    """Values replaced in place (``fill_``, ``normal_``): positions unchanged."""


def copy_(state: TraceState, func, name, args, kwargs, out) -> None:
    """``dst.copy_(src)``: ``dst`` takes ``src``'s origin; a write into a view fixes everything involved."""
    dst, src = args[0], args[1]
    so = state.origin(src)
    if dst._is_view():
        base = dst._base
        reason = f"in-place write into a view of a tensor{state.where()}"
        state.fix(state.canon(so).numpy(), reason)
        if base is not None:
            state.fix(state.canon(state.origin(base)).numpy(), reason)
        state.fix(state.canon(state.origin(dst)).numpy(), reason)
        return
    state.set_origin(dst, so.expand(dst.shape) if so.dim() <= dst.dim() else so)


def restride(state: TraceState, func, name, args, kwargs, out) -> None:
    """``as_strided_`` keeping the size (a memory-format change) leaves the layout; anything else mixes."""
    if isinstance(args[0], torch.Tensor) and \
            tuple(schema_arg(func, args, kwargs, "size")) == tuple(state.origin(args[0]).shape) and \
            not schema_arg(func, args, kwargs, "storage_offset"):
        return
    mixes_channels(state, func, name, args, kwargs, out)


def identity(state: TraceState, func, name, args, kwargs, out) -> None:
    """Copies and casts: outputs of the input's shape carry its origin."""
    src = args[0]
    if isinstance(src, torch.Tensor):
        for t in flat_tensors(out):
            if t.shape == src.shape:
                state.set_origin(t, state.origin(src))
            else:
                state.set_data(t)


def constant_pad(state: TraceState, func, name, args, kwargs, out) -> None:
    """Padding with a constant: the padded elements are data."""
    pad = schema_arg(func, args, kwargs, "pad")
    res = torch.constant_pad_nd(state.origin(args[0]).contiguous(), pad, DATA)
    state.set_origin(flat_tensors(out)[0], res)


def mixes_channels(state: TraceState, func, name, args, kwargs, out) -> None:
    """An op with no rule (a matmul, an unknown op): what it reads is fixed, its outputs are data."""
    state.fix_inputs(args, kwargs, f"op {name} may mix channels{state.where()}")
    state.set_data(out)


def _table(entries: Iterable[Tuple[Iterable[str], OpRule]]) -> Dict[str, OpRule]:
    table: Dict[str, OpRule] = {}
    for names, rule in entries:
        for op_name in names:
            table.setdefault(op_name, rule)  # earlier entries win, as in the order listed
    return table


#: op name -> rule. Looked up before the prefixes and tags; the first family listing a name wins.
OP_RULES: Dict[str, OpRule] = _table([
    (_FACTORY_FREE, make_free), (_FACTORY_DATA, make_data), (_FILL, fill), ({"copy_"}, copy_),
    ({"as_strided_"}, restride), (_IDENTITY, identity), (_SHUFFLES, shuffle), (_RESHAPES, reshape),
    (_SELECTING, select), (_REPLAY, replay), ({"constant_pad_nd"}, constant_pad),
    ({"grid_sampler_2d", "grid_sampler"}, spatial), (_REDUCTIONS, reduction),
])
#: (name prefix, rule), tried in order for names not in :data:`OP_RULES`.
PREFIX_RULES: Tuple[Tuple[str, OpRule], ...] = tuple((prefix, spatial) for prefix in _SPATIAL_PREFIXES)


def rule_for(name: str, tags: Iterable[torch.Tag]) -> OpRule:
    """The rule of the aten op ``name`` (its overload packet's name) with ``tags``."""
    rule = OP_RULES.get(name)
    if rule is not None:
        return rule
    for prefix, prefixed in PREFIX_RULES:
        if name.startswith(prefix):
            return prefixed
    tags = set(tags)
    if torch.Tag.reduction in tags:
        return reduction
    if torch.Tag.pointwise in tags or name in _EXTRA_POINTWISE:
        return pointwise
    return mixes_channels


def apply_op_rule(state: TraceState, func, args, kwargs, out) -> None:
    """Follow one aten op call: set the origins of ``out`` from those of the inputs."""
    name = func.overloadpacket.__name__
    if name in NO_READ:
        return
    if not flat_tensors(out):
        if name in READS_VALUES:
            state.fix_inputs(args, kwargs, f"{func} reads channel values{state.where()}")
        return
    rule_for(name, func.tags)(state, func, name, args, kwargs, out)
