"""How calibration samples become model inputs and sample counts.

Example:
    >>> import torch
    >>> batch = (torch.zeros(4, 3, 8, 8), torch.zeros(4))
    >>> default_sample_to_n_samples(batch)
    4
    >>> args, kwargs = default_sample_to_model_inputs(batch)
    >>> args[0].shape, kwargs
    (torch.Size([4, 3, 8, 8]), {})
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import torch

__all__ = ["default_sample_to_n_samples", "default_sample_to_model_inputs", "map_tensors"]


def default_sample_to_n_samples(sample: Any) -> int:
    """Batch size of a sample: the first dimension of its first tensor (1 if none).

    Example:
        >>> default_sample_to_n_samples({"x": torch.zeros(2, 5)})
        2
    """
    if isinstance(sample, torch.Tensor):
        return int(sample.shape[0]) if sample.ndim else 1
    if isinstance(sample, (tuple, list)):
        return default_sample_to_n_samples(sample[0]) if sample else 1
    if isinstance(sample, dict):
        return default_sample_to_n_samples(next(iter(sample.values()))) if sample else 1
    return 1


def default_sample_to_model_inputs(sample: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """``(args, kwargs)`` for ``model(*args, **kwargs)``.

    A tuple/list sample ``(x, target, ...)`` feeds ``x``; a dict feeds its
    items as keyword arguments; anything else is passed as the only argument.

    Example:
        >>> default_sample_to_model_inputs({"x": 1})
        ((), {'x': 1})
    """
    if isinstance(sample, (tuple, list)):
        if not sample:
            raise ValueError("sample is an empty sequence; cannot build model inputs from it")
        return (sample[0],), {}
    if isinstance(sample, dict):
        return (), dict(sample)
    return (sample,), {}


def map_tensors(obj: Any, fn) -> Any:
    """Apply ``fn`` to every tensor in a nest of tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(map_tensors(x, fn) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_tensors(x, fn) for x in obj)
    if isinstance(obj, dict):
        return type(obj)((k, map_tensors(v, fn)) for k, v in obj.items())
    return obj
