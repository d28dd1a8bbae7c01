"""Snapshot of everything calibration may touch on a model, restored exactly afterwards.

Calibration runs forward and backward passes (and torch-pruning's tracing,
which switches the model to eval mode) on the user's model. A
:class:`ModelSnapshot` taken first restores, on :meth:`~ModelSnapshot.restore`:
every module's ``training`` flag, its plain Python attributes (caches such as
timm's ``attention_bias_cache`` included, container contents too), its hook
dictionaries, the parameter and buffer objects it holds, parameter ``.grad``
and ``requires_grad``, and buffer values (written back only where they
changed, so autograd version counters of untouched buffers stay as they were).

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)).eval()
    >>> snapshot = ModelSnapshot(net)
    >>> _ = net.train(); net[0].cache = {"x": 1}; net(torch.randn(4, 2)).sum().backward()
    >>> snapshot.restore()
    >>> net.training, hasattr(net[0], "cache"), net[0].weight.grad, float(net[1].running_mean.abs().sum())
    (False, False, None, 0.0)
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
from torch import nn

__all__ = ["ModelSnapshot"]

# attributes every nn.Module has; the rest of a module's __dict__ is its own Python state
_MODULE_INTERNALS = frozenset(nn.Module().__dict__)
_STRUCTURE = ("_parameters", "_buffers", "_modules")


def _copy_contents(value: Any) -> Any:
    """What a container holds (a shallow copy), or None for anything that is not a container."""
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list):
        return list(value)
    if isinstance(value, set):
        return set(value)
    return None


def _same_items(a: List[Any], b: List[Any]) -> bool:
    """Element-wise identity (values may be tensors, whose ``==`` is not a truth value)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _put_contents(value: Any, contents: Any) -> None:
    if isinstance(value, dict):
        items = list(value.items())
        if len(items) != len(contents) or not all(k1 is k2 and v1 is v2 for (k1, v1), (k2, v2) in zip(items,
                                                                                                      contents)):
            value.clear()
            value.update(contents)
    elif isinstance(value, list):
        if not _same_items(value, contents):
            value[:] = contents
    elif isinstance(value, set):
        value.clear()
        value.update(contents)


class ModelSnapshot:
    """Capture ``model`` now; :meth:`restore` puts it back exactly.

    Args:
        model: the model.
        ignore: ``(module, attribute name)`` pairs left alone (e.g. an entry-point
            method patched while the snapshot is active).
    """

    def __init__(self, model: nn.Module, ignore: Iterable[Tuple[nn.Module, str]] = ()) -> None:
        self.model = model
        self._ignore = {(id(m), name) for m, name in ignore}
        self._modules: List[nn.Module] = list(model.modules())
        self._training = [m.training for m in self._modules]
        self._attributes: List[Dict[str, Tuple[Any, Any]]] = []
        self._internals: List[Dict[str, Any]] = []
        self._structure: List[Dict[str, List[Tuple[str, Any]]]] = []
        for m in self._modules:
            own, internal = {}, {}
            for key, value in m.__dict__.items():
                if (id(m), key) in self._ignore or key in _STRUCTURE or key == "training":
                    continue
                if key in _MODULE_INTERNALS:
                    internal[key] = (value, _copy_contents(value))
                else:
                    own[key] = (value, _copy_contents(value))
            self._attributes.append(own)
            self._internals.append(internal)
            self._structure.append({key: list(m.__dict__[key].items()) for key in _STRUCTURE})
        self._parameters = [(p, p.grad, None if p.grad is None else p.grad.detach().clone(), p.requires_grad)
                            for p in model.parameters()]
        self._buffers = [(b, b.detach().clone()) for b in model.buffers()]

    def restore_attributes(self) -> None:
        """Put back every module's own Python attributes (not flags, hooks or tensors).

        Calibration calls this before each step, so a module that caches tensors
        between calls (e.g. attention biases in eval mode) starts every step as
        the user left it and no step reuses another step's autograd graph.
        """
        for m, saved in zip(self._modules, self._attributes):
            current = m.__dict__
            for key in [k for k in current if k not in saved and k not in _MODULE_INTERNALS
                        and k not in _STRUCTURE and (id(m), k) not in self._ignore]:
                del current[key]
            for key, (value, contents) in saved.items():
                if current.get(key, _MISSING) is not value:
                    current[key] = value
                if contents is not None:
                    _put_contents(value, contents)

    def restore(self) -> None:
        """Put the whole model back as it was when the snapshot was taken."""
        self.restore_attributes()
        for m, mode, internal, structure in zip(self._modules, self._training, self._internals, self._structure):
            m.training = mode
            for key, (value, contents) in internal.items():
                if m.__dict__.get(key, _MISSING) is not value:
                    m.__dict__[key] = value
                if contents is not None:
                    _put_contents(value, contents)
            for key, items in structure.items():
                _put_contents(m.__dict__[key], items)
        with torch.no_grad():
            for p, grad, value, flag in self._parameters:
                if p.grad is not grad:
                    p.grad = grad
                if grad is not None and not torch.equal(grad, value):  # accumulated into in place
                    grad.copy_(value)
                if p.requires_grad != flag:
                    p.requires_grad_(flag)
            for b, saved in self._buffers:
                if b.shape != saved.shape or b.dtype != saved.dtype:
                    continue  # replaced in place by something else: the module holds the original object again
                if not torch.equal(b, saved):
                    b.copy_(saved)


class _Missing:
    pass


_MISSING: Optional[Any] = _Missing()
