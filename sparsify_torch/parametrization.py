"""The mask parametrization: a weight read returns ``original * mask``; the model saves plain weights.

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

:func:`register_mask` (what :func:`sparsify_torch.prune` uses) also gives the module state-dict hooks,
so a model being pruned saves like the plain model: ``model.state_dict()`` holds the weight under its
own name (``"weight"``, not ``"parametrizations.weight.original"``) with the value the model computes
with (``original * mask``), and no mask. A freshly built plain model loads it with
``load_state_dict(strict=True)``. The masks and the values the pruned entries keep travel beside it,
in :meth:`sparsify_torch.Pruner.state_dict`. The other way, a plain state dict (saved before pruning,
or mid-pruning) loads into a model being pruned: each weight's values go to ``original``, the masks
stay as they are (a state dict with the ``parametrizations.`` keys, saved by an older version, loads
as before, masks included).

    >>> lin = torch.nn.Linear(2, 2, bias=False)
    >>> _ = torch.nn.init.ones_(lin.weight)
    >>> p = register_mask(lin, "weight", MaskParametrization(torch.tensor([[1.0, 0.0], [0.0, 1.0]])))
    >>> {k: v.tolist() for k, v in lin.state_dict().items()}
    {'weight': [[1.0, 0.0], [0.0, 1.0]]}
    >>> plain = torch.nn.Linear(2, 2, bias=False)
    >>> plain.load_state_dict(lin.state_dict())
    <All keys matched successfully>
    >>> lin.load_state_dict({"weight": torch.full((2, 2), 3.0)})
    <All keys matched successfully>
    >>> lin.weight.tolist(), lin.parametrizations.weight.original.tolist()
    ([[3.0, 0.0], [0.0, 3.0]], [[3.0, 3.0], [3.0, 3.0]])
"""
from __future__ import annotations

import functools
import math
import weakref
from typing import Any, MutableMapping

import torch
from torch import nn
from torch.nn.utils import parametrize

__all__ = ["MaskParametrization", "register_mask"]


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


# ----- plain state dicts ------------------------------------------------------------------------------
#: modules whose state-dict hooks :func:`register_mask` installed (each once; a deep copy carries its own)
_HOOKED: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()


def register_mask(module: nn.Module, tensor_name: str, mask: MaskParametrization) -> MaskParametrization:
    """Parametrize ``module.<tensor_name>`` with ``mask`` and make the module save it under its plain name.

    ``torch.nn.utils.parametrize.register_parametrization`` plus two hooks on ``module`` (see the module
    docstring): a state-dict post-hook writing ``<tensor_name>`` = ``original * mask`` in place of the
    ``parametrizations.<tensor_name>.original`` and ``...0.mask`` entries (in the plain module's key
    order), and a load pre-hook reading a plain ``<tensor_name>`` entry into ``original`` while the mask
    stays. The hooks act only on tensors parametrized by a single :class:`MaskParametrization`, so they do
    nothing once the parametrization is removed (``Pruner.remove()``). Returns ``mask``.

    Example:
        >>> conv = torch.nn.Conv1d(1, 2, 1)
        >>> _ = register_mask(conv, "weight", MaskParametrization(torch.ones(2, 1, 1)))
        >>> list(conv.state_dict())
        ['weight', 'bias']
    """
    order = tuple(module._parameters)                   # the plain module's key order, before the weight moves
    parametrize.register_parametrization(module, tensor_name, mask)
    if module not in _HOOKED:
        module.register_state_dict_post_hook(functools.partial(_save_plain, order))
        module.register_load_state_dict_pre_hook(_load_plain)
        _HOOKED.add(module)
    return mask


def _masked_tensors(module: nn.Module) -> dict[str, MaskParametrization]:
    """``{tensor name: its MaskParametrization}`` of the tensors of ``module`` masked by one alone."""
    lists = getattr(module, "parametrizations", None)
    if not isinstance(lists, nn.ModuleDict):
        return {}
    return {t: plist[0] for t, plist in lists.items()
            if len(plist) == 1 and isinstance(plist[0], MaskParametrization)}


def _keys(prefix: str, tensor_name: str) -> tuple[str, str]:
    return f"{prefix}parametrizations.{tensor_name}.original", f"{prefix}parametrizations.{tensor_name}.0.mask"


@torch.no_grad()
def _save_plain(order: tuple[str, ...], module: nn.Module, state_dict: MutableMapping[str, Any], prefix: str,
                local_metadata: Any) -> None:
    """State-dict post-hook: ``prefix + t`` = ``original * mask`` for each masked tensor ``t`` (the value
    the forward pass computes, bit for bit), its ``parametrizations.`` entries dropped, in the plain
    module's key order (kept after the masks are removed too)."""
    plain: dict[str, torch.Tensor] = {}
    for t in _masked_tensors(module):
        original, mask = _keys(prefix, t)
        if original in state_dict and mask in state_dict:
            plain[t] = state_dict[original].detach() * state_dict[mask].detach()
    if not plain and tuple(module._parameters) == order:
        return                         # (after remove_parametrizations the weight comes last: reordered below)
    tail = []                          # this module's entries: the end of the dict (children's included)
    for key in reversed(state_dict):   # (no copy of the keys: a module's own tail only)
        if not key.startswith(prefix):
            break
        tail.append(key)
    tail.reverse()
    drop = {k for t in plain for k in _keys(prefix, t)}
    entries = {k: state_dict.pop(k) for k in tail}
    for name in order:                 # parameters first, in the plain module's order
        if name in plain:
            state_dict[prefix + name] = plain.pop(name)
        elif prefix + name in entries:
            state_dict[prefix + name] = entries.pop(prefix + name)
    for t, value in plain.items():     # (a tensor the module did not hold at registration)
        state_dict[prefix + t] = value
    for k, v in entries.items():       # then buffers and children, as they came
        if k not in drop:
            state_dict[k] = v


def _load_plain(module: nn.Module, state_dict: MutableMapping[str, Any], prefix: str, local_metadata: Any,
                strict: bool, missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]) -> None:
    """Load pre-hook: a plain ``prefix + t`` entry of a masked tensor ``t`` is loaded into ``original`` and
    the mask is kept (``load_state_dict`` hands hooks its own copy of the dict)."""
    for t, par in _masked_tensors(module).items():
        original, mask = _keys(prefix, t)
        if prefix + t in state_dict and original not in state_dict:
            state_dict[original] = state_dict.pop(prefix + t)
            if mask not in state_dict:
                state_dict[mask] = par.mask
