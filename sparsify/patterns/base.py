"""The base pattern: exact unit selection, local and global allocation, monotone masks.

A pattern turns per-element scores into boolean masks (True = kept) with an
exact number of pruned units. Scores and masks are ``dict[str, np.ndarray]``
keyed by layer name, in the canonical (PyTorch) layout; patterns work on the
2-D view of :mod:`sparsify.layout`. A subclass says what a *unit* is
(:meth:`Pattern.unit_scores`, :meth:`Pattern.unit_pre_pruned`,
:meth:`Pattern.expand_keep`); everything else lives here.

Example:
    >>> import numpy as np
    >>> from sparsify.patterns import get_pattern
    >>> get_pattern("1x1").get_masks({"w": np.array([[3.0, 1.0], [2.0, 0.5]])}, 0.5)["w"].tolist()
    [[True, False], [True, False]]
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..layout import from_2d, to_2d, view_shape
from ..schedules.base import validate_ratio
from ..selection.lowest_k import exact_prune_count
from ..selection.score_checks import NaNScoreError, check_finite
from .erk_scope import erk_masks
from .global_scope import global_masks
from .layer_view import fill_units, finish_mask, layer_view, select_units, unit_nan_error
from .row_scope import row_masks

__all__ = ["Pattern", "BLOCK_REDUCTIONS", "config_value", "can_score_layer_by_layer"]

BLOCK_REDUCTIONS = ("sum", "mean", "max")
_RATIO_CEILING = 0.999999           # a layer never prunes to (numerically) 100%


def config_value(config: Any, key: str, default: Any) -> Any:
    """``key`` of a pattern config: a name string (only ``"pattern"``), a dict, an object or None.

    Example:
        >>> config_value("2:4", "pattern", "1x1"), config_value({"pruning_scope": "global"}, "pruning_scope", "local")
        ('2:4', 'global')
    """
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
    :meth:`unit_pre_pruned`, :meth:`expand_keep` (and :meth:`units_for_ratio`
    when a unit's pruned fraction is not 1), and list a few names they accept
    in ``examples`` with a one-line ``summary`` (help texts are built from them).

    Attributes:
        pattern: the pattern name it was built from.
        is_global: True for ``pruning_scope="global"``.
        max_ratio: highest sparsity ratio the pattern can reach (1.0: any
            ratio below 1; ``N/M`` for ``"N:M"``, inclusive).
    """

    family = "base"
    #: a few names of this family, for help texts (see :func:`sparsify.patterns.pattern_examples`)
    examples: tuple[str, ...] = ()
    #: one line describing the family's names
    summary: str = ""
    #: how error messages name :attr:`max_ratio` (e.g. "N/M")
    max_ratio_label: str = ""
    #: True when a NaN score always reaches its unit's score (sum/mean/max of a block), so the
    #: selection kernel, which names the layer, finds it without a separate full pass.
    nan_reaches_units = False
    #: True when a unit is one element (``"1x1"``): layers keep their canonical layout (no 2-D copy);
    #: ties still follow the 2-D view's row-major order.
    elementwise = False
    #: True (the core rule): ratios lie in [0, 1) and a layer keeps at least one unit. False (the seed
    #: API's rule, set on a copy by ``sparsify_tf``'s seed API): 1.0 is allowed and prunes every unit.
    keep_one_unit = True

    def __init__(self, config: Any = None) -> None:
        self.pattern: str = config_value(config, "pattern", "1x1")
        scope = config_value(config, "pruning_scope", "local")
        if scope not in ("global", "local", "row", "erk"):
            raise ValueError(f"pruning_scope must be 'global', 'local', 'row' or 'erk', got {scope!r}")
        self.is_global: bool = scope == "global"
        self.scope: str = scope
        self.max_sparsity_ratio_per_layer: float = validate_ratio(
            "max_sparsity_ratio_per_layer", config_value(config, "max_sparsity_ratio_per_layer", 0.98))
        self.min_sparsity_ratio_per_layer: float = validate_ratio(
            "min_sparsity_ratio_per_layer", config_value(config, "min_sparsity_ratio_per_layer", 0.0))
        if self.min_sparsity_ratio_per_layer > self.max_sparsity_ratio_per_layer:
            raise ValueError(f"min_sparsity_ratio_per_layer ({self.min_sparsity_ratio_per_layer}) must be <= "
                             f"max_sparsity_ratio_per_layer ({self.max_sparsity_ratio_per_layer})")
        self.block_score_reduce: str = config_value(config, "block_score_reduce", "sum")
        if self.block_score_reduce not in BLOCK_REDUCTIONS:
            raise ValueError(f"block_score_reduce must be one of {BLOCK_REDUCTIONS}, got {self.block_score_reduce!r}")
        self.skip_incompatible_layers: bool = bool(config_value(config, "skip_incompatible_layers", False))

    @classmethod
    def parse(cls, name: str) -> dict[str, Any] | None:  # pragma: no cover - abstract
        """Constructor keywords parsed from ``name``, or None if the name is not of this family."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pattern!r}, scope={self.scope!r})"

    # ----- what a unit is (subclasses) -------------------------------------------------
    @property
    def max_ratio(self) -> float:
        """Highest sparsity ratio this pattern can reach (ratios are also always < 1)."""
        return 1.0

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

    def pre_pruned_scores(self, score2d: np.ndarray, pre2d: np.ndarray) -> np.ndarray:
        """Element scores :meth:`unit_scores` sees when earlier masks exist (default: unchanged).

        Units touched by an earlier pruning score ``-inf`` afterwards anyway; a
        pattern whose units are chosen *inside* a group (N:M) lowers the
        pruned elements here so they go first within their group.
        """
        return score2d

    def unit_count(self, shape2d: tuple[int, int]) -> int | None:
        """Number of units of a 2-D view of ``shape2d``, or None when only :meth:`unit_scores` can tell."""
        return None

    def layer_units(self, name: str, score2d: np.ndarray, pre2d: np.ndarray | None = None,
                    need_scores: bool = True, check_nan: bool = True) -> tuple[np.ndarray | None, Any]:
        """Unit scores of one layer as the selection sees them, and the aux of :meth:`expand_keep`.

        With an earlier mask ``pre2d`` the scores are those of
        :meth:`pre_pruned_scores`; the units it touched
        (:meth:`unit_pre_pruned`) score ``-inf`` in the selection, which the
        caller arranges (these unit scores are not changed). NaN raises
        :class:`~sparsify.selection.score_checks.NaNScoreError` naming ``name``: here when
        ``check_nan`` (or when the selection could miss it), else through the
        unit scores, which the selection checks. With ``need_scores=False``
        (every unit or none is pruned) a pattern may return None for the
        scores, after checking for NaN itself.

        Example:
            >>> from sparsify.patterns import get_pattern
            >>> units, _ = get_pattern("1x2").layer_units("fc", np.array([[1.0, 2.0, 5.0, 0.5]]),
            ...                                           np.array([[True, True, False, True]]))
            >>> units.tolist()
            [[3.0, 5.5]]
        """
        seen = score2d if pre2d is None else self.pre_pruned_scores(score2d, pre2d)
        elements_checked = check_nan or not self.nan_reaches_units or seen is not score2d
        if elements_checked:
            check_finite(score2d, name)
        units, aux = self.unit_scores(seen)
        if pre2d is not None and not elements_checked:
            check_finite(units, name)               # the selection does not look at units pruned before
        return units, aux

    def unit_view(self, w: np.ndarray) -> np.ndarray:
        """The 2-D array of a canonical ``w`` whose blocks or groups are this pattern's units
        (the 2-D view of :mod:`sparsify.layout`; ``"OxIxK"`` rearranges it)."""
        return to_2d(np.asarray(w))

    def shape_fit(self, shape: tuple[int, ...]) -> str | None:
        """None if a canonical ``shape`` fits the pattern, else the reason it does not."""
        return self.fits(view_shape(tuple(shape)))

    def conformity(self, nonzero2d: np.ndarray) -> tuple[int, int]:
        """``(units, violations)``: does a 2-D zero structure follow the pattern?

        A unit violates it when it holds a zero without being entirely zero
        (N:M: a group with fewer than N zeros). Reports use this for every family.

        Example:
            >>> from sparsify.patterns import get_pattern
            >>> get_pattern("1x2").conformity(np.array([[False, False, True, False]]))
            (2, 1)
        """
        touched = self.unit_pre_pruned(nonzero2d)           # units holding a zero
        return int(touched.size), int((touched & self.unit_pre_pruned(~nonzero2d)).sum())

    def units_for_ratio(self, ratio: float, n_units: int) -> int:
        """Exact number of units to prune for an element sparsity ``ratio``."""
        return exact_prune_count(ratio, n_units, keep_one=self.keep_one_unit)

    def check_ratio(self, ratio: float, what: str = "target_sparsity_ratio") -> float:
        """``ratio`` as a float in [0, 1) (or [0, 1] without :attr:`keep_one_unit`) and <= :attr:`max_ratio`;
        ``ValueError`` naming ``what``.

        Example:
            >>> from sparsify.patterns import get_pattern
            >>> get_pattern("2:4").check_ratio(0.6, "target_sparsity")
            Traceback (most recent call last):
            ...
            ValueError: target_sparsity for pattern '2:4' must be <= N/M = 0.5, got 0.6
        """
        r = float(ratio)
        if np.isnan(r) or not (0.0 <= r < 1.0 or (r == 1.0 and not self.keep_one_unit)):
            raise ValueError(f"{what} must be in {'[0, 1)' if self.keep_one_unit else '[0, 1]'}, got {ratio!r}")
        if r > self.max_ratio + 1e-12:
            label = f"{self.max_ratio_label} = " if self.max_ratio_label else ""
            raise ValueError(f"{what} for pattern {self.pattern!r} must be <= {label}{self.max_ratio:g}, got {ratio!r}")
        return r

    # ----- helpers ---------------------------------------------------------------------
    def _max_ratio_arg(self, max_sparsity_ratio_per_layer: float | None) -> float:
        """The per-layer maximum of a call: the configured one, or the argument checked like it."""
        if max_sparsity_ratio_per_layer is None:
            return self.max_sparsity_ratio_per_layer
        return validate_ratio("max_sparsity_ratio_per_layer", max_sparsity_ratio_per_layer)

    def _limits(self, n_units: int, max_ratio: float) -> tuple[int, int]:
        ceiling = min(self.max_ratio, _RATIO_CEILING if self.keep_one_unit else 1.0)
        lo = self.units_for_ratio(min(self.min_sparsity_ratio_per_layer, ceiling), n_units)
        hi = self.units_for_ratio(min(max_ratio, ceiling), n_units)
        return lo, max(lo, hi)

    def _local_mask(self, name: str, score: np.ndarray, pre: np.ndarray | None, ratio: float,
                    limits_ratio: float | None) -> np.ndarray:
        """One layer's mask in local scope (``limits_ratio``: the per-layer max, None for no clamp)."""
        layer = layer_view(self, name, score, pre)
        if layer is None:
            return np.ones(np.shape(score), dtype=bool) if pre is None else np.asarray(pre, bool).copy()
        try:
            if layer.n_units is None:               # a pattern that only knows its units from their scores
                fill_units(self, layer, True, False)
            k = self.units_for_ratio(ratio, layer.n_units)
            if limits_ratio is not None:
                lo, hi = self._limits(layer.n_units, limits_ratio)
                k = min(max(k, lo), hi)
            if not layer.computed:
                fill_units(self, layer, 0 < k < layer.n_units, False)
            keep = select_units(layer, k)
        except NaNScoreError as e:
            raise unit_nan_error(self, name, layer.score2d, e) from None
        return finish_mask(self, score, layer, keep)

    def check_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        """Check a layer's canonical ``shape`` against the pattern before any state changes.

        Returns True if the layer will be pruned, False if it is left dense
        (``skip_incompatible_layers``); raises ``ValueError`` naming the layer otherwise.

        Example:
            >>> from sparsify.patterns import get_pattern
            >>> get_pattern("4x1").check_shape("fc", (8, 3))
            True
            >>> get_pattern("2:4").check_shape("fc", (8, 3))
            Traceback (most recent call last):
            ...
            ValueError: layer 'fc' with 2-D view (8, 3) does not fit pattern '2:4': its last axis (3) is not a multiple of M=4 (set skip_incompatible_layers=True to leave such layers dense)
        """
        shape = tuple(int(d) for d in shape)
        if len(shape) == 0:
            raise ValueError(f"layer {name!r}: scores must have at least 1 dimension, got a scalar")
        shape2d = view_shape(shape, name)   # no array: a check of a huge (or sharded) weight allocates nothing
        reason = self.fits(shape2d)
        if reason is None:
            return True
        if self.skip_incompatible_layers:
            return False
        raise ValueError(f"layer {name!r} with 2-D view {shape2d} does not fit pattern {self.pattern!r}: "
                         f"{reason} (set skip_incompatible_layers=True to leave such layers dense)")

    # ----- public API (seed names) -----------------------------------------------------
    def get_mask_single(self, score: np.ndarray, exact_sparsity_ratio: float,
                        pre_mask: np.ndarray | None = None, name: str = "layer") -> np.ndarray:
        """Mask of one layer with exactly ``units_for_ratio(ratio)`` units pruned.

        Example:
            >>> from sparsify.patterns import get_pattern
            >>> get_pattern("1x1").get_mask_single(np.array([3.0, 1.0, 2.0]), 0.34).tolist()
            [True, False, True]
        """
        ratio = self.check_ratio(exact_sparsity_ratio, "exact_sparsity_ratio")
        return self._local_mask(name, score, pre_mask, ratio, None)

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
        if self.scope == "row":
            return row_masks(self, scores, target_sparsity_ratio, pre_masks, max_sparsity_ratio_per_layer)
        if self.scope == "erk":
            return erk_masks(self, scores, self.check_ratio(target_sparsity_ratio), pre_masks,
                             self._max_ratio_arg(max_sparsity_ratio_per_layer))
        fn = self.get_masks_global if self.is_global else self.get_masks_local
        return fn(scores, target_sparsity_ratio, pre_masks, max_sparsity_ratio_per_layer)

    def get_masks_local(self, scores: Mapping[str, np.ndarray], target_sparsity_ratio: float,
                        pre_masks: Mapping[str, np.ndarray] | None = None,
                        max_sparsity_ratio_per_layer: float | None = None) -> dict[str, np.ndarray]:
        """Every layer pruned to the same ratio, clamped to the per-layer min/max."""
        ratio = self.check_ratio(target_sparsity_ratio)
        max_ratio = self._max_ratio_arg(max_sparsity_ratio_per_layer)
        return {name: self._local_mask(name, score, None if pre_masks is None else pre_masks.get(name), ratio, max_ratio)
                for name, score in scores.items()}

    def get_masks_global(self, scores: Mapping[str, np.ndarray], target_sparsity_ratio: float,
                         pre_masks: Mapping[str, np.ndarray] | None = None,
                         max_sparsity_ratio_per_layer: float | None = None) -> dict[str, np.ndarray]:
        """One threshold over all layers' units (dict order breaks ties), exact total.

        A layer that would exceed the per-layer max (or fall below the min) is
        clamped there and the others are re-thresholded, so the total number
        of pruned units stays exact (when the caps allow it); see
        :func:`sparsify.patterns.allocation.allocate_pruned_units`.
        """
        ratio = self.check_ratio(target_sparsity_ratio)
        max_ratio = self._max_ratio_arg(max_sparsity_ratio_per_layer)
        try:                                        # NaN reaches the units: the selection finds it, naming the layer
            return global_masks(self, scores, ratio, pre_masks, max_ratio, check_nan=False)
        except NaNScoreError:
            pass                                    # again, raising in the documented order: every layer's elements first
        return global_masks(self, scores, ratio, pre_masks, max_ratio, check_nan=True)

    def get_block_size_dict(self, data: Mapping[str, np.ndarray]) -> dict[str, list[int]]:
        """Block (rows, cols) of the 2-D view for each layer."""
        raise NotImplementedError

    # ----- public steps of the selection, for selection over shards (sparsify.distributed) -----
    def prepare_units(self, name: str, score: np.ndarray, pre_mask: np.ndarray | None = None,
                      check_nan: bool = True) -> tuple | None:
        """The unit scores of one layer as the selection sees them, or None for a skipped layer.

        Returns ``(score2d, units, pre2d, aux)``: the 2-D view, the unit scores
        (units touched by ``pre_mask`` at ``-inf``), the 2-D previous mask (None
        when all kept) and what :meth:`finish_units` needs. Rows of the 2-D view
        that hold whole units give exactly the units of those rows.

        Example:
            >>> from sparsify.patterns import get_pattern
            >>> get_pattern("1x2").prepare_units("w", np.array([[1.0, 2.0, 5.0, 1.0]]))[1].tolist()
            [[3.0, 6.0]]
        """
        layer = layer_view(self, name, score, pre_mask, two_d=True)     # units in 2-D order across shards
        if layer is None:
            return None
        s2, pre2 = layer.score2d, layer.pre2d
        try:
            units, aux = self.layer_units(name, s2, pre2, True, check_nan)
        except NaNScoreError as e:
            raise unit_nan_error(self, name, s2, e) from None
        if pre2 is not None:
            units = np.where(self.unit_pre_pruned(pre2), -np.inf, units)
        return s2, units, pre2, aux

    def finish_units(self, score: np.ndarray, prepared: tuple, unit_keep: np.ndarray) -> np.ndarray:
        """The element mask (shape of ``score``) from the kept units of :meth:`prepare_units`."""
        s2, _, pre2, aux = prepared
        keep2 = self.expand_keep(unit_keep, s2, aux)
        if pre2 is not None:
            keep2 = keep2 & pre2
        return from_2d(keep2, np.shape(score))

    def unit_limits(self, n_units: int, max_ratio: float) -> tuple[int, int]:
        """Fewest and most of ``n_units`` units a layer may prune (``min_``/``max_sparsity_ratio_per_layer``).

        Example:
            >>> from sparsify.patterns import get_pattern
            >>> get_pattern("1x1").unit_limits(100, 0.98)
            (0, 98)
        """
        return self._limits(n_units, max_ratio)

    def unit_nan_error(self, name: str, score2d: np.ndarray, error: NaNScoreError) -> ValueError:
        """The error to raise for NaN unit scores of layer ``name`` (NaN scores, or +inf and -inf in one unit)."""
        return unit_nan_error(self, name, score2d, error)

    def get_sparsity_ratio(self, pre_masks: Mapping[str, np.ndarray], return_dict: bool = False):
        """Fraction of pruned elements over all masks (and per layer with ``return_dict``).

        Example:
            >>> from sparsify.patterns import get_pattern
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
            >>> from sparsify.patterns import get_pattern
            >>> get_pattern("1x1").get_pattern_lock_masks({"w": np.array([0.0, 2.0])})["w"].tolist()
            [False, True]
        """
        return {n: np.asarray(w) != 0 for n, w in modules.items()}


def can_score_layer_by_layer(pattern: Any, criterion: Any) -> bool:
    """True when :func:`global_masks_by_layer` may replace ``pattern``'s global selection on ``criterion``'s
    scores: global scope, the base class's selection, a pattern whose masks need the scores only through its
    unit scores (the built-in blocks and N:M), a criterion evaluated at the update.

    Example:
        >>> from sparsify.criteria import get_criterion
        >>> from sparsify.patterns import get_pattern
        >>> can_score_layer_by_layer(get_pattern({"pattern": "4x1", "pruning_scope": "global"}), get_criterion("wanda"))
        True
        >>> can_score_layer_by_layer(get_pattern({"pattern": "4x1", "pruning_scope": "local"}), get_criterion("wanda"))
        False
    """
    cls = type(pattern)
    owner = next((k for k in cls.__mro__ if "expand_keep" in k.__dict__), None)
    return (isinstance(pattern, Pattern) and pattern.is_global and pattern.scope == "global"
            and cls.get_masks is Pattern.get_masks and cls.get_masks_global is Pattern.get_masks_global
            and owner is not None and owner.__dict__.get("expand_keep_reads_shape_only", False) is True
            and not criterion.per_step)
