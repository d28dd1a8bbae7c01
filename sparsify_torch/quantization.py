"""Int8 for pruned torch models that keeps every pruned zero: post-training and quantization-aware.

* **Post-training** (:func:`quantize_model_int8`): every ``nn.Linear`` (and
  ``transformers``' ``Conv1D``, by duck type, without importing transformers;
  and ``nn.Conv1d/2d/3d``, as :class:`Int8Conv`) is replaced by an int8 layer whose values are :func:`sparsify.quantization.quantize_int8`'s
  (symmetric, per output channel, no zero point: ``0 -> 0``). ``mode="weight_only"``
  (the default) gives an :class:`Int8Linear` (int8 weight + float32 scales,
  dequantized in the forward pass: a quarter of the memory, float32 compute,
  works on every device); ``mode="dynamic"`` gives ``torch.ao``'s dynamic int8
  ``Linear`` holding the same int8 values (int8 matmuls with activations
  quantized per batch, CPU only; ``torch.ao.quantization`` is deprecated upstream).
  The per-layer zeros check (:func:`sparsify.quantization.zeros_check`) runs on the
  way and is returned; a zero turned non-zero raises.
* **Quantization-aware fine-tuning** (:func:`add_fake_quant`): a
  :class:`FakeQuantInt8` parametrization registered *after* the pruning mask
  (``sparsify_torch.parametrization.MaskParametrization``), so the forward pass
  sees ``fake_quant(original * mask)`` and the gradient passes straight through
  the rounding to the mask. :func:`quantize_model_int8` then exports exactly the
  values the model trained with, and exactly the pruned zeros.
* **Files** (:func:`int8_document`, :func:`save_int8_npz`, :func:`load_int8_state_dict`):
  the int8 model as :mod:`sparsify.int8_format`'s bitmask + int8 values + scales,
  read back as a float ``state_dict`` of the original model (dequantized) or,
  with :func:`sparsify.int8_format.int8_tensors`, as the exact int8 values.

Example:
    >>> import torch
    >>> lin = torch.nn.Linear(4, 2)
    >>> with torch.no_grad():
    ...     _ = lin.weight.copy_(torch.tensor([[0.0, 1.0, 0.0, -0.5], [2.0, 0.0, 0.0, 0.0]]))
    >>> model, report = quantize_model_int8(torch.nn.Sequential(lin))
    >>> model[0].qweight.tolist(), report["0.weight"].lost_zeros
    ([[0, 127, 0, -64], [127, 0, 0, 0]], 0)
"""
from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrize

from sparsify import int8_format
from sparsify.quantization import LayerZeros, quantize_int8, require_zeros_kept, zeros_check

__all__ = ["MODES", "Int8Linear", "Int8Conv", "FakeQuantInt8", "quantizable_layers", "add_fake_quant", "quantize_model_int8",
           "int8_weights", "int8_document", "save_int8_npz", "load_int8_state_dict"]

#: The post-training int8 modes of :func:`quantize_model_int8`.
MODES = ("weight_only", "dynamic")


def _is_conv1d(module: nn.Module) -> bool:
    """``transformers.pytorch_utils.Conv1D`` (GPT-2's linear layers, weight ``(in, out)``), by duck type."""
    return type(module).__name__ == "Conv1D" and "transformers" in type(module).__module__ \
        and hasattr(module, "nf") and isinstance(getattr(module, "weight", None), torch.Tensor)


def _is_plain_conv(module: nn.Module) -> bool:
    """``nn.Conv1d/2d/3d`` with zero padding (the convolutions :class:`Int8Conv` computes)."""
    return isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) and module.padding_mode == "zeros"


