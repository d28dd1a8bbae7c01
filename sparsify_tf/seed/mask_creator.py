"""Mask creation for TF graphs: the values always come from the core.

:class:`CoreMaskCreator` wraps a core :class:`~sparsify.patterns.Pattern` and a
registered criterion (``"magnitude"`` by default) and builds a
``tf.numpy_function`` that converts the TF kernels to the canonical layout
(``sparsify.layout``), asks the core engine for the masks of an externally
scheduled update (:meth:`sparsify.PruningEngine.masks_at_sparsity`: the
sparsity is the user's graph tensor, SparseML's contract; scores, count rules,
allocation and tie order are those of every other adapter's updates) and
converts them back. It is what the seed API (:mod:`sparsify_tf.seed.mask_pruning`) prunes with;
SparseML's ``PruningMaskCreator`` classes (:mod:`sparsify_tf.seed.mask_creator_pruning`)
are core mask creators too. A pattern with ``pruning_scope: global`` computes
the masks of several weights in one core call
(:meth:`CoreMaskCreator.create_sparsity_masks`), one threshold for all.

Count rules. Given a pattern *name* or a config *dict*, the seed API follows
the seed (SparseML): sparsity is in [0, 1], 1.0 prunes every unit, and no
per-layer cap applies unless asked for (``max_sparsity_ratio_per_layer`` in
the dict or as an argument). Given a ``Pattern`` or a ``PruningConfig``
object, the core's own rules apply: sparsity in [0, 1), at least one unit of
a layer kept, and the object's per-layer limits (0.98 by default). Either way
a layer prunes exactly ``exact_prune_count(s, units)`` units.

Any of the accepted forms becomes a :class:`CoreMaskCreator` through
:func:`sparsify_tf.seed.mask_creator_coercion.get_mask_creator`. A criterion
registered with ``register_criterion(name, needs=("weight",))`` works here
too: ``CoreMaskCreator("4x1", criterion=name)`` (or ``criterion`` in a config
dict or ``PruningConfig``); criteria that need gradients, a running state or
activations are refused (the seed API reads only the weights).

Example:
    >>> import numpy as np
    >>> mc = CoreMaskCreator("2:4")
    >>> mc.masks_numpy({"w": np.array([[4.0], [1.0], [3.0], [2.0]])}, {"w": "dense"}, 0.5)["w"].ravel().tolist()
    [1.0, 0.0, 1.0, 0.0]
    >>> CoreMaskCreator("1x1").masks_numpy({"w": np.array([[0.5], [3.0]])}, {"w": "dense"}, 1.0)["w"].ravel().tolist()
    [0.0, 0.0]
"""
from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from sparsify.criteria import get_criterion, registered_criteria
from sparsify.engine import PruningEngine
from sparsify.layout import canonical_to_tf, tf_to_canonical
from sparsify.patterns import Pattern, get_pattern

__all__ = ["CoreMaskCreator", "MaskCreatorLike", "infer_kind", "seed_pattern", "seed_criterion", "check_pruned_gradient"]

MaskCreatorLike = Any  # "CoreMaskCreator | PruningMaskCreator | Pattern | str | Mapping"

_CAP = "max_sparsity_ratio_per_layer"


def infer_kind(tf_shape: Sequence[int]) -> str:
    """The TF layout of a kernel from its rank: ``"dense"`` (2-D) or ``"conv"`` (3-D to 5-D).

    Example:
        >>> infer_kind((3, 3, 8, 16)), infer_kind((8, 16))
        ('conv', 'dense')
    """
    rank = len(tuple(tf_shape))
    if rank == 2:
        return "dense"
    if 3 <= rank <= 5:
        return "conv"
    raise ValueError(f"tensor of shape {tuple(tf_shape)}: a kernel to prune must be 2-D (MatMul) or 3-D to 5-D "
                     f"(convolution); pass kind= for other layouts")


