"""The mask parametrization: a weight read returns ``original * mask``.

The mask is a registered buffer (same dtype and device as the weight) that
is only ever updated in place, so its identity never changes: optimizers,
hooks and ``torch.compile`` graphs keep pointing at the same tensor. Like
``torch.ao.pruning``'s ``FakeSparsity``, but the mask values come from the
framework-neutral core (:class:`sparsify.PruningEngine`).

Example:
    >>> import torch
    >>> from torch.nn.utils import parametrize
    >>> lin = torch.nn.Linear(2, 2, bias=False)
    >>> _ = torch.nn.init.ones_(lin.weight)
    >>> p = MaskParametrization(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    >>> _ = parametrize.register_parametrization(lin, "weight", p)
    >>> lin.weight.tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    >>> p.set_mask(torch.ones(2, 2, dtype=torch.bool))
    >>> lin.weight.tolist()
    [[1.0, 1.0], [1.0, 1.0]]
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

__all__ = ["MaskParametrization"]


def _count_load(module: "MaskParametrization", incompatible_keys: object) -> None:
    module.loads += 1


class _StraightThrough(torch.autograd.Function):
    """``original * mask`` forward; the dense gradient backward (pruned weights keep training), plus
    ``decay * original`` on the pruned entries (SR-STE's sparse-refined term) when ``decay`` is not 0."""

    @staticmethod
    def forward(ctx: Any, original: torch.Tensor, mask: torch.Tensor, decay: float) -> torch.Tensor:
        ctx.decay = decay
        if decay:
            ctx.save_for_backward(original, mask)
        return original * mask

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        if not ctx.decay:
            return grad, None, None
        original, mask = ctx.saved_tensors
        # the pruned values times decay, then added: the same rounding as FSDP2's hook (fsdp.py)
        return grad + original * (1 - mask) * ctx.decay, None, None


class MaskParametrization(nn.Module):
    """Parametrization ``weight = original * mask`` with the mask as an in-place buffer.

    The stored weight (``original``) stays dense under the mask: pruned entries
    keep their values, so a later update can rank them again (``monotone=False``).
    Their gradient is none (``straight_through=False``: ``d(original * mask)``) or
    the dense gradient (``straight_through=True``), plus ``pruned_decay * original`` on
    the pruned entries (SR-STE, ``PruningConfig.pruned_decay``). With ``capture_grad`` set, the
    next backward pass records the dense gradient of the weight the model uses
    (``dense_grad``), which regrowth (RigL) ranks the pruned weights by.

    Args:
        mask: initial mask, boolean or 0/1 floats (True / 1 = kept). It is
            stored as a buffer named ``mask`` in the weight's dtype.
        straight_through: pass the dense gradient to pruned entries.
        pruned_decay: with ``straight_through``, add ``pruned_decay * original`` to the
            gradient of every pruned entry (a finite number >= 0; 0 adds nothing).

    Example:
        >>> p = MaskParametrization(torch.tensor([True, False]))
        >>> p(torch.tensor([3.0, 4.0])).tolist()
        [3.0, 0.0]
        >>> w = torch.tensor([3.0, 4.0], requires_grad=True)
        >>> sr = MaskParametrization(torch.tensor([True, False]), straight_through=True, pruned_decay=0.5)
        >>> sr(w).sum().backward()
        >>> w.grad.tolist()          # 1 + 0.5 * 4 on the pruned entry
        [1.0, 3.0]
    """

    mask: torch.Tensor

    def __init__(self, mask: torch.Tensor, straight_through: bool = False, pruned_decay: float = 0.0) -> None:
        super().__init__()
        if not isinstance(straight_through, bool):
            raise TypeError(f"straight_through must be True or False, got {straight_through!r}")
        if isinstance(pruned_decay, bool) or not isinstance(pruned_decay, (int, float)):
            raise TypeError(f"pruned_decay must be a number >= 0, got {pruned_decay!r}")
        if not math.isfinite(pruned_decay) or pruned_decay < 0:
            raise ValueError(f"pruned_decay must be a finite number >= 0, got {pruned_decay!r}")
        if pruned_decay and not straight_through:
            raise ValueError(f"pruned_decay={pruned_decay!r} needs straight_through=True (pruned entries get no "
                             "gradient otherwise)")
        self.straight_through = straight_through
        self.pruned_decay = float(pruned_decay)
        self.capture_grad = False
        self.dense_grad: torch.Tensor | None = None
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
        m = mask.detach().clone()
        if not m.is_floating_point():
            m = m.to(torch.get_default_dtype())
        self.register_buffer("mask", m)
        self.loads = 0     # counts state_dict loads into the buffer, so a Pruner knows to re-read it
        self.register_load_state_dict_post_hook(_count_load)

    def forward(self, original: torch.Tensor) -> torch.Tensor:
        """``original * mask`` (gradients of pruned entries are zero unless ``straight_through``)."""
        out = _StraightThrough.apply(original, self.mask, self.pruned_decay) if self.straight_through \
            else original * self.mask
        if self.capture_grad and out.requires_grad:
            out.register_hook(self._record_grad)
        return out

    def _record_grad(self, grad: torch.Tensor) -> None:
        self.dense_grad = grad.detach().clone()

    @torch.no_grad()
    def set_mask(self, mask: torch.Tensor) -> None:
        """Copy ``mask`` (bool or 0/1) into the buffer in place.

        Raises:
            ValueError: if the shape differs from the buffer's.
        """
        if tuple(mask.shape) != tuple(self.mask.shape):
            raise ValueError(f"mask shape {tuple(mask.shape)} differs from the parametrized weight's "
                             f"shape {tuple(self.mask.shape)}")
        self.mask.copy_(mask.to(device=self.mask.device, dtype=self.mask.dtype))

    def bool_mask(self) -> torch.Tensor:
        """The mask as a boolean tensor (True = kept)."""
        return self.mask != 0

    def extra_repr(self) -> str:
        kept = int(torch.count_nonzero(self.mask))
        return f"shape={tuple(self.mask.shape)}, kept={kept}/{self.mask.numel()}"
