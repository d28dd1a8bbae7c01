"""Input-activation statistics, once for every adapter: per-channel sums of squares and their norms.

Activation criteria (``wanda``: ``|w| * ||x_j||``) read, per pruned weight, the L2
norm of each input channel over every input the layer saw since the last mask
update. Adapters only collect the sums of squares (a forward hook, a graph op)
and hand them here; the core owns the rest:

* **accumulation**: :func:`sum_of_squares` and :class:`ActivationWindow` square
  and add in **float32** (NumPy's pairwise summation of the squares, then one
  float32 addition per call), as torch's hook does on the device
  (``docs/design.md``: "Activation statistics");
* **norms**: :meth:`ActivationWindow.read` returns the square roots shaped to
  broadcast against the canonical weight: ``(1, in)`` for a dense weight,
  ``(1, in, 1, ...)`` for a convolution, ``(out, in / groups, 1, ...)`` for a
  grouped convolution (output row ``o`` reads its own group's channels);
* **the wait-for-data rule**: an update due before any pruned layer saw an
  input waits (:meth:`ActivationWindow.waiting`); an update where some layers
  saw inputs and others none is an error naming every layer without any.

Example:
    >>> import numpy as np
    >>> x = np.array([[3.0, 0.0], [4.0, 1.0]])
    >>> sum_of_squares(x).tolist()
    [25.0, 1.0]
    >>> window = ActivationWindow({"fc": (1, 2)})
    >>> window.waiting()
    True
    >>> window.add("fc", sum_of_squares(x))
    >>> window.waiting(), window.read()["fc"].tolist()
    (False, [[5.0, 1.0]])
    >>> window.reset(); window.calls["fc"]
    0
"""
from __future__ import annotations

import types
from typing import Any, Mapping

import numpy as np

__all__ = ["sum_of_squares", "ActivationWindow", "UNSEEN"]

#: What :meth:`ActivationWindow.read` says of the weights without input (``{names}``: their list).
UNSEEN = "{names} saw no input since the last update: run the model on data before the update"


def sum_of_squares(x: np.ndarray, channel_axis: int = -1) -> np.ndarray:
    """Per-channel sums of squares of ``x`` over every axis but ``channel_axis``, as float32.

    ``x`` is cast to float32 first and the squares are summed in float32 (the one
    accumulation rule of every adapter).

    Args:
        x: the inputs of a layer, any shape with at least one axis.
        channel_axis: the axis of the input channels (``-1``: channels last, e.g. a Dense
            input ``(batch, in)``; ``1`` for torch's ``(batch, in, h, w)``).

    Example:
        >>> sum_of_squares(np.ones((2, 3, 4)), channel_axis=1).tolist()
        [8.0, 8.0, 8.0]
    """
    a = np.asarray(x)
    if a.ndim == 0:
        raise ValueError(f"x must have at least one axis (the channels), got a scalar {a!r}")
    if a.dtype.kind not in "fiub":
        raise TypeError(f"x must be a real numeric array, got dtype {a.dtype}")
    if not -a.ndim <= channel_axis < a.ndim:
        raise ValueError(f"channel_axis={channel_axis} is out of range for x of shape {a.shape}")
    a = np.moveaxis(a.astype(np.float32, copy=False), channel_axis, -1).reshape(-1, a.shape[channel_axis])
    return np.square(a).sum(axis=0, dtype=np.float32)


