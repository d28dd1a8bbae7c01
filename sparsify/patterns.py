"""Sparsity patterns and their registry.

A pattern turns per-element scores into boolean masks (True = kept) with an
exact number of pruned units. Scores and masks are ``dict[str, np.ndarray]``
keyed by layer name, in the canonical (PyTorch) layout; patterns work on the
2-D view of :mod:`sparsify.layout`.

Registered families:

* ``"NxM"`` (:class:`PatternNxM`): blocks of N rows by M columns of the 2-D
  view; ``"1x1"`` is unstructured, ``"channelx1"`` whole rows (output
  channels), ``"1xchannel"`` whole columns.
* ``"N:M"`` (:class:`PatternNInM`): N of every M consecutive weights along the
  last axis are pruned (``"2:4"`` keeps 2 of 4, ``"1:4"`` keeps 3 of 4).

Example:
    >>> import numpy as np
    >>> p = get_pattern("1x2")
    >>> p.get_mask_single(np.array([[1.0, 2.0, 9.0, 9.0]]), 0.5).astype(int).tolist()
    [[0, 0, 1, 1]]
    >>> get_pattern("2:4").get_mask_single(np.array([[4.0, 1.0, 3.0, 2.0]]), 0.5).astype(int).tolist()
    [[1, 0, 1, 0]]
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from .layout import from_2d, to_2d
from .selection import check_finite, exact_prune_count, lowest_k_keep

__all__ = [
    "register_pattern", "get_pattern", "registered_patterns", "Pattern", "PatternNxM", "PatternNInM",
    "BLOCK_REDUCTIONS",
]

_REGISTRY: dict[str, type["Pattern"]] = {}
BLOCK_REDUCTIONS = ("sum", "mean", "max")


def register_pattern(name: str) -> Callable[[type["Pattern"]], type["Pattern"]]:
    """Class decorator registering a pattern family under ``name``.

    The class must implement ``parse(pattern_string)`` returning keyword
    arguments for its constructor, or ``None`` if the string is not its own.

    Example:
        >>> "NxM" in registered_patterns()
        True
    """
    def wrap(cls: type[Pattern]) -> type[Pattern]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"pattern name {name!r} is already registered by {_REGISTRY[name].__name__}")
        _REGISTRY[name] = cls
        cls.family = name
        return cls
    return wrap


def registered_patterns() -> tuple[str, ...]:
    """Names of the registered pattern families."""
    return tuple(_REGISTRY)


def _parse_any(name: str) -> tuple[type["Pattern"], dict[str, Any]]:
    for cls in _REGISTRY.values():
        kwargs = cls.parse(name)
        if kwargs is not None:
            return cls, kwargs
    raise ValueError(f"pattern must be one of the registered families {registered_patterns()} "
                     f"(e.g. '1x1', '4x1', 'channelx1', '2:4'), got {name!r}")


def get_pattern(config: Any) -> "Pattern":
    """Build a pattern from a name (``"4x1"``), a dict, a ``PruningConfig`` or a ``Pattern``.

    Example:
        >>> get_pattern({"pattern": "2:4", "pruning_scope": "global"}).is_global
        True
    """
    if isinstance(config, Pattern):
        return config
    name = _config_get(config, "pattern", "1x1")
    if not isinstance(name, str):
        raise TypeError(f"pattern must be a string such as '4x1' or '2:4', got {name!r}")
    cls, _ = _parse_any(name)
    return cls(config)


def _config_get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    if isinstance(config, str):
        return config if key == "pattern" else default
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


class Pattern:
    """Base class: exact unit selection, local and global allocation, monotone masks.

    Subclasses define what a *unit* is through :meth:`unit_scores`,
    :meth:`expand` and :meth:`units_for_ratio`.
    """

    family = "base"

    def __init__(self, config: Any = None) -> None:
        self.pattern: str = _config_get(config, "pattern", "1x1")
        scope = _config_get(config, "pruning_scope", "local")
        if scope not in ("global", "local"):
            raise ValueError(f"pruning_scope must be 'global' or 'local', got {scope!r}")
        self.is_global: bool = scope == "global"
        self.max_sparsity_ratio_per_layer: float = float(_config_get(config, "max_sparsity_ratio_per_layer", 0.98))
        self.min_sparsity_ratio_per_layer: float = float(_config_get(config, "min_sparsity_ratio_per_layer", 0.0))
        self.block_score_reduce: str = _config_get(config, "block_score_reduce", "sum")
        if self.block_score_reduce not in BLOCK_REDUCTIONS:
            raise ValueError(f"block_score_reduce must be one of {BLOCK_REDUCTIONS}, got {self.block_score_reduce!r}")
        self.skip_incompatible_layers: bool = bool(_config_get(config, "skip_incompatible_layers", False))

    @classmethod
    def parse(cls, name: str) -> dict[str, Any] | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pattern!r}, scope={'global' if self.is_global else 'local'})"

    # ----- what a unit is (subclasses) -------------------------------------------------
    def fits(self, shape2d: tuple[int, int]) -> str | None:
        """None if the 2-D view fits the pattern, else the reason it does not."""
        return None

    def unit_scores(self, score2d: np.ndarray) -> tuple[np.ndarray, Any]:
        """Scores of the units of one 2-D view (any shape; flattened row-major),
        plus anything :meth:`expand_keep` needs again."""
        raise NotImplementedError

    def unit_pre_pruned(self, pre2d: np.ndarray) -> np.ndarray:
        """Units (shape of :meth:`unit_scores`) touched by an earlier pruning."""
        raise NotImplementedError

    def expand_keep(self, unit_keep: np.ndarray, score2d: np.ndarray, aux: Any) -> np.ndarray:
        """Element-level keep mask of the 2-D view from the kept units."""
        raise NotImplementedError

    def units_for_ratio(self, ratio: float, n_units: int) -> int:
        """Exact number of units to prune for an element sparsity ``ratio``."""
        return exact_prune_count(ratio, n_units)

    def check_ratio(self, ratio: float, what: str = "target_sparsity_ratio") -> float:
        r = float(ratio)
        if np.isnan(r) or not 0.0 <= r < 1.0:
            raise ValueError(f"{what} must be in [0, 1), got {ratio!r}")
        return r

    # ----- helpers ---------------------------------------------------------------------
    #: True when a NaN score always reaches its unit's score (sum/mean/max of a block), so the
    #: selection kernel, which names the layer, finds it without a separate full pass.
    nan_reaches_units = False

    def _prepare(self, name: str, score: np.ndarray, pre_mask: np.ndarray | None, check_nan: bool = True):
        score = np.asarray(score)
        if score.ndim == 0:
            raise ValueError(f"layer {name!r}: scores must have at least 1 dimension, got a scalar")
        s2 = to_2d(score)
        reason = self.fits(s2.shape)
        if reason is not None:
            if self.skip_incompatible_layers:
                return None
            raise ValueError(f"layer {name!r} with 2-D view {s2.shape} does not fit pattern {self.pattern!r}: "
                             f"{reason} (set skip_incompatible_layers=True to leave such layers dense)")
        if check_nan or not self.nan_reaches_units:
            check_finite(s2, name)
        pre2 = None
        if pre_mask is not None:
            pre_mask = np.asarray(pre_mask)
            if pre_mask.shape != score.shape:
                raise ValueError(f"layer {name!r}: pre_mask shape {pre_mask.shape} differs from scores shape {score.shape}")
            pre2 = to_2d(pre_mask.astype(bool, copy=False))
            if pre2.all():
                pre2 = None
        units, aux = self.unit_scores(s2 if pre2 is None else self._pre_pruned_lowest(s2, pre2))
        if pre2 is not None:
            if not (check_nan or not self.nan_reaches_units):
                check_finite(units, name)           # before -inf hides a NaN in a pruned unit
            units = np.where(self.unit_pre_pruned(pre2), -np.inf, units)
        return s2, units, pre2, aux

    def _pre_pruned_lowest(self, s2: np.ndarray, pre2: np.ndarray) -> np.ndarray:
        """Element scores seen by unit_scores when earlier masks exist (default: unchanged)."""
        return s2

    def _finish(self, score: np.ndarray, prepared: tuple, unit_keep: np.ndarray) -> np.ndarray:
        s2, _, pre2, aux = prepared
        keep2 = self.expand_keep(unit_keep, s2, aux)
        if pre2 is not None:
            keep2 = keep2 & pre2
        return from_2d(keep2, np.shape(score))

    def _limits(self, n_units: int, max_ratio: float) -> tuple[int, int]:
        lo = self.units_for_ratio(min(self.min_sparsity_ratio_per_layer, self._ratio_ceiling()), n_units)
        hi = self.units_for_ratio(min(max_ratio, self._ratio_ceiling()), n_units)
        return lo, max(lo, hi)

    def _ratio_ceiling(self) -> float:
        return 0.999999

    def check_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        """Check a layer's canonical ``shape`` against the pattern before any state changes.

        Returns True if the layer will be pruned, False if it is left dense
        (``skip_incompatible_layers``); raises ``ValueError`` naming the layer otherwise.

        Example:
            >>> get_pattern("4x1").check_shape("fc", (8, 3))
            True
            >>> get_pattern("2:4").check_shape("fc", (8, 3))
            Traceback (most recent call last):
            ...
            ValueError: layer 'fc' with 2-D view (8, 3) does not fit pattern '2:4': its last axis (3) is not a multiple of M=4 (set skip_incompatible_layers=True to leave such layers dense)
        """
        return self._prepare(name, np.zeros(tuple(shape), dtype=np.float32), None) is not None

    # ----- public API (seed names) -----------------------------------------------------
    def get_mask_single(self, score: np.ndarray, exact_sparsity_ratio: float,
                        pre_mask: np.ndarray | None = None, name: str = "layer") -> np.ndarray:
        """Mask of one layer with exactly ``units_for_ratio(ratio)`` units pruned.

        Example:
            >>> get_pattern("1x1").get_mask_single(np.array([3.0, 1.0, 2.0]), 0.34).tolist()
            [True, False, True]
        """
        ratio = self.check_ratio(exact_sparsity_ratio, "exact_sparsity_ratio")
        prepared = self._prepare(name, score, pre_mask, check_nan=False)
        if prepared is None:
            return np.ones(np.shape(score), dtype=bool) if pre_mask is None else np.asarray(pre_mask, bool).copy()
        units = prepared[1]
        k = self.units_for_ratio(ratio, units.size)
        return self._finish(score, prepared, lowest_k_keep(units, k, name))

    def get_masks(self, scores: Mapping[str, np.ndarray], target_sparsity_ratio: float,
                  pre_masks: Mapping[str, np.ndarray] | None = None,
                  max_sparsity_ratio_per_layer: float | None = None,
                  keep_pre_mask: bool = False) -> dict[str, np.ndarray]:
        """Masks for all layers, in global or local scope as configured.

        ``keep_pre_mask=True`` returns copies of ``pre_masks`` unchanged.
        """
        if keep_pre_mask:
            if pre_masks is None:
                raise ValueError("keep_pre_mask=True needs pre_masks")
            return {k: np.asarray(v, dtype=bool).copy() for k, v in pre_masks.items()}
        fn = self.get_masks_global if self.is_global else self.get_masks_local
        return fn(scores, target_sparsity_ratio, pre_masks, max_sparsity_ratio_per_layer)

    def get_masks_local(self, scores: Mapping[str, np.ndarray], target_sparsity_ratio: float,
                        pre_masks: Mapping[str, np.ndarray] | None = None,
                        max_sparsity_ratio_per_layer: float | None = None) -> dict[str, np.ndarray]:
        """Every layer pruned to the same ratio, clamped to the per-layer min/max."""
        ratio = self.check_ratio(target_sparsity_ratio)
        max_ratio = self.max_sparsity_ratio_per_layer if max_sparsity_ratio_per_layer is None else max_sparsity_ratio_per_layer
        masks = {}
        for name, score in scores.items():
            pre = None if pre_masks is None else pre_masks.get(name)
            prepared = self._prepare(name, score, pre, check_nan=False)
            if prepared is None:
                masks[name] = np.ones(np.shape(score), dtype=bool) if pre is None else np.asarray(pre, bool).copy()
                continue
            units = prepared[1]
            lo, hi = self._limits(units.size, max_ratio)
            k = min(max(self.units_for_ratio(ratio, units.size), lo), hi)
            masks[name] = self._finish(score, prepared, lowest_k_keep(units, k, name))
        return masks

    def get_masks_global(self, scores: Mapping[str, np.ndarray], target_sparsity_ratio: float,
                         pre_masks: Mapping[str, np.ndarray] | None = None,
                         max_sparsity_ratio_per_layer: float | None = None) -> dict[str, np.ndarray]:
        """One threshold over all layers' units (dict order breaks ties), exact total.

        A layer that would exceed the per-layer max (or fall below the min) is
        clamped there and the others are re-thresholded, so the total number
        of pruned units stays exact (when the caps allow it).
        """
        ratio = self.check_ratio(target_sparsity_ratio)
        max_ratio = self.max_sparsity_ratio_per_layer if max_sparsity_ratio_per_layer is None else max_sparsity_ratio_per_layer
        masks: dict[str, np.ndarray] = {}
        prepared: dict[str, tuple] = {}
        for name, score in scores.items():
            pre = None if pre_masks is None else pre_masks.get(name)
            p = self._prepare(name, score, pre)
            if p is None:
                masks[name] = np.ones(np.shape(score), dtype=bool) if pre is None else np.asarray(pre, bool).copy()
            else:
                prepared[name] = p
        if not prepared:
            return masks
        sizes = {n: p[1].size for n, p in prepared.items()}
        limits = {n: self._limits(sizes[n], max_ratio) for n in prepared}
        total = self.units_for_ratio(ratio, sum(sizes.values()))
        total = min(max(total, sum(lo for lo, _ in limits.values())), sum(hi for _, hi in limits.values()))
        counts = self._allocate(prepared, sizes, limits, total)
        for name, p in prepared.items():
            c = counts[name]
            keep = c if isinstance(c, np.ndarray) else lowest_k_keep(p[1], c, name)
            masks[name] = self._finish(scores[name], p, keep)
        return {n: masks[n] for n in scores}

    def _allocate(self, prepared, sizes, limits, total):
        """Pruned-unit count per layer (or the kept-unit array where the global cut is used as is).

        The answer is defined by walking all units in global order (score, then
        layer order, then index): after the first tau units, layer l prunes
        ``clip(c_l(tau), min_l, max_l)``, where ``c_l(tau)`` counts its units
        among them; tau is the first point where the counts add up to ``total``.
        Each round cuts the free layers at the remaining budget; if clipping
        would add units some layer is surely held at its minimum, if it would
        remove units some layer is surely held at its maximum. Fix those, repeat.
        """
        fixed: dict[str, int] = {}
        for _ in range(len(prepared) + 1):
            free = [n for n in prepared if n not in fixed]
            budget = total - sum(fixed.values())
            if not free:
                return fixed
            flat = np.concatenate([prepared[n][1].reshape(-1) for n in free]) if len(free) > 1 \
                else prepared[free[0]][1].reshape(-1)
            kept = lowest_k_keep(flat, min(max(budget, 0), flat.size), "global scores")
            parts, off = {}, 0
            for n in free:
                parts[n] = kept[off:off + sizes[n]].reshape(prepared[n][1].shape)
                off += sizes[n]
            counts = {n: sizes[n] - int(np.count_nonzero(parts[n])) for n in free}
            clipped = {n: min(max(c, limits[n][0]), limits[n][1]) for n, c in counts.items()}
            excess = sum(clipped.values()) - budget
            if excess == 0:
                return {**fixed, **{n: parts[n] if clipped[n] == counts[n] else clipped[n] for n in free}}
            for n in free:
                if excess > 0 and counts[n] < limits[n][0]:
                    fixed[n] = limits[n][0]
                elif excess < 0 and counts[n] > limits[n][1]:
                    fixed[n] = limits[n][1]
        raise RuntimeError("global allocation did not converge")  # pragma: no cover

    def get_block_size_dict(self, data: Mapping[str, np.ndarray]) -> dict[str, list[int]]:
        """Block (rows, cols) of the 2-D view for each layer."""
        raise NotImplementedError

    def get_sparsity_ratio(self, pre_masks: Mapping[str, np.ndarray], return_dict: bool = False):
        """Fraction of pruned elements over all masks (and per layer with ``return_dict``).

        Example:
            >>> get_pattern("1x1").get_sparsity_ratio({"a": np.array([True, False, False, True])})
            0.5
        """
        per = {n: 1.0 - float(np.count_nonzero(m)) / max(np.size(m), 1) for n, m in pre_masks.items()}
        total = sum(np.size(m) for m in pre_masks.values())
        ratio = (sum(np.size(m) - np.count_nonzero(m) for m in pre_masks.values()) / total) if total else 0.0
        return (float(ratio), per) if return_dict else float(ratio)

    def get_pattern_lock_masks(self, modules: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Masks that lock the current zeros of each weight (True where non-zero).

        Example:
            >>> get_pattern("1x1").get_pattern_lock_masks({"w": np.array([0.0, 2.0])})["w"].tolist()
            [False, True]
        """
        return {n: np.asarray(w) != 0 for n, w in modules.items()}


