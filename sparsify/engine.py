"""The one object adapters talk to: config in, masks out.

:class:`PruningEngine` ties a :class:`~sparsify.config.PruningConfig` to its
schedule and pattern. Adapters hand it canonical-layout NumPy weights (and
scores for gradient criteria) and write the masks it returns back into their
framework state; they hold no pruning math of their own.

An update's masks come from one path: the criterion's scores (from the
registry), then the pattern's selection at a sparsity (its count rules,
local/global allocation, tie order). :meth:`PruningEngine.compute_update`
takes that sparsity from the config's schedule (what
:class:`~sparsify.protocol.PruningProtocol` advances by);
:meth:`PruningEngine.masks_at_sparsity` takes it from the caller, for an
*externally scheduled* update (the SparseML seed API, whose schedule and update
timing are the user's graph tensors). ``PruningEngine(config, pattern=...)``
makes the masks with a pattern of the caller's (e.g. the seed's count rule).

Example:
    >>> import numpy as np
    >>> eng = PruningEngine({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    >>> eng.select_layers(["fc.weight", "fc.bias"], {"fc.weight": (2, 2), "fc.bias": (2,)})
    ['fc.weight']
    >>> eng.compute_masks({"fc.weight": np.array([[1.0, -3.0], [0.5, 2.0]])}, step=0)["fc.weight"].tolist()
    [[False, True], [False, True]]
    >>> eng.masks_at_sparsity({"fc.weight": np.array([[1.0, -3.0], [0.5, 2.0]])}, 0.25)["fc.weight"].tolist()
    [[True, True], [False, True]]
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import numpy as np

from .config import PruningConfig
from .criteria import get_criterion, scored_every_step
from .global_stream import can_stream_global, can_stream_local, mask_buffers, streamed_global_masks, streamed_layer_mask
from .layout import view_shape
from .pattern_fit import check_pattern_fit
from .patterns import Pattern
from .patterns.base import can_score_layer_by_layer
from .patterns.global_scope import global_masks_by_layer
from .parallel_layers import BufferPool, layer_scores, map_layers
from .regrowth import regrow, regrowth_fraction
from .selection.score_checks import NaNScoreError
from .threads import default_threads, use_threads
from .update_memory import check_update_memory

__all__ = ["PruningEngine", "select_names", "select_layers"]


def select_names(names: Iterable[str], op_names: list[str], excluded_op_names: list[str]) -> list[str]:
    """Names matched (``re.search``) by some ``op_names`` regex and by no excluded one.

    Example:
        >>> select_names(["conv1/kernel", "fc/kernel"], ["conv"], [])
        ['conv1/kernel']
    """
    inc = [re.compile(r) for r in op_names]
    exc = [re.compile(r) for r in excluded_op_names]
    return [n for n in names if any(r.search(n) for r in inc) and not any(r.search(n) for r in exc)]


def select_layers(config: PruningConfig, names: Iterable[str], shapes: Mapping[str, tuple[int, ...]] | None = None,
                  min_ndim: int = 2) -> list[str]:
    """The weights ``config`` prunes among ``names``: selected by its ``op_names``/``excluded_op_names``,
    keeping order. Weights of fewer than ``min_ndim`` dimensions (biases, norms) are left out when ``shapes``
    is given. Raises ``ValueError`` if nothing matches. (:meth:`PruningEngine.select_layers` is this function.)

    Example:
        >>> select_layers(PruningConfig(), ["fc.weight", "fc.bias"], {"fc.weight": (2, 2), "fc.bias": (2,)})
        ['fc.weight']
    """
    names = list(names)
    candidates = [n for n in names if shapes is None or len(tuple(shapes[n])) >= min_ndim]
    chosen = select_names(candidates, config.op_names, config.excluded_op_names)
    if not chosen:
        shown = ", ".join(candidates[:20]) + (" ..." if len(candidates) > 20 else "")
        raise ValueError(f"op_names={config.op_names} excluded_op_names={config.excluded_op_names} "
                         f"match no prunable weight; prunable weights are: [{shown}]")
    return chosen


def _checked_weights(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Numeric arrays of at least one dimension (a ``ValueError`` naming the layer otherwise), before any
    scoring."""
    out = {n: _numeric(f"weights[{n!r}]", w) for n, w in weights.items()}
    for n, w in out.items():
        view_shape(w.shape, n)
    return out


