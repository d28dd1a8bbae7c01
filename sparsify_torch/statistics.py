"""What the torch adapter reads besides the weights: the inputs of each pruned layer.

:class:`ActivationNorms` sums, per input channel, the squares of every input a
layer sees (a forward pre-hook, on the layer's device, in float32) and counts
the calls; the core's :class:`sparsify.activation_stats.ActivationWindow` owns
the rest (the norms shaped per canonical weight, grouped convolutions, the
wait-for-data rule). Wanda (``criterion="wanda"``) multiplies ``|w|`` by them.

Example:
    >>> import torch
    >>> from sparsify_torch.layers import prunable_weights
    >>> lin = torch.nn.Linear(2, 1)
    >>> norms = ActivationNorms(prunable_weights(lin))
    >>> norms.waiting()
    True
    >>> _ = lin(torch.tensor([[3.0, 0.0], [4.0, 1.0]]))
    >>> norms.canonical()["weight"].tolist()
    [[5.0, 1.0]]
    >>> norms.remove()
"""
from __future__ import annotations

import sys
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from sparsify.activation_stats import ActivationWindow

from .layers import PrunableWeight, is_linear_like, registered_layout

__all__ = ["ActivationNorms", "check_activation_layers", "norms_from_sums", "activation_window"]

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def _module_type(module: nn.Module) -> type:
    """The module's own class (FSDP2's ``fully_shard`` swaps it for a subclass ``FSDP<Class>``)."""
    kind = type(module)
    if "torch.distributed.fsdp" not in sys.modules:         # no fully_shard yet: no FSDP module (and no import)
        return kind
    from torch.distributed.fsdp import FSDPModule
    if issubclass(kind, FSDPModule):
        kind = next(b for b in kind.__mro__[1:] if not issubclass(b, FSDPModule))
    return kind


def check_activation_layers(weights: list[PrunableWeight], criterion: str) -> None:
    """Raise ``ValueError`` naming the weights whose inputs cannot be read per channel (only Linear and
    convolutions, not grouped transposed ones, feed their input channels straight to the weight's columns;
    ``Conv1D`` and registered 2-D layers read their first input's last dimension, as Linear does)."""
    bad = [w.name for w in weights
           if not (_module_type(w.module) is nn.Linear or isinstance(w.module, _CONV) or _registered_linear(w))
           or w.rows is not None or (w.conv_transpose_groups and w.conv_transpose_groups != 1)]
    if bad:
        raise ValueError(f"criterion {criterion!r} needs the input channels of each pruned weight; {bad} are not "
                         "Linear or convolution weights (Embedding, attention projections and grouped transposed "
                         "convolutions are not supported): exclude them with excluded_op_names")


def _registered_linear(w: PrunableWeight) -> bool:
    """A registered layer (``Conv1D``, a user's) taking its 2-D weight as a linear layer does."""
    return registered_layout(w.module) is not None and is_linear_like(w.module, w.tensor_name)


def activation_window(weights: list[PrunableWeight], criterion: str = "wanda") -> ActivationWindow:
    """The core's window for ``weights`` (canonical shapes; the groups of grouped convolutions).

    Example:
        >>> from sparsify_torch.layers import prunable_weights
        >>> activation_window(prunable_weights(nn.Conv2d(4, 2, 1, groups=2))).widths()
        {'weight': 4}
    """
    groups = {w.name: w.module.groups for w in weights
              if getattr(w.module, "groups", 1) > 1 and not w.conv_transpose_groups}
    return ActivationWindow({w.name: w.shape for w in weights}, criterion, groups)


