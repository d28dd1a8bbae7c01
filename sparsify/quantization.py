"""Symmetric per-output-channel int8 quantization that keeps every pruned zero, and the zeros check.

A weight in the canonical layout ``(out, in, ...)`` is quantized one output
channel (row) at a time: ``scale[o] = max |w[o]| / 127`` and
``q = round(w / scale)`` (nearest, ties to even), an ``int8`` in ``[-127, 127]``.
There is no zero point, so ``0 -> 0`` exactly: a pruned weight stays a zero
after quantization, and :func:`dequantize_int8` (``q * scale``) gives it back as
``0.0``. A small kept weight (below ``scale / 2`` in magnitude) rounds to a
*new* zero; that is reported, never hidden. A row of zeros gets scale ``1.0``
(its values are all 0 whatever the scale).

:func:`zeros_check` compares each layer before and after quantization: zeros
before, zeros after, new zeros made by rounding, and zeros turned non-zero (the
number every framework's test asserts is 0).

Example:
    >>> w = np.array([[0.0, 0.5, -1.27], [0.0, 0.0, 0.0]], np.float32)
    >>> q, scales = quantize_int8(w)
    >>> q.tolist(), scales.tolist()
    ([[0, 50, -127], [0, 0, 0]], [0.009999999776482582, 1.0])
    >>> dequantize_int8(q, scales).tolist()[0]
    [0.0, 0.5, -1.2699999809265137]
    >>> zeros_check({"fc": w}, {"fc": q})["fc"]
    LayerZeros(name='fc', size=6, zeros_before=4, zeros_after=4, new_zeros=0, lost_zeros=0)
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

__all__ = ["QMAX", "quantize_int8", "dequantize_int8", "LayerZeros", "layer_zeros", "zeros_check",
           "require_zeros_kept", "format_zeros_report"]

#: The largest int8 magnitude used (symmetric: -127..127, -128 is never produced).
QMAX = 127


def _float_weight(weight: object, name: str) -> np.ndarray:
    w = np.asarray(weight)
    if w.dtype.kind != "f":
        raise TypeError(f"weight {name!r} must be a floating-point array, got dtype {w.dtype}")
    if w.ndim < 1 or w.size == 0:
        raise ValueError(f"weight {name!r} must have at least one axis and one element, got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError(f"weight {name!r} holds NaN or infinite values; int8 scales need finite weights")
    return w


def _channel_axis(axis: object, ndim: int, name: str) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"axis of {name!r} must be an integer in [{-ndim}, {ndim}) for a {ndim}-D weight, "
                         f"got {axis!r}")
    return int(axis) % ndim


def quantize_int8(weight: np.ndarray, name: str = "weight", axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(q, scales)``: the int8 values (same shape) and one float32 scale per output channel.

    ``weight ~ q * scales[:, None, ...]``, with ``|weight - q * scale| <= scale / 2``
    for every element and ``q == 0`` wherever ``weight == 0``.

    Args:
        weight: a floating-point array in the canonical layout ``(out, in, ...)``
            (a 1-D array is ``out`` channels of one weight each).
        name: the layer's name, used in error messages.
        axis: the output-channel axis (0 in the canonical layout; ``-1`` for a
            Keras ``Dense`` kernel ``(in, out)``).

    Raises:
        TypeError: a non-floating-point weight.
        ValueError: an empty weight, or NaN / infinite values.

    Example:
        >>> q, s = quantize_int8(np.array([[0.004, -0.254, 0.0]], np.float32))
        >>> q.tolist(), q.dtype.name      # 0.004 / 0.002 = 2; the pruned 0.0 stays 0
        ([[2, -127, 0]], 'int8')
    """
    w = _float_weight(weight, name)
    ax = _channel_axis(axis, w.ndim, name)
    if ax:
        q, scales = quantize_int8(np.moveaxis(w, ax, 0), name)
        return np.ascontiguousarray(np.moveaxis(q, 0, ax)), scales
    rows = w.reshape(w.shape[0], -1).astype(np.float64)
    amax = np.abs(rows).max(axis=1)
    scales = np.where(amax > 0, amax / QMAX, 1.0).astype(np.float32)
    q = np.rint(rows / scales.astype(np.float64)[:, None])
    q = np.clip(q, -QMAX, QMAX).astype(np.int8)
    return q.reshape(w.shape), scales


def dequantize_int8(q: np.ndarray, scales: np.ndarray, dtype: type | np.dtype = np.float32,
                    axis: int = 0) -> np.ndarray:
    """``q * scales`` (per output channel, along ``axis``) in ``dtype``: the weight an int8 kernel computes with.

    Raises:
        TypeError: ``q`` is not int8.
        ValueError: ``scales`` is not one positive finite number per output channel.

    Example:
        >>> dequantize_int8(np.array([[2, -127, 0]], np.int8), np.array([0.5], np.float32)).tolist()
        [[1.0, -63.5, 0.0]]
    """
    q = np.asarray(q)
    s = np.asarray(scales)
    if q.dtype != np.int8:
        raise TypeError(f"q must be an int8 array, got dtype {q.dtype}")
    if q.ndim >= 1 and _channel_axis(axis, q.ndim, "q"):
        ax = _channel_axis(axis, q.ndim, "q")
        return np.ascontiguousarray(np.moveaxis(dequantize_int8(np.moveaxis(q, ax, 0), s, dtype), 0, ax))
    if q.ndim < 1 or s.shape != (q.shape[0],):
        raise ValueError(f"scales must hold one value per output channel, shape ({q.shape[0] if q.ndim else 0},), "
                         f"got shape {s.shape}")
    if s.dtype.kind != "f" or not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("scales must be positive finite floating-point numbers")
    out = q.reshape(q.shape[0], -1).astype(np.float64) * s.astype(np.float64)[:, None]
    return out.astype(dtype).reshape(q.shape)


