"""``"OxIxK"``: blocks of a weight seen as (outputs, inputs, kernel taps).

The 2-D view of :mod:`sparsify.layout` puts a conv's taps and input channels
together in its columns, so some natural units are not blocks of it: a whole
input channel of a conv (all outputs, all taps), the kernel of one
input-output pair, or I inputs by O outputs at one kernel tap. This family
sees a canonical weight ``(out, in, *kernel)`` as ``(out, in, taps)`` and
names a unit by three parts:

* ``O``: outputs per unit, a positive integer or ``channel`` (all outputs);
* ``I``: inputs per unit, a positive integer or ``channel`` (all inputs);
* ``K``: ``1`` (one kernel tap) or ``kernel`` (every tap).

``"channelx1xkernel"`` removes input channels, ``"1xchannelxkernel"`` output
channels, ``"1x1xkernel"`` the kernel of one input-output pair (SparseML's
"filter"), ``"1x4x1"`` four inputs of one output at one tap, ``"1xchannelx1"``
all inputs of one output at one tap. A dense weight has one tap, so ``K`` does
not matter there. With ``K = kernel`` one of ``O``, ``I`` must be 1 or
``channel``, and ``channelxchannelxkernel`` (the whole weight) is not a unit.

Each weight is rearranged so that its units are the ``NxM`` blocks of a 2-D
array (:meth:`PatternKernelBlocks.arrange`); selection, scopes, limits and
monotone masks are those of :class:`~sparsify.patterns.nxm.PatternNxM` on it,
ties broken in the rearranged row-major order. A unit scores the sum (or
mean, max, min: ``block_score_reduce``) of its element scores. Selection over
shards (:mod:`sparsify.distributed`) does not support this family.

Example:
    >>> import numpy as np
    >>> w = np.abs(np.arange(2 * 3 * 2, dtype=float) - 5).reshape(2, 3, 2)   # (out 2, in 3, taps 2)
    >>> keep = PatternKernelBlocks("channelx1xkernel").get_mask_single(w, 0.34)   # one input channel of 3
    >>> keep.all(axis=(0, 2)).tolist(), keep.any(axis=(0, 2)).tolist()
    ([False, True, True], [False, True, True])
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from .base import Pattern, config_value
from .nxm import PatternNxM
from .registry import register_pattern

__all__ = ["PatternKernelBlocks", "KERNEL_BLOCK_REDUCTIONS"]

_OIK = re.compile(r"^\s*(\d+|channel)\s*x\s*(\d+|channel)\s*x\s*(1|kernel)\s*$", re.I)
#: unit scores this family offers (the core's sum, mean, max, and min)
KERNEL_BLOCK_REDUCTIONS = ("sum", "mean", "max", "min")
_CONFIG_KEYS = ("pattern", "pruning_scope", "max_sparsity_ratio_per_layer", "min_sparsity_ratio_per_layer",
                "skip_incompatible_layers")
_O, _I, _T = 0, 1, 2                  # axes of the (out, in, taps) view


def _three_axes(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``(out, in, taps)`` of a canonical shape (1-D: one output row)."""
    if len(shape) == 1:
        return (1, shape[0], 1)
    return (shape[0], shape[1], int(np.prod(shape[2:], dtype=np.int64)))