def quantizable_layers(model: nn.Module, op_names: Iterable[str] | str | None = None) -> dict[str, nn.Module]:
    """The layers :func:`quantize_model_int8` converts, keyed by module name: ``nn.Linear``,
    ``transformers``' ``Conv1D`` and ``nn.Conv1d/2d/3d`` (zero padding).

    Args:
        model: the model.
        op_names: regexes (``re.search``) over the weight names (``"fc.weight"``);
            ``None``: every such layer.

    Raises:
        ValueError: a regex that is invalid or matches no layer.

    Example:
        >>> m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
        >>> list(quantizable_layers(m)), list(quantizable_layers(m, "^2\\\\."))
        (['0', '2'], ['2'])
    """
    layers = {n: m for n, m in model.named_modules() if n and (isinstance(m, nn.Linear) or _is_conv1d(m)
                                                              or _is_plain_conv(m))}
    if op_names is None:
        return layers
    patterns = [op_names] if isinstance(op_names, str) else list(op_names)
    out: dict[str, nn.Module] = {}
    for p in patterns:
        try:
            rx = re.compile(p)
        except (re.error, TypeError) as e:
            raise ValueError(f"op_names: {p!r} is not a valid regex ({e})") from None
        hits = {n: m for n, m in layers.items() if rx.search(f"{n}.weight")}
        if not hits:
            raise ValueError(f"op_names: {p!r} matches no Linear / Conv1D / Conv weight; they are "
                             f"{[f'{n}.weight' for n in layers]}")
        out.update(hits)
    return {n: m for n, m in layers.items() if n in out}


def _fake_quant(w: torch.Tensor) -> torch.Tensor:
    """``q * scale`` exactly as :func:`sparsify.quantization.quantize_int8` computes it (float64 math), per row."""
    rows = w.detach().reshape(w.shape[0], -1).double()
    amax = rows.abs().amax(dim=1)
    scales = torch.where(amax > 0, amax / 127, torch.ones_like(amax)).float().double()
    q = torch.round(rows / scales[:, None]).clamp_(-127, 127)
    return (q * scales[:, None]).to(w.dtype).reshape(w.shape)


class FakeQuantInt8(nn.Module):
    """Parametrization: the weight rounded to symmetric per-channel int8 and back (straight-through gradient).

    Register it after the mask so it sees the masked weight (a zero stays a zero).
    ``transposed=True`` is for a weight stored ``(in, out)`` (``Conv1D``): the
    channels are its columns.

    Example:
        >>> fq = FakeQuantInt8()
        >>> w = torch.tensor([[1.0, 0.3, 0.0]], requires_grad=True)
        >>> out = fq(w)
        >>> [round(v, 4) for v in out.tolist()[0]]      # 0.3 * 127 = 38.1 -> 38 steps of 1/127
        [1.0, 0.2992, 0.0]
        >>> out.sum().backward(); w.grad.tolist()       # straight through
        [[1.0, 1.0, 1.0]]
    """

    def __init__(self, transposed: bool = False) -> None:
        super().__init__()
        if not isinstance(transposed, bool):
            raise TypeError(f"transposed must be True or False, got {transposed!r}")
        self.transposed = transposed

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        """``w + (fake_quant(w) - w).detach()``."""
        fq = _fake_quant(w.t()).t() if self.transposed else _fake_quant(w)
        return w + (fq - w).detach()

    def extra_repr(self) -> str:
        return f"transposed={self.transposed}"


def _weight_before(module: nn.Module) -> torch.Tensor:
    """The weight the layer computes with, before any :class:`FakeQuantInt8` (masks applied)."""
    if parametrize.is_parametrized(module, "weight"):
        plist = module.parametrizations["weight"]
        w = plist.original
        for p in plist:
            if isinstance(p, FakeQuantInt8):
                break
            w = p(w)
        return w.detach()
    return module.weight.detach()


def add_fake_quant(model: nn.Module, op_names: Iterable[str] | str | None = None) -> list[str]:
    """Register a :class:`FakeQuantInt8` on every weight of :func:`quantizable_layers` (after its mask, if pruned).

    Train as usual (keep the :class:`~sparsify_torch.Pruner` attached so the masks
    stay applied), then call :func:`quantize_model_int8`. Returns the weight names.

    Raises:
        ValueError: a layer already has one, or ``op_names`` matches nothing.

    Example:
        >>> m = torch.nn.Sequential(torch.nn.Linear(3, 2))
        >>> add_fake_quant(m), type(m[0].parametrizations.weight[0]).__name__
        (['0.weight'], 'FakeQuantInt8')
    """
    layers = quantizable_layers(model, op_names)
    for name, module in layers.items():
        if parametrize.is_parametrized(module, "weight") and any(
                isinstance(p, FakeQuantInt8) for p in module.parametrizations["weight"]):
            raise ValueError(f"layer {name!r} already has a FakeQuantInt8 parametrization")
    for module in layers.values():
        parametrize.register_parametrization(module, "weight", FakeQuantInt8(transposed=_is_conv1d(module)))
    return [f"{n}.weight" for n in layers]


