"""Say it when training ends before the schedule reached its target.

A schedule that reaches ``target_sparsity`` at ``end_step`` prunes nothing useful when training stops
at step 20 of 2000: the model comes out dense (or partly pruned) and nothing in the loss says so. Every
adapter calls :func:`warn_if_unreached` once where training ends (the end of Keras ``fit``, torch's
``Pruner.remove()`` and export, the end of a TF graph session's ``PruningHook``); it warns with a
:class:`TargetNotReachedWarning` that names the step reached, ``end_step`` and the sparsity reached,
once per protocol.

Example:
    >>> import warnings
    >>> import numpy as np
    >>> from sparsify.protocol import PruningProtocol
    >>> p = PruningProtocol({"target_sparsity": 0.8, "end_step": 2000, "pruning_frequency": 100}, {"w": (8, 8)})
    >>> _ = p.advance(0, {"w": np.arange(64.0).reshape(8, 8)})
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_unreached(p, 20, where="fit")
    True
    >>> print(caught[0].message)     # doctest: +NORMALIZE_WHITESPACE
    fit: training ended at step 20 before the pruning schedule reached its target: the last mask update
    was at step 0 and the masks hold sparsity 0.0000, but target_sparsity 0.8 is reached only at
    end_step 2000. Train for at least end_step steps, or lower end_step (and pruning_frequency).
    >>> warn_if_unreached(p, 20, where="fit")       # once per protocol
    False
"""
from __future__ import annotations

import warnings
import weakref

from .protocol import PruningProtocol

__all__ = ["TargetNotReachedWarning", "unreached_message", "warn_if_unreached"]

_WARNED: "weakref.WeakSet[PruningProtocol]" = weakref.WeakSet()


class TargetNotReachedWarning(UserWarning):
    """Training ended before the pruning schedule applied its final sparsity."""


def _final_step(protocol: PruningProtocol) -> int:
    """The step at which the schedule applies its final sparsity (``end_step``; ``start_step`` when the
    schedule has no end)."""
    cfg = protocol.config
    return int(cfg.end_step) if cfg.end_step >= 0 else max(int(cfg.start_step), 0)


def unreached_message(protocol: PruningProtocol, step: int, *, where: str,
                      sparsity: float | None = None) -> str | None:
    """The warning's text if the masks of ``protocol`` stop short of the schedule's final target, else None.

    Args:
        protocol: the core protocol the adapter followed (its ``done_step`` is the last update applied).
        step: the step training ended at (optimizer steps done).
        where: who is ending training, first in the message (``"PruningCallback"``, ``"Pruner.remove()"``).
        sparsity: the sparsity the masks hold, where the adapter holds masks the protocol does not (a TF
            graph's mask variables); default the protocol's own masks.

    Example:
        >>> import numpy as np
        >>> p = PruningProtocol({"target_sparsity": 0.5, "end_step": 0}, {"w": (2, 4)})
        >>> _ = p.advance(0, {"w": np.arange(8.0).reshape(2, 4)})
        >>> unreached_message(p, 10, where="fit") is None        # one-shot at step 0: reached
        True
    """
    if protocol.released:                     # leave_enabled=False: the masks were let go on purpose
        return None
    final_step = _final_step(protocol)
    final = protocol.target_sparsity(final_step)
    done = protocol.done_step
    if final <= 0.0 or (done >= final_step and protocol.target_sparsity(done) >= final):
        return None
    held = protocol.total_sparsity() if sparsity is None else float(sparsity)
    last = "no mask update ran" if done < 0 else f"the last mask update was at step {done}"
    return (f"{where}: training ended at step {int(step)} before the pruning schedule reached its target: "
            f"{last} and the masks hold sparsity {held:.4f}, but target_sparsity {final:g} is reached only at "
            f"end_step {final_step}. Train for at least end_step steps, or lower end_step (and "
            f"pruning_frequency).")


def warn_if_unreached(protocol: PruningProtocol, step: int, *, where: str, sparsity: float | None = None,
                      stacklevel: int = 3) -> bool:
    """Warn (:class:`TargetNotReachedWarning`, once per protocol) if training ended short of the target.

    Arguments as :func:`unreached_message`. Returns True if it warned now.
    """
    if protocol in _WARNED:
        return False
    message = unreached_message(protocol, step, where=where, sparsity=sparsity)
    if message is None:
        return False
    _WARNED.add(protocol)
    warnings.warn(message, TargetNotReachedWarning, stacklevel=stacklevel)
    return True