@register_pattern("OxIxK")
class PatternKernelBlocks(PatternNxM):
    """Units of O outputs by I inputs at one tap (``K=1``) or over the whole kernel (``K=kernel``).

    Attributes:
        out_block, in_block: outputs and inputs per unit (None: all of them).
        whole_kernel: True for ``K = kernel``.

    Example:
        >>> p = PatternKernelBlocks("1x1xkernel")
        >>> (p.out_block, p.in_block, p.whole_kernel), p.arranged_shape((8, 4, 3, 3))
        ((1, 1, True), (32, 9))
    """

    examples = ("channelx1xkernel", "1x1xkernel", "1x4x1", "2x2x1", "1xchannelx1")
    summary = ("OxIxK blocks of O outputs by I inputs (channel: all) at one kernel tap (K=1) or over the whole "
               "kernel (K=kernel): channelx1xkernel removes input channels, 1x1xkernel the kernel of one "
               "input-output pair, 1x4x1 four inputs of one output at one tap")
    nan_reaches_units = True

    def __init__(self, config: Any = None) -> None:
        reduce = config_value(config, "block_score_reduce", "sum")
        if reduce not in KERNEL_BLOCK_REDUCTIONS:
            raise ValueError(f"block_score_reduce must be one of {KERNEL_BLOCK_REDUCTIONS}, got {reduce!r}")
        base = {k: config_value(config, k, None) for k in _CONFIG_KEYS}
        Pattern.__init__(self, {**{k: v for k, v in base.items() if v is not None},
                                "block_score_reduce": "max" if reduce == "min" else reduce})
        self.block_score_reduce = reduce
        parsed = self.parse(self.pattern)
        if parsed is None:
            raise ValueError(f"pattern must look like 'OxIxK' (e.g. 'channelx1xkernel', '1x4x1'), got {self.pattern!r}")
        self.out_block: int | None = parsed["out"]
        self.in_block: int | None = parsed["in"]
        self.whole_kernel: bool = parsed["kernel"]
        self._order, self._row_axes, (self.rows, self.cols) = self._layout()
        self.elementwise = self.rows == 1 and self.cols == 1

    @classmethod
    def parse(cls, name: str) -> dict[str, Any] | None:
        """``{"out", "in", "kernel"}`` of an ``"OxIxK"`` name (None = all), else None.

        Example:
            >>> PatternKernelBlocks.parse("channelx1xkernel"), PatternKernelBlocks.parse("4x1")
            ({'out': None, 'in': 1, 'kernel': True}, None)
        """
        m = _OIK.match(name) if isinstance(name, str) else None
        if not m:
            return None
        o, i, k = (g.lower() for g in m.groups())
        out = None if o == "channel" else int(o)
        inp = None if i == "channel" else int(i)
        if out == 0 or inp == 0:
            raise ValueError(f"pattern {name!r}: outputs and inputs per unit must be positive integers or 'channel'")
        kernel = k == "kernel"
        if kernel and out is None and inp is None:
            raise ValueError(f"pattern {name!r}: 'channelxchannelxkernel' is the whole weight, not a unit")
        if kernel and out not in (1, None) and inp not in (1, None):
            raise ValueError(f"pattern {name!r}: with K=kernel one of O and I must be 1 or 'channel'")
        return {"out": out, "in": inp, "kernel": kernel}

    def _layout(self) -> tuple[tuple[int, int, int], int, tuple[int | None, int | None]]:
        """Axis order of the (out, in, taps) view, how many lead axes make the rows, and the NxM block."""
        o, i = self.out_block, self.in_block
        if self.whole_kernel:
            if i is None:                       # O outputs by all inputs, all taps
                return (_O, _I, _T), 1, (o, None)
            if o is None:                       # I inputs by all outputs, all taps
                return (_I, _O, _T), 1, (i, None)
            if o == 1:                          # I inputs of one output, all taps
                return (_O, _I, _T), 2, (i, None)
            return (_I, _O, _T), 2, (o, None)   # O outputs of one input, all taps
        if o is None and i is None:             # one whole tap
            return (_T, _O, _I), 1, (1, None)
        if o is None:                           # I inputs by all outputs at one tap
            return (_T, _I, _O), 2, (i, None)
        return (_T, _O, _I), 2, (o, i)          # O outputs by I inputs at one tap

    # ----- the rearranged view ---------------------------------------------------------
    def arranged_shape(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """Shape of the 2-D array :meth:`arrange` makes of a canonical ``shape``."""
        sizes = [_three_axes(tuple(int(d) for d in shape))[a] for a in self._order]
        rows = int(np.prod(sizes[:self._row_axes], dtype=np.int64))
        return rows, int(np.prod(sizes[self._row_axes:], dtype=np.int64))

    def arrange(self, a: np.ndarray) -> np.ndarray:
        """A canonical array as the 2-D array whose ``NxM`` blocks are this pattern's units.

        Example:
            >>> PatternKernelBlocks("channelx1xkernel").arrange(np.arange(4).reshape(2, 2)).tolist()
            [[0, 2], [1, 3]]
        """
        a = np.asarray(a)
        three = a.reshape(_three_axes(a.shape)).transpose(self._order)
        return np.ascontiguousarray(three).reshape(self.arranged_shape(a.shape))

    def unarrange(self, a2: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """Inverse of :meth:`arrange` for a canonical ``shape``."""
        sizes = _three_axes(tuple(shape))
        three = np.asarray(a2).reshape([sizes[a] for a in self._order]).transpose(np.argsort(self._order))
        return np.ascontiguousarray(three).reshape(shape)

    def kernel_fit(self, shape: tuple[int, ...]) -> str | None:
        """None if blocks of this pattern tile a canonical ``shape``, else the reason they do not."""
        if len(shape) == 0:
            return "a scalar has no units"
        sizes = _three_axes(tuple(int(d) for d in shape))
        if self._row_axes == 2:                 # the block's rows must not straddle the outer row axis
            inner, block = sizes[self._order[1]], self.rows
            if inner % block:
                what = "outputs" if self._order[1] == _O else "inputs"
                return f"{block} {what} per unit do not divide its {inner} {what}"
        return self.fits(self.arranged_shape(shape))

    def unit_view(self, w: np.ndarray) -> np.ndarray:
        return self.arrange(w)

    def shape_fit(self, shape: tuple[int, ...]) -> str | None:
        return self.kernel_fit(tuple(shape))

    # ----- the public API on the rearranged view ---------------------------------------
    def _unfit(self, name: str, shape: tuple[int, ...]) -> bool:
        """True when the layer is left dense (``skip_incompatible_layers``); raises when it does not fit."""
        reason = self.kernel_fit(shape)
        if reason is None:
            return False
        if self.skip_incompatible_layers:
            return True
        raise ValueError(f"layer {name!r} of shape {tuple(shape)} does not fit pattern {self.pattern!r}: {reason} "
                         "(set skip_incompatible_layers=True to leave such layers dense)")

    def _arranged(self, scores: Mapping[str, np.ndarray], pre_masks: Mapping[str, np.ndarray] | None):
        arranged, pre, dense = {}, {}, {}
        for name, score in scores.items():
            score = np.asarray(score)
            p = None if pre_masks is None else pre_masks.get(name)
            if p is not None and np.shape(p) != score.shape:
                raise ValueError(f"layer {name!r}: pre_mask shape {np.shape(p)} differs from scores shape "
                                 f"{score.shape}")
            if self._unfit(name, score.shape):
                dense[name] = np.ones(score.shape, dtype=bool) if p is None else np.asarray(p, bool).copy()
                continue
            arranged[name] = self.arrange(score)
            if p is not None:
                pre[name] = self.arrange(p)
        return arranged, (pre if pre_masks is not None else None), dense

    def _back(self, scores, masks, dense):
        return {n: dense[n] if n in dense else self.unarrange(masks[n], np.shape(scores[n])) for n in scores}

    def check_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        """True if the layer is pruned, False if left dense; ``ValueError`` naming it otherwise."""
        return not self._unfit(name, tuple(int(d) for d in shape))

    def get_mask_single(self, score, exact_sparsity_ratio, pre_mask=None, name="layer"):
        pre = None if pre_mask is None else {name: pre_mask}
        masks = self.get_masks_local({name: score}, exact_sparsity_ratio, pre, limits=False)
        return masks[name]

    def get_masks_local(self, scores, target_sparsity_ratio, pre_masks=None, max_sparsity_ratio_per_layer=None,
                        limits: bool = True):
        """Every layer pruned to the same ratio (``limits``: clamped to the per-layer min/max)."""
        arranged, pre, dense = self._arranged(scores, pre_masks)
        if limits:
            masks = super().get_masks_local(arranged, target_sparsity_ratio, pre, max_sparsity_ratio_per_layer)
        else:
            masks = {n: super(PatternKernelBlocks, self).get_mask_single(
                s, target_sparsity_ratio, None if pre is None else pre.get(n), name=n) for n, s in arranged.items()}
        return self._back(scores, masks, dense)

    def get_masks_global(self, scores, target_sparsity_ratio, pre_masks=None, max_sparsity_ratio_per_layer=None):
        """One threshold over all layers' units (dict order, then rearranged order, breaks ties)."""
        arranged, pre, dense = self._arranged(scores, pre_masks)
        masks = super().get_masks_global(arranged, target_sparsity_ratio, pre, max_sparsity_ratio_per_layer)
        return self._back(scores, masks, dense)

    def prepare_units(self, name, score, pre_mask=None, check_nan=True):
        raise ValueError(f"pattern {self.pattern!r}: selection over shards does not support 'OxIxK' patterns "
                         "(their units are not rows of the 2-D view); prune the whole layer")

    def unit_scores(self, score2d):
        if self.block_score_reduce != "min":
            return super().unit_scores(score2d)
        br, bc = self.block_shape(score2d.shape)
        r, c = score2d.shape
        return score2d.reshape(r // br, br, c // bc, bc).min(axis=(1, 3)), None

    def get_block_size_dict(self, data: Mapping[str, np.ndarray]) -> dict[str, list[int]]:
        """Block (rows, cols) of the rearranged 2-D array for each layer."""
        return {n: list(self.block_shape(self.arranged_shape(np.shape(w)))) for n, w in data.items()}

    # ----- unit values, for adapters that show or initialise them ------------------------
    def unit_values(self, score: np.ndarray, name: str = "layer") -> np.ndarray:
        """The score of every unit of one canonical array (grid of the rearranged view's blocks).

        Example:
            >>> PatternKernelBlocks("channelx1xkernel").unit_values(np.array([[1.0, 4.0], [3.0, 0.0]])).tolist()
            [[4.0], [4.0]]
        """
        score = np.asarray(score)
        self._unfit(name, score.shape)
        a2 = self.arrange(score)
        br, bc = self.block_shape(a2.shape)
        units, _ = self.unit_scores(a2)
        return np.asarray(units, dtype=np.float64).reshape(a2.shape[0] // br, a2.shape[1] // bc)

    def unit_lock_mask(self, score: np.ndarray, name: str = "layer") -> np.ndarray:
        """Keep mask (shape of ``score``) of the units whose score is not zero (e.g. magnitudes of a weight).

        Example:
            >>> PatternKernelBlocks("channelx1xkernel").unit_lock_mask(np.array([[0.0, 2.0], [0.0, 0.0]])).tolist()
            [[False, True], [False, True]]
        """
        score = np.asarray(score)
        units = self.unit_values(score, name) != 0
        keep2 = self.expand_keep(units.reshape(-1), self.arrange(score), None)
        return self.unarrange(keep2, score.shape)