def seed_pattern(config: Any, max_sparsity_ratio_per_layer: float | None = None) -> Pattern:
    """A core pattern with the seed's count rule: sparsity in [0, 1] (1.0 prunes every unit), no per-layer
    cap unless ``max_sparsity_ratio_per_layer`` is given (or named in a config dict).

    Example:
        >>> p = seed_pattern("4x1")
        >>> p.keep_one_unit, p.max_sparsity_ratio_per_layer
        (False, 1.0)
        >>> seed_pattern({"pattern": "1x1", "max_sparsity_ratio_per_layer": 0.9}).max_sparsity_ratio_per_layer
        0.9
    """
    pattern = copy.copy(get_pattern(config))
    cap = max_sparsity_ratio_per_layer
    if cap is None and isinstance(config, Mapping):
        cap = config.get(_CAP)
    pattern.keep_one_unit = False
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float, np.integer, np.floating))
                            or not 0.0 <= float(cap) <= 1.0):
        raise ValueError(f"{_CAP} must be a number in [0, 1], got {cap!r}")
    pattern.max_sparsity_ratio_per_layer = 1.0 if cap is None else float(cap)
    if pattern.min_sparsity_ratio_per_layer > pattern.max_sparsity_ratio_per_layer:
        raise ValueError(f"min_sparsity_ratio_per_layer ({pattern.min_sparsity_ratio_per_layer}) must be <= "
                         f"{_CAP} ({pattern.max_sparsity_ratio_per_layer})")
    return pattern


def seed_criterion(criterion: Any = None, config: Any = None) -> str:
    """The registered criterion the seed API scores with: ``criterion``, else the ``criterion`` of a config
    dict or ``PruningConfig``, else ``"magnitude"``. It must need only the weight.

    Raises:
        TypeError/ValueError: naming ``criterion``, with the criteria the seed API can use.

    Example:
        >>> seed_criterion(), seed_criterion(config={"pattern": "4x1", "criterion": "magnitude"})
        ('magnitude', 'magnitude')
        >>> seed_criterion("snip")
        Traceback (most recent call last):
        ...
        ValueError: criterion='snip' needs ['weight', 'grad']; the seed API reads only the weights: use 'magnitude' or a criterion registered with needs=('weight',)
    """
    if criterion is None:
        criterion = config.get("criterion") if isinstance(config, Mapping) else getattr(config, "criterion", None)
        criterion = "magnitude" if criterion is None else criterion
    if not isinstance(criterion, str):
        raise TypeError(f"criterion must be the name of a registered criterion, got {criterion!r}")
    usable = [n for n in registered_criteria() if get_criterion(n).needs == ("weight",)]
    if criterion not in registered_criteria():
        raise ValueError(f"criterion must be one of the registered criteria that need only the weight "
                         f"{tuple(usable)}, got {criterion!r}")
    needs = get_criterion(criterion).needs
    if needs != ("weight",):
        shown = " or ".join(repr(n) for n in usable)
        raise ValueError(f"criterion={criterion!r} needs {list(needs)}; the seed API reads only the weights: use "
                         f"{shown + ' or ' if shown else ''}a criterion registered with needs=('weight',)")
    return criterion


def check_pruned_gradient(config: Any) -> None:
    """Refuse a config dict or ``PruningConfig`` asking for ``pruned_gradient`` other than ``"none"``: the seed
    API writes ``weight * mask`` (pruned weights keep no value and get no gradient).

    Example:
        >>> check_pruned_gradient({"pattern": "4x1", "pruned_gradient": "none"})
        >>> check_pruned_gradient({"pattern": "4x1", "pruned_gradient": "straight_through"})
        Traceback (most recent call last):
        ...
        ValueError: pruned_gradient='straight_through' is not supported by the SparseML seed API: it writes weight * mask, so pruned weights keep no value and get no gradient (pruned_gradient='none', the only value allowed here); 'straight_through' is implemented by sparsify_torch
    """
    value = config.get("pruned_gradient", "none") if isinstance(config, Mapping) else \
        getattr(config, "pruned_gradient", "none")
    if value != "none":
        raise ValueError(f"pruned_gradient={value!r} is not supported by the SparseML seed API: it writes "
                         "weight * mask, so pruned weights keep no value and get no gradient "
                         "(pruned_gradient='none', the only value allowed here); 'straight_through' is "
                         "implemented by sparsify_torch")


