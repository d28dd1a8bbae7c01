"""SparseML's mask creator classes (``sparseml.tensorflow_v1.optim.mask_creator_pruning``), on the core.

Same names, constructor arguments and ``str()`` as SparseML's TF-v1 classes, so
code that builds them, or serialises them by name, moves over unchanged:

* :class:`UnstructuredPruningMaskCreator` (``"unstructured"``): single weights, core pattern ``"1x1"``;
* :class:`DimensionPruningMaskCreator` (``dim``: TF axes whose index a unit keeps, or ``"channel"``/``"filter"``):
  one unit per index of those axes, e.g. ``"channel"`` a whole input channel, ``"filter"`` the kernel of one
  input-output pair of a conv;
* :class:`BlockPruningMaskCreator` (``block_shape = [inputs, outputs]``, ``-1`` for all): blocks of a 2-D
  kernel, or of one tap of a conv kernel.

Every mask comes from the core: the grouped units are the core's ``"OxIxK"``
patterns (:mod:`sparsify.patterns.kernel_blocks`) chosen per weight, a unit scores
the mean (``grouping_op_name``: or max, min) of its magnitudes, and a weight
prunes exactly ``exact_prune_count(s, units)`` units with the seed's rule
(sparsity 1.0 prunes all, no per-layer cap). A ``BlockPruningMaskCreator`` block
of several inputs *and* outputs is that block; SparseML's TF code instead took
``inputs * outputs`` consecutive outputs of one input.

Example:
    >>> str(load_mask_creator("channel")), str(BlockPruningMaskCreator([4, 1]))
    ('channel', '[4, 1]')
    >>> str(DimensionPruningMaskCreator([2, 3]))
    'DimensionPruningMaskCreator:[2, 3]'
    >>> DimensionPruningMaskCreator("filter").core_pattern_name((3, 3, 16, 32), "conv")
    '1x1xkernel'
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import tensorflow as tf

from sparsify.criteria import magnitude
from sparsify.layout import canonical_to_tf, tf_to_canonical
from sparsify.patterns import Pattern

from .mask_creator import CoreMaskCreator, infer_kind, seed_pattern

__all__ = [
    "PruningMaskCreator", "UnstructuredPruningMaskCreator", "GroupedPruningMaskCreator",
    "DimensionPruningMaskCreator", "BlockPruningMaskCreator", "UserMaskCreator", "load_mask_creator",
]


class PruningMaskCreator(ABC):
    """Abstract base of SparseML's mask creators: a mask initializer and a sparsity mask for a weight tensor.

    Subclass it with your own TF code as in SparseML; the seed API calls
    ``create_sparsity_mask(tensor, sparsity)`` (see :class:`UserMaskCreator`).
    """

    @abstractmethod
    def get_mask_initializer(self, tensor: tf.Tensor) -> Callable[..., tf.Tensor]:
        """An initializer ``(shape, dtype, partition_info)`` of the mask of ``tensor``."""

    @abstractmethod
    def create_sparsity_mask(self, tensor: tf.Tensor, sparsity: tf.Tensor) -> tf.Tensor:
        """The mask (1 = kept) of ``tensor`` at ``sparsity``."""


def _check_dtype(dtype: Any) -> tf.DType:
    dtype = tf.as_dtype(dtype)
    if not dtype.is_numpy_compatible or dtype == tf.string:
        raise ValueError(f"dtype of a mask must be numeric or boolean, got {dtype!r}")
    return dtype


class UnstructuredPruningMaskCreator(CoreMaskCreator, PruningMaskCreator):
    """Single weights pruned by magnitude (SparseML ``"unstructured"``; core pattern ``"1x1"``).

    Example:
        >>> import numpy as np
        >>> UnstructuredPruningMaskCreator().lock_mask_numpy(np.array([[0.0, 2.0]]), "dense").tolist()
        [[0.0, 1.0]]
    """

    def __init__(self) -> None:
        CoreMaskCreator.__init__(self, "1x1")

    def lock_mask_numpy(self, weight: np.ndarray, kind: str) -> np.ndarray:
        """1.0 where ``weight`` (TF layout) is non-zero, the core's lock mask."""
        w = np.asarray(weight)
        canon = tf_to_canonical(w, kind)
        lock = self.pattern_for(w.shape, kind).get_pattern_lock_masks({"w": canon})["w"]
        return canonical_to_tf(lock, kind, w.shape).astype(np.float32)

    def nonzero_mask(self, tensor: tf.Tensor, kind: str | None = None) -> tf.Tensor:
        """Graph op: :meth:`lock_mask_numpy` of ``tensor`` (float32, its shape)."""
        tensor = tf.convert_to_tensor(tensor)
        kind = infer_kind(tensor.shape.as_list()) if kind is None else kind
        self.check_shape("tensor", tuple(tensor.shape.as_list()), kind)
        out = tf.numpy_function(lambda w: self.lock_mask_numpy(w, kind), [tensor], tf.float32, stateful=False,
                                name="nm_core_lock_mask")
        out.set_shape(tensor.shape)
        return out

    def get_mask_initializer(self, tensor: tf.Tensor) -> Callable[..., tf.Tensor]:
        """An initializer ``(shape, dtype=float32, partition_info=None)``: 1 for the non-zero weights of ``tensor``."""
        def nonzero_initializer(shape: Any = None, dtype: Any = tf.float32, partition_info: Any = None) -> tf.Tensor:
            dtype = _check_dtype(dtype)
            # a variable not yet initialized (one global initializer) is read as its initial value
            value = tensor
            if isinstance(tensor, tf.Variable) and not tf.executing_eagerly():
                value = tf.cond(tf.compat.v1.is_variable_initialized(tensor), tensor.read_value,
                                lambda: tensor.initial_value)
            return tf.cast(self.nonzero_mask(value), dtype)
        return nonzero_initializer

    def __str__(self) -> str:
        return "unstructured"

    def __repr__(self) -> str:
        return str(self)


