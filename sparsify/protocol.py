"""The update protocol every adapter follows, owned by the core.

:class:`PruningProtocol` decides *when* masks change and *what* they become;
an adapter (TF graph, Keras, torch) only moves weights into the canonical
layout and writes the masks it gets back into framework state. It owns:

* **selection and order**: the weights picked by ``op_names`` /
  ``excluded_op_names``, in the order the adapter lists them. Adapters list
  weights in the model's definition order (torch ``named_parameters()``,
  Keras layers in assignment order, TF graph variable creation order), so
  global scope breaks cross-layer ties the same way in every framework;
* **the schedule**: :meth:`advance` acts when an update point lies in
  ``(done_step, step]``, so skipped steps (``steps_per_execution``, a hook
  that ran late, a resume) never lose an update;
* **release**: with ``leave_enabled=False`` the first call after ``end_step``
  releases the masks (the weights keep the zeros of the last masks, the masks
  become all ones) and nothing changes afterwards;
* **monotone masks**: the previous masks are the ``pre_masks`` of the next
  update;
* **state**: :meth:`state_dict` / :meth:`load_state_dict` (checked before
  anything changes; a different config is refused, naming the keys);
* **figures**: per-layer and total sparsity, as every adapter reports them.

Example:
    >>> import numpy as np
    >>> proto = PruningProtocol({"target_sparsity": 0.5, "start_step": 0, "end_step": 4,
    ...                          "pruning_frequency": 2}, {"fc": (2, 2), "bias": (2,)})
    >>> proto.names
    ['fc']
    >>> w = {"fc": np.array([[1.0, -3.0], [0.5, 2.0]])}
    >>> proto.advance(0, w).masks["fc"].tolist()       # update point 0: target 0.0
    [[True, True], [True, True]]
    >>> [proto.due(s) for s in (1, 2, 3)]
    [False, True, True]
    >>> update = proto.advance(5, w)          # steps 1..5 skipped: the update at 4 is not lost
    >>> update.step, update.masks["fc"].tolist()
    (5, [[False, True], [False, True]])
    >>> proto.done_step, proto.total_sparsity(), proto.advance(6, w) is None
    (5, 0.5, True)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Callable, Mapping, Union

import numpy as np

from .config import PruningConfig
from .engine import PruningEngine
from .mask_update import MaskUpdate

__all__ = ["PruningProtocol", "MaskUpdate", "sparsity_figures", "counted_sparsity_figures", "config_fingerprint", "RUNTIME_FIELDS", "fingerprint_differences",
           "STATE_VERSION"]

STATE_VERSION = 1
_INT64_MAX = 2 ** 63 - 1

Arrays = Mapping[str, np.ndarray]
ArraysOrReader = Union[Arrays, Callable[[], Arrays], None]


def sparsity_figures(masks: Arrays, prefix: str = "sparsity") -> dict[str, float]:
    """Per-layer and total fraction of pruned weights, keyed as every adapter logs them.

    ``{prefix: total, f"{prefix}/{name}": layer, ...}``; masks are True (or
    non-zero) where kept.

    Example:
        >>> sparsity_figures({"a": np.array([True, False]), "b": np.array([1.0, 1.0, 0.0, 0.0])})
        {'sparsity': 0.5, 'sparsity/a': 0.5, 'sparsity/b': 0.5}
    """
    return counted_sparsity_figures({name: (int(np.size(m)) - int(np.count_nonzero(m)), int(np.size(m)))
                                     for name, m in masks.items()}, prefix)


def counted_sparsity_figures(counts: Mapping[str, tuple[int, int]], prefix: str = "sparsity") -> dict[str, float]:
    """:func:`sparsity_figures` from ``{name: (pruned, size)}`` (e.g. counts summed over ranks).

    Example:
        >>> counted_sparsity_figures({"a": (1, 2), "b": (0, 2)})
        {'sparsity': 0.25, 'sparsity/a': 0.5, 'sparsity/b': 0.0}
    """
    out: dict[str, float] = {}
    pruned = total = 0
    for name, (k, n) in counts.items():
        out[f"{prefix}/{name}"] = k / n if n else 0.0
        pruned, total = pruned + k, total + n
    return {prefix: pruned / total if total else 0.0, **out}


#: Config fields that change how an update runs, never its masks: left out of the fingerprint
#: (a resume with another thread count is the same run).
RUNTIME_FIELDS = ("num_threads",)


def _fingerprinted() -> list[str]:
    return [f.name for f in dataclasses.fields(PruningConfig) if f.name not in RUNTIME_FIELDS]


def config_fingerprint(config: PruningConfig | Mapping[str, Any]) -> np.ndarray:
    """One int64 per config field (in field order) but :data:`RUNTIME_FIELDS`: a digest of its value.

    Frameworks that keep pruning state in fixed-shape variables (Keras, TF
    graphs) save it beside the masks, so a resume with another config is
    refused naming the keys that differ (:func:`fingerprint_differences`).

    Example:
        >>> fp = config_fingerprint({"pattern": "4x1"})
        >>> fp.shape == (len(dataclasses.fields(PruningConfig)) - len(RUNTIME_FIELDS),), fp.dtype
        (True, dtype('int64'))
        >>> bool((config_fingerprint({"num_threads": 1}) == config_fingerprint({"num_threads": 2})).all())
        True
    """
    cfg = PruningConfig.coerce(config)
    values = cfg.to_dict()
    names = _fingerprinted()
    out = np.empty(len(names), dtype=np.int64)
    for i, name in enumerate(names):
        digest = hashlib.sha256(json.dumps(values[name], sort_keys=True).encode()).digest()
        out[i] = np.frombuffer(digest[:8], dtype="<i8")[0]
    return out


def fingerprint_differences(config: PruningConfig | Mapping[str, Any], fingerprint: Any) -> list[str]:
    """Names of the config fields whose saved digests differ from ``config``'s.

    Example:
        >>> fingerprint_differences({"pattern": "2:4", "target_sparsity": 0.5},
        ...                         config_fingerprint({"pattern": "4x1", "target_sparsity": 0.5}))
        ['pattern']
    """
    mine = config_fingerprint(config)
    saved = np.asarray(fingerprint, dtype=np.int64).reshape(-1)
    names = _fingerprinted()
    if saved.shape != mine.shape:
        return names
    return [n for n, a, b in zip(names, mine, saved) if a != b]


def _read(source: ArraysOrReader) -> Arrays | None:
    return source() if callable(source) else source


def _check_step(step: Any, what: str = "step") -> int:
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, got {step!r} ({type(step).__name__})")
    s = int(step)
    if not -1 <= s <= _INT64_MAX:
        raise ValueError(f"{what} must be in [-1, 2**63 - 1], got {s}")
    return s


class PruningProtocol:
    """When masks change and what they become, for one config on one model.

    Args:
        config: a ``PruningConfig``, a dict of its fields or a YAML path.
        shapes: every candidate weight's canonical shape, in the model's own
            weight order (see the module docstring); the config selects among them.
        min_ndim: weights with fewer dimensions (biases, norms) are never selected.

    Raises:
        ValueError: bad config, nothing selected, a pattern that does not fit a
            selected weight.
    """

    def __init__(self, config: PruningConfig | Mapping[str, Any] | str,
                 shapes: Mapping[str, tuple[int, ...]], *, min_ndim: int = 2) -> None:
        self.engine = PruningEngine(config)
        self.config: PruningConfig = self.engine.config
        shapes = {str(n): tuple(int(d) for d in s) for n, s in shapes.items()}
        self.names: list[str] = self.engine.select_layers(list(shapes), shapes, min_ndim)
        self.shapes: dict[str, tuple[int, ...]] = {n: shapes[n] for n in self.names}
        #: layers the pattern does not fit, left dense (skip_incompatible_layers): {name: reason}
        self.skipped: dict[str, str] = self.engine.check_layers(self.shapes)
        #: shapes of the arrays this process passes and holds: the canonical shapes here, the rows of
        #: a shard in :class:`sparsify.distributed.ShardedPruningProtocol`
        self.local_shapes: dict[str, tuple[int, ...]] = self.held_shapes(self.shapes)
        self._done = -1
        self._released = False
        self._masks: dict[str, np.ndarray] = {n: np.ones(s, dtype=bool) for n, s in self.local_shapes.items()}

    def __repr__(self) -> str:
        return (f"PruningProtocol(pattern={self.config.pattern!r}, scope={self.config.pruning_scope!r}, "
                f"layers={len(self.names)}, done_step={self._done}, sparsity={self.total_sparsity():.4f})")

    # ----- read-only state ---------------------------------------------------------------
    @property
    def done_step(self) -> int:
        """Step of the last applied update or release (-1: none yet)."""
        return self._done

    @property
    def released(self) -> bool:
        """True once the masks were released after ``end_step`` (``leave_enabled=False``)."""
        return self._released

    @property
    def masks(self) -> dict[str, np.ndarray]:
        """Current masks (canonical layout, bool, True = kept). Read-only views."""
        out = {}
        for n, m in self._masks.items():
            v = m.view()
            v.flags.writeable = False
            out[n] = v
        return out

    @property
    def any_pruned(self) -> bool:
        """True if some mask holds a zero."""
        return not all(m.all() for m in self._masks.values())

    def layer_sparsity(self) -> dict[str, float | None]:
        """Fraction of pruned weights per layer; None for a layer :attr:`skipped` (the pattern does not fit it)."""
        return {n: None if n in self.skipped else 1.0 - float(np.count_nonzero(m)) / m.size if m.size else 0.0
                for n, m in self._masks.items()}

    def total_sparsity(self) -> float:
        """Fraction of pruned weights over all pruned layers."""
        return sparsity_figures(self._masks)["sparsity"]

    def figures(self, prefix: str = "sparsity") -> dict[str, float]:
        """:func:`sparsity_figures` of the current masks (logs, TensorBoard, the CLI)."""
        return sparsity_figures(self._masks, prefix)

    # ----- the schedule ------------------------------------------------------------------
    def _release_due(self, step: int) -> bool:
        return not self._released and not self.config.leave_enabled and not self.engine.masking_active(step)

    def due(self, step: int) -> bool:
        """True if :meth:`advance` at ``step`` would change the masks (an update point
        in ``(done_step, step]``, or the release)."""
        step = _check_step(step)
        if self._released:
            return False
        return self.engine.update_due(self._done, step) or self._release_due(step)

    def next_step(self) -> int:
        """First step after ``done_step`` at which :meth:`due` turns true (-1: never again, also when
        that step would be past ``2**63 - 1``, the last step :meth:`advance` accepts).

        Example:
            >>> p = PruningProtocol({"start_step": 2, "end_step": 10, "pruning_frequency": 4,
            ...                      "leave_enabled": False}, {"w": (4, 4)})
            >>> p.next_step()
            2
        """
        if self._released:
            return -1
        nxt = self.engine.next_update_step(self._done)
        if not self.config.leave_enabled and self.config.end_step >= 0:     # end_step=-1 never ends: no release
            release = max(self.config.end_step + 1, self._done + 1)
            nxt = release if nxt < 0 else min(nxt, release)
        return nxt if nxt <= _INT64_MAX else -1        # steps are int64 (see advance): never reached

    def target_sparsity(self, step: int) -> float:
        """Sparsity an update at ``step`` prunes to (the schedule at the last update point)."""
        return self.engine.target_sparsity(_check_step(step))

    def advance(self, step: int, weights: ArraysOrReader = None, scores: ArraysOrReader = None, *,
                grads: ArraysOrReader = None, activations: ArraysOrReader = None) -> MaskUpdate | None:
        """Apply what is due at ``step``: an update, a release, both, or nothing (None).

        Args:
            step: the current step (optimizer steps done).
            weights: canonical-layout weights keyed by name, or a zero-argument
                callable returning them (called only when an update is due). Dense:
                pruned entries hold the values they keep under the mask (zeros when the
                framework stores none), which ``monotone=False`` ranks.
            scores: element scores (same forms), required by per-step criteria;
                when given (and regrowth is off), ``weights`` are not read. Default: the
                criterion's scores of ``weights``.
            grads: gradients (same forms), for ``regrowth="rigl"``.
            activations: per-input-channel statistics (same forms, broadcastable to the
                weights), for criteria that need ``activation`` (``"wanda"``).

        Returns:
            A :class:`MaskUpdate` to write back, or None when nothing changed.
        """
        step = _check_step(step)
        if self._released:
            return None
        update = self.engine.update_due(self._done, step)
        release = self._release_due(step)
        if not update and not release:
            return None
        masks, grown = self._masks, {}
        if update:
            s = _read(scores)
            w = _read(weights) if s is None or self.config.regrowth != "none" else None
            if w is None and s is None:
                raise ValueError(f"an update is due at step {step}: pass the weights (or scores)")
            if s is not None:
                s = self._checked("scores", s)
            w = s if w is None else self._checked("weights", w)
            g = _read(grads) if self.config.regrowth == "rigl" else None
            a = _read(activations) if "activation" in self.engine.needs else None
            masks, grown = self.new_masks(w, step, s, None if g is None else self._checked("grads", g),
                                          None if a is None else dict(a))
            masks = {n: np.require(masks[n], dtype=bool, requirements=['C', 'W']) for n in self.names}
        keep_values = masks
        if release:
            masks = {n: np.ones(s, dtype=bool) for n, s in self.local_shapes.items()}
        self._masks = masks
        self._done = step
        self._released = release
        return MaskUpdate(step, dict(masks), dict(keep_values), release, dict(grown))

    # ----- extension points (sharded weights: sparsify.distributed) -------------------------
    def held_shapes(self, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        """Shapes of the weights, scores and masks this process holds, from the selected canonical
        ``shapes`` (all of them here; a subclass holding shards returns its rows' shapes)."""
        return dict(shapes)

    def new_masks(self, weights: Mapping[str, np.ndarray], step: int, scores: Mapping[str, np.ndarray] | None,
                  grads: Mapping[str, np.ndarray] | None = None,
                  activations: Mapping[str, np.ndarray] | None = None,
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(masks, grown)`` of an update at ``step`` from checked weights (and scores of a per-step
        criterion, gradients, activation statistics), with the current masks as the previous ones.
        A subclass may compute them elsewhere."""
        return self.engine.compute_update(weights, step, pre_masks=self._masks, scores=scores, grads=grads,
                                          activations=activations)

    def _checked(self, what: str, arrays: Arrays) -> dict[str, np.ndarray]:
        if not isinstance(arrays, Mapping):
            raise TypeError(f"{what} must be a dict of arrays keyed by weight name, got {type(arrays).__name__}")
        missing = [n for n in self.names if n not in arrays]
        if missing:
            raise ValueError(f"{what} lacks the pruned weights {missing}")
        out = {}
        for n in self.names:
            a = np.asarray(arrays[n])
            if a.shape != self.local_shapes[n]:
                raise ValueError(f"{what}[{n!r}] has shape {a.shape}, but the weight's canonical shape is "
                                 f"{self.local_shapes[n]}")
            if a.dtype.kind not in "fiu":
                raise TypeError(f"{what}[{n!r}] must be a real numeric array, got dtype {a.dtype}")
            out[n] = a
        return out

    # ----- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: config, names, done step, release, masks.

        Example:
            >>> p = PruningProtocol({"target_sparsity": 0.5, "end_step": 0}, {"w": (2, 2)})
            >>> sorted(p.state_dict())
            ['config', 'done_step', 'masks', 'names', 'released', 'version']
        """
        return {"version": STATE_VERSION, "config": self.config.to_dict(), "names": list(self.names),
                "done_step": self._done, "released": self._released,
                "masks": {n: m.copy() for n, m in self._masks.items()}}

    def config_differences(self, other: PruningConfig | Mapping[str, Any]) -> list[str]:
        """Config keys whose values differ from ``other`` (a config or its dict)."""
        theirs = other.to_dict() if isinstance(other, PruningConfig) else dict(other)
        mine = self.config.to_dict()
        return sorted(k for k in set(mine) | set(theirs) if mine.get(k, "<missing>") != theirs.get(k, "<missing>"))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; everything is checked before anything changes.

        Raises:
            ValueError: the state was saved with another config (the differing
                keys are named), for other weights, or holds bad values.
        """
        self.check_state(state)
        self.restore(state["done_step"], state["masks"], released=state["released"])

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Check what a saved state says about the run, without its masks (:meth:`restore` checks those):
        its keys, version, config and pruned weights. An adapter that converts the saved masks first
        calls it before, so that a state of another model or config is named as such.

        Example:
            >>> p = PruningProtocol({"target_sparsity": 0.5, "end_step": 0}, {"w": (2, 2)})
            >>> p.check_state({**p.state_dict(), "names": ["v"]})
            Traceback (most recent call last):
            ...
            ValueError: state was saved for pruned weights ['v'], but this model prunes ['w']
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        missing = [k for k in ("config", "names", "done_step", "released", "masks") if k not in state]
        if missing:
            raise ValueError(f"state is missing keys {missing}; expected a dict from state_dict()")
        if state.get("version", STATE_VERSION) != STATE_VERSION:
            raise ValueError(f"state version {state.get('version')!r} is not supported (expected {STATE_VERSION})")
        if not isinstance(state["config"], Mapping):
            raise ValueError(f"state['config'] must be a dict, got {type(state['config']).__name__}")
        diff = self.config_differences(state["config"])
        if diff:
            shown = ", ".join(f"{k}: saved {state['config'].get(k, '<missing>')!r}, now {getattr(self.config, k, '<missing>')!r}"
                              for k in diff)
            raise ValueError(f"state was saved with a different config ({shown}); resume with the saved config, "
                             "or start a new pruning run")
        names = state["names"]
        if not isinstance(names, (list, tuple)) or list(names) != self.names:
            raise ValueError(f"state was saved for pruned weights {names!r}, but this model prunes {self.names}")

    def restore(self, done_step: int, masks: Arrays, *, released: bool | None = None) -> None:
        """Set the done step and masks (e.g. read back from framework variables after a checkpoint load).

        ``released`` is what the schedule implies (a done step after
        ``end_step`` with ``leave_enabled=False``); given explicitly (a saved
        state), it must agree (``ValueError`` otherwise). Masks may be bool or 0/1
        numbers. Everything is checked before anything changes.
        """
        done = _check_step(done_step, "done_step")
        implied = not self.config.leave_enabled and done > self.config.end_step >= 0
        if released is None:
            released = implied
        if not isinstance(released, (bool, np.bool_)):
            raise TypeError(f"released must be True or False, got {released!r}")
        if bool(released) != implied:       # advance() releases exactly at the first step after end_step
            raise ValueError(f"released={bool(released)} does not match done_step={done} with end_step="
                             f"{self.config.end_step}, leave_enabled={self.config.leave_enabled}: the masks are "
                             f"released exactly when leave_enabled=False and done_step > end_step >= 0")
        if not isinstance(masks, Mapping):
            raise TypeError(f"masks must be a dict of arrays keyed by weight name, got {type(masks).__name__}")
        if set(masks) != set(self.names):
            raise ValueError(f"masks are for weights {sorted(masks)}, but this model prunes {self.names}")
        new = {}
        for n in self.names:
            m = np.asarray(masks[n])
            if m.shape != self.local_shapes[n]:
                raise ValueError(f"masks[{n!r}] has shape {m.shape}, but the weight's canonical shape is "
                                 f"{self.local_shapes[n]}")
            if m.dtype != bool:
                if m.dtype.kind not in "fiu" or not np.isin(m, (0, 1)).all():
                    raise ValueError(f"masks[{n!r}] must hold only 0 and 1 (or booleans)")
                m = m != 0
            new[n] = np.array(m, dtype=bool)
        self._masks = new
        self._done = done
        self._released = bool(released)

