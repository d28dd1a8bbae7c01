"""Any form of mask creator the seed API accepts, made a :class:`~sparsify_tf.seed.mask_creator.CoreMaskCreator`.

:func:`get_mask_creator` takes a core mask creator as is, wraps a user's
SparseML-style ``PruningMaskCreator`` (:mod:`sparsify_tf.seed.mask_creator_pruning`),
loads SparseML's mask type names (``"unstructured"``, ``"channel"``,
``"[4, 1]"``) and builds a core mask creator from a pattern name, a config
dict or a :class:`~sparsify.patterns.Pattern`.

Example:
    >>> str(get_mask_creator("channel")), get_mask_creator("2:4").pattern.pattern
    ('channel', '2:4')
"""
from __future__ import annotations

from typing import Mapping

from sparsify.patterns import Pattern, get_pattern

from .mask_creator import CoreMaskCreator, MaskCreatorLike
from .mask_creator_pruning import PruningMaskCreator, UserMaskCreator, load_mask_creator

__all__ = ["get_mask_creator"]


def get_mask_creator(mask_creator: MaskCreatorLike) -> CoreMaskCreator:
    """Coerce a mask creator: a ``CoreMaskCreator`` (SparseML's classes included), a user's
    ``PruningMaskCreator``, a ``Pattern``, a pattern name, a SparseML mask type (``"unstructured"``,
    ``"channel"``, ``"filter"``, ``"[4, 1]"``) or a config dict.

    Raises:
        TypeError/ValueError: naming ``mask_creator`` and what is allowed.

    Example:
        >>> get_mask_creator("4x1").pattern.pattern, str(get_mask_creator("channel"))
        ('4x1', 'channel')
    """
    if isinstance(mask_creator, CoreMaskCreator):
        return mask_creator
    if isinstance(mask_creator, PruningMaskCreator):
        return UserMaskCreator(mask_creator)
    if isinstance(mask_creator, str):
        try:
            get_pattern(mask_creator)
        except ValueError as e:
            try:
                return load_mask_creator(mask_creator)
            except ValueError:
                raise ValueError(f"mask_creator: {e}; or a SparseML mask type such as 'unstructured', 'channel', "
                                 f"'filter' or '[4, 1]'") from None
    if isinstance(mask_creator, (Pattern, str, Mapping)) or hasattr(mask_creator, "pattern_obj"):
        monotone = mask_creator.get("monotone", True) if isinstance(mask_creator, Mapping) else \
            getattr(mask_creator, "monotone", True)
        try:
            return CoreMaskCreator(mask_creator, monotone=bool(monotone))
        except (ValueError, TypeError) as e:
            raise type(e)(f"mask_creator: {e}") from None
    raise TypeError(f"mask_creator must be a pattern name such as '1x1', '4x1' or '2:4', a SparseML mask type "
                    f"such as 'unstructured' or '[4, 1]', a config dict, a sparsify Pattern, a PruningMaskCreator "
                    f"or a CoreMaskCreator, got {mask_creator!r}")