class GroupedPruningMaskCreator(UnstructuredPruningMaskCreator):
    """Abstract: masks whose units are groups of weights (a core ``"OxIxK"`` pattern per weight).

    A unit scores the ``grouping_op_name`` (``"mean"``, ``"max"`` or ``"min"``)
    of its magnitudes; subclasses say which core pattern a weight gets
    (:meth:`core_pattern_name`).
    """

    _GROUPING_OPS = {"mean": tf.reduce_mean, "max": tf.reduce_max, "min": tf.reduce_min}

    def __init__(self, grouping_op_name: str = "mean") -> None:
        super().__init__()
        self.get_grouping_op(grouping_op_name)
        self.grouping_op_name = grouping_op_name
        self._patterns: dict[str, Pattern] = {}

    @staticmethod
    def get_grouping_op(grouping_op_name: str) -> Callable[..., tf.Tensor]:
        """The TF reduction named ``grouping_op_name`` (the masks use the core's reduction of that name)."""
        if grouping_op_name not in GroupedPruningMaskCreator._GROUPING_OPS:
            raise ValueError(f"grouping_op_name must be one of {tuple(GroupedPruningMaskCreator._GROUPING_OPS)}, "
                             f"got {grouping_op_name!r}")
        return GroupedPruningMaskCreator._GROUPING_OPS[grouping_op_name]

    @abstractmethod
    def core_pattern_name(self, tf_shape: Sequence[int], kind: str) -> str:
        """The core ``"OxIxK"`` pattern name for a weight of ``tf_shape`` and ``kind``."""

    def pattern_for(self, tf_shape: tuple[int, ...], kind: str, name: str = "layer") -> Pattern:
        pname = self.core_pattern_name(tuple(int(d) for d in tf_shape), kind)
        if pname not in self._patterns:
            self._patterns[pname] = seed_pattern({"pattern": pname, "block_score_reduce": self.grouping_op_name})
        return self._patterns[pname]

    def lock_mask_numpy(self, weight: np.ndarray, kind: str) -> np.ndarray:
        """1.0 on the units whose grouped magnitude is non-zero (TF layout)."""
        w = np.asarray(weight)
        lock = self.pattern_for(w.shape, kind).unit_lock_mask(magnitude(tf_to_canonical(w, kind)))
        return canonical_to_tf(lock, kind, w.shape).astype(np.float32)

    def group_tensor(self, tensor: tf.Tensor, kind: str | None = None) -> tf.Tensor:
        """Graph op: the grouped magnitude of every unit of ``tensor`` (float32, one value per unit)."""
        tensor = tf.convert_to_tensor(tensor)
        kind = infer_kind(tensor.shape.as_list()) if kind is None else kind
        pattern = self.pattern_for(tuple(tensor.shape.as_list()), kind)

        def _values(w):
            return pattern.unit_values(magnitude(tf_to_canonical(np.asarray(w), kind))).astype(np.float32)

        return tf.numpy_function(_values, [tensor], tf.float32, stateful=False, name="nm_core_group_values")


