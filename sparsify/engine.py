"""The one object adapters talk to: config in, masks out.

:class:`PruningEngine` ties a :class:`~sparsify.config.PruningConfig` to its
schedule and pattern. Adapters hand it canonical-layout NumPy weights (and
scores for gradient criteria) and write the masks it returns back into their
framework state; they hold no pruning math of their own.

Example:
    >>> import numpy as np
    >>> eng = PruningEngine({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    >>> eng.select_layers(["fc.weight", "fc.bias"], {"fc.weight": (2, 2), "fc.bias": (2,)})
    ['fc.weight']
    >>> eng.compute_masks({"fc.weight": np.array([[1.0, -3.0], [0.5, 2.0]])}, step=0)["fc.weight"].tolist()
    [[False, True], [False, True]]
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import numpy as np

from .config import PruningConfig
from .criteria import magnitude, needs_gradients
from .pattern_fit import check_pattern_fit

__all__ = ["PruningEngine", "select_names"]


def select_names(names: Iterable[str], op_names: list[str], excluded_op_names: list[str]) -> list[str]:
    """Names matched (``re.search``) by some ``op_names`` regex and by no excluded one.

    Example:
        >>> select_names(["conv1/kernel", "fc/kernel"], ["conv"], [])
        ['conv1/kernel']
    """
    inc = [re.compile(r) for r in op_names]
    exc = [re.compile(r) for r in excluded_op_names]
    return [n for n in names if any(r.search(n) for r in inc) and not any(r.search(n) for r in exc)]


class PruningEngine:
    """Schedule + pattern + criterion for one config.

    Args:
        config: a ``PruningConfig``, a dict or a YAML path.
    """

    def __init__(self, config: PruningConfig | Mapping[str, Any] | str) -> None:
        self.config = PruningConfig.coerce(config)
        self.schedule = self.config.schedule()
        self.pattern = self.config.pattern_obj()

    @property
    def needs_gradients(self) -> bool:
        """True when the criterion needs gradients (snip, snip_momentum)."""
        return needs_gradients(self.config.criterion)

    def select_layers(self, names: Iterable[str], shapes: Mapping[str, tuple[int, ...]] | None = None,
                      min_ndim: int = 2) -> list[str]:
        """Names selected by ``op_names``/``excluded_op_names``, keeping order.

        Weights of fewer than ``min_ndim`` dimensions (biases, norms) are left
        out when ``shapes`` is given. Raises ``ValueError`` if nothing matches.
        """
        names = list(names)
        candidates = [n for n in names if shapes is None or len(tuple(shapes[n])) >= min_ndim]
        chosen = select_names(candidates, self.config.op_names, self.config.excluded_op_names)
        if not chosen:
            shown = ", ".join(candidates[:20]) + (" ..." if len(candidates) > 20 else "")
            raise ValueError(f"op_names={self.config.op_names} excluded_op_names={self.config.excluded_op_names} "
                             f"match no prunable weight; prunable weights are: [{shown}]")
        return chosen

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

        ``scores`` defaults to the magnitude of ``weights``; gradient criteria
        pass their own. With ``monotone`` (the default) earlier pruned weights
        stay pruned.
        """
        weights = {n: _numeric(f"weights[{n!r}]", w) for n, w in weights.items()}
        if scores is None:
            if self.needs_gradients:
                raise ValueError(f"criterion {self.config.criterion!r} needs scores computed from gradients; "
                                 "pass scores=...")
            scores = {n: magnitude(w) for n, w in weights.items()}
        else:
            _same_layers("scores", scores, weights)
            scores = {n: _numeric(f"scores[{n!r}]", scores[n], weights[n].shape) for n in weights}
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
        empty = [n for n, w in weights.items() if w.size == 0]
        masks = self.pattern.get_masks({n: s for n, s in scores.items() if n not in empty},
                                       self.target_sparsity(step),
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


def _same_layers(what: str, given: Mapping[str, Any], weights: Mapping[str, Any]) -> None:
    if set(given) != set(weights):
        raise ValueError(f"{what} must have exactly the weights' keys: missing {sorted(set(weights) - set(given))}, "
                         f"unknown {sorted(set(given) - set(weights))}")
