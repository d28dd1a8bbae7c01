"""Layer kinds: how tracing and surgery treat a module at its boundary, and how to register your own layers.

Every module met during tracing has a :class:`LayerKind`. Convolutions and
linear layers read input channels and produce new ones; per-channel layers
(BatchNorm, PReLU, ...) and depthwise convolutions pass channels on; opaque
modules (attention, recurrent layers) are not followed inside; anything else
is traced through op by op. A custom layer whose ops the tracer cannot follow
(a fused kernel, a matmul written by hand) can say what it does with
:func:`register_layer_kind`; tracing, calibration and surgery then treat it
like the built-in layer of that kind.

Example:
    >>> import torch
    >>> from torch import nn
    >>> class Scale(nn.Module):  # one factor per channel, applied with an einsum the tracer does not follow
    ...     def __init__(self, channels):
    ...         super().__init__()
    ...         self.factor = nn.Parameter(torch.ones(channels))
    ...     def forward(self, x):
    ...         return torch.einsum("nchw,c->nchw", x, self.factor)
    >>> register_layer_kind(Scale, LayerKind.PER_CHANNEL, in_dims={"factor": 0})
    >>> layer_kind(Scale(4)), layer_kind(nn.Conv2d(4, 4, 3, groups=4)), layer_kind(nn.ReLU())
    (<LayerKind.PER_CHANNEL: 'norm'>, <LayerKind.DEPTHWISE: 'dw'>, <LayerKind.TRACED: ''>)
    >>> from sparsify_torch.channels import calibrate_and_prune_model_equal
    >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), Scale(8), nn.ReLU(), nn.Conv2d(8, 2, 1))
    >>> small = calibrate_and_prune_model_equal(net, [torch.randn(2, 3, 8, 8)], lambda out, x: out.pow(2).mean())
    >>> small[0].out_channels, tuple(small[1].factor.shape), small[3].in_channels
    (4, (4,), 4)
    >>> unregister_layer_kind(Scale)
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Type, Union

import torch
from torch import nn

__all__ = ["LayerKind", "CustomLayer", "register_layer_kind", "unregister_layer_kind", "custom_layer", "layer_kind",
           "input_channel_dim"]


class LayerKind(enum.StrEnum):
    """How a module is handled at its boundary (values are the short names used in channel groups).

    ``CONV``, ``LINEAR``, ``CONV_TRANSPOSE``: read input channels, produce new
    ones; ``GROUPED_CONV``: a grouped convolution (every block keeps the same
    positions); ``DEPTHWISE``: one input channel per group (maybe with a
    multiplier), passes channels on; ``PER_CHANNEL``: each channel computed from
    itself alone (BatchNorm, InstanceNorm, PReLU); ``LAYER_NORM`` and
    ``GROUP_NORM``: pass channels on, statistics over several channels;
    ``OPAQUE``: not followed inside (what goes in is never pruned); ``TRACED``:
    followed op by op (containers, activations, anything else).
    """

    CONV = "conv"
    LINEAR = "linear"
    CONV_TRANSPOSE = "convt"
    GROUPED_CONV = "gconv"
    DEPTHWISE = "dw"
    PER_CHANNEL = "norm"
    LAYER_NORM = "lnorm"
    GROUP_NORM = "gnorm"
    OPAQUE = "opaque"
    TRACED = ""

    @property
    def produces_channels(self) -> bool:
        """Reads input channels and produces new output channels (a conv/linear)."""
        return self in _PRODUCING

    @property
    def passes_channels(self) -> bool:
        """Passes its input channels on (per-channel layers, normalisations, depthwise convolutions)."""
        return self in _PASSING


_PRODUCING = frozenset({LayerKind.CONV, LayerKind.LINEAR, LayerKind.CONV_TRANSPOSE, LayerKind.GROUPED_CONV})
_PASSING = frozenset({LayerKind.DEPTHWISE, LayerKind.PER_CHANNEL, LayerKind.LAYER_NORM, LayerKind.GROUP_NORM})
#: the kinds a user's layer may be registered as
REGISTRABLE = (LayerKind.CONV, LayerKind.LINEAR, LayerKind.PER_CHANNEL, LayerKind.OPAQUE, LayerKind.TRACED)


@dataclass(frozen=True)
class CustomLayer:
    """What :func:`register_layer_kind` recorded for one module type.

    Attributes:
        kind: the layer kind.
        channel_dim: the dimension of the layer's input (and output) that holds channels.
        in_dims: per tensor attribute, the dimension indexed by input channels (the
            channels a ``PER_CHANNEL`` layer passes on).
        out_dims: per tensor attribute, the dimension indexed by output channels.
        in_channels: attribute holding the input channel count ("" when the count is
            read from the first tensor of ``in_dims``).
        out_channels: the same for output channels.
    """

    kind: LayerKind
    channel_dim: int = 1
    in_dims: Mapping[str, int] = field(default_factory=dict)
    out_dims: Mapping[str, int] = field(default_factory=dict)
    in_channels: str = ""
    out_channels: str = ""

    def n_in(self, module: nn.Module) -> int:
        """Input channel count of ``module``.

        Raises:
            ValueError: the registered attribute or tensor is missing from ``module``.
        """
        return self._count(module, "in", self.in_channels, self.in_dims)

    def n_out(self, module: nn.Module) -> int:
        """Output channel count of ``module`` (see :meth:`n_in`)."""
        return self._count(module, "out", self.out_channels, self.out_dims)

    @staticmethod
    def _count(module: nn.Module, side: str, attribute: str, dims: Mapping[str, int]) -> int:
        if attribute:
            value = getattr(module, attribute, None)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{type(module).__name__} was registered with {side}_channels={attribute!r}, but "
                                 f"its {attribute!r} is {value!r}, not an integer")
            return value
        name, dim = next(iter(dims.items()))
        tensor = getattr(module, name, None)
        if not isinstance(tensor, torch.Tensor) or not -tensor.dim() <= dim < tensor.dim():
            raise ValueError(f"{type(module).__name__} was registered with {side}_dims={dict(dims)!r}, but its "
                             f"{name!r} is not a tensor with a dimension {dim} (pass {side}_channels=...)")
        return int(tensor.shape[dim])


_REGISTERED: Dict[type, CustomLayer] = {}


def _check_dims(value, name: str, allowed: bool, kind: LayerKind) -> Dict[str, int]:
    if value is None:
        if allowed:
            raise ValueError(f"{name} is required for kind LayerKind.{kind.name}: map each tensor attribute indexed "
                             f"by those channels to its dimension, e.g. {{'weight': 0}}")
        return {}
    if not allowed:
        raise ValueError(f"{name}={value!r} is not allowed for kind LayerKind.{kind.name}")
    if not isinstance(value, Mapping) or not value:
        raise TypeError(f"{name} must be a non-empty mapping of tensor attribute name to dimension, got {value!r}")
    for key, dim in value.items():
        if not isinstance(key, str) or not key or isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"{name} must map attribute names (str) to dimensions (int), got {key!r}: {dim!r}")
    return dict(value)


def _check_attribute(value, name: str, allowed: bool, kind: LayerKind) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be the name of an integer attribute (str) or None, got {value!r}")
    if not allowed:
        raise ValueError(f"{name}={value!r} is not allowed for kind LayerKind.{kind.name}")
    return value


def register_layer_kind(module_type: Type[nn.Module], kind: Union[LayerKind, str], *, channel_dim: int = 1,
                        in_dims: Optional[Mapping[str, int]] = None, out_dims: Optional[Mapping[str, int]] = None,
                        in_channels: Optional[str] = None, out_channels: Optional[str] = None) -> None:
    """Tell channel tracing (and calibration and surgery) what a layer type does with channels.

    Modules of ``module_type`` (and its subclasses) are then handled as units at
    their boundary, like the built-in layers of ``kind``, instead of being traced
    op by op:

    - ``LayerKind.CONV`` or ``LayerKind.LINEAR``: reads the channels at
      ``channel_dim`` of its first input and writes new channels at the same
      dimension of its output. Surgery removes input channels from the
      ``in_dims`` tensors and output channels from the ``out_dims`` tensors.
    - ``LayerKind.PER_CHANNEL``: output channel *c* depends on input channel *c*
      only (a scale, a bias, an activation with per-channel slopes); removing a
      channel removes index *c* of every ``in_dims`` tensor.
    - ``LayerKind.OPAQUE``: not followed; its inputs are never pruned.
    - ``LayerKind.TRACED``: followed op by op (undoes the kind of a built-in base class).

    Args:
        module_type: the ``nn.Module`` subclass.
        kind: a :class:`LayerKind` (or its value) among the five above.
        channel_dim: the channel dimension of the layer's input and output (1:
            channels first, -1: channels last).
        in_dims: tensor attribute -> dimension indexed by input channels
            (a missing or ``None`` attribute, such as an absent bias, is skipped).
        out_dims: tensor attribute -> dimension indexed by output channels (CONV/LINEAR only).
        in_channels: integer attribute holding the input channel count (surgery
            updates it); without it the count is read from the first ``in_dims`` tensor.
        out_channels: the same for output channels (CONV/LINEAR only).

    Raises:
        TypeError: ``module_type`` is not an ``nn.Module`` subclass, or an argument of the wrong type.
        ValueError: a kind that cannot be registered, or arguments that do not fit the kind.

    Example:
        >>> import torch
        >>> class Dense(nn.Module):  # a linear layer written with a matmul (matmuls stop tracing)
        ...     def __init__(self, n_in, n_out):
        ...         super().__init__()
        ...         self.n_in, self.n_out = n_in, n_out
        ...         self.weight = nn.Parameter(torch.randn(n_out, n_in))
        ...     def forward(self, x):
        ...         return x @ self.weight.t()
        >>> register_layer_kind(Dense, LayerKind.LINEAR, channel_dim=-1, in_dims={"weight": 1},
        ...                     out_dims={"weight": 0}, in_channels="n_in", out_channels="n_out")
        >>> custom_layer(Dense(3, 5)).n_out(Dense(3, 5))
        5
        >>> unregister_layer_kind(Dense)
    """
    if not isinstance(module_type, type) or not issubclass(module_type, nn.Module):
        raise TypeError(f"module_type must be an nn.Module subclass, got {module_type!r}")
    try:
        kind = LayerKind(kind)
    except ValueError:
        kind = None
    if kind not in REGISTRABLE:
        allowed = ", ".join(f"LayerKind.{k.name}" for k in REGISTRABLE)
        raise ValueError(f"kind must be one of {allowed} for a registered layer, got {kind!r}")
    if isinstance(channel_dim, bool) or not isinstance(channel_dim, int):
        raise TypeError(f"channel_dim must be an int (1: channels first, -1: channels last), got {channel_dim!r}")
    producing = kind in (LayerKind.CONV, LayerKind.LINEAR)
    followed = producing or kind is LayerKind.PER_CHANNEL
    spec = CustomLayer(kind, channel_dim, _check_dims(in_dims, "in_dims", followed, kind),
                       _check_dims(out_dims, "out_dims", producing, kind),
                       _check_attribute(in_channels, "in_channels", followed, kind),
                       _check_attribute(out_channels, "out_channels", producing, kind))
    _REGISTERED[module_type] = spec


def unregister_layer_kind(module_type: Type[nn.Module]) -> None:
    """Forget what :func:`register_layer_kind` said about ``module_type``.

    Raises:
        ValueError: ``module_type`` was not registered.
    """
    if module_type not in _REGISTERED:
        raise ValueError(f"module_type {module_type!r} is not registered")
    del _REGISTERED[module_type]


#: Layer types known by ``(module, qualname)``, matched without importing their library: ``transformers``'
#: ``Conv1D`` (GPT-2) is a linear layer whose weight is stored ``(in, out)``.
_BY_NAME: Dict[tuple, CustomLayer] = {
    ("transformers.pytorch_utils", "Conv1D"): CustomLayer(LayerKind.LINEAR, -1, {"weight": 0},
                                                          {"weight": 1, "bias": 0}, "nx", "nf"),
}


def custom_layer(module: nn.Module) -> Optional[CustomLayer]:
    """The registration that applies to ``module`` (its own type first, then its base classes; ``transformers``'
    ``Conv1D`` is built in), or None."""
    for cls in type(module).__mro__:
        spec = _REGISTERED.get(cls) or _BY_NAME.get((cls.__module__, cls.__qualname__))
        if spec is not None:
            return spec
    return None


def layer_kind(module: nn.Module) -> LayerKind:
    """How tracing treats ``module`` at its boundary (see :class:`LayerKind`).

    Example:
        >>> layer_kind(nn.Conv2d(4, 8, 3, groups=2)), layer_kind(nn.LayerNorm(4)) == "lnorm"
        (<LayerKind.GROUPED_CONV: 'gconv'>, True)
    """
    spec = custom_layer(module)
    if spec is not None:
        return spec.kind
    if isinstance(module, nn.modules.conv._ConvNd):
        if module.transposed:
            return LayerKind.CONV_TRANSPOSE if module.groups == 1 else LayerKind.OPAQUE
        if module.groups == 1:
            return LayerKind.CONV
        return LayerKind.DEPTHWISE if module.in_channels == module.groups else LayerKind.GROUPED_CONV
    if isinstance(module, nn.Linear):
        return LayerKind.LINEAR
    if isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
        return LayerKind.PER_CHANNEL
    if isinstance(module, nn.PReLU):
        return LayerKind.PER_CHANNEL if module.num_parameters > 1 else LayerKind.TRACED
    if isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
        return LayerKind.LAYER_NORM if len(module.normalized_shape) == 1 else LayerKind.OPAQUE
    if isinstance(module, nn.GroupNorm):
        return LayerKind.GROUP_NORM
    if isinstance(module, (nn.MultiheadAttention, nn.RNNBase, nn.Embedding, nn.EmbeddingBag, nn.LocalResponseNorm,
                           nn.modules.rnn.RNNCellBase, nn.Bilinear)):
        return LayerKind.OPAQUE
    return LayerKind.TRACED


def input_channel_dim(module: nn.Module) -> int:
    """The channel dimension of a conv/linear layer's input: -1 for linear layers, 1 for convolutions.

    Example:
        >>> input_channel_dim(nn.Linear(2, 3)), input_channel_dim(nn.Conv1d(2, 3, 1))
        (-1, 1)
    """
    spec = custom_layer(module)
    if spec is not None:
        return spec.channel_dim
    return -1 if isinstance(module, nn.Linear) else 1
