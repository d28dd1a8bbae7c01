"""The adapter contract, typed: what a framework adapter supplies and what it receives.

Data flows one way (``docs/design.md``): an adapter reads its weights into the
canonical layout, the core (:class:`~sparsify.protocol.PruningProtocol`) decides
the masks, and the adapter writes the :class:`~sparsify.protocol.MaskUpdate`
back. These protocols name the two sides; :func:`collect_reads` gives
:meth:`PruningProtocol.advance` exactly the readers the config needs
(:attr:`PruningEngine.needs`), so an adapter that implements a reader gets
every criterion and regrowth method that uses it.

* :class:`WeightReader`: ``names`` (the canonical order, which also orders
  cross-layer ties in global scope: the model's own weight order) and
  ``read_weights()``: canonical arrays, dense under the mask (pruned entries
  hold the values they keep; zeros where the framework keeps none).
* :class:`GradientReader`: ``read_grads()``, the gradient of the weight the
  model used in the last backward pass (RigL).
* :class:`ActivationReader`: ``read_activations()``, per-input-channel L2 norms
  of each layer's inputs since the last update, broadcastable to the weight.
* :class:`MaskWriter`: ``write_update(update)``: the masks; zeros of a release;
  ``grown`` entries set to zero in the weight and its optimizer state.

Example:
    >>> import numpy as np
    >>> from sparsify import PruningProtocol
    >>> class Toy:
    ...     names = ["w"]
    ...     def __init__(self): self.w = np.array([[1.0, -3.0], [0.5, 2.0]]); self.mask = None
    ...     def read_weights(self): return {"w": self.w}
    ...     def write_update(self, update): self.mask = update.masks["w"]
    >>> toy = Toy()
    >>> isinstance(toy, WeightReader) and isinstance(toy, MaskWriter)
    True
    >>> proto = PruningProtocol({"target_sparsity": 0.5, "end_step": 0}, {"w": (2, 2)})
    >>> toy.write_update(proto.advance(0, **collect_reads(proto, toy)))
    >>> toy.mask.tolist()
    [[False, True], [False, True]]
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, runtime_checkable

import numpy as np

from .protocol import MaskUpdate, PruningProtocol

__all__ = ["WeightReader", "GradientReader", "ActivationReader", "MaskWriter", "collect_reads"]

Arrays = Mapping[str, np.ndarray]


@runtime_checkable
class WeightReader(Protocol):
    """Supplies the canonical weights of the pruned layers, in the canonical order."""

    names: list[str]

    def read_weights(self) -> Arrays:
        """Canonical weights keyed by name (dense under the mask)."""


@runtime_checkable
class GradientReader(Protocol):
    """Supplies dense gradients (for ``regrowth="rigl"``)."""

    def read_grads(self) -> Arrays:
        """Canonical gradients of the weights the model used in the last backward pass."""


@runtime_checkable
class ActivationReader(Protocol):
    """Supplies per-input-channel activation statistics (for criteria that need ``activation``)."""

    def read_activations(self) -> Arrays:
        """Per-input-channel L2 norms since the last update, broadcastable to each canonical weight."""


@runtime_checkable
class MaskWriter(Protocol):
    """Writes a :class:`~sparsify.protocol.MaskUpdate` into framework state."""

    def write_update(self, update: MaskUpdate) -> None:
        """Masks into the mask state; a release's zeros into the weights; grown entries zeroed in
        the weights and their optimizer state."""


def collect_reads(protocol: PruningProtocol, adapter: Any) -> dict[str, Callable[[], Arrays] | None]:
    """The keyword arguments of :meth:`PruningProtocol.advance` for ``adapter``: its weight reader, and
    its gradient and activation readers when the config needs them (called only if an update is due).

    Raises:
        TypeError: the adapter lacks a reader the config needs (named).
    """
    needs = protocol.engine.needs
    if not isinstance(adapter, WeightReader):
        raise TypeError(f"{type(adapter).__name__} is not a WeightReader: it needs names and read_weights()")
    out: dict[str, Callable[[], Arrays] | None] = {"weights": adapter.read_weights}
    if "grad" in needs and not protocol.engine.scored_every_step:
        if not isinstance(adapter, GradientReader):
            raise TypeError(f"regrowth={protocol.config.regrowth!r} needs gradients: {type(adapter).__name__} "
                            "has no read_grads()")
        out["grads"] = adapter.read_grads
    if "activation" in needs:
        if not isinstance(adapter, ActivationReader):
            raise TypeError(f"criterion {protocol.config.criterion!r} needs activation statistics: "
                            f"{type(adapter).__name__} has no read_activations()")
        out["activations"] = adapter.read_activations
    return out