class PruningEngine:
    """Schedule + pattern + criterion for one config.

    Args:
        config: a ``PruningConfig``, a dict or a YAML path.
        pattern: a :class:`~sparsify.patterns.Pattern` that makes the masks instead of the
            config's pattern fields (its own count rules and per-layer limits; e.g. the seed
            API's: sparsity 1.0 prunes every unit, no per-layer cap). Default: the config's.
    """

    def __init__(self, config: PruningConfig | Mapping[str, Any] | str, *, pattern: Pattern | None = None) -> None:
        if pattern is not None and not isinstance(pattern, Pattern):
            raise TypeError(f"pattern must be a sparsify Pattern (or None: the config's), got {pattern!r}")
        self.config = PruningConfig.coerce(config)
        self.schedule = self.config.schedule()
        self.pattern = self.config.pattern_obj() if pattern is None else pattern
        #: threads of an update: the config's ``num_threads``, else SPARSIFY_NUM_THREADS, else the cores available
        self.num_threads = default_threads() if self.config.num_threads is None else self.config.num_threads

    @property
    def scored_every_step(self) -> bool:
        """True when the criterion is scored after every backward pass (snip, snip_momentum), by the
        adapter, which hands the scores to the update; False when it is scored at the update."""
        return scored_every_step(self.config.criterion)

    @property
    def needs(self) -> frozenset[str]:
        """What the adapters collect for this config: the criterion's needs, plus ``grad`` for RigL."""
        extra = {"grad"} if self.config.regrowth == "rigl" else set()
        return frozenset(get_criterion(self.config.criterion).needs) | extra

    def select_layers(self, names: Iterable[str], shapes: Mapping[str, tuple[int, ...]] | None = None,
                      min_ndim: int = 2) -> list[str]:
        """Names selected by ``op_names``/``excluded_op_names``, keeping order (:func:`select_layers`).

        Weights of fewer than ``min_ndim`` dimensions (biases, norms) are left
        out when ``shapes`` is given. Raises ``ValueError`` if nothing matches.
        """
        return select_layers(self.config, names, shapes, min_ndim)

    def check_layers(self, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, str]:
        """Raise ``ValueError`` now, naming every selected weight the pattern does not fit; with
        ``skip_incompatible_layers``, warn and return them (``{name: reason}``, left dense).

        Empty weights (a zero dimension) have nothing to prune and always fit.
        """
        return check_pattern_fit(self.pattern, shapes, self.config.pattern, self.config.skip_incompatible_layers)

    # ----- schedule ----------------------------------------------------------------------
    def target_sparsity(self, step: int) -> float:
        """Sparsity the masks get when updated at ``step`` (read at the last update point)."""
        last = int(self.schedule.last_update_step(step))
        return 0.0 if last < 0 else float(self.schedule.sparsity(last))

    def update_due(self, done_step: int, step: int) -> bool:
        """True if an update point lies in ``(done_step, step]``."""
        return bool(self.schedule.update_due(done_step, step))

    def last_update_step(self, step: int) -> int:
        """Latest update point ``<= step`` (-1 if none)."""
        return int(self.schedule.last_update_step(step))

    def next_update_step(self, step: int) -> int:
        """First update point strictly after ``step`` (-1 if none is left)."""
        return self.schedule.next_update_step(step)

    def masking_active(self, step: int) -> bool:
        """False after ``end_step`` when ``leave_enabled`` is off (masks no longer applied)."""
        return self.schedule.masking_active(step)

    # ----- masks ---------------------------------------------------------------------------
    def compute_masks(self, weights: Mapping[str, np.ndarray], step: int,
                      pre_masks: Mapping[str, np.ndarray] | None = None,
                      scores: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Boolean masks (True = kept, canonical layout) for an update at ``step``.

        ``scores`` defaults to the criterion's scores of ``weights``; per-step
        criteria (gradients, running state) pass their own. With ``monotone``
        (the default) earlier pruned weights stay pruned. See :meth:`compute_update`.
        """
        return self.compute_update(weights, step, pre_masks, scores)[0]

    def criterion_scores(self, weights: Mapping[str, np.ndarray],
                         activations: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The criterion's element scores of ``weights`` (criteria evaluated at the update).

        Raises:
            ValueError: the criterion is evaluated per step (the adapter passes its scores), or an
                activation statistic it needs is missing.
        """
        crit = get_criterion(self.config.criterion)
        if crit.per_step:
            raise ValueError(f"criterion {self.config.criterion!r} needs scores computed from gradients; "
                             "pass scores=...")
        inputs = self._criterion_inputs(weights, activations)
        with use_threads(self.num_threads):
            return map_layers(lambda n: layer_scores(crit, self.config, inputs[n]),
                              {n: np.size(w) for n, w in weights.items()})

    def _criterion_inputs(self, weights: Mapping[str, np.ndarray],
                          activations: Mapping[str, np.ndarray] | None) -> dict[str, dict[str, Any]]:
        """Each layer's inputs to the criterion (``ValueError`` for a missing activation statistic)."""
        needs = get_criterion(self.config.criterion).needs
        out = {}
        for n, w in weights.items():
            inputs: dict[str, Any] = {"weight": w}
            if "activation" in needs:
                if activations is None or n not in activations:
                    raise ValueError(f"criterion {self.config.criterion!r} needs the input activation statistics of "
                                     f"{n!r}; none were collected (run forward passes before the update)")
                inputs["activation"] = np.asarray(activations[n])
            out[n] = inputs
        return out

    def masks_at_sparsity(self, weights: Mapping[str, np.ndarray], sparsity: float,
                          pre_masks: Mapping[str, np.ndarray] | None = None,
                          scores: Mapping[str, np.ndarray] | None = None,
                          activations: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Masks of an *externally scheduled* update: ``sparsity`` is the caller's, not the schedule's.

        The path of :meth:`compute_update` (criterion scores, the pattern's count rules,
        local/global allocation, ties to the earlier weight in ``weights``' order, monotone
        ``pre_masks``) without regrowth, which follows the config's schedule.

        Args:
            weights: canonical weights keyed by name, in the canonical order (it breaks
                cross-layer ties in global scope).
            sparsity: the fraction to prune, checked against the pattern (``ValueError`` naming
                ``sparsity``): in [0, 1), or [0, 1] for a pattern without ``keep_one_unit``.
            pre_masks, scores, activations: as in :meth:`compute_update`.

        Example:
            >>> import numpy as np
            >>> PruningEngine({}).masks_at_sparsity({"w": np.array([[3.0, -1.0, 2.0, 0.5]])}, 0.5)["w"].tolist()
            [[True, False, True, False]]
        """
        if isinstance(sparsity, (bool, np.bool_)) or not isinstance(sparsity, (int, float, np.integer, np.floating)):
            raise TypeError(f"sparsity must be a number, got {sparsity!r} ({type(sparsity).__name__})")
        sparsity = self.pattern.check_ratio(sparsity, "sparsity")
        self._check_memory(weights, scores, streamable=True)
        with use_threads(self.num_threads):
            masks = None if scores is not None else self._masks_streamed(weights, sparsity, pre_masks, activations)
            if masks is not None:
                return masks
            weights, scores = self._scored(weights, scores, activations)
            return self._selected(weights, scores, sparsity, pre_masks)

    def compute_update(self, weights: Mapping[str, np.ndarray], step: int,
                       pre_masks: Mapping[str, np.ndarray] | None = None,
                       scores: Mapping[str, np.ndarray] | None = None,
                       grads: Mapping[str, np.ndarray] | None = None,
                       activations: Mapping[str, np.ndarray] | None = None,
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(masks, grown)`` of an update at ``step``: the scheduled masks, then regrowth.

        Args:
            weights: canonical weights (dense: pruned entries hold the values they keep under the mask).
            step: the update step.
            pre_masks: the previous masks (monotone: a subset of them stays; regrowth swaps).
            scores: element scores of a per-step criterion; default: the criterion of ``weights``.
            grads: gradients (``regrowth="rigl"``).
            activations: per-input-channel statistics (criteria that need ``activation``).

        Returns:
            The masks and, per layer, the entries regrowth grew (all False without regrowth).
        """
        fraction = regrowth_fraction(self.config, step)
        self._check_memory(weights, scores, streamable=fraction == 0)
        with use_threads(self.num_threads):
            masks = None
            if fraction == 0 and scores is None:
                masks = self._masks_streamed(weights, self.target_sparsity(step), pre_masks, activations)
            if masks is not None:
                return masks, {n: np.zeros(m.shape, dtype=bool) for n, m in masks.items()}
            weights, scores = self._scored(weights, scores, activations)
            masks = self._selected(weights, scores, self.target_sparsity(step), pre_masks)
        if fraction > 0:
            if self.config.regrowth == "rigl":
                if grads is None:
                    raise ValueError("regrowth='rigl' grows the pruned weights with the largest gradients, but no "
                                     "gradients were collected: run a backward pass before the update")
                _same_layers("grads", grads, weights)
                grads = {n: _numeric(f"grads[{n!r}]", grads[n], weights[n].shape) for n in weights}
            return regrow(masks, scores, grads, fraction, self.config.regrowth, step)
        return masks, {n: np.zeros(m.shape, dtype=bool) for n, m in masks.items()}

    def _check_memory(self, weights: Mapping[str, Any], scores: Mapping[str, Any] | None, streamable: bool) -> None:
        """``MemoryError`` naming the layer, the bytes needed and the bytes available when the update's masks
        (and a layer's scores, where they are not computed chunk by chunk) cannot fit, before any allocation
        (:func:`~sparsify.update_memory.check_update_memory`)."""
        crit = get_criterion(self.config.criterion)
        chunked = streamable and scores is None and (
            (self._streams() and can_stream_local(self.pattern, crit)) or can_stream_global(self.pattern, crit))
        check_update_memory({n: (np.shape(w), _score_bytes(w)) for n, w in weights.items()},
                            scores_whole=scores is None and not chunked)

    def _scored(self, weights: Mapping[str, np.ndarray], scores: Mapping[str, np.ndarray] | None,
                activations: Mapping[str, np.ndarray] | None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Checked weights and their scores (the criterion's unless given)."""
        weights = _checked_weights(weights)
        if scores is None:
            scores = self.criterion_scores(weights, activations)
        else:
            _same_layers("scores", scores, weights)
        return weights, {n: _numeric(f"scores[{n!r}]", scores[n], weights[n].shape) for n in weights}

    def _masks_streamed(self, weights: Mapping[str, np.ndarray], sparsity: float,
                        pre_masks: Mapping[str, np.ndarray] | None,
                        activations: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
        """The masks without every layer's scores at once (local scope: layer by layer; global scope, element
        units, row-separable criterion: :func:`~sparsify.global_stream.streamed_global_masks`), or None where
        the update needs all the scores (the full path, which also raises NaN errors in their documented order)."""
        if self._streams():
            return self._streamed(weights, sparsity, pre_masks, activations)
        crit = get_criterion(self.config.criterion)
        if not can_stream_global(self.pattern, crit):
            if can_score_layer_by_layer(self.pattern, crit):
                return self._global_by_layer(crit, weights, sparsity, pre_masks, activations)
            return None
        checked = _checked_weights(weights)
        inputs = self._criterion_inputs(checked, activations)
        try:
            return streamed_global_masks(self.pattern, crit, self.config, inputs,
                                         lambda: self._checked_pre(checked, pre_masks), sparsity)
        except NaNScoreError:
            return None

    def _global_by_layer(self, crit: Any, weights: Mapping[str, np.ndarray], sparsity: float,
                         pre_masks: Mapping[str, np.ndarray] | None,
                         activations: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
        """Global scope on blocks or N:M: :func:`~sparsify.patterns.global_scope.global_masks_by_layer`, each
        layer scored (in row chunks on several threads, :func:`~sparsify.parallel_layers.layer_scores`) and its
        element scores dropped once its unit scores are made; None after a NaN (the full path raises it as
        documented)."""
        checked = _checked_weights(weights)
        inputs = self._criterion_inputs(checked, activations)
        pre = self._checked_pre(checked, pre_masks)
        empty = {n for n, w in checked.items() if w.size == 0}

        def score_of(n: str) -> np.ndarray:
            return np.ascontiguousarray(_numeric(f"scores[{n!r}]", layer_scores(crit, self.config, inputs[n]),
                                                 checked[n].shape))

        try:
            masks = global_masks_by_layer(self.pattern, score_of,
                                          {n: w.shape for n, w in checked.items() if n not in empty},
                                          self.pattern.check_ratio(sparsity),
                                          None if pre is None else {n: m for n, m in pre.items() if n not in empty},
                                          self.pattern.max_sparsity_ratio_per_layer)
        except NaNScoreError:
            return None
        masks.update({n: np.ones(checked[n].shape, dtype=bool) for n in empty})
        return {n: masks[n] for n in checked}

    def _streams(self) -> bool:
        """True when an update scores and selects each layer on its own: local scope, criterion evaluated at
        the update (a layer's scores live only while its mask is made, so the extra memory stays bounded)."""
        return self.pattern.scope == "local" and not get_criterion(self.config.criterion).per_step

    def _streamed(self, weights: Mapping[str, np.ndarray], sparsity: float, pre_masks: Mapping[str, np.ndarray] | None,
                  activations: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """The masks of :meth:`_selected` in local scope, each layer scored then selected, layers side by side
        (:func:`~sparsify.parallel_layers.map_layers`); every argument is checked before any layer is scored."""
        weights = _checked_weights(weights)
        crit = get_criterion(self.config.criterion)
        inputs = self._criterion_inputs(weights, activations)
        pre = self._checked_pre(weights, pre_masks)

        chunked = can_stream_local(self.pattern, crit)
        buffers = mask_buffers({n: w.size for n, w in weights.items()}) if chunked else {}
        pool = BufferPool() if crit.into is not None else None

        def one(n: str) -> np.ndarray:
            w = weights[n]
            if w.size == 0:
                return np.ones(w.shape, dtype=bool)
            if chunked:                               # no layer-sized score array: scored chunk by chunk
                try:
                    mask = streamed_layer_mask(self.pattern, crit, self.config, n, inputs[n],
                                               None if pre is None else pre.get(n), sparsity, buffers[n])
                    if mask is not None:
                        return mask
                except NaNScoreError:
                    pass                              # the whole layer's path raises it, worded as documented
            buf = pool.take(w.shape, w.dtype) if pool is not None and w.dtype.kind == "f" else None
            try:                                      # the scores live until the mask is made, then lent on
                score = np.ascontiguousarray(_numeric(f"scores[{n!r}]", layer_scores(crit, self.config, inputs[n], buf),
                                                      w.shape))
                return self.pattern.get_masks({n: score}, sparsity, None if pre is None or n not in pre else
                                              {n: pre[n]})[n]
            finally:
                if buf is not None:
                    pool.give(buf)

        return map_layers(one, {n: w.size for n, w in weights.items()})

    def _checked_pre(self, weights: dict[str, np.ndarray], pre_masks: Mapping[str, np.ndarray] | None
                     ) -> Mapping[str, np.ndarray] | None:
        """``pre_masks`` checked against ``weights`` (None unless monotone), after the pattern-fit check."""
        pre = None
        if pre_masks is not None:
            unknown = [n for n in pre_masks if n not in weights]
            if unknown:
                raise ValueError(f"pre_masks names weights {unknown} that are not being pruned "
                                 f"(weights: {list(weights)[:10]}); pass masks keyed like the weights")
            for n, m in pre_masks.items():
                if np.shape(m) != weights[n].shape:
                    raise ValueError(f"pre_masks[{n!r}] has shape {np.shape(m)}, but the weight has shape "
                                     f"{weights[n].shape}")
            pre = pre_masks if self.config.monotone else None
        if not self.pattern.skip_incompatible_layers:       # every misfit named at once, before any selection
            check_pattern_fit(self.pattern, {n: w.shape for n, w in weights.items()}, self.pattern.pattern)
        return pre

    def _selected(self, weights: dict[str, np.ndarray], scores: dict[str, np.ndarray], sparsity: float,
                  pre_masks: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """The pattern's masks at ``sparsity`` (monotone: a subset of ``pre_masks``), keyed like ``weights``."""
        pre = self._checked_pre(weights, pre_masks)
        empty = [n for n, w in weights.items() if w.size == 0]
        # C order: adapters hand in transposed views of their kernels, and selection on a view is slower
        masks = self.pattern.get_masks({n: np.ascontiguousarray(s) for n, s in scores.items() if n not in empty},
                                       sparsity,
                                       None if pre is None else {n: m for n, m in pre.items() if n not in empty})
        masks.update({n: np.ones(weights[n].shape, dtype=bool) for n in empty})
        return {n: masks[n] for n in weights}


def _numeric(what: str, array: Any, shape: tuple[int, ...] | None = None) -> np.ndarray:
    a = np.asarray(array)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{what} must be a real numeric array (float or int), got dtype {a.dtype}")
    if shape is not None and a.shape != shape:
        raise ValueError(f"{what} has shape {a.shape}, but the weight has shape {shape}")
    return a


def _score_bytes(weight: Any) -> int:
    """Bytes of one score of ``weight`` (its dtype's; 0 where it has no NumPy dtype: not counted)."""
    try:
        return np.dtype(weight.dtype).itemsize
    except (AttributeError, TypeError):
        return 0


def _same_layers(what: str, given: Mapping[str, Any], weights: Mapping[str, Any]) -> None:
    if set(given) != set(weights):
        raise ValueError(f"{what} must have exactly the weights' keys: missing {sorted(set(weights) - set(given))}, "
                         f"unknown {sorted(set(given) - set(weights))}")
