"""tfmot's pruning arithmetic, as TF ops: the one place in sparsify that follows it.

``sparsify.PruningConfig`` and the core count units their own way
(``floor(s * n + 0.5)`` pruned, one unit always kept, ties broken by index,
pruned weights held at zero). tfmot users moving over expect the kernels tfmot
gave them, so :mod:`sparsify_tf.compat.tfmot` does not go through the core:
it computes masks exactly as tfmot 0.8 does, here and nowhere else.

* **Step.** A pruned layer keeps its own ``pruning_step``; every training call
  adds one *before* the schedule is asked, so the first training step sees 1
  (tfmot's "step + 1").
* **Schedules.** ``should_prune = begin <= step <= end (or end == -1) and
  (step - begin) % frequency == 0``. ``PolynomialDecay`` evaluates
  ``final + (initial - final) * (1 - p) ** power`` in float32 with
  ``p = clip(float32(step - begin) / (end - begin), 0, 1)``.
* **Count.** ``k = max(round(float32(n) * (1 - s)), 1)`` weights are kept
  (``round`` is TF's half-to-even); the threshold is the k-th largest
  magnitude and every weight with ``|w| >= threshold`` is kept, so ties at the
  threshold are all kept.
* **Blocks** (``block_size`` on rank-2 weights): magnitudes pooled (``AVG``
  or ``MAX``, SAME padding, rows then columns), the count rule applied to the
  pooled grid, and the block mask expanded back.
* **m_by_n** ``(m, n)``: in every ``n`` consecutive weights along the input
  dimension (TFLite layout) the ``n - m`` largest magnitudes are kept
  (``top_k``: among equal magnitudes the lower index wins); a last partial
  group is padded with zeros. These masks are made once, at step 1, and kept:
  the schedule is not used.
* Between mask updates nothing holds pruned weights at zero: the optimizer
  moves them and the next training call multiplies the weights by the mask
  before the forward pass, so a pruned weight can grow back at a later update.

Example:
    >>> import tensorflow as tf
    >>> w = tf.constant([[0.1, -0.4], [0.3, 0.2]])
    >>> magnitude_mask(w, tf.constant(0.5))[1].numpy().tolist()
    [[0.0, 1.0], [1.0, 0.0]]
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import tensorflow as tf

__all__ = ["PruningSchedule", "ConstantSparsity", "PolynomialDecay", "schedule_from_config",
           "should_update_masks", "magnitude_mask", "block_mask", "m_by_n_mask", "check_m_by_n", "m_by_n_supported"]


def _int(name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    return int(value)


def _ratio(name: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
    return value


class PruningSchedule:
    """Base of tfmot-style schedules: ``schedule(step) -> (should_prune, sparsity)`` as tensors.

    Subclass it for a custom schedule (implement ``__call__`` and ``get_config``).
    """

    def _check_steps(self, begin_step: Any, end_step: Any, frequency: Any, allow_forever: bool) -> tuple[int, int, int]:
        begin_step, end_step, frequency = _int("begin_step", begin_step), _int("end_step", end_step), \
            _int("frequency", frequency)
        if begin_step < 0:
            raise ValueError(f"begin_step must be >= 0, got {begin_step}")
        if end_step == -1 and not allow_forever:
            raise ValueError(f"end_step must be >= begin_step for {type(self).__name__} (it cannot be -1)")
        if end_step != -1 and end_step < begin_step:
            raise ValueError(f"end_step must be -1 or >= begin_step ({begin_step}), got {end_step}")
        if frequency <= 0:
            raise ValueError(f"frequency must be > 0, got {frequency}")
        return begin_step, end_step, frequency

    @staticmethod
    def _should_prune_in_step(step: Any, begin_step: int, end_step: int, frequency: int) -> tf.Tensor:
        in_range = tf.math.logical_and(tf.math.greater_equal(step, begin_step),
                                       tf.math.logical_or(tf.math.less_equal(step, end_step),
                                                          tf.math.less(end_step, 0)))
        on_turn = tf.math.equal(tf.math.floormod(tf.math.subtract(step, begin_step), frequency), 0)
        return tf.math.logical_and(in_range, on_turn)

    def __call__(self, step: Any) -> tuple[tf.Tensor, tf.Tensor]:  # pragma: no cover - abstract
        raise NotImplementedError("a PruningSchedule subclass must implement __call__(step)")

    def get_config(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError("a PruningSchedule subclass must implement get_config()")

    @classmethod
    def from_config(cls, config: dict) -> "PruningSchedule":
        """The schedule from the ``"config"`` part of :meth:`get_config`."""
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config()["config"].items())
        return f"{type(self).__name__}({args})"


class ConstantSparsity(PruningSchedule):
    """Prune to ``target_sparsity`` every ``frequency`` steps in ``[begin_step, end_step]`` (-1: forever).

    Example:
        >>> s = ConstantSparsity(0.5, begin_step=2, frequency=2)
        >>> [bool(s(step)[0]) for step in range(1, 6)], float(s(4)[1])
        ([False, True, False, True, False], 0.5)
    """

    def __init__(self, target_sparsity: float, begin_step: int, end_step: int = -1, frequency: int = 100) -> None:
        self.begin_step, self.end_step, self.frequency = self._check_steps(begin_step, end_step, frequency, True)
        self.target_sparsity = _ratio("target_sparsity", target_sparsity)

    def __call__(self, step: Any) -> tuple[tf.Tensor, tf.Tensor]:
        return (self._should_prune_in_step(step, self.begin_step, self.end_step, self.frequency),
                tf.constant(self.target_sparsity, dtype=tf.float32))

    def get_config(self) -> dict:
        return {"class_name": type(self).__name__,
                "config": {"target_sparsity": self.target_sparsity, "begin_step": self.begin_step,
                           "end_step": self.end_step, "frequency": self.frequency}}


class PolynomialDecay(PruningSchedule):
    """Sparsity rising from ``initial_sparsity`` to ``final_sparsity`` as a polynomial of the step.

    Example:
        >>> s = PolynomialDecay(0.5, 0.8, begin_step=0, end_step=10, frequency=5)
        >>> [round(float(s(step)[1]), 4) for step in (0, 5, 10, 20)]
        [0.5, 0.7625, 0.8, 0.8]
    """

    def __init__(self, initial_sparsity: float, final_sparsity: float, begin_step: int, end_step: int,
                 power: float = 3, frequency: int = 100) -> None:
        self.begin_step, self.end_step, self.frequency = self._check_steps(begin_step, end_step, frequency, False)
        self.initial_sparsity = _ratio("initial_sparsity", initial_sparsity)
        self.final_sparsity = _ratio("final_sparsity", final_sparsity)
        if isinstance(power, bool) or not isinstance(power, (int, float)):
            raise TypeError(f"power must be a number, got {power!r}")
        self.power = power

    def __call__(self, step: Any) -> tuple[tf.Tensor, tf.Tensor]:
        # the op order and dtypes are tfmot's: int step difference, float32 from there on
        p = tf.math.minimum(1.0, tf.math.maximum(0.0, tf.math.divide(
            tf.dtypes.cast(step - self.begin_step, tf.float32), self.end_step - self.begin_step)))
        sparsity = tf.math.add(tf.math.multiply(self.initial_sparsity - self.final_sparsity,
                                                tf.math.pow(1 - p, self.power)), self.final_sparsity)
        return self._should_prune_in_step(step, self.begin_step, self.end_step, self.frequency), sparsity

    def get_config(self) -> dict:
        return {"class_name": type(self).__name__,
                "config": {"initial_sparsity": self.initial_sparsity, "final_sparsity": self.final_sparsity,
                           "power": self.power, "begin_step": self.begin_step, "end_step": self.end_step,
                           "frequency": self.frequency}}


def schedule_from_config(config: Any, custom_objects: dict | None = None) -> PruningSchedule:
    """A schedule from ``{"class_name": ..., "config": {...}}`` (or a schedule, returned as is).

    Example:
        >>> schedule_from_config(ConstantSparsity(0.5, 0).get_config())
        ConstantSparsity(target_sparsity=0.5, begin_step=0, end_step=-1, frequency=100)
    """
    if isinstance(config, PruningSchedule):
        return config
    if not isinstance(config, dict):
        raise TypeError(f"pruning_schedule must be a PruningSchedule (ConstantSparsity, PolynomialDecay, ...) "
                        f"or its get_config() dict, got {config!r}")
    if "class_name" not in config or "config" not in config:
        raise ValueError(f"pruning_schedule must be a PruningSchedule or its get_config() dict, got {config!r}")
    known = {"ConstantSparsity": ConstantSparsity, "PolynomialDecay": PolynomialDecay, **(custom_objects or {})}
    cls = known.get(config["class_name"])
    if cls is None:
        raise ValueError(f"pruning_schedule: unknown schedule class {config['class_name']!r}; known: "
                         f"{sorted(known)} (load a custom schedule inside a custom_object_scope naming it)")
    return cls.from_config(config["config"])


def should_update_masks(schedule: PruningSchedule, m_by_n: tuple[int, int] | None, step: Any) -> tf.Tensor:
    """Whether the masks are recomputed at ``step``: the schedule's turn, or step 1 only for m_by_n.

    Example:
        >>> bool(should_update_masks(ConstantSparsity(0.5, 0, frequency=1), (2, 4), 2))
        False
    """
    if m_by_n:
        return tf.math.equal(step, 1)
    return schedule(step)[0]


def magnitude_mask(weights: tf.Tensor, sparsity: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``(threshold, mask)``: tfmot's count rule over ``|weights|`` (mask in the weights' dtype)."""
    abs_weights = tf.math.abs(weights)
    size = tf.size(abs_weights)
    k = tf.dtypes.cast(tf.math.maximum(tf.math.round(tf.dtypes.cast(size, tf.float32) * (1 - sparsity)), 1),
                       tf.int32)
    values, _ = tf.math.top_k(tf.reshape(abs_weights, [-1]), k=size)
    threshold = tf.gather(values, k - 1)
    return threshold, tf.dtypes.cast(tf.math.greater_equal(abs_weights, threshold), weights.dtype)