class CoreMaskCreator:
    """Computes masks with a core pattern and criterion (an externally scheduled core update).

    Args:
        pattern: a pattern name (``"1x1"``, ``"4x1"``, ``"2:4"``, ``"channelx1xkernel"``, ...) or config dict
            (the seed's count rule, see the module), or a ``PruningConfig``/``Pattern`` (the core's rules).
        monotone: pass the current mask as ``pre_masks`` so pruned weights stay pruned.
        max_sparsity_ratio_per_layer: a per-layer cap for a name or dict (default: none).
        criterion: a registered criterion that needs only the weight (default: the config's
            ``criterion``, else ``"magnitude"``); see :func:`seed_criterion`.

    Raises:
        ValueError: a config asking for ``pruned_gradient="straight_through"`` (:func:`check_pruned_gradient`).
    """

    def __init__(self, pattern: Pattern | str | Mapping[str, Any] = "1x1", monotone: bool = True,
                 max_sparsity_ratio_per_layer: float | None = None, criterion: str | None = None) -> None:
        if not isinstance(monotone, bool):
            raise TypeError(f"monotone must be True or False, got {monotone!r}")
        check_pruned_gradient(pattern)
        self.criterion: str = seed_criterion(criterion, pattern)
        self.seed_rules = isinstance(pattern, (str, Mapping))
        if self.seed_rules:
            self.pattern = seed_pattern(pattern, max_sparsity_ratio_per_layer)
        else:
            if max_sparsity_ratio_per_layer is not None:
                raise ValueError(f"{_CAP} applies to a pattern name or dict; a {type(pattern).__name__} brings its "
                                 f"own, got {_CAP}={max_sparsity_ratio_per_layer!r}")
            self.pattern = get_pattern(pattern)
        self.monotone = monotone
        self._engines: dict[tuple[int, bool, str], PruningEngine] = {}

    def __repr__(self) -> str:
        shown = "" if self.criterion == "magnitude" else f", criterion={self.criterion!r}"
        return f"CoreMaskCreator({self.pattern!r}, monotone={self.monotone}{shown})"

    def engine_for(self, pattern: Pattern) -> PruningEngine:
        """The core engine that makes ``pattern``'s masks with this creator's criterion (one per pattern)."""
        key = (id(pattern), self.monotone, self.criterion)
        engine = self._engines.get(key)
        if engine is None or engine.pattern is not pattern:
            engine = PruningEngine({"criterion": self.criterion, "monotone": self.monotone}, pattern=pattern)
            self._engines[key] = engine
        return engine

    def pattern_for(self, tf_shape: tuple[int, ...], kind: str, name: str = "layer") -> Pattern:
        """The core pattern that prunes a weight of ``tf_shape`` and ``kind`` (here: always :attr:`pattern`)."""
        return self.pattern

    def check_shape(self, name: str, tf_shape: tuple[int, ...], kind: str) -> None:
        """``ValueError`` naming the weight now if its shape does not fit the pattern."""
        canon = tf_to_canonical(np.zeros(tuple(tf_shape), dtype=np.float32), kind)
        self.pattern_for(tuple(tf_shape), kind, name).check_shape(name, canon.shape)

    @property
    def is_global(self) -> bool:
        """True when the pattern prunes with one threshold over all weights given together."""
        return bool(self.pattern.is_global)

    def check_sparsity(self, sparsity: float, name: str = "sparsity") -> float:
        """``ValueError`` naming ``name`` now if the pattern cannot prune to ``sparsity`` (N:M: above N/M).

        Example:
            >>> CoreMaskCreator("2:4").check_sparsity(0.9, "final_sparsity")
            Traceback (most recent call last):
            ...
            ValueError: final_sparsity=0.9 cannot be reached with mask_creator '2:4': final_sparsity for pattern '2:4' must be <= N/M = 0.5, got 0.9
        """
        try:
            return self.pattern.check_ratio(sparsity, name)
        except ValueError as e:
            raise ValueError(f"{name}={sparsity!r} cannot be reached with mask_creator {self.pattern.pattern!r}: "
                             f"{e}") from None

    def masks_numpy(self, weights: Mapping[str, np.ndarray], kinds: Mapping[str, str], sparsity: float,
                    pre_masks: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Masks (TF layout, float, 1 = kept) for TF-layout ``weights`` at ``sparsity``: the core engine's
        externally scheduled update (:meth:`sparsify.PruningEngine.masks_at_sparsity`) of their canonical
        layouts, in the order given (a global pattern's cross-layer ties go to the earlier weight)."""
        canon = {n: tf_to_canonical(np.asarray(w), kinds[n]) for n, w in weights.items()}
        pre = None
        if self.monotone and pre_masks is not None:
            pre = {n: tf_to_canonical(np.asarray(m), kinds[n]) != 0 for n, m in pre_masks.items()}
        patterns = {n: self.pattern_for(np.shape(weights[n]), kinds[n], n) for n in weights}
        if all(p is self.pattern for p in patterns.values()):
            masks = self.engine_for(self.pattern).masks_at_sparsity(canon, float(sparsity), pre)
        else:                                       # one pattern per weight: each layer on its own
            masks = {n: self.engine_for(patterns[n]).masks_at_sparsity({n: canon[n]}, float(sparsity),
                                                                        None if pre is None else {n: pre[n]})[n]
                     for n in canon}
        return {n: canonical_to_tf(masks[n], kinds[n], np.shape(weights[n])).astype(np.asarray(weights[n]).dtype)
                for n in weights}

    def create_sparsity_mask(self, tensor: tf.Tensor, sparsity: tf.Tensor, pre_mask: tf.Tensor | None = None,
                             kind: str | None = None, name: str = "layer") -> tf.Tensor:
        """Graph op computing the mask of ``tensor`` (TF layout; ``kind`` inferred from its rank) at ``sparsity``."""
        tensor = tf.convert_to_tensor(tensor)
        kind = infer_kind(tensor.shape.as_list()) if kind is None else kind
        return self.create_sparsity_masks([tensor], sparsity, None if pre_mask is None else [pre_mask],
                                          [kind], [name], op_name="nm_core_mask")[0]

    def create_sparsity_masks(self, tensors: Sequence[tf.Tensor], sparsity: tf.Tensor,
                              pre_masks: Sequence[tf.Tensor] | None, kinds: Sequence[str], names: Sequence[str],
                              op_name: str = "nm_core_masks") -> list[tf.Tensor]:
        """Graph op computing the masks of all ``tensors`` (TF layout) at ``sparsity`` in one core call.

        With a global pattern, one threshold over all of them, ties broken in the order given.
        """
        n = len(tensors)
        if not n or len(kinds) != n or len(names) != n or (pre_masks is not None and len(pre_masks) != n):
            raise ValueError(f"tensors, kinds and names (and pre_masks) must be non-empty and of equal length, got "
                             f"{n}, {len(kinds)}, {len(names)}"
                             + ("" if pre_masks is None else f", {len(pre_masks)}"))
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        for t, kind, name in zip(tensors, kinds, names):
            if t.shape.is_fully_defined():
                self.check_shape(name, tuple(t.shape.as_list()), kind)
        kind_of = dict(zip(names, kinds))

        def _fn(s, *arrays):
            ws, pre = arrays[:n], arrays[n:]
            masks = self.masks_numpy(dict(zip(names, ws)), kind_of, float(s), dict(zip(names, pre)) if pre else None)
            return [masks[k] for k in names]

        inputs = [sparsity, *tensors, *(pre_masks or [])]
        outs = tf.numpy_function(_fn, inputs, [t.dtype for t in tensors], stateful=False, name=op_name)
        for o, t in zip(outs, tensors):
            o.set_shape(t.shape)
        return list(outs)