@dataclasses.dataclass(frozen=True)
class LayerZeros:
    """The zeros of one layer before and after quantization.

    ``new_zeros``: non-zero weights that rounding turned into zeros (small
    weights, reported); ``lost_zeros``: zeros that became non-zero (a bug: a
    pruned weight came back). ``zeros_after == zeros_before + new_zeros - lost_zeros``.
    """

    name: str
    size: int
    zeros_before: int
    zeros_after: int
    new_zeros: int
    lost_zeros: int

    @property
    def keeps_zeros(self) -> bool:
        """Every zero before is still a zero after."""
        return self.lost_zeros == 0

    @property
    def sparsity_before(self) -> float:
        """The fraction of zeros before quantization."""
        return self.zeros_before / self.size

    @property
    def sparsity_after(self) -> float:
        """The fraction of zeros after quantization."""
        return self.zeros_after / self.size


def layer_zeros(before: np.ndarray, after: np.ndarray, name: str = "weight") -> LayerZeros:
    """The :class:`LayerZeros` of one layer (any dtypes: a value counts as zero when it equals 0).

    Raises:
        ValueError: the shapes differ.

    Example:
        >>> layer_zeros(np.array([0.0, 0.001, 1.0]), np.array([0, 0, 127], np.int8))
        LayerZeros(name='weight', size=3, zeros_before=1, zeros_after=2, new_zeros=1, lost_zeros=0)
    """
    b, a = np.asarray(before), np.asarray(after)
    if b.shape != a.shape:
        raise ValueError(f"layer {name!r}: shape before {b.shape} differs from shape after {a.shape}")
    zb, za = b == 0, a == 0
    return LayerZeros(name=name, size=int(b.size), zeros_before=int(zb.sum()), zeros_after=int(za.sum()),
                      new_zeros=int((za & ~zb).sum()), lost_zeros=int((zb & ~za).sum()))


def zeros_check(before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray]) -> dict[str, LayerZeros]:
    """Per layer, the zeros before and after quantization (:class:`LayerZeros`), in the order of ``before``.

    ``after`` may hold the int8 values or the dequantized weights (in any
    layout the caller brings to ``before``'s shape).

    Raises:
        ValueError: the two mappings name different layers, or a layer's shapes differ.

    Example:
        >>> r = zeros_check({"a": np.array([0.0, 2.0])}, {"a": np.array([1, 127], np.int8)})
        >>> r["a"].lost_zeros, r["a"].keeps_zeros
        (1, False)
    """
    if set(before) != set(after):
        raise ValueError(f"zeros_check: layers before {sorted(before)} differ from layers after {sorted(after)}")
    return {name: layer_zeros(before[name], after[name], name) for name in before}


def require_zeros_kept(report: Mapping[str, LayerZeros]) -> None:
    """Raise ``ValueError`` naming every layer where a zero became non-zero.

    Example:
        >>> require_zeros_kept(zeros_check({"a": np.zeros(2)}, {"a": np.array([0, 3])}))
        Traceback (most recent call last):
        ...
        ValueError: quantization turned zeros into non-zeros: a (1 of 2 zeros)
    """
    bad = [f"{r.name} ({r.lost_zeros} of {r.zeros_before} zeros)" for r in report.values() if r.lost_zeros]
    if bad:
        raise ValueError("quantization turned zeros into non-zeros: " + ", ".join(bad))


def format_zeros_report(report: Mapping[str, LayerZeros]) -> str:
    """A Markdown table of a :func:`zeros_check` report (one row per layer).

    Example:
        >>> print(format_zeros_report(zeros_check({"fc": np.array([0.0, 2.0])}, {"fc": np.array([0, 127])})))
        | layer | weights | zeros before | zeros after | new zeros | zeros lost |
        |---|---:|---:|---:|---:|---:|
        | fc | 2 | 1 (50.00%) | 1 (50.00%) | 0 | 0 |
    """
    lines = ["| layer | weights | zeros before | zeros after | new zeros | zeros lost |", "|---|---:|---:|---:|---:|---:|"]
    for r in report.values():
        lines.append(f"| {r.name} | {r.size} | {r.zeros_before} ({r.sparsity_before:.2%}) | "
                     f"{r.zeros_after} ({r.sparsity_after:.2%}) | {r.new_zeros} | {r.lost_zeros} |")
    return "\n".join(lines)
