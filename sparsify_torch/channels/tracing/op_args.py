"""Reading the arguments of an aten op call: the tensors in it, a named argument, dimensions.

Example:
    >>> import torch
    >>> [tuple(t.shape) for t in flat_tensors(([torch.zeros(2)], {"b": torch.ones(1, 3)}))]
    [(2,), (1, 3)]
    >>> normalized_dims(-1, 3), normalized_dims(None, 2)
    ([2], [0, 1])
"""
from __future__ import annotations

from typing import List, Optional

import torch

__all__ = ["flat_tensors", "schema_arg", "varies", "normalized_dims"]


def flat_tensors(obj, out: Optional[List[torch.Tensor]] = None) -> List[torch.Tensor]:
    """Every tensor in ``obj`` (nested lists, tuples and dict values), in order."""
    out = [] if out is None else out
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            flat_tensors(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            flat_tensors(x, out)
    return out


def schema_arg(func, args, kwargs, name: str, default=None):
    """The argument ``name`` of an aten op call, by its schema (``default`` when not passed)."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            if name in kwargs:
                return kwargs[name]
            if i < len(args):
                return args[i]
            return default
    return default


def varies(c: torch.Tensor, dim: int) -> bool:
    """Whether an origin holds different values along ``dim``."""
    if c.shape[dim] <= 1:
        return False
    return bool((c.amax(dim) != c.amin(dim)).any())


def normalized_dims(dims, ndim: int) -> List[int]:
    """``dims`` (None, an int or a list, maybe negative) as sorted non-negative dimensions; None or [] is all."""
    if dims is None:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    dims = [d % ndim if ndim else 0 for d in dims]
    return sorted(set(dims)) if dims else list(range(ndim))