def _positive_int(what: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


class ActivationWindow:
    """Per pruned weight: the float32 sums of squares of its input channels and the number of
    calls (forward passes) since the last update.

    Args:
        shapes: each weight's canonical shape ``(out, in / groups, *kernel)``, in the canonical order.
        criterion: the criterion's name, for the errors.
        groups: ``{name: groups}`` of grouped convolutions (default 1): the layer has
            ``groups * in / groups`` input channels and row ``o`` reads group ``o // (out / groups)``.
        unseen: the end of :meth:`read`'s error, after "but " (default :data:`UNSEEN`); ``{names}``
            is replaced by the list of weights without input (an adapter names how it collects).

    Example:
        >>> w = ActivationWindow({"conv": (4, 1, 3, 3)}, groups={"conv": 2})
        >>> w.add("conv", np.array([1.0, 4.0]))
        >>> w.read()["conv"].reshape(-1).tolist()           # rows 0, 1 read channel 0; rows 2, 3 channel 1
        [1.0, 1.0, 2.0, 2.0]
    """

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], criterion: str = "wanda",
                 groups: Mapping[str, int] | None = None, *, unseen: str = UNSEEN) -> None:
        if not isinstance(shapes, Mapping):
            raise TypeError(f"shapes must be a dict of shapes keyed by weight name, got {type(shapes).__name__}")
        groups = dict(groups or {})
        unknown = [n for n in groups if n not in shapes]
        if unknown:
            raise ValueError(f"groups names {unknown}, which are not weights of shapes ({list(shapes)})")
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._groups: dict[str, int] = {}
        for name, shape in shapes.items():
            shape = tuple(int(d) for d in shape)
            if len(shape) < 2:
                raise ValueError(f"shapes[{name!r}] must have at least 2 axes (out, in, ...), got {shape}")
            g = _positive_int(f"groups[{name!r}]", groups.get(name, 1))
            if shape[0] % g:
                raise ValueError(f"groups[{name!r}]={g} does not divide the {shape[0]} output rows of {shape}")
            self._shapes[name], self._groups[name] = shape, g
        self.criterion, self._unseen = criterion, unseen
        self._sums = {n: np.zeros(s[1] * self._groups[n], dtype=np.float32) for n, s in self._shapes.items()}
        self._calls = {n: 0 for n in self._shapes}

    @property
    def names(self) -> list[str]:
        """The weights, in the canonical order."""
        return list(self._shapes)

    def widths(self) -> dict[str, int]:
        """Input channels of each weight's layer (the length of its sums).

        Example:
            >>> ActivationWindow({"fc": (3, 5)}).widths()
            {'fc': 5}
        """
        return {n: s.size for n, s in self._sums.items()}

    @property
    def sums(self) -> Mapping[str, np.ndarray]:
        """The sums of squares since the last update (read-only float32 views), keyed by weight name."""
        out = {}
        for n, s in self._sums.items():
            v = s.view()
            v.flags.writeable = False
            out[n] = v
        return types.MappingProxyType(out)

    @property
    def calls(self) -> Mapping[str, int]:
        """Calls (forward passes) counted since the last update, keyed by weight name (read-only)."""
        return types.MappingProxyType(dict(self._calls))

    def _checked_sums(self, name: str, sums: Any) -> np.ndarray:
        if name not in self._sums:
            raise ValueError(f"name {name!r} is not a weight of this window (weights: {self.names})")
        a = np.asarray(sums)
        width = self._sums[name].size
        if a.shape != (width,) or a.dtype.kind not in "fiu":
            raise ValueError(f"sums of {name!r} must be a real array of shape ({width},), got {a.dtype} of shape "
                             f"{a.shape}")
        return a.astype(np.float32)

    def add(self, name: str, sums: Any, calls: int = 1) -> None:
        """Add one call's (or ``calls`` calls') per-channel sums of squares of ``name``'s inputs (float32)."""
        a = self._checked_sums(name, sums)
        calls = _positive_int("calls", calls)
        self._sums[name] += a
        self._calls[name] += calls

    def load(self, sums: Mapping[str, Any], calls: Mapping[str, int]) -> None:
        """Replace the window with the framework's state: ``sums`` and ``calls`` keyed by weight name (a
        weight missing from both had no call). Everything is checked before anything changes.

        Example:
            >>> w = ActivationWindow({"fc": (1, 2)})
            >>> w.load({"fc": [9.0, 16.0]}, {"fc": 3})
            >>> w.calls["fc"], w.read()["fc"].tolist()
            (3, [[3.0, 4.0]])
        """
        if not isinstance(sums, Mapping) or not isinstance(calls, Mapping):
            raise TypeError(f"sums and calls must be dicts keyed by weight name, got {type(sums).__name__} and "
                            f"{type(calls).__name__}")
        unknown = [n for n in list(sums) + list(calls) if n not in self._sums]
        if unknown:
            raise ValueError(f"sums/calls name {sorted(set(unknown))}, which are not weights of this window "
                             f"(weights: {self.names})")
        new_sums = {n: self._checked_sums(n, sums[n]) if n in sums else np.zeros_like(s) for n, s in self._sums.items()}
        new_calls = {}
        for n in self._calls:
            c = calls.get(n, 0)
            if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)) or c < 0:
                raise ValueError(f"calls[{n!r}] must be a non-negative integer, got {c!r}")
            new_calls[n] = int(c)
        self._sums, self._calls = new_sums, new_calls

    def waiting(self) -> bool:
        """True when there are weights and none was called since the last update: an update due now
        waits for data (it applies at the first step after a forward pass)."""
        return bool(self._calls) and not any(self._calls.values())

    def unseen(self) -> list[str]:
        """The weights no call reached since the last update, in the canonical order."""
        return [n for n, c in self._calls.items() if c == 0]

    def read(self) -> dict[str, np.ndarray]:
        """The per-input-channel L2 norms (float32 square roots of the sums), broadcastable to each
        canonical shape: ``(1, in, 1, ...)``, or ``(out, in / groups, 1, ...)`` for a grouped convolution.

        Raises:
            ValueError: some weights saw no input since the last update (all of them are named).
        """
        missing = self.unseen()
        if missing:
            raise ValueError(f"criterion {self.criterion!r} needs the inputs of every pruned weight, but "
                             + self._unseen.format(names=missing))
        return {n: self._norms(n) for n in self._shapes}

    def _norms(self, name: str) -> np.ndarray:
        shape, groups = self._shapes[name], self._groups[name]
        norms = np.sqrt(self._sums[name])
        spatial = (1,) * (len(shape) - 2)
        if groups == 1:
            return norms.reshape(1, -1, *spatial)
        per, rows_per_group = shape[1], shape[0] // groups
        idx = (np.arange(shape[0])[:, None] // rows_per_group) * per + np.arange(per)[None, :]
        return norms[idx].reshape(shape[0], per, *spatial)

    def reset(self) -> None:
        """Start a new window (after an update): zero sums, no calls."""
        for s in self._sums.values():
            s[...] = 0
        self._calls = {n: 0 for n in self._calls}

    def __repr__(self) -> str:
        return f"ActivationWindow(weights={len(self._shapes)}, criterion={self.criterion!r}, unseen={self.unseen()})"