def norms_from_sums(weights: list[PrunableWeight], sums: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Per-input-channel sums of squares (keyed by weight name) -> their square roots, broadcastable to each
    weight's canonical shape (:meth:`sparsify.activation_stats.ActivationWindow.read`). Weights without sums
    are left out.

    Example:
        >>> from sparsify_torch.layers import prunable_weights
        >>> norms_from_sums(prunable_weights(nn.Linear(2, 1)), {"weight": torch.tensor([9.0, 16.0])})["weight"].tolist()
        [[3.0, 4.0]]
    """
    chosen = [w for w in weights if w.name in sums]
    window = activation_window(chosen)
    window.load({w.name: sums[w.name].float().cpu().numpy() for w in chosen}, {w.name: 1 for w in chosen})
    return window.read()


class ActivationNorms:
    """Per-input-channel L2 norms of the inputs of each pruned layer since the last :meth:`reset`.

    The sums of squares stay on the layer's device between updates; the core's window
    (:attr:`window`) reads them at an update.

    Args:
        weights: the pruned weights (Linear and convolution weights; see :func:`check_activation_layers`).
        criterion: the criterion's name, for errors.
    """

    def __init__(self, weights: list[PrunableWeight], criterion: str = "wanda") -> None:
        self._weights = list(weights)
        self.window = activation_window(self._weights, criterion)
        self._sums: dict[int, torch.Tensor] = {}
        self._calls: dict[int, int] = {}
        self._handles = [module.register_forward_pre_hook(self._hook)
                         for module in dict.fromkeys(w.module for w in self._weights)]

    @torch.no_grad()
    def _hook(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if not args or not isinstance(args[0], torch.Tensor):
            return
        x = args[0].detach()
        if not isinstance(module, _CONV):          # Linear, Conv1D, registered 2-D layers: features last
            sq = x.reshape(-1, x.shape[-1]).float().pow(2).sum(0)
        else:
            spatial = len(module.kernel_size)
            if x.dim() == spatial + 1:               # unbatched input
                x = x.unsqueeze(0)
            sq = x.transpose(0, 1).reshape(x.shape[1], -1).float().pow(2).sum(1)
        key = id(module)
        self._sums[key] = sq if key not in self._sums else self._sums[key] + sq
        self._calls[key] = self._calls.get(key, 0) + 1

    def local_calls(self) -> dict[str, int]:
        """Calls of each weight's layer since the last reset, keyed by weight name."""
        return {w.name: self._calls.get(id(w.module), 0) for w in self._weights}

    def sync(self, sums: Mapping[str, torch.Tensor] | None = None, calls: Mapping[str, int] | None = None) -> None:
        """Load the window from this process's statistics (or the given ones, e.g. summed over ranks)."""
        sums = self.state() if sums is None else sums
        calls = self.local_calls() if calls is None else calls
        self.window.load({n: s.float().cpu().numpy() for n, s in sums.items()}, dict(calls))

    def waiting(self) -> bool:
        """True while no pruned layer saw an input since the last reset (an update due now waits)."""
        return not any(self._calls.values()) and bool(self._weights)

    def canonical(self) -> dict[str, np.ndarray]:
        """The norms of each weight, broadcastable to its canonical shape (NumPy float32).

        Raises:
            ValueError: some pruned layers saw no input since the last reset (all of them named).
        """
        self.sync()
        return self.window.read()

    def widths(self) -> dict[str, int]:
        """Input channels of each weight's layer (the length of its sums), keyed by weight name."""
        return self.window.widths()

    def reset(self) -> None:
        """Start a new window (after an update)."""
        self._sums.clear()
        self._calls.clear()
        self.window.reset()

    def state(self) -> dict[str, torch.Tensor]:
        """The sums of squares seen since the last reset, keyed by weight name (for checkpoints)."""
        return {w.name: self._sums[id(w.module)].detach().cpu().clone() for w in self._weights
                if id(w.module) in self._sums}

    def load_state(self, sums: Any) -> None:
        """Restore :meth:`state` output (checked before anything changes, see :meth:`check_state`);
        each weight with sums counts as called once."""
        self.restore({"activation_sums": sums})

    def check_state(self, sums: Any) -> dict[int, torch.Tensor]:
        """:meth:`state` output, checked, as this object holds it; nothing changes.

        Raises:
            ValueError: a name that is not a pruned weight, or a sum of the wrong shape.
        """
        if not isinstance(sums, dict):
            raise ValueError(f"activation sums must be a dict of tensors keyed by weight name, got {type(sums).__name__}")
        by_name, widths = {w.name: w for w in self._weights}, self.widths()
        new = {}
        for name, value in sums.items():
            w = by_name.get(name)
            if w is None:
                raise ValueError(f"activation sums hold {name!r}, which is not a pruned weight")
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != (widths[name],):
                raise ValueError(f"activation sums of {name!r} must be a tensor of shape ({widths[name]},)")
            new[id(w.module)] = value.detach().float().clone()
        return new

    def checkpoint(self) -> dict[str, Any]:
        """The pruner state's entries: ``activation_sums`` (:meth:`state`)."""
        return {"activation_sums": self.state()}

    def restore(self, state: Mapping[str, Any], check_only: bool = False) -> None:
        """Restore :meth:`checkpoint` entries of a pruner ``state``, checked before anything changes
        (``check_only``: only checked).

        Raises:
            ValueError: ``state['activation_sums']`` missing or malformed.
        """
        sums = state.get("activation_sums")
        if not isinstance(sums, Mapping):
            raise ValueError(f"criterion {self.window.criterion!r} reads activations: state['activation_sums'] "
                             "must be the dict the pruner's state_dict() saved")
        checked = self.check_state(dict(sums))
        if not check_only:
            self._sums = checked
            self._calls = {key: 1 for key in checked}

    def remove(self) -> None:
        """Drop the hooks."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