def _pool(grid: tf.Tensor, block: Sequence[int], pooling_type: str) -> tf.Tensor:
    """Block pooling of a rank-2 tensor, rows first then columns (SAME padding)."""
    rows, cols = grid.shape
    x = tf.reshape(grid, [1, 1, rows, cols])
    x = tf.nn.pool(x, window_shape=[1, block[0]], pooling_type=pooling_type, strides=[1, block[0]], padding="SAME")
    x = tf.transpose(x, perm=[0, 1, 3, 2])
    x = tf.nn.pool(x, window_shape=[1, block[1]], pooling_type=pooling_type, strides=[1, block[1]], padding="SAME")
    return tf.squeeze(tf.transpose(x, perm=[0, 1, 3, 2]), axis=[0, 1])


def block_mask(weights: tf.Tensor, sparsity: tf.Tensor, block_size: Sequence[int],
               pooling_type: str) -> tuple[tf.Tensor, tf.Tensor]:
    """``(threshold, mask)`` with whole ``block_size`` blocks kept or pruned (rank-2 weights)."""
    if list(block_size) == [1, 1]:
        return magnitude_mask(weights, sparsity)
    shape = weights.shape
    pooled = _pool(tf.math.abs(tf.reshape(weights, [shape[0], shape[1]])), block_size, pooling_type)
    threshold, grid = magnitude_mask(pooled, sparsity)
    full = tf.repeat(tf.repeat(grid, block_size[0], axis=0), block_size[1], axis=1)
    return threshold, tf.reshape(full[:shape[0], :shape[1]], tf.shape(weights))