class Int8Linear(nn.Module):
    """A weight-only int8 linear layer: ``x @ (qweight * scales[:, None]).T + bias``.

    ``qweight`` (int8, ``(out, in)``) and ``scales`` (float32, ``(out,)``) are
    buffers, so ``state_dict`` holds the int8 values. ``transposed`` records
    that the source was a ``Conv1D`` (weight ``(in, out)``), for the file.

    Example:
        >>> lin = Int8Linear(torch.tensor([[2, 0], [0, -4]], dtype=torch.int8), torch.tensor([0.5, 0.25]))
        >>> lin(torch.tensor([[1.0, 1.0]])).tolist()
        [[1.0, -1.0]]
    """

    qweight: torch.Tensor
    scales: torch.Tensor

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None,
                 transposed: bool = False) -> None:
        super().__init__()
        if qweight.dtype != torch.int8 or qweight.dim() != 2:
            raise ValueError(f"qweight must be a 2-D int8 tensor, got {qweight.dtype} of shape {tuple(qweight.shape)}")
        if scales.shape != (qweight.shape[0],) or not scales.is_floating_point() or not bool(torch.all(scales > 0)):
            raise ValueError(f"scales must hold {qweight.shape[0]} positive floats, got shape {tuple(scales.shape)}")
        if bias is not None and bias.shape != (qweight.shape[0],):
            raise ValueError(f"bias must have shape ({qweight.shape[0]},), got {tuple(bias.shape)}")
        self.out_features, self.in_features = (int(d) for d in qweight.shape)
        self.transposed = bool(transposed)
        self.register_buffer("qweight", qweight.detach().clone())
        self.register_buffer("scales", scales.detach().to(torch.float32).clone())
        self.bias = nn.Parameter(bias.detach().clone()) if bias is not None else None

    def dequantized_weight(self) -> torch.Tensor:
        """``qweight * scales[:, None]`` in float32, ``(out, in)``."""
        return self.qweight.to(torch.float32) * self.scales[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.dequantized_weight().to(x.dtype), bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"nonzero={int(torch.count_nonzero(self.qweight))}/{self.qweight.numel()}")


