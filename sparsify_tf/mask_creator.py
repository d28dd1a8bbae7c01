"""Mask creation for TF graphs: the values always come from the core.

:class:`CoreMaskCreator` wraps a core :class:`~sparsify.patterns.Pattern` and
builds a ``tf.numpy_function`` that converts the TF kernel to the canonical
layout (``sparsify.layout``), asks the pattern for the mask and converts it
back. It replaces the seed's ``PruningMaskCreator`` objects. A pattern with
``pruning_scope: global`` computes the masks of several weights in one core
call (:meth:`CoreMaskCreator.create_sparsity_masks`), one threshold for all.

Example:
    >>> import numpy as np
    >>> mc = get_mask_creator("2:4")
    >>> mc.masks_numpy({"w": np.array([[4.0], [1.0], [3.0], [2.0]])}, {"w": "dense"}, 0.5)["w"].ravel().tolist()
    [1.0, 0.0, 1.0, 0.0]
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from sparsify.criteria import magnitude
from sparsify.layout import canonical_to_tf, tf_to_canonical
from sparsify.patterns import Pattern, get_pattern

__all__ = ["CoreMaskCreator", "get_mask_creator", "MaskCreatorLike"]

MaskCreatorLike = Any  # "CoreMaskCreator | Pattern | str | Mapping"


class CoreMaskCreator:
    """Computes masks with a core pattern (magnitude scores).

    Args:
        pattern: a pattern name (``"1x1"``, ``"4x1"``, ``"2:4"``, ...), a config
            dict/``PruningConfig`` or a ``Pattern``.
        monotone: pass the current mask as ``pre_masks`` so pruned weights stay pruned.
    """

    def __init__(self, pattern: Pattern | str | Mapping[str, Any] = "1x1", monotone: bool = True) -> None:
        if not isinstance(monotone, bool):
            raise TypeError(f"monotone must be True or False, got {monotone!r}")
        self.pattern = get_pattern(pattern)
        self.monotone = monotone

    def __repr__(self) -> str:
        return f"CoreMaskCreator({self.pattern!r}, monotone={self.monotone})"

    def check_shape(self, name: str, tf_shape: tuple[int, ...], kind: str) -> None:
        """``ValueError`` naming the weight now if its shape does not fit the pattern."""
        canon = tf_to_canonical(np.zeros(tuple(tf_shape), dtype=np.float32), kind)
        self.pattern.get_mask_single(np.ones(canon.shape, dtype=np.float32), 0.0, name=name)

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
        """Masks (TF layout, float, 1 = kept) for TF-layout ``weights`` at ``sparsity``."""
        canon = {n: tf_to_canonical(np.asarray(w), kinds[n]) for n, w in weights.items()}
        pre = None
        if self.monotone and pre_masks is not None:
            pre = {n: tf_to_canonical(np.asarray(m), kinds[n]) != 0 for n, m in pre_masks.items()}
        masks = self.pattern.get_masks({n: magnitude(w) for n, w in canon.items()}, float(sparsity), pre)
        return {n: canonical_to_tf(masks[n], kinds[n], np.shape(weights[n])).astype(np.asarray(weights[n]).dtype)
                for n in weights}

    def create_sparsity_mask(self, tensor: tf.Tensor, sparsity: tf.Tensor, pre_mask: tf.Tensor | None = None,
                             kind: str = "dense", name: str = "layer") -> tf.Tensor:
        """Graph op computing the mask of ``tensor`` (TF layout) at ``sparsity`` with the core."""
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


def get_mask_creator(mask_creator: MaskCreatorLike) -> CoreMaskCreator:
    """Coerce a ``CoreMaskCreator``, ``Pattern``, pattern name or config dict.

    Raises:
        TypeError/ValueError: naming ``mask_creator`` and what is allowed.
    """
    if isinstance(mask_creator, CoreMaskCreator):
        return mask_creator
    if isinstance(mask_creator, (Pattern, str, Mapping)) or hasattr(mask_creator, "pattern_obj"):
        try:
            return CoreMaskCreator(mask_creator, monotone=bool(getattr(mask_creator, "monotone", True))
                                   if not isinstance(mask_creator, Mapping) else bool(mask_creator.get("monotone", True)))
        except (ValueError, TypeError) as e:
            raise type(e)(f"mask_creator: {e}") from None
    raise TypeError(f"mask_creator must be a pattern name such as '1x1', '4x1' or '2:4', a config dict, a "
                    f"sparsify Pattern or a CoreMaskCreator, got {mask_creator!r}")