def m_by_n_supported(shape: Sequence[int]) -> bool:
    """Whether m_by_n pruning applies to a weight of this shape (rank 2 or 4, tfmot's rule)."""
    return len(shape) in (2, 4)


def check_m_by_n(value: Any) -> tuple[int, int]:
    """``(m, n)`` from a 2-sequence of ints with ``0 < m < n``; ValueError naming the value otherwise.

    Example:
        >>> check_m_by_n([2, 4])
        (2, 4)
    """
    try:
        pair = tuple(value)
    except TypeError:
        raise ValueError(f"sparsity_m_by_n must be a tuple of 2 ints (m zeros in n), got {value!r}") from None
    if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in pair) \
            or not 0 < pair[0] < pair[1]:
        raise ValueError(f"sparsity_m_by_n must be 2 ints (m, n) with 0 < m < n (m zeros in every n), "
                         f"got {value!r}")
    return pair


def m_by_n_mask(weights: tf.Tensor, m_by_n: tuple[int, int]) -> tf.Tensor:
    """Mask keeping ``n - m`` of every ``n`` consecutive weights along the input dimension."""
    m, n = m_by_n
    shape = weights.shape
    if len(shape) == 2:                                    # Dense (in, out) -> (out, in)
        rows = tf.transpose(weights)
    else:                                                  # Conv2D (h, w, in, out) -> (out*h*w, in)
        rows = tf.reshape(tf.transpose(weights, perm=[3, 0, 1, 2]), [-1, shape[2]])
    width = rows.shape[1]
    pad = (-width) % n
    groups = tf.reshape(tf.pad(tf.math.abs(rows), [[0, 0], [0, pad]]), [-1, n])
    _, keep_idx = tf.math.top_k(groups, k=n - m, sorted=False)
    keep = tf.reduce_sum(tf.one_hot(keep_idx, n, dtype=weights.dtype), axis=-2)
    keep = tf.reshape(keep, [-1, width + pad])[:, :width]
    if len(shape) == 2:
        return tf.transpose(keep)
    return tf.transpose(tf.reshape(keep, [shape[3], shape[0], shape[1], shape[2]]), perm=[1, 2, 3, 0])
