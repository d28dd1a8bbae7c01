"""``"NxM"`` blocks: N rows by M columns of the 2-D view, pruned or kept together.

As in Intel Neural Compressor, ``channel`` stands for a whole axis:
``"channelxM"`` is a block of all rows by M columns (``"channelx1"`` removes
one input column of the 2-D view across every output) and ``"Nxchannel"`` is
N rows by all columns (``"1xchannel"`` removes a whole output channel).

Example:
    >>> import numpy as np
    >>> w = np.array([[1.0, 9.0, 2.0], [1.0, 9.0, 8.0]])
    >>> PatternNxM("channelx1").get_mask_single(w, 0.34).astype(int).tolist()   # column sums 2, 18, 10
    [[0, 1, 1], [0, 1, 1]]
    >>> PatternNxM("1xchannel").get_mask_single(w, 0.5).astype(int).tolist()    # row sums 12, 18
    [[0, 0, 0], [1, 1, 1]]
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from ..layout import to_2d
from .base import Pattern
from .registry import register_pattern

__all__ = ["PatternNxM"]

_NXM = re.compile(r"^\s*(\d+|channel)\s*x\s*(\d+|channel)\s*$", re.I)
_UNSET: Any = "unset"


def _block_name(rows: int | None, cols: int | None) -> str:
    return f"{'channel' if rows is None else rows}x{'channel' if cols is None else cols}"


@register_pattern("NxM")
class PatternNxM(Pattern):
    """Blocks of ``block_size = (rows, cols)`` of the 2-D view; a block's score is
    the sum (or mean/max) of its element scores.

    Construct from a config (``PatternNxM("4x1")``, a dict or a ``PruningConfig``)
    or with explicit keywords: ``PatternNxM(block_rows=4, block_cols=1)``;
    ``None`` for a dimension means the whole axis (``block_rows=None`` is
    ``"channelxM"``, all rows; ``block_cols=None`` is ``"Nxchannel"``, all columns).

    Example:
        >>> PatternNxM(block_rows=1, block_cols=2).get_block_size_dict({"w": np.zeros((3, 4))})
        {'w': [1, 2]}
        >>> PatternNxM("channelx2").get_block_size_dict({"w": np.zeros((3, 4))})
        {'w': [3, 2]}
    """

    examples = ("1x1", "4x1", "1x4", "2x2", "channelx1", "1xchannel")
    summary = ("NxM blocks of N rows by M columns of the 2-D view (1x1 is unstructured); channelxM: all rows "
               "by M columns (channelx1 removes input columns); Nxchannel: N rows by all columns "
               "(1xchannel removes output channels)")
    nan_reaches_units = True

    def __init__(self, config: Any = None, *, block_rows: int | None | str = _UNSET,
                 block_cols: int | None | str = _UNSET) -> None:
        if config is None and (block_rows is not _UNSET or block_cols is not _UNSET):
            rows = 1 if block_rows is _UNSET else block_rows
            cols = 1 if block_cols is _UNSET else block_cols
            if rows is None and cols is None:
                raise ValueError("block_rows and block_cols cannot both be None (whole axis)")
            config = _block_name(rows, cols)
        super().__init__(config)
        parsed = self.parse(self.pattern)
        if parsed is None:
            raise ValueError(f"pattern must look like 'NxM' (e.g. '4x1', 'channelx1', '1xchannel'), "
                             f"got {self.pattern!r}")
        self.rows: int | None = parsed["rows"]
        self.cols: int | None = parsed["cols"]
        self.elementwise = self.rows == 1 and self.cols == 1

    @classmethod
    def parse(cls, name: str) -> dict[str, Any] | None:
        """``{"rows", "cols"}`` of an ``"NxM"`` name (``None`` = the whole axis), else None.

        Example:
            >>> PatternNxM.parse("channelx4"), PatternNxM.parse("2xchannel"), PatternNxM.parse("2:4")
            ({'rows': None, 'cols': 4}, {'rows': 2, 'cols': None}, None)
        """
        m = _NXM.match(name) if isinstance(name, str) else None
        if not m:
            return None
        a, b = m.group(1).lower(), m.group(2).lower()
        if a == "channel" and b == "channel":
            raise ValueError(f"pattern {name!r}: at most one block dimension may be 'channel'")
        rows = None if a == "channel" else int(a)
        cols = None if b == "channel" else int(b)
        if (rows is not None and rows <= 0) or (cols is not None and cols <= 0):
            raise ValueError(f"pattern {name!r}: block dimensions must be positive integers, got {a}x{b}")
        return {"rows": rows, "cols": cols}

    @property
    def block_size(self) -> tuple[int | None, int | None]:
        """(rows, cols); None means the whole axis."""
        return (self.rows, self.cols)

    def block_shape(self, shape2d: tuple[int, int]) -> tuple[int, int]:
        """(rows, cols) of one block on a 2-D view of ``shape2d`` (whole axes resolved).

        Example:
            >>> PatternNxM("channelx2").block_shape((6, 4)), PatternNxM("3xchannel").block_shape((6, 4))
            ((6, 2), (3, 4))
        """
        return (shape2d[0] if self.rows is None else self.rows, shape2d[1] if self.cols is None else self.cols)

    def fits(self, shape2d):
        br, bc = self.block_shape(shape2d)
        if shape2d[0] % br or shape2d[1] % bc:
            return f"block {br}x{bc} does not divide it"
        return None

    def unit_count(self, shape2d):
        br, bc = self.block_shape(shape2d)
        return (shape2d[0] // br) * (shape2d[1] // bc)

    def unit_scores(self, score2d):
        br, bc = self.block_shape(score2d.shape)
        if br == 1 and bc == 1:
            return score2d, None
        r, c = score2d.shape
        blocks = score2d.reshape(r // br, br, c // bc, bc)
        if self.block_score_reduce == "max":
            return blocks.max(axis=(1, 3)), None
        with np.errstate(invalid="ignore"):        # +inf and -inf in one block: NaN, named by the caller
            red = blocks.sum(axis=(1, 3), dtype=np.float64)
        return (red / (br * bc) if self.block_score_reduce == "mean" else red), None

    def unit_pre_pruned(self, pre2d):
        br, bc = self.block_shape(pre2d.shape)
        if br == 1 and bc == 1:
            return ~pre2d
        r, c = pre2d.shape
        return ~pre2d.reshape(r // br, br, c // bc, bc).all(axis=(1, 3))

    #: expand_keep reads the scores' shape only (global scope may drop the element scores once units are made)
    expand_keep_reads_shape_only = True

    def expand_keep(self, unit_keep, score2d, aux):
        br, bc = self.block_shape(score2d.shape)
        if br == 1 and bc == 1:
            return unit_keep.reshape(score2d.shape)
        r, c = score2d.shape
        cols = unit_keep.reshape(r // br, c // bc)
        if bc > 1:                                   # along a row first (contiguous), then copy the rows
            cols = np.repeat(cols, bc, axis=1)
        if br == 1:
            return cols
        keep = np.empty((r, c), dtype=bool)
        np.copyto(keep.reshape(r // br, br, c), cols[:, None, :])
        return keep

    def get_block_size_dict(self, data: Mapping[str, np.ndarray]) -> dict[str, list[int]]:
        """Block (rows, cols) of the 2-D view for each layer."""
        return {n: list(self.block_shape(to_2d(np.asarray(w), n).shape)) for n, w in data.items()}