_NXM = re.compile(r"^\s*(\d+|channel)\s*x\s*(\d+|channel)\s*$", re.I)
_NINM = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


@register_pattern("NxM")
class PatternNxM(Pattern):
    """Blocks of ``block_size = (rows, cols)`` of the 2-D view; a block's score is
    the sum (or mean/max) of its elements.

    Construct from a config (``PatternNxM("4x1")``, a dict or a ``PruningConfig``)
    or with explicit keywords: ``PatternNxM(block_rows=4, block_cols=1)``;
    ``None`` for a dimension means the whole axis (``block_cols=None`` is
    ``"channelx1"``, whole rows; ``block_rows=None`` is ``"1xchannel"``).

    Example:
        >>> PatternNxM(block_rows=1, block_cols=2).get_block_size_dict({"w": np.zeros((3, 4))})
        {'w': [1, 2]}
    """

    nan_reaches_units = True

    def __init__(self, config: Any = None, *, block_rows: int | None | str = "unset",
                 block_cols: int | None | str = "unset") -> None:
        if config is None and (block_rows != "unset" or block_cols != "unset"):
            rows, cols = (1 if block_rows == "unset" else block_rows), (1 if block_cols == "unset" else block_cols)
            if rows is None and cols is None:
                raise ValueError("block_rows and block_cols cannot both be None (whole axis)")
            # DESIGN rule 3 spelling: a block spanning all columns is "channelx1", all rows "1xchannel"
            config = "channelx1" if cols is None else "1xchannel" if rows is None else f"{rows}x{cols}"
        super().__init__(config)
        parsed = self.parse(self.pattern)
        if parsed is None:
            raise ValueError(f"pattern must look like 'NxM' (e.g. '4x1', 'channelx1'), got {self.pattern!r}")
        self.rows: int | None = parsed["rows"]
        self.cols: int | None = parsed["cols"]

    @classmethod
    def parse(cls, name: str) -> dict[str, Any] | None:
        m = _NXM.match(name) if isinstance(name, str) else None
        if not m:
            return None
        # DESIGN rule 3: "channelx1" = whole rows, "1xchannel" = whole columns.
        a, b = m.group(1).lower(), m.group(2).lower()
        if a == "channel" and b == "channel":
            raise ValueError(f"pattern {name!r}: at most one block dimension may be 'channel'")
        if a == "channel":
            rows, cols = 1, None
        elif b == "channel":
            rows, cols = None, 1
        else:
            rows, cols = int(a), int(b)
            if rows <= 0 or cols <= 0:
                raise ValueError(f"pattern {name!r}: block dimensions must be positive integers, got {rows}x{cols}")
        return {"rows": rows, "cols": cols}

    @property
    def block_size(self) -> tuple[int | None, int | None]:
        """(rows, cols); None means the whole axis."""
        return (self.rows, self.cols)

    def _block(self, shape2d: tuple[int, int]) -> tuple[int, int]:
        return (shape2d[0] if self.rows is None else self.rows, shape2d[1] if self.cols is None else self.cols)

    def fits(self, shape2d):
        br, bc = self._block(shape2d)
        if shape2d[0] % br or shape2d[1] % bc:
            return f"block {br}x{bc} does not divide it"
        return None

    def unit_scores(self, score2d):
        br, bc = self._block(score2d.shape)
        if br == 1 and bc == 1:
            return score2d, None
        r, c = score2d.shape
        blocks = score2d.reshape(r // br, br, c // bc, bc)
        if self.block_score_reduce == "max":
            return blocks.max(axis=(1, 3)), None
        red = blocks.sum(axis=(1, 3), dtype=np.float64)
        return (red / (br * bc) if self.block_score_reduce == "mean" else red), None

    def unit_pre_pruned(self, pre2d):
        br, bc = self._block(pre2d.shape)
        if br == 1 and bc == 1:
            return ~pre2d
        r, c = pre2d.shape
        return ~pre2d.reshape(r // br, br, c // bc, bc).all(axis=(1, 3))

    def expand_keep(self, unit_keep, score2d, aux):
        br, bc = self._block(score2d.shape)
        if br == 1 and bc == 1:
            return unit_keep.reshape(score2d.shape)
        r, c = score2d.shape
        uk = unit_keep.reshape(r // br, 1, c // bc, 1)
        return np.broadcast_to(uk, (r // br, br, c // bc, bc)).reshape(r, c)

    def get_block_size_dict(self, data):
        return {n: list(self._block(to_2d(np.asarray(w)).shape)) for n, w in data.items()}


@register_pattern("N:M")
class PatternNInM(Pattern):
    """``N`` of every ``M`` consecutive weights along the last axis of the 2-D view are pruned.

    A sparsity ratio ``r <= N/M`` prunes the lowest-scoring fraction ``r / (N/M)``
    of the groups (a group scores the sum of its N smallest scores) N:M and
    leaves the rest dense, so N:M can follow a gradual schedule.
    Keywords: ``PatternNInM(n_pruned=2, group_size=4)`` is ``"2:4"``.

    Example:
        >>> p = PatternNInM(n_pruned=1, group_size=2)
        >>> (p.N, p.M)
        (1, 2)
    """

    def __init__(self, config: Any = None, *, n_pruned: int | None = None, group_size: int | None = None) -> None:
        if config is None and (n_pruned is not None or group_size is not None):
            if n_pruned is None or group_size is None:
                raise ValueError("PatternNInM needs both n_pruned and group_size")
            config = f"{n_pruned}:{group_size}"
        super().__init__(config)
        parsed = self.parse(self.pattern)
        if parsed is None:
            raise ValueError(f"pattern must look like 'N:M' (e.g. '2:4'), got {self.pattern!r}")
        self.N: int = parsed["N"]
        self.M: int = parsed["M"]

    @classmethod
    def parse(cls, name: str) -> dict[str, Any] | None:
        m = _NINM.match(name) if isinstance(name, str) else None
        if not m:
            return None
        n, mm = int(m.group(1)), int(m.group(2))
        if not 0 < n < mm:
            raise ValueError(f"pattern {name!r}: N:M needs 0 < N < M (N pruned of every M), got N={n}, M={mm}")
        return {"N": n, "M": mm}

    @property
    def max_ratio(self) -> float:
        """Highest sparsity this pattern can reach: N/M."""
        return self.N / self.M

    def check_ratio(self, ratio, what="target_sparsity_ratio"):
        r = super().check_ratio(ratio, what)
        if r > self.max_ratio + 1e-12:
            raise ValueError(f"{what} for pattern {self.pattern!r} must be <= N/M = {self.max_ratio:g}, got {ratio!r}")
        return r

    def _ratio_ceiling(self) -> float:
        return self.max_ratio

    def units_for_ratio(self, ratio, n_units):
        frac = min(float(ratio) / self.max_ratio, 1.0)
        return exact_prune_count(frac, n_units, keep_one=False)

    def fits(self, shape2d):
        if shape2d[1] % self.M:
            return f"its last axis ({shape2d[1]}) is not a multiple of M={self.M}"
        return None

    def groups(self, a2d: np.ndarray) -> np.ndarray:
        """View of a 2-D array as ``(rows, groups, M)``."""
        return a2d.reshape(a2d.shape[0], a2d.shape[1] // self.M, self.M)

    def _pre_pruned_lowest(self, s2, pre2):
        # pruned elements go first inside their group; a finite floor (not -inf) keeps the
        # products in smallest_in_group free of inf * 0
        s2 = s2 if s2.dtype.kind == "f" else s2.astype(np.float64)
        return np.where(pre2, s2, np.finfo(s2.dtype).min / (self.M + 1))

    def smallest_in_group(self, score2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """True at the N lowest scores of every group of M (ties: lower index first),
        and the sum of those N scores per group.

        Example:
            >>> small, sums = PatternNInM("2:4").smallest_in_group(np.array([[1.0, 1.0, 0.0, 1.0]]))
            >>> small.tolist(), sums.tolist()
            ([[True, False, True, False]], [[1.0]])
        """
        g = score2d.reshape(-1, self.M)
        small = np.empty(g.shape, dtype=bool)
        sums = np.zeros(g.shape[0], dtype=np.float64)
        if self.M > 8:
            order = np.argsort(g, axis=-1, kind="stable")[:, : self.N]
            small[:] = False
            np.put_along_axis(small, order, True, axis=-1)
            sums = np.where(small, g, 0).sum(axis=-1, dtype=np.float64)
        else:
            cols = np.ascontiguousarray(g.T)         # (M, groups): each comparison is one contiguous pass
            rank = np.zeros(cols.shape, dtype=np.uint8)
            j_first = np.empty(cols.shape[1], dtype=bool)
            as_int = j_first.view(np.uint8)
            for i in range(self.M):
                for j in range(i + 1, self.M):
                    np.less(cols[j], cols[i], out=j_first)  # ties: the lower index i ranks first
                    rank[i] += as_int
                    rank[j] += 1
                    rank[j] -= as_int
            for i in range(self.M):
                pick = rank[i] < self.N
                small[:, i] = pick
                sums += cols[i] * pick                  # multiply, not np.where: branch-free and fast
        return small.reshape(score2d.shape), sums.reshape(score2d.shape[0], -1)

    def unit_scores(self, score2d):
        small, sums = self.smallest_in_group(score2d)
        return sums, small

    def unit_pre_pruned(self, pre2d):
        return ~self.groups(pre2d).all(axis=-1)

    def expand_keep(self, unit_keep, score2d, aux):
        keep = np.logical_not(aux)                   # aux: the N lowest of each group
        if unit_keep.any():                          # groups left dense keep all M
            groups = self.groups(keep)
            groups |= unit_keep.reshape(score2d.shape[0], score2d.shape[1] // self.M, 1)
        return keep

    def get_block_size_dict(self, data):
        return {n: [1, self.M] for n in data}
