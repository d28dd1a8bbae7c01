"""Which selected layers a pattern does not fit: one error naming all of them, or one warning naming the skipped.

A pattern fits a layer when it tiles the layer's 2-D view (``"4x1"`` needs a
row count divisible by 4, ``"2:4"`` a last axis divisible by 4). Without
``skip_incompatible_layers`` a layer that does not fit is an error, and the
error names every such layer, not only the first. With it, those layers are
*skipped*: left dense for the whole run, reported by
:attr:`sparsify.PruningProtocol.skipped` and as ``None`` in
:meth:`~sparsify.PruningProtocol.layer_sparsity` (and so in every adapter's
``sparsity()``), and named in a ``UserWarning`` when the protocol is built.

Example:
    >>> from sparsify.patterns import get_pattern
    >>> check_pattern_fit(get_pattern("4x1"), {"fc": (8, 3), "out": (10, 8)}, "4x1")
    Traceback (most recent call last):
    ...
    ValueError: layer 'out' with 2-D view (10, 8) does not fit pattern '4x1': block 4x1 does not divide it (set skip_incompatible_layers=True to leave such layers dense)
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     check_pattern_fit(get_pattern("4x1"), {"fc": (8, 3), "out": (10, 8)}, "4x1", skip=True)
    {'out': '2-D view (10, 8): block 4x1 does not divide it'}
    >>> str(caught[0].message).split(":")[0]
    "pattern '4x1' does not fit 1 of 2 selected layers, left dense (skip_incompatible_layers=True)"
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

from .layout import view_shape

__all__ = ["incompatible_layers", "check_pattern_fit"]

_SHOWN = 8      # layers named in a message before "... and N more"


def incompatible_layers(pattern: Any, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[tuple[int, int], str]]:
    """``{name: (2-D view shape, reason)}`` for every layer ``pattern`` does not fit, in ``shapes`` order.

    Empty weights (a zero dimension) have nothing to prune and always fit.

    Example:
        >>> from sparsify.patterns import get_pattern
        >>> incompatible_layers(get_pattern("2:4"), {"a": (4, 8), "b": (4, 6), "c": (0, 6)})
        {'b': ((4, 6), 'its last axis (6) is not a multiple of M=4')}
    """
    out = {}
    for name, shape in shapes.items():
        shape = tuple(int(d) for d in shape)
        if 0 in shape:
            continue
        shape2d = view_shape(shape, name)
        reason = pattern.shape_fit(shape)         # the 2-D view's fit; "OxIxK" checks the kernel too
        if reason is not None:
            out[name] = (shape2d, reason)
    return out


def _listed(bad: Mapping[str, tuple[tuple[int, int], str]]) -> str:
    items = [f"{n!r} (2-D view {s}: {r})" for n, (s, r) in list(bad.items())[:_SHOWN]]
    more = len(bad) - _SHOWN
    return "; ".join(items) + (f"; ... and {more} more" if more > 0 else "")


def check_pattern_fit(pattern: Any, shapes: Mapping[str, tuple[int, ...]], pattern_name: str,
                      skip: bool = False) -> dict[str, str]:
    """Check every selected layer against ``pattern``; return the skipped ones.

    Args:
        pattern: a :class:`~sparsify.patterns.base.BasePattern` (its ``fits``).
        shapes: canonical shapes of the selected layers.
        pattern_name: the config's ``pattern`` string, for the messages.
        skip: ``skip_incompatible_layers``.

    Returns:
        ``{name: reason}`` of the layers left dense (empty unless ``skip``); a
        ``UserWarning`` names them.

    Raises:
        ValueError: without ``skip``, naming every layer the pattern does not fit.
    """
    bad = incompatible_layers(pattern, shapes)
    if not bad:
        return {}
    if not skip:
        if len(bad) == 1:
            (name, (shape2d, reason)), = bad.items()
            raise ValueError(f"layer {name!r} with 2-D view {shape2d} does not fit pattern {pattern_name!r}: "
                             f"{reason} (set skip_incompatible_layers=True to leave such layers dense)")
        if len(bad) == len(shapes):
            raise ValueError(f"pattern {pattern_name!r} fits none of the {len(shapes)} selected layers: "
                             f"{_listed(bad)}; choose a pattern that fits them (skip_incompatible_layers=True "
                             "would leave every layer dense and prune nothing)")
        raise ValueError(f"pattern {pattern_name!r} does not fit {len(bad)} of {len(shapes)} selected layers: "
                         f"{_listed(bad)}; set skip_incompatible_layers=True to leave them dense, or exclude them "
                         "with excluded_op_names")
    what = "nothing will be pruned" if len(bad) == len(shapes) else "the others are pruned"
    warnings.warn(f"pattern {pattern_name!r} does not fit {len(bad)} of {len(shapes)} selected layers, left dense "
                  f"(skip_incompatible_layers=True): {_listed(bad)}; {what}", UserWarning, stacklevel=4)
    return {n: f"2-D view {s}: {reason}" for n, (s, reason) in bad.items()}
