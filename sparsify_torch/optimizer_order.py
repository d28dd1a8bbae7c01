"""Optimizer state follows parameter positions: which order a pruned model's optimizer must use, and its check.

A torch optimizer saves its state by position: ``optimizer.state_dict()["state"][i]`` belongs to the
``i``-th parameter of its param groups. :func:`sparsify_torch.prune` moves each pruned weight into
``module.parametrizations.<name>.original``, so after it ``model.parameters()`` lists a pruned layer's
bias *before* its weight. An optimizer built on ``model.parameters()`` after ``prune()`` therefore numbers
the parameters differently from one built before ``prune()`` (or on the plain model): loading the state
dict of one into the other puts each weight's state on another parameter (``Adam.step`` fails on the
shapes, or trains silently with the wrong moments where the shapes agree).

The rule: an optimizer lists the parameters in the **plain model's order**. Build it before ``prune()``
(the Trainer and Lightning callbacks do), or, after ``prune()``, on :meth:`sparsify_torch.Pruner.plain_parameters`.
:meth:`sparsify_torch.Pruner.check_optimizer` tells an optimizer that breaks the rule, and an optimizer
passed to ``prune(optimizer=)`` refuses, in ``load_state_dict``, a state dict whose per-parameter state
does not fit its parameters' shapes (before anything is loaded).

Example:
    >>> import torch
    >>> a, b = torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(2))
    >>> opt = torch.optim.SGD([b, a], lr=0.1, momentum=0.9)
    >>> state = {"state": {0: {"momentum_buffer": torch.zeros(2, 3)}}, "param_groups": opt.state_dict()["param_groups"]}
    >>> misplaced_state(opt, state)
    [(0, 'momentum_buffer', (2, 3), (2,))]
    >>> out_of_plain_order([[b, a]], plain=[a, b], current=[b, a])
    [(0, [1, 0])]
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

import torch

__all__ = ["unwrap_optimizer", "PARAMETER_SHAPED_STATE", "misplaced_state", "out_of_plain_order", "plain_name", "check_order",
           "check_state"]

#: State entries that torch's optimizers keep with their parameter's shape (Adam(W), NAdam, RAdam, Adamax,
#: SGD, RMSprop, Adagrad, Adadelta, ASGD, Rprop); other entries (step counts, factored statistics) are not checked.
PARAMETER_SHAPED_STATE = frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "momentum_buffer",
                                    "square_avg", "grad_avg", "sum", "acc_delta", "ax", "prev", "step_size"})


def _flat_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters in the order its state dict numbers them."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def misplaced_state(optimizer: torch.optim.Optimizer,
                    state_dict: Mapping[str, Any] | None = None) -> list[tuple[int, str, tuple, tuple]]:
    """``(position, state key, state shape, parameter shape)`` of each parameter-shaped state tensor
    (:data:`PARAMETER_SHAPED_STATE`) whose shape is not its parameter's: in ``state_dict`` (one about to be
    loaded, numbered by position) or, without it, in the optimizer's own state. Empty when all fit.
    """
    params = _flat_params(optimizer)
    if state_dict is None:
        index = {id(p): i for i, p in enumerate(params)}
        entries: Iterable = ((index.get(id(p)), s) for p, s in optimizer.state.items())
    else:
        entries = state_dict.get("state", {}).items()
    out = []
    for i, state in entries:
        if not isinstance(i, int) or not 0 <= i < len(params) or not isinstance(state, Mapping):
            continue
        for key, value in state.items():
            if key in PARAMETER_SHAPED_STATE and isinstance(value, torch.Tensor) and value.dim() > 0 \
                    and tuple(value.shape) != tuple(params[i].shape):
                out.append((i, key, tuple(value.shape), tuple(params[i].shape)))
    return out


def out_of_plain_order(groups: Sequence[Sequence[torch.Tensor]], plain: Sequence[torch.Tensor],
                       current: Sequence[torch.Tensor]) -> list[tuple[int, list[int]]]:
    """The param groups that list parameters in ``current`` order (``model.parameters()`` after ``prune()``)
    where it is not the ``plain`` model's order: ``(group index, plain positions in the group's order)``.

    A group in the plain order, or in an order of its own (not ``current``'s either), is not reported.
    """
    plain_at = {id(p): i for i, p in enumerate(plain)}
    current_at = {id(p): i for i, p in enumerate(current)}
    out = []
    for g, params in enumerate(groups):
        known = [p for p in params if id(p) in plain_at and id(p) in current_at]
        by_plain = [plain_at[id(p)] for p in known]
        by_current = [current_at[id(p)] for p in known]
        if by_current == sorted(by_current) and by_plain != sorted(by_plain):
            out.append((g, by_plain))
    return out


def plain_name(name: str) -> str:
    """The plain model's name of a parameter named after ``prune()``.

    Example:
        >>> plain_name("0.parametrizations.weight.original"), plain_name("parametrizations.weight.original")
        ('0.weight', 'weight')
    """
    return re.sub(r"(^|\.)parametrizations\.([^.]+)\.original$", r"\1\2", name)


def _names(listed: list[str]) -> str:
    return f"{listed[:4]}{' ...' if len(listed) > 4 else ''}"


def check_order(optimizer: torch.optim.Optimizer, plain: Sequence[tuple[str, torch.Tensor]],
                current: Sequence[torch.Tensor]) -> None:
    """Raise ``ValueError`` if a param group of ``optimizer`` lists the parameters in the ``current`` order
    (``model.parameters()`` after ``prune()``) rather than the ``plain`` model's (``(name, parameter)`` pairs)."""
    bad = out_of_plain_order([g["params"] for g in optimizer.param_groups], [q for _, q in plain], current)
    if bad:
        g, positions = bad[0]
        raise ValueError(f"optimizer: param group {g} lists the parameters in the order model.parameters() has after "
                         f"prune() ({_names([plain[i][0] for i in positions])}), not the plain model's "
                         f"({_names([plain[i][0] for i in sorted(positions)])}): its state dict numbers the "
                         "parameters differently from an optimizer built before prune() or on the plain model. Build "
                         "it before prune(), or on pruner.plain_parameters()")


def check_state(optimizer: torch.optim.Optimizer, plain: Sequence[tuple[str, torch.Tensor]],
                state_dict: Mapping[str, Any] | None = None) -> None:
    """Raise ``ValueError`` if :func:`misplaced_state` finds state that does not fit its parameter: in
    ``state_dict`` (about to be loaded) or in the optimizer's own state."""
    misplaced = misplaced_state(optimizer, state_dict)
    if not misplaced:
        return
    names = {id(q): n for n, q in plain}
    i, key, got, want = misplaced[0]
    param = _flat_params(optimizer)[i]
    raise ValueError(f"optimizer {'holds' if state_dict is None else 'is given'} state {key!r} of shape {got} for "
                     f"parameter {i} ({names.get(id(param), '?')!r}, shape {want}) ({len(misplaced)} such entries): "
                     "the state dict was saved by an optimizer that listed the parameters in another order (built on "
                     "model.parameters() after prune() in one run and before it in the other). Build the optimizer "
                     "before prune() in every run, or after it on pruner.plain_parameters()")


def unwrap_optimizer(optimizer: Any) -> Any:
    """The ``torch.optim.Optimizer`` inside a wrapper that holds it as ``.optimizer`` (accelerate's
    ``AcceleratedOptimizer``, Lightning's ``LightningOptimizer``, DeepSpeed's), looking through a few
    levels; anything else is returned as it is (and refused by ``prune`` if not an optimizer, by its
    own type name).

    Example:
        >>> opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
        >>> class Wrapper:
        ...     def __init__(self, optimizer):
        ...         self.optimizer = optimizer
        >>> unwrap_optimizer(Wrapper(Wrapper(opt))) is opt
        True
    """
    inner = optimizer
    for _ in range(4):            # AcceleratedOptimizer subclasses Optimizer, but only its .optimizer holds the state
        wrapped = getattr(inner, "optimizer", None)
        if wrapped is None or wrapped is inner:
            break
        inner = wrapped
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer
