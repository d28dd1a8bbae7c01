"""Global scope without every layer's scores at once: scores recomputed row chunk by row chunk.

The global scope cuts all layers at one threshold. Where a unit is one element
(``"1x1"``) and the criterion is row-separable and evaluated at the update
(magnitude, Wanda), :func:`streamed_global_masks` never holds a layer's scores:
a :class:`~sparsify.selection.streamed_cut.StreamedCut` computes them again for each
chunk it reads (a strided sample of rows, then one classification pass; an
exact pass per 16 bits of the threshold only when the sample's bracket
misses). The extra memory is the masks (1 byte per weight), the bracket's
candidates and a few chunks per thread; the masks are those of
:meth:`sparsify.Pattern.get_masks_global` on the full scores, bit for bit.
:func:`streamed_layer_mask` does the same for one layer in local scope (no
layer-sized score array to allocate, fault in and free: threads scale).

Example:
    >>> import numpy as np
    >>> from sparsify.criteria import get_criterion
    >>> from sparsify.patterns import get_pattern
    >>> inputs = {"a": {"weight": np.array([[4.0, -1.0]])}, "b": {"weight": np.array([[2.0, 3.0]])}}
    >>> masks = streamed_global_masks(get_pattern({"pruning_scope": "global"}), get_criterion("magnitude"), None,
    ...                               inputs, None, 0.5)
    >>> {n: m.astype(int).tolist() for n, m in masks.items()}
    {'a': [[1, 0]], 'b': [[0, 1]]}
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from .layout import view_shape
from .patterns.allocation import allocate_on_cut
from .patterns.base import Pattern
from .patterns.layer_view import view_axes
from .selection.streamed_cut import StreamedCut

__all__ = ["can_stream_global", "streamed_global_masks", "can_stream_local", "streamed_layer_mask", "mask_buffers"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def can_stream_global(pattern: Any, criterion: Any) -> bool:
    """True when :func:`streamed_global_masks` may replace the global selection of ``pattern`` on the scores of
    ``criterion``: global scope, element units, the base class's global path, a row-separable criterion.

    Example:
        >>> from sparsify.criteria import get_criterion
        >>> from sparsify.patterns import get_pattern
        >>> can_stream_global(get_pattern({"pruning_scope": "global"}), get_criterion("magnitude"))
        True
        >>> can_stream_global(get_pattern({"pattern": "4x1", "pruning_scope": "global"}), get_criterion("magnitude"))
        False
    """
    cls = type(pattern)
    return (isinstance(pattern, Pattern) and pattern.scope == "global" and pattern.elementwise
            and cls.get_masks is Pattern.get_masks and cls.get_masks_global is Pattern.get_masks_global
            and criterion.row_separable and not criterion.per_step)


def _rows_function(criterion: Any, config: Any, inputs: Mapping[str, Any], pre: np.ndarray | None,
                   dtype: np.dtype) -> Callable[[Any, np.ndarray | None], np.ndarray]:
    """Flat scores of some rows of one layer, written into ``out`` where the criterion can
    (:meth:`~sparsify.criteria.Criterion.scores_into`); ``-inf`` where ``pre`` pruned before (NaN stays NaN:
    it raises)."""
    weight = inputs["weight"]
    pre2 = None if pre is None else pre.reshape(weight.shape[0], -1)
    low = dtype.type(-np.inf)

    def rows(r: Any, out: np.ndarray | None = None) -> np.ndarray:
        w = weight[r]
        x = None
        if out is not None:
            x = criterion.scores_into(out.reshape(w.shape), config=config, **{**inputs, "weight": w})
        if x is None:
            x = np.asarray(criterion.scores(config=config, **{**inputs, "weight": w})).reshape(-1)
            if x.dtype != dtype:
                x = x.astype(dtype)
            if pre2 is not None:
                x = np.where(pre2[r].reshape(-1) | np.isnan(x), x, low)   # a new array: x may be the caller's
        elif pre2 is not None:
            np.copyto(x, low, where=~(pre2[r].reshape(x.shape) | np.isnan(x)))   # x is our buffer
        return x.reshape(-1)

    return rows


def mask_buffers(sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Flat bool buffers of ``sizes`` (name -> elements), views of one allocation: an update's masks fault in a
    few large pages together instead of many small allocations that the allocator returns to the system and
    takes back at every update. A mask kept alive keeps the whole allocation (1 byte per weight) alive.

    Example:
        >>> {n: b.size for n, b in mask_buffers({"a": 3, "b": 2}).items()}
        {'a': 3, 'b': 2}
    """
    buf = np.empty(sum(sizes.values()), dtype=bool)
    out, off = {}, 0
    for n, size in sizes.items():
        out[n] = buf[off:off + size]
        off += size
    return out


def _probe(criterion: Any, config: Any, inputs: Mapping[str, Mapping[str, Any]]) -> np.dtype | None:
    """The scores' dtype when every layer can be scored by row chunks (one row each, in layer order), else None."""
    dtypes = set()
    for inp in inputs.values():
        w = inp["weight"]
        if not isinstance(w, np.ndarray) or w.ndim < 1 or any(
                k != "weight" and not (np.ndim(v) < w.ndim or (np.ndim(v) == w.ndim and np.shape(v)[0] == 1))
                for k, v in inp.items()):
            return None
        s = np.asarray(criterion.scores(config=config, **{**inp, "weight": w[:1]}))
        if s.shape != (1, *w.shape[1:]) or s.dtype not in _FLOATS:
            return None
        dtypes.add(s.dtype)
    return dtypes.pop() if len(dtypes) == 1 else None