class Int8Conv(nn.Module):
    """A weight-only int8 convolution (1-D, 2-D or 3-D): ``conv(x, qweight * scales[:, None, ...], bias)``.

    Built from an ``nn.Conv1d/2d/3d`` by :func:`quantize_model_int8` (its stride,
    padding, dilation and groups kept); ``qweight`` is int8 ``(out, in/groups, *kernel)``.

    Example:
        >>> conv = torch.nn.Conv1d(1, 1, 2, bias=False)
        >>> with torch.no_grad():
        ...     _ = conv.weight.copy_(torch.tensor([[[0.0, 2.0]]]))
        >>> m, _ = quantize_model_int8(torch.nn.Sequential(conv))
        >>> m[0].qweight.tolist(), m[0](torch.tensor([[[1.0, 2.0, 3.0]]])).tolist()
        ([[[0, 127]]], [[[4.0, 6.0]]])
    """

    qweight: torch.Tensor
    scales: torch.Tensor

    def __init__(self, conv: nn.Module, qweight: torch.Tensor, scales: torch.Tensor) -> None:
        super().__init__()
        if not _is_plain_conv(conv):
            raise ValueError(f"conv must be an nn.Conv1d/2d/3d with padding_mode='zeros', got {conv!r}")
        if qweight.dtype != torch.int8 or tuple(qweight.shape) != tuple(conv.weight.shape):
            raise ValueError(f"qweight must be an int8 tensor of shape {tuple(conv.weight.shape)}, got "
                             f"{qweight.dtype} of shape {tuple(qweight.shape)}")
        if scales.shape != (qweight.shape[0],) or not bool(torch.all(scales > 0)):
            raise ValueError(f"scales must hold {qweight.shape[0]} positive floats, got shape {tuple(scales.shape)}")
        self.dims = len(qweight.shape) - 2
        self.stride, self.padding, self.dilation, self.groups = conv.stride, conv.padding, conv.dilation, conv.groups
        self.register_buffer("qweight", qweight.detach().clone())
        self.register_buffer("scales", scales.detach().to(torch.float32).clone())
        self.bias = nn.Parameter(conv.bias.detach().clone()) if conv.bias is not None else None

    def dequantized_weight(self) -> torch.Tensor:
        """``qweight * scales`` per output channel, in float32."""
        return self.qweight.to(torch.float32) * self.scales.view(-1, *([1] * (self.dims + 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = (F.conv1d, F.conv2d, F.conv3d)[self.dims - 1]
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return conv(x, self.dequantized_weight().to(x.dtype), bias, self.stride, self.padding, self.dilation,
                    self.groups)

    def extra_repr(self) -> str:
        return (f"dims={self.dims}, shape={tuple(self.qweight.shape)}, stride={self.stride}, padding={self.padding}, "
                f"nonzero={int(torch.count_nonzero(self.qweight))}/{self.qweight.numel()}")


def _dynamic_linear(q: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
    import warnings

    with warnings.catch_warnings():      # torch.ao.quantization announces its deprecation on import and use
        warnings.simplefilter("ignore")
        from torch.ao.nn.quantized import dynamic as nnqd

        layer = nnqd.Linear(q.shape[1], q.shape[0], bias_=bias is not None, dtype=torch.qint8)
        qw = torch._make_per_channel_quantized_tensor(q.cpu(), scales.double().cpu(),
                                                      torch.zeros(q.shape[0], dtype=torch.int64), 0)
        layer.set_weight_bias(qw, None if bias is None else bias.detach().float().cpu())
    return layer


def _layer_int8(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(q, scales)`` of an int8 layer this module made, ``(out, in)``; None for other modules."""
    if isinstance(module, (Int8Linear, Int8Conv)):
        return module.qweight, module.scales
    if type(module).__name__ == "Linear" and "quantized.dynamic" in type(module).__module__:
        w = module.weight()
        return w.int_repr(), w.q_per_channel_scales().float()
    return None


def quantize_model_int8(model: nn.Module, mode: str = "weight_only", op_names: Iterable[str] | str | None = None
                        ) -> tuple[nn.Module, dict[str, LayerZeros]]:
    """Replace each Linear / Conv1D by its int8 version, in place; returns ``(model, zeros report)``.

    The weight quantized is the one the layer computes with (a pruned layer's
    ``original * mask``; a QAT layer's masked weight, whose fake-quantized values
    are then exactly the int8 layer's). The report (per ``"<layer>.weight"``, see
    :class:`sparsify.quantization.LayerZeros`) counts the zeros before and after.

    Args:
        model: a float model, pruned (masks attached or removed) or not.
        mode: ``"weight_only"`` (:class:`Int8Linear`) or ``"dynamic"`` (``torch.ao``'s
            dynamic int8 ``Linear``, CPU). Convolutions always become :class:`Int8Conv`
            (weight-only: ``torch.ao`` has no dynamic int8 convolution).
        op_names: regexes over weight names selecting the layers (default: all).

    Raises:
        ValueError: an unknown ``mode``; ``"dynamic"`` with a layer off the CPU; ``op_names``
            matching nothing; a zero that became non-zero (never expected: the quantization is symmetric).

    Example:
        >>> m = torch.nn.Sequential(torch.nn.Linear(8, 4))
        >>> with torch.no_grad():
        ...     m[0].weight[:, :6] = 0
        >>> _, report = quantize_model_int8(m, mode="dynamic")
        >>> type(m[0]).__name__, report["0.weight"].zeros_before, report["0.weight"].lost_zeros
        ('Linear', 24, 0)
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    layers = quantizable_layers(model, op_names)
    if mode == "dynamic":
        elsewhere = [n for n, m in layers.items() if not _is_plain_conv(m) and _weight_before(m).device.type != "cpu"]
        if elsewhere:
            raise ValueError(f"mode='dynamic' runs on the CPU only, but {elsewhere} are on another device; move the "
                             "model to the CPU or use mode='weight_only'")
    before, after, new = {}, {}, {}
    for name, module in layers.items():
        w = _weight_before(module)
        canonical = w.t() if _is_conv1d(module) else w
        q, scales = quantize_int8(canonical.float().cpu().numpy(), f"{name}.weight")
        qt, st = torch.from_numpy(q), torch.from_numpy(scales)
        bias = module.bias.detach() if getattr(module, "bias", None) is not None else None
        if _is_plain_conv(module):
            new[name] = Int8Conv(module, qt, st).to(w.device)
        elif mode == "weight_only":
            new[name] = Int8Linear(qt, st, bias, transposed=_is_conv1d(module)).to(w.device)
        else:
            new[name] = _dynamic_linear(qt, st, bias)
        before[f"{name}.weight"] = canonical.cpu().numpy()
        after[f"{name}.weight"] = _layer_int8(new[name])[0].cpu().numpy()
    report = zeros_check(before, after)
    require_zeros_kept(report)
    for name, layer in new.items():
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, layer)
    return model, report


def int8_weights(model: nn.Module) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"<layer>.weight": (q, scales)}`` of every int8 layer (``(out, in)`` int8 values, float32 scales).

    Example:
        >>> m, _ = quantize_model_int8(torch.nn.Sequential(torch.nn.Linear(3, 2)))
        >>> q, s = int8_weights(m)["0.weight"]
        >>> q.dtype.name, q.shape, s.shape
        ('int8', (2, 3), (2,))
    """
    out = {}
    for name, module in model.named_modules():
        got = _layer_int8(module)
        if got is not None:
            out[f"{name}.weight"] = (got[0].cpu().numpy().copy(), got[1].cpu().numpy().astype(np.float32))
    return out


def int8_document(model: nn.Module) -> dict[str, Any]:
    """The :mod:`sparsify.int8_format` document of a model :func:`quantize_model_int8` converted.

    Each int8 layer is stored under its float model's name (``"fc.weight"``, in the
    float layer's layout: ``(in, out)`` with the channels on axis 1 for a
    ``Conv1D``) as bitmask + int8 values + scales; every other tensor of
    ``state_dict()`` (biases, norms) is stored exactly.

    Raises:
        ValueError: the model holds no int8 layer.
    """
    tensors: dict[str, np.ndarray] = {}
    entries: dict[str, Any] = {}
    int8_keys = set()
    for name, module in model.named_modules():
        got = _layer_int8(module)
        if got is None:
            continue
        prefix = f"{name}." if name else ""
        q, scales = got[0].cpu().numpy(), got[1].cpu().numpy().astype(np.float32)
        transposed = isinstance(module, Int8Linear) and module.transposed
        entries[f"{prefix}weight"] = int8_format.encode_int8_values(
            np.ascontiguousarray(q.T) if transposed else q, scales, axis=1 if transposed else 0)
        int8_keys.update(f"{prefix}{k}" for k in ("qweight", "scales", "_packed_params._packed_params",
                                                   "scale", "zero_point"))
        b = module.bias if isinstance(module, (Int8Linear, Int8Conv)) else module.bias()
        if b is not None:
            tensors[f"{prefix}bias"] = b.detach().cpu().numpy()
    if not entries:
        raise ValueError("the model holds no int8 layer: call quantize_model_int8(model) first")
    for key, v in model.state_dict().items():
        if key not in int8_keys and key not in tensors and isinstance(v, torch.Tensor) and v.dtype != torch.bfloat16:
            tensors[key] = v.detach().cpu().numpy()
    doc = int8_format.compress_int8(tensors, quantize=[])
    doc["tensors"] = {**entries, **doc["tensors"]}
    return doc


def save_int8_npz(model: nn.Module, path: str | os.PathLike) -> int:
    """Write :func:`int8_document` to ``path`` (a compressed ``.npz``, NumPy can read it); returns its bytes."""
    return int8_format.save_int8_npz(path, int8_document(model))


def load_int8_state_dict(source: str | os.PathLike | Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The dense float ``state_dict`` of an int8 file or document (int8 weights dequantized).

    It loads into the *float* model the file came from (``model.load_state_dict``);
    the exact int8 values are :func:`sparsify.int8_format.int8_tensors` of
    :func:`sparsify.int8_format.load_int8_npz`.

    Raises:
        ValueError: not an int8 file / document, or a malformed one.
    """
    doc = source if isinstance(source, Mapping) else int8_format.load_int8_npz(source)
    return {n: torch.from_numpy(np.array(a)) for n, a in int8_format.decompress_int8(doc).items()}