def _axis_roles(n_dims: int, kind: str) -> dict[int, str]:
    """TF axis -> ``"in"``, ``"out"`` or ``"tap"`` for a kernel of rank ``n_dims`` and ``kind``."""
    if kind == "dense" and n_dims == 2:
        return {0: "in", 1: "out"}
    if kind == "embedding" and n_dims == 2:     # a MatMul weight read transposed: already (out, in)
        return {0: "out", 1: "in"}
    if kind in ("conv", "conv_transpose") and n_dims >= 3:
        roles = {a: "tap" for a in range(n_dims - 2)}
        first, second = ("in", "out") if kind == "conv" else ("out", "in")
        return {**roles, n_dims - 2: first, n_dims - 1: second}
    raise ValueError(f"grouped mask creators prune MatMul (2-D) and convolution kernels, got kind={kind!r} with "
                     f"{n_dims} dimensions")


def _unit_name(out: str, inp: str, kernel: str) -> str:
    return f"{out}x{inp}x{kernel}"


class DimensionPruningMaskCreator(GroupedPruningMaskCreator):
    """One unit per index of the TF axes ``dim`` (the other axes are grouped).

    Args:
        dim: an axis, a list of axes (``[2, 3]`` on a conv kernel: one unit per input-output pair),
            ``"channel"`` (input channels: axis 0 of a 2-D kernel, ``n - 2`` of a conv kernel) or
            ``"filter"`` (``[n - 2, n - 1]``: the kernel of one input-output pair; conv kernels only).
        grouping_op_name: ``"mean"``, ``"max"`` or ``"min"`` of a unit's magnitudes.

    Example:
        >>> DimensionPruningMaskCreator(0).core_pattern_name((16, 32), "dense")
        'channelx1x1'
        >>> DimensionPruningMaskCreator([0, 1]).core_pattern_name((3, 3, 8, 8), "conv")   # one tap of all pairs
        'channelxchannelx1'
    """

    _VALID_DIM_NAMES = ("channel", "filter")

    def __init__(self, dim: str | int | Sequence[int], grouping_op_name: str = "mean") -> None:
        self.dim_name: str | None = None
        if isinstance(dim, str):
            if dim not in self._VALID_DIM_NAMES:
                raise ValueError(f"dim must be an axis, a list of axes or one of {self._VALID_DIM_NAMES}, got {dim!r}")
            self.dim_name, dims = dim, []
        elif isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
            dims = [int(dim)]
        elif isinstance(dim, (list, tuple)) and dim and all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dim):
            dims = [int(d) for d in dim]
        else:
            raise TypeError(f"dim must be an int, a non-empty list of ints, 'channel' or 'filter', got {dim!r}")
        super().__init__(grouping_op_name)
        self.dim: list[int] = dims

    def dims_for(self, n_dims: int) -> list[int]:
        """The axes a unit keeps on a kernel of rank ``n_dims`` (names resolved as in SparseML)."""
        if self.dim_name == "channel":
            return [0] if n_dims <= 2 else [n_dims - 2]
        if self.dim_name == "filter":
            if n_dims <= 2:
                raise ValueError(f"dim='filter' prunes convolution kernels (3 or more dimensions), got a kernel with "
                                 f"{n_dims} dimensions")
            return [n_dims - 2, n_dims - 1]
        return list(self.dim)

    def core_pattern_name(self, tf_shape: Sequence[int], kind: str) -> str:
        n = len(tf_shape)
        dims = self.dims_for(n)
        bad = [d for d in dims if not 0 <= d < n]
        if bad:
            raise ValueError(f"dim={self.dim!r}: axes {bad} are not axes of a kernel of shape {tuple(tf_shape)}")
        roles = _axis_roles(n, kind)
        kept = {roles[d] for d in dims}
        taps = [a for a, r in roles.items() if r == "tap"]
        kept_taps = [a for a in taps if a in dims]
        if taps and kept_taps and len(kept_taps) < len(taps):
            raise ValueError(f"dim={self.dim!r} on a kernel of shape {tuple(tf_shape)} keeps some kernel axes but not "
                             f"all: a unit is one tap (all kernel axes in dim) or the whole kernel (none)")
        kernel = "1" if (kept_taps or not taps) else "kernel"
        name = _unit_name("1" if "out" in kept else "channel", "1" if "in" in kept else "channel", kernel)
        if name == "channelxchannelxkernel":
            raise ValueError(f"dim={self.dim!r} on a kernel of shape {tuple(tf_shape)} keeps no input, output or "
                             "kernel axis: the whole weight would be one unit")
        return name

    def __str__(self) -> str:
        return self.dim_name if self.dim_name is not None else f"{type(self).__name__}:{self.dim}"

    def __repr__(self) -> str:
        return str(self)