def streamed_global_masks(pattern: Any, criterion: Any, config: Any, inputs: Mapping[str, Mapping[str, Any]],
                          pre_masks: Mapping[str, np.ndarray] | Callable[[], Any] | None,
                          ratio: float) -> dict[str, np.ndarray] | None:
    """Masks (True = kept) of ``pattern``'s global selection at ``ratio`` on ``criterion``'s scores of each
    layer's ``inputs`` (``{"weight": ..., "activation": ...}``), or None where the scores cannot be streamed
    (the caller computes them all). ``pre_masks`` may be a function that checks and returns them, called after
    the scores' dtype is known. Raises :class:`~sparsify.selection.score_checks.NaNScoreError` for a NaN score.
    """
    ratio = pattern.check_ratio(ratio)
    max_ratio = pattern.max_sparsity_ratio_per_layer
    names = [n for n, inp in inputs.items() if np.size(inp["weight"]) > 0]
    dtype = _probe(criterion, config, {n: inputs[n] for n in names}) if names else np.dtype(np.float32)
    if dtype is None:
        return None
    pre_masks = pre_masks() if callable(pre_masks) else pre_masks
    if any(pattern.fits(view_shape(np.shape(inp["weight"]), n)) is not None for n, inp in inputs.items()):
        return None
    masks = {n: np.ones(np.shape(inp["weight"]), dtype=bool) for n, inp in inputs.items() if n not in names}
    if not names:
        return masks
    pre = {}
    for n in names:
        p = None if pre_masks is None or pre_masks.get(n) is None else np.asarray(pre_masks[n], dtype=bool)
        pre[n] = None if p is None or p.all() else p
    shapes = {n: np.shape(inputs[n]["weight"]) for n in names}
    rows = {n: _rows_function(criterion, config, inputs[n], pre[n], dtype) for n in names}
    ties = {n: view_axes(len(s)) if len(s) >= 3 else None for n, s in shapes.items()}
    sizes = {n: int(np.prod(s)) for n, s in shapes.items()}
    buffers = mask_buffers(sizes)
    limits = {n: pattern.unit_limits(sizes[n], max_ratio) for n in names}
    total = pattern.units_for_ratio(ratio, sum(sizes.values()))
    total = min(max(total, sum(lo for lo, _ in limits.values())), sum(hi for _, hi in limits.values()))
    cut = StreamedCut([rows[n] for n in names], [shapes[n] for n in names], names, dtype, [ties[n] for n in names],
                      [buffers[n] for n in names])
    counts = allocate_on_cut(cut, sizes, limits, total)
    for part in cut.parts:
        part.keep = None                               # a clipped layer's classification: not needed any more
    for n in names:
        keep = counts[n]
        if not isinstance(keep, np.ndarray):           # clipped: its own lowest units
            one = StreamedCut([rows[n]], [shapes[n]], [n], dtype, [ties[n]], [buffers[n]])   # its buffer: unused
            one.counts(int(keep))
            keep = one.keeps()[0]
        keep = keep.reshape(shapes[n])
        if pre[n] is not None:
            np.logical_and(keep, pre[n], out=keep)
        masks[n] = keep
    return {n: masks[n] for n in inputs}


def can_stream_local(pattern: Any, criterion: Any) -> bool:
    """True when :func:`streamed_layer_mask` may replace ``pattern``'s local selection of one layer.

    Example:
        >>> from sparsify.criteria import get_criterion
        >>> from sparsify.patterns import get_pattern
        >>> can_stream_local(get_pattern("1x1"), get_criterion("wanda")), can_stream_local(get_pattern("2:4"), get_criterion("wanda"))
        (True, False)
    """
    cls = type(pattern)
    return (isinstance(pattern, Pattern) and pattern.scope == "local" and pattern.elementwise
            and cls.get_masks is Pattern.get_masks and cls.get_masks_local is Pattern.get_masks_local
            and cls._local_mask is Pattern._local_mask and criterion.row_separable and not criterion.per_step)


def streamed_layer_mask(pattern: Any, criterion: Any, config: Any, name: str, inputs: Mapping[str, Any],
                        pre_mask: np.ndarray | None, ratio: float, out: np.ndarray | None = None) -> np.ndarray | None:
    """The local-scope mask of one non-empty layer (``pattern.get_masks({name: scores}, ratio, pre)[name]``, bit
    for bit) from scores computed row chunk by row chunk, or None where they cannot be (the caller scores the
    layer whole). ``out``: a C-contiguous bool array of the layer's size to write the mask into (e.g. one of
    :func:`mask_buffers`). Raises :class:`~sparsify.selection.score_checks.NaNScoreError` for a NaN score.

    Example:
        >>> from sparsify.criteria import get_criterion
        >>> from sparsify.patterns import get_pattern
        >>> streamed_layer_mask(get_pattern("1x1"), get_criterion("magnitude"), None, "fc",
        ...                     {"weight": np.array([[3.0, -1.0], [0.5, 2.0]])}, None, 0.5).tolist()
        [[True, False], [False, True]]
    """
    ratio = pattern.check_ratio(ratio)
    shape = np.shape(inputs["weight"])
    dtype = _probe(criterion, config, {name: inputs})
    if dtype is None or pattern.fits(view_shape(shape, name)) is not None:
        return None
    pre = None if pre_mask is None else np.asarray(pre_mask, dtype=bool)
    pre = None if pre is None or pre.all() else pre
    n = int(np.prod(shape))
    lo, hi = pattern.unit_limits(n, pattern.max_sparsity_ratio_per_layer)
    cut = StreamedCut([_rows_function(criterion, config, inputs, pre, dtype)], [shape], [name], dtype,
                      [view_axes(len(shape)) if len(shape) >= 3 else None], [out])
    cut.counts(min(max(pattern.units_for_ratio(ratio, n), lo), hi))
    keep = cut.keeps()[0]
    if pre is not None:
        np.logical_and(keep, pre, out=keep)
    return keep
