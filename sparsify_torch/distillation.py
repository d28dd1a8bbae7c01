"""Distillation from the dense model while pruning, in torch: the frozen teacher and the loss term.

:func:`sparsify_torch.prune` with ``distillation=`` (a :class:`sparsify.DistillationConfig` or its dict)
builds a :class:`Distiller`; a training loop adds ``pruner.distill_loss(inputs, logits)`` to its task loss.
The teacher is frozen: ``requires_grad=False`` on every parameter, ``eval()`` mode, run under
``torch.no_grad()``. With ``teacher="dense_at_start"`` it is a deep copy of the model as it is when pruning
begins: at the pruning schedule's ``start_step`` (its first mask update), in ``pruner.step()`` before that
update, however early ``prune`` was called (with ``start_step=0``: in ``prune``, before any mask). Until then
the distillation term is exactly zero and no teacher exists, so the usual recipe (``prune`` before the loop,
pruning from step ``start_step > 0``) distils from the model trained so far, not from its initialisation.
Its default weight (no ``weight`` or ``weight_schedule`` given) fades: 1 at ``start_step``, linearly to 0 at
the middle of the pruning window, 0 after (:meth:`sparsify.DistillationConfig.for_pruning`, with the
pruning schedule's ``start_step`` and ``end_step``). Otherwise the teacher is the caller's module, used from
the first step. It is held by the pruner only:
never a submodule of the pruned model, so never in its ``state_dict()`` nor saved with it, and the
optimizer never sees it (build the optimizer from ``model.parameters()``).

Intermediate outputs (``features``) are read by forward hooks on the named modules of student and
teacher (the student's from the forward pass that produced the logits, with their graph).

Example:
    >>> import torch
    >>> from sparsify import DistillationConfig
    >>> model = torch.nn.Linear(3, 2)
    >>> d = Distiller(model, DistillationConfig(temperature=1.0, weight=1.0))
    >>> x = torch.ones(4, 3)
    >>> float(d.loss(x, model(x), step=0).detach())     # the student is still the teacher
    0.0
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Mapping

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrize

from sparsify.distillation import DistillationConfig

from .parametrization import MaskParametrization
from .quantization import FakeQuantInt8

__all__ = ["Distiller", "frozen_copy", "hook_ids", "kd_loss"]


_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
          "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")
_HOOK_FLAGS = ("_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs")


def hook_ids(model: nn.Module) -> dict[str, frozenset[int]]:
    """The ids of the module hooks (forward, backward, state dict) of each module of ``model``, by name:
    the hooks a later :func:`frozen_copy` keeps (e.g. the user's, before ``prune`` adds its own).

    Example:
        >>> m = torch.nn.Linear(2, 2)
        >>> hook_ids(m)
        {'': frozenset()}
    """
    return {name: frozenset(k for d in _HOOKS for k in getattr(m, d)) for name, m in model.named_modules()}


def frozen_copy(model: nn.Module, keep_hooks: Mapping[str, frozenset[int]] | None = None) -> nn.Module:
    """A deep copy of ``model`` with no gradient (``requires_grad=False``) in ``eval()`` mode, without masks:
    each weight under a :class:`~sparsify_torch.parametrization.MaskParametrization` becomes a plain
    parameter holding the value the model computes with (``original * mask``); a QAT rounding
    (:class:`~sparsify_torch.quantization.FakeQuantInt8`) is left out: the teacher stays float.

    ``keep_hooks`` (from :func:`hook_ids`): keep only these module hooks in the copy; the others (the
    pruner's and the distiller's own, on the student) are neither copied nor run by the copy. ``None``: all.

    Example:
        >>> t = frozen_copy(torch.nn.Linear(2, 2))
        >>> t.training, any(p.requires_grad for p in t.parameters())
        (False, False)
    """
    memo: dict[int, Any] = {}
    if keep_hooks is not None:
        kept_fns = {id(getattr(m, d)[k]) for name, m in model.named_modules() for d in _HOOKS
                    for k in getattr(m, d) if k in keep_hooks.get(name, ())}
        for name, m in model.named_modules():
            for d in _HOOKS:
                for k, fn in getattr(m, d).items():
                    if k not in keep_hooks.get(name, ()) and id(fn) not in kept_fns:
                        memo[id(fn)] = None            # not copied: the slot is dropped below
    teacher = copy.deepcopy(model, memo)
    if keep_hooks is not None:
        for name, m in teacher.named_modules():
            for d in _HOOKS + _HOOK_FLAGS:
                hooks = getattr(m, d)
                for k in [k for k in hooks if k not in keep_hooks.get(name, ())]:
                    del hooks[k]
    for module in list(teacher.modules()):
        if parametrize.is_parametrized(module):
            rounded_only = []        # QAT's rounding is the student's, not the teacher's: the teacher stays float
            for t, chain in module.parametrizations.items():
                for i in reversed([i for i, p in enumerate(chain) if isinstance(p, FakeQuantInt8)]):
                    if len(chain) > 1:
                        del chain[i]
                    else:
                        rounded_only.append(t)
            masked = [t for t, chain in module.parametrizations.items()
                      if t not in rounded_only and all(isinstance(p, MaskParametrization) for p in chain)]
            if masked or rounded_only:      # a class of its own: removing a parametrization edits the class, which the copy shares
                cls = type(module)
                module.__class__ = type(cls.__name__, cls.__bases__, {
                    k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")})
            for tensor_name in masked + rounded_only:
                parametrize.remove_parametrizations(module, tensor_name, leave_parametrized=tensor_name in masked)
    teacher.requires_grad_(False)
    for p in teacher.parameters():
        p.grad = None
    return teacher.eval()


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``T**2 * mean_rows KL(softmax(t/T) || softmax(s/T))`` in torch (rows: every leading position), the
    term :func:`sparsify.distillation.kd_loss` computes in NumPy.

    Example:
        >>> round(float(kd_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 2.0]]), 2.0)), 6)
        0.443776
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} must have one shape")
    n = student_logits.shape[-1]
    log_q = F.log_softmax(student_logits.reshape(-1, n) / temperature, dim=-1)
    log_p = F.log_softmax(teacher_logits.detach().reshape(-1, n).to(log_q.dtype) / temperature, dim=-1)
    return F.kl_div(log_q, log_p, reduction="batchmean", log_target=True) * (temperature * temperature)


def _logits_of(output: Any) -> torch.Tensor:
    """The logits in a model's output: the tensor itself, ``output.logits``, ``output["logits"]`` or ``output[0]``."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, Mapping) and "logits" in output:
        return output["logits"]
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise TypeError(f"the teacher's output is a {type(output).__name__}; pass logits_fn=... to prune() to pick "
                    "its logits")


class _Recorder:
    """Forward hooks keeping the last output of each named module."""

    def __init__(self, model: nn.Module, names: list[str], who: str) -> None:
        modules = dict(model.named_modules())
        missing = [n for n in names if n not in modules]
        if missing:
            raise ValueError(f"features {missing} are not modules of the {who} (named_modules() holds e.g. "
                             f"{[n for n in modules if n][:8]})")
        self.outputs: dict[str, torch.Tensor] = {}
        self.handles = [modules[n].register_forward_hook(self._hook(n)) for n in names]

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
            self.outputs[name] = _logits_of(output)
        return hook

    def take(self, name: str, who: str) -> torch.Tensor:
        if name not in self.outputs:
            raise RuntimeError(f"feature {name!r} of the {who} was not computed: run the forward pass that gives "
                               "the logits before distill_loss")
        return self.outputs.pop(name)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self.outputs.clear()


class Distiller:
    """The frozen teacher of one student and the distillation term of :class:`sparsify.DistillationConfig`.

    Args:
        student: the model being pruned (hooks are put on its ``features`` modules).
        config: the distillation settings.
        teacher: the teacher module (``config.teacher="user"``), frozen in place and used from step 0;
            ``None`` (``"dense_at_start"``): a :func:`frozen_copy` of ``student`` taken at step
            ``start_step`` (now when it is 0), by :meth:`reach`.
        logits_fn: picks the logits from the teacher's output (default: the tensor, ``.logits``,
            ``["logits"]`` or ``[0]``).
        start_step: the step at which pruning begins (the pruning schedule's first update): the
            ``"dense_at_start"`` teacher is the student as it is then, and the term is 0 before.
        end_step: the pruning schedule's ``end_step``: the default weight (``"fade"``) falls from 1 at
            ``start_step`` to 0 at ``start_step + (end_step - start_step) // 2``
            (:meth:`sparsify.DistillationConfig.for_pruning`); needed by a ``"fade"`` only.

    Raises:
        ValueError: a ``"fade"`` weight without ``end_step`` or with a window it cannot fade over.

    Example:
        >>> d = Distiller(torch.nn.Linear(3, 2), DistillationConfig(), start_step=5, end_step=25)
        >>> d.teacher is None, float(d.loss(torch.ones(1, 3), torch.ones(1, 2), step=4))
        (True, 0.0)
        >>> d.reach(5)
        >>> d.teacher.training, [d.config.weight_at(s) for s in (5, 10, 15)]
        (False, [1.0, 0.5, 0.0])
    """

    def __init__(self, student: nn.Module, config: DistillationConfig, teacher: nn.Module | None = None,
                 logits_fn: Callable[[Any], torch.Tensor] | None = None, *, start_step: int = 0,
                 end_step: int | None = None) -> None:
        if teacher is None and config.teacher == "user":
            raise ValueError("distillation teacher='user' needs the teacher module: prune(..., teacher=module)")
        if teacher is not None and config.teacher != "user":
            raise ValueError(f"a teacher module was passed but distillation teacher={config.teacher!r}: set "
                             "teacher='user' in the distillation config, or pass no module")
        if teacher is not None and not isinstance(teacher, nn.Module):
            raise TypeError(f"teacher must be a torch.nn.Module, got {type(teacher).__name__}")
        if teacher is student:
            raise ValueError("teacher is the student itself; pass a separate (e.g. copy.deepcopy) module")
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"start_step must be an integer >= 0, got {start_step!r}")
        if config.weight_schedule == "fade":
            if end_step is None:
                raise ValueError("end_step: the distillation weight fades over the pruning window (the default of "
                                 "the 'dense_at_start' teacher): pass the pruning end_step, or give the weight "
                                 "(e.g. weight=1.0)")
            config = config.for_pruning(start_step, end_step)
        if teacher is not None:
            teacher.requires_grad_(False)
            teacher.eval()
        self.config = config          # a "fade" as its ramp over the pruning window
        self.start_step = 0 if teacher is not None else start_step
        self.teacher: nn.Module | None = teacher
        self.logits_fn = logits_fn or _logits_of
        self._student_module = student
        self._user_hooks = hook_ids(student)       # the hooks a deferred copy keeps: none of sparsify's
        modules = dict(student.named_modules())
        missing = [n for n in config.features if n not in modules]
        if missing:
            raise ValueError(f"features {missing} are not modules of the student (named_modules() holds e.g. "
                             f"{[n for n in modules if n][:8]})")
        self._teacher: _Recorder | None = None
        if self.teacher is None and self.start_step == 0:
            self._take_teacher()
        self._student = _Recorder(student, config.features, "student")
        if self.teacher is not None and self._teacher is None:
            try:
                self._teacher = _Recorder(self.teacher, config.features, "teacher")
            except BaseException:
                self._student.remove()
                raise

    def _take_teacher(self) -> None:
        """Copy the student now (frozen, unmasked, without sparsify's hooks) as the teacher."""
        teacher = frozen_copy(self._student_module, self._user_hooks)
        self._teacher = _Recorder(teacher, self.config.features, "teacher")
        self.teacher = teacher

    def reach(self, step: int) -> None:
        """Take the ``"dense_at_start"`` teacher if ``step`` (the pruner's count) reached :attr:`start_step`
        and it is not taken yet. The pruner calls it in ``step()`` before that step's mask update."""
        if self.teacher is None and step >= self.start_step:
            self._take_teacher()

    @torch.no_grad()
    def teacher_outputs(self, inputs: Any) -> torch.Tensor:
        """The teacher's logits on ``inputs`` (a tensor: ``teacher(inputs)``; a tuple: ``teacher(*inputs)``;
        a dict: ``teacher(**inputs)``), without a graph; it stays in ``eval()`` mode."""
        self.teacher.eval()
        if isinstance(inputs, Mapping):
            out = self.teacher(**inputs)
        elif isinstance(inputs, tuple):
            out = self.teacher(*inputs)
        else:
            out = self.teacher(inputs)
        return self.logits_fn(out)

    def loss(self, inputs: Any, student_logits: torch.Tensor, step: int) -> torch.Tensor:
        """``w(step) * (logit_weight * KD + feature_weight * mean MSE of the features)``, a scalar with the
        student's graph; exactly 0 (no teacher pass) before :attr:`start_step` and while ``w(step)`` is 0.
        A ``"dense_at_start"`` teacher not taken yet at or after :attr:`start_step` (a pruner restored past
        it) is taken now: the model as it is."""
        if not isinstance(student_logits, torch.Tensor):
            raise TypeError(f"student_logits must be a tensor (the model's logits), "
                            f"got {type(student_logits).__name__}")
        w = self.config.weight_at(step) if step >= self.start_step else 0.0
        if w != 0.0:
            self.reach(step)
        if w == 0.0:
            self._student.outputs.clear()
            return student_logits.new_zeros(())
        teacher_logits = self.teacher_outputs(inputs)
        total = self.config.logit_weight * kd_loss(student_logits, teacher_logits, self.config.temperature)
        if self.config.features:
            mse = [F.mse_loss(self._student.take(n, "student"), self._teacher.take(n, "teacher").detach())
                   for n in self.config.features]
            total = total + self.config.feature_weight * torch.stack(mse).mean()
        return w * total

    def remove(self) -> None:
        """Drop the hooks on student and teacher."""
        self._student.remove()
        if self._teacher is not None:
            self._teacher.remove()
