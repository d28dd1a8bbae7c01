"""Importance criteria, a registry: element scores that patterns rank (lowest pruned first).

A criterion is a function registered by name with what it *needs* from the
adapters, among :data:`NEEDS`:

* ``weight``: the canonical weight, dense (pruned entries hold their stored values);
* ``grad``: the gradient of the loss w.r.t. the weight the model uses (the last backward pass);
* ``state``: the criterion's running state (None at first); it then returns ``(scores, new_state)``
  and is evaluated after every backward pass, so the state runs over the steps;
* ``activation``: per-input-channel statistics (the L2 norm of the layer's inputs over the
  samples seen since the last update), shaped to broadcast against the canonical weight:
  ``(1, in)`` for a Linear, ``(1, in, 1, ...)`` for a convolution.

The function takes those as keyword arguments (plus ``config``, the
:class:`~sparsify.config.PruningConfig`, and anything else it should ignore via
``**_``) and returns scores of the weight's shape: higher = keep. Criteria
written with array operators only work unchanged on NumPy arrays and on
framework tensors, so an adapter may evaluate a per-step criterion on its
device. Registering a criterion is all it takes for every adapter to use it
(see ``docs/design.md``, "Add a criterion").

Example:
    >>> import numpy as np
    >>> @register_criterion("distance_from_tenth", needs=("weight",))
    ... def distance(weight, **_):
    ...     return abs(weight - 0.1)
    >>> get_criterion("distance_from_tenth").scores(weight=np.array([0.1, 1.0])).tolist()
    [0.0, 0.9]
    >>> get_criterion("snip").needs
    ('weight', 'grad')
    >>> unregister_criterion("distance_from_tenth")
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

__all__ = ["Criterion", "NEEDS", "register_criterion", "unregister_criterion", "get_criterion",
           "registered_criteria", "oneshot_needs_data",
           "magnitude", "snip", "snip_momentum", "wanda", "scored_every_step", "gradient_score",
           "CRITERIA", "GRADIENT_CRITERIA"]

#: What a criterion may ask the adapters for.
NEEDS = ("weight", "grad", "state", "activation")


@dataclass(frozen=True)
class Criterion:
    """A registered criterion: its name, what it needs, and the function.

    Attributes:
        name: the config value (``criterion=name``).
        needs: the inputs the adapters collect for it (a subset of :data:`NEEDS`).
        fn: the scoring function (keyword arguments, see the module docstring).
        row_separable: the scores of rows ``a:b`` (first axis) of the weight, with the other inputs
            unchanged, are rows ``a:b`` of its scores, exactly (element-wise math): the update may then
            score a large layer in chunks on several threads.
        into: optional, ``into(out, **inputs)`` writes the scores ``fn`` gives into the NumPy array ``out``
            (the scores' shape) and returns it, or returns None where it cannot (another dtype): a chunked
            update then reuses one buffer instead of allocating (and faulting in) every chunk's scores.
    """

    name: str
    needs: tuple[str, ...]
    fn: Callable[..., Any]
    row_separable: bool = False
    into: Callable[..., Any] | None = None

    @property
    def per_step(self) -> bool:
        """True when scores are evaluated after every backward pass (gradients or a running state),
        False when they are evaluated at each mask update from what the adapter reads then."""
        return "grad" in self.needs or "state" in self.needs

    def scores(self, *, config: Any = None, **inputs: Any) -> Any:
        """Scores from ``inputs`` (exactly the needs; ``state`` may be None); with ``state`` in the
        needs, ``(scores, new_state)``.

        Raises:
            ValueError: an input the criterion needs is missing.
        """
        missing = [k for k in self.needs if k not in inputs or (inputs[k] is None and k != "state")]
        if missing:
            raise ValueError(f"criterion {self.name!r} needs {list(self.needs)}; missing {missing}")
        return self.fn(config=config, **{k: inputs[k] for k in self.needs})

    def scores_into(self, out: np.ndarray, *, config: Any = None, **inputs: Any) -> np.ndarray | None:
        """:meth:`scores` written into ``out`` (same values, bit for bit), or None where the criterion has no
        ``into`` or it cannot write these inputs' scores into ``out`` (the caller uses :meth:`scores`).

        Example:
            >>> import numpy as np
            >>> buf = np.empty(2, dtype=np.float32)
            >>> get_criterion("magnitude").scores_into(buf, weight=np.array([-3.0, 1.0], dtype=np.float32)) is buf
            True
            >>> buf.tolist()
            [3.0, 1.0]
        """
        if self.into is None:
            return None
        return self.into(out, config=config, **{k: inputs[k] for k in self.needs})


_REGISTRY: dict[str, Criterion] = {}


def register_criterion(name: str, needs: tuple[str, ...] | list[str] = ("weight",),
                       row_separable: bool = False) -> Callable:
    """Decorator registering ``fn`` as criterion ``name`` (usable as ``PruningConfig(criterion=name)``).

    Args:
        name: a new criterion name.
        needs: what the function takes, among :data:`NEEDS` (``weight`` is usually one of them).
        row_separable: see :class:`Criterion` (True only for element-wise math on the weight's rows).

    Raises:
        ValueError: the name is taken or not a non-empty string, or ``needs`` holds something
            not in :data:`NEEDS`.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"criterion name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"criterion {name!r} is already registered; unregister_criterion({name!r}) first")
    if isinstance(needs, str) or not isinstance(needs, (tuple, list)) or not needs:
        raise ValueError(f"needs must be a non-empty tuple of names among {NEEDS}, got {needs!r}")
    bad = [n for n in needs if n not in NEEDS]
    if bad or len(set(needs)) != len(needs):
        raise ValueError(f"needs must name distinct inputs among {NEEDS}, got {tuple(needs)!r}")

    if not isinstance(row_separable, bool):
        raise TypeError(f"row_separable must be True or False, got {row_separable!r}")

    def decorate(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"register_criterion({name!r}) decorates a function, got {type(fn).__name__}")
        _REGISTRY[name] = Criterion(name, tuple(needs), fn, row_separable)
        return fn
    return decorate


def unregister_criterion(name: str) -> None:
    """Remove a criterion registered with :func:`register_criterion` (built-ins included)."""
    if name not in _REGISTRY:
        raise ValueError(f"criterion {name!r} is not registered (registered: {registered_criteria()})")
    del _REGISTRY[name]


def registered_criteria() -> tuple[str, ...]:
    """The registered criterion names, built-ins first."""
    return tuple(_REGISTRY)


def get_criterion(name: str) -> Criterion:
    """The registered :class:`Criterion` called ``name``.

    Raises:
        ValueError: no such criterion (the registered names are listed).
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"criterion must be one of {registered_criteria()}, got {name!r}") from None


def scored_every_step(criterion: str) -> bool:
    """True if ``criterion`` is scored after every backward pass (from gradients or a running state:
    ``snip``, ``snip_momentum``), False if it is scored at each mask update from what the adapter reads
    then (``magnitude``, ``wanda``; RigL's gradients are read at the update too).

    Example:
        >>> scored_every_step("snip"), scored_every_step("wanda")
        (True, False)
    """
    return get_criterion(criterion).per_step


def oneshot_needs_data(criterion: str, has_data: bool, what: str = "data") -> bool:
    """Whether one-shot pruning by ``criterion`` reads calibration inputs (every adapter's rule): criteria
    scored from gradients are refused (no backward pass runs), activation criteria without data too.

    Example:
        >>> oneshot_needs_data("wanda", True), oneshot_needs_data("magnitude", False)
        (True, False)
    """
    crit = get_criterion(criterion)
    if crit.per_step:
        raise ValueError(f"criterion {criterion!r} needs gradients, but one-shot pruning runs no backward pass; "
                         "use a criterion that needs only weights or activations ('magnitude', 'wanda')")
    needs = "activation" in crit.needs
    if needs and not has_data:
        raise ValueError(f"criterion {criterion!r} reads the layers' inputs: pass calibration {what}")
    return needs


def magnitude(weight: Any) -> Any:
    """``|w|``; for NumPy signed integers as the unsigned type of the same width, so the most
    negative value (``abs`` wraps it to itself) keeps its true magnitude.

    Example:
        >>> import numpy as np
        >>> magnitude(np.array([-128, 3], dtype=np.int8)).tolist()
        [128, 3]
    """
    if isinstance(weight, (np.ndarray, np.generic)) and weight.dtype.kind == "i":
        return np.abs(weight).view(weight.dtype.newbyteorder("=").str.replace("i", "u"))   # two's complement: exact
    return abs(weight)


def gradient_score(config: Any, previous: Any, weight: Any, grad: Any) -> Any:
    """The score of a per-step criterion (:func:`scored_every_step`) after a backward pass, on any array type
    with arithmetic operators (NumPy, torch, JAX, TF): e.g. ``snip`` of this pass, or ``snip_momentum``'s running
    average from ``previous`` (None before the first pass). A criterion with a running state returns its new
    state, which is also the next ``previous``. Every adapter scores per-step criteria with this function.

    Example:
        >>> import numpy as np
        >>> from sparsify import PruningConfig
        >>> gradient_score(PruningConfig(criterion="snip"), None, np.array([2.0, -1.0]), np.array([0.5, 3.0])).tolist()
        [1.0, 3.0]
    """
    crit = get_criterion(config.criterion)
    inputs = {"weight": weight, "grad": grad, "state": previous}
    out = crit.scores(config=config, **{k: v for k, v in inputs.items() if k in crit.needs})
    return out[1] if "state" in crit.needs else out


def snip(weight: Any, grad: Any) -> Any:
    """``|w * g|``: first-order estimate of the loss change from removing w (SNIP).

    Example:
        >>> import numpy as np
        >>> snip(np.array([-2.0, 1.0]), np.array([0.5, -3.0])).tolist()
        [1.0, 3.0]
    """
    return abs(weight * grad)


def snip_momentum(previous: Any, weight: Any, grad: Any, momentum: float = 0.9) -> Any:
    """Running average ``momentum * previous + (1 - momentum) * |w * g|``.

    Pass ``previous=None`` for the first step (the average starts at zero).

    Example:
        >>> import numpy as np
        >>> snip_momentum(None, np.array([2.0]), np.array([1.0]), 0.5).tolist()
        [1.0]
    """
    if not 0.0 <= float(momentum) < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    fresh = abs(weight * grad) * (1.0 - momentum)
    return fresh if previous is None else previous * momentum + fresh


def wanda(weight: Any, activation: Any) -> Any:
    """``|w_ij| * ||x_j||_2`` (Wanda, Sun et al. 2023): a weight matters as much as the inputs it scales.

    ``activation`` holds the per-input-channel L2 norms, broadcastable to the weight.

    Example:
        >>> import numpy as np
        >>> wanda(np.array([[1.0, -2.0]]), np.array([[3.0, 0.5]])).tolist()
        [[3.0, 1.0]]
    """
    return abs(weight) * activation


register_criterion("magnitude", needs=("weight",), row_separable=True)(lambda weight, **_: magnitude(weight))
register_criterion("snip", needs=("weight", "grad"))(lambda weight, grad, **_: snip(weight, grad))


@register_criterion("snip_momentum", needs=("weight", "grad", "state"))
def _snip_momentum(weight: Any, grad: Any, state: Any, config: Any = None, **_: Any) -> tuple[Any, Any]:
    momentum = 0.9 if config is None else config.criterion_momentum
    avg = snip_momentum(state, weight, grad, momentum)
    return avg, avg


register_criterion("wanda", needs=("weight", "activation"), row_separable=True)(
    lambda weight, activation, **_: wanda(weight, activation))


def _float_array(x: Any, dtype: np.dtype) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == dtype and x.dtype.kind == "f"


def _magnitude_into(out: np.ndarray, weight: Any, **_: Any) -> np.ndarray | None:
    if not _float_array(weight, out.dtype) or weight.shape != out.shape:
        return None
    return np.abs(weight, out=out)


def _wanda_into(out: np.ndarray, weight: Any, activation: Any, **_: Any) -> np.ndarray | None:
    # abs(w) * a in the weight's dtype exactly: only where that is also the product's dtype and shape
    if (not _float_array(weight, out.dtype) or weight.shape != out.shape
            or np.result_type(weight, activation) != out.dtype
            or np.broadcast_shapes(weight.shape, np.shape(activation)) != out.shape):
        return None
    np.abs(weight, out=out)
    return np.multiply(out, activation, out=out)


_REGISTRY["magnitude"] = replace(_REGISTRY["magnitude"], into=_magnitude_into)
_REGISTRY["wanda"] = replace(_REGISTRY["wanda"], into=_wanda_into)



def __getattr__(name: str) -> Any:
    # CRITERIA / GRADIENT_CRITERIA: the registry now (a criterion registered later shows up too)
    if name == "CRITERIA":
        return registered_criteria()
    if name == "GRADIENT_CRITERIA":
        return tuple(n for n, c in _REGISTRY.items() if c.per_step)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