class BlockPruningMaskCreator(GroupedPruningMaskCreator):
    """Blocks of ``block_shape = [inputs, outputs]`` of a 2-D kernel, or of each tap of a conv kernel.

    Args:
        block_shape: two positive ints, or ``-1`` for all inputs (outputs) of the kernel.
        grouping_op_name: ``"mean"``, ``"max"`` or ``"min"`` of a block's magnitudes.

    Example:
        >>> BlockPruningMaskCreator([4, 1]).core_pattern_name((3, 3, 64, 32), "conv")
        '1x4x1'
        >>> BlockPruningMaskCreator([-1, 1]).core_pattern_name((128, 64), "dense")
        '1xchannelx1'
    """

    def __init__(self, block_shape: Sequence[int], grouping_op_name: str = "mean") -> None:
        shape = list(block_shape) if isinstance(block_shape, (list, tuple)) else None
        if shape is None or len(shape) != 2:
            raise ValueError(f"block_shape must have 2 elements (inputs, outputs), got {block_shape!r}")
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and (d > 0 or d == -1) for d in shape):
            raise ValueError(f"block_shape elements must be positive ints or -1 (all), got {block_shape!r}")
        super().__init__(grouping_op_name)
        self.block_shape: list[int] = [int(d) for d in shape]

    def core_pattern_name(self, tf_shape: Sequence[int], kind: str) -> str:
        _axis_roles(len(tf_shape), kind)
        inputs, outputs = ("channel" if d == -1 else str(d) for d in self.block_shape)
        return _unit_name(outputs, inputs, "1")

    def __str__(self) -> str:
        return str(self.block_shape)

    def __repr__(self) -> str:
        return str(self)


class UserMaskCreator(CoreMaskCreator):
    """A user's own :class:`PruningMaskCreator` (its TF code makes the masks) in the seed API.

    Only the range of the sparsity is checked here ([0, 1]); the masks are
    whatever ``creator.create_sparsity_mask(tensor, sparsity)`` returns.
    """

    def __init__(self, creator: PruningMaskCreator) -> None:
        if not isinstance(creator, PruningMaskCreator):
            raise TypeError(f"creator must be a PruningMaskCreator, got {creator!r}")
        super().__init__("1x1", monotone=False)
        self.creator = creator

    def __repr__(self) -> str:
        return f"UserMaskCreator({self.creator!r})"

    def check_shape(self, name: str, tf_shape: tuple[int, ...], kind: str) -> None:
        """Nothing to check: the user's creator decides which shapes it takes."""

    def create_sparsity_masks(self, tensors, sparsity, pre_masks, kinds, names, op_name="nm_user_masks"):
        out = []
        for t in tensors:
            mask = self.creator.create_sparsity_mask(t, tf.cast(sparsity, tf.float32))
            out.append(tf.cast(mask, t.dtype))
        return out


_BLOCK_STR = re.compile(r"^\s*[\[(]\s*(-?\d+)\s*,\s*(-?\d+)\s*[\])]\s*$")
_DIM_STR = re.compile(r"^\s*DimensionPruningMaskCreator\s*:\s*\[([-\d,\s]+)\]\s*$")


def load_mask_creator(obj: str | Iterable[int] | PruningMaskCreator) -> PruningMaskCreator:
    """The mask creator a SparseML mask type names; the inverse of ``str(creator)``.

    ``"unstructured"``, ``"channel"``, ``"filter"``, a block shape (``"[4, 1]"``,
    ``"(2, 2)"``, ``[4, 1]``) or ``"DimensionPruningMaskCreator:[2, 3]"``.

    Example:
        >>> type(load_mask_creator("[4, 1]")).__name__, load_mask_creator([2, 2]).block_shape
        ('BlockPruningMaskCreator', [2, 2])
    """
    if isinstance(obj, PruningMaskCreator):
        return obj
    if isinstance(obj, str):
        if obj == "unstructured":
            return UnstructuredPruningMaskCreator()
        if obj in DimensionPruningMaskCreator._VALID_DIM_NAMES:
            return DimensionPruningMaskCreator(obj)
        m = _BLOCK_STR.match(obj)
        if m:
            return BlockPruningMaskCreator([int(m.group(1)), int(m.group(2))])
        m = _DIM_STR.match(obj)
        if m:
            return DimensionPruningMaskCreator([int(d) for d in m.group(1).split(",") if d.strip()])
    elif isinstance(obj, (list, tuple)):
        return BlockPruningMaskCreator(list(obj))
    raise ValueError(f"mask type must be 'unstructured', 'channel', 'filter', a block shape such as '[4, 1]' or "
                     f"'DimensionPruningMaskCreator:[2, 3]', got {obj!r}")
