"""Distillation from the dense model while pruning, in torch: the frozen teacher and the loss term.

:func:`sparsify_torch.prune` with ``distillation=`` (a :class:`sparsify.DistillationConfig` or its dict)
builds a :class:`Distiller`; a training loop adds ``pruner.distill_loss(inputs, logits)`` to its task loss.
The teacher is frozen: ``requires_grad=False`` on every parameter, ``eval()`` mode, run under
``torch.no_grad()``. With ``teacher="dense_at_start"`` it is a deep copy of the model taken by ``prune``
before any mask is registered (the dense model pruning begins from); otherwise the caller's module. It is
held by the pruner only: never a submodule of the pruned model, so never in its ``state_dict()`` nor saved
with it, and the optimizer never sees it (build the optimizer from ``model.parameters()``).

Intermediate outputs (``features``) are read by forward hooks on the named modules of student and
teacher (the student's from the forward pass that produced the logits, with their graph).

Example:
    >>> import torch
    >>> from sparsify import DistillationConfig
    >>> model = torch.nn.Linear(3, 2)
    >>> d = Distiller(model, DistillationConfig(temperature=1.0))
    >>> x = torch.ones(4, 3)
    >>> float(d.loss(x, model(x), step=0))     # the student is still the teacher
    0.0
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Mapping

import torch
from torch import nn
from torch.nn import functional as F

from sparsify.distillation import DistillationConfig

__all__ = ["Distiller", "frozen_copy", "kd_loss"]


def frozen_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with no gradient (``requires_grad=False``) in ``eval()`` mode.

    Example:
        >>> t = frozen_copy(torch.nn.Linear(2, 2))
        >>> t.training, any(p.requires_grad for p in t.parameters())
        (False, False)
    """
    teacher = copy.deepcopy(model)
    teacher.requires_grad_(False)
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
        teacher: the teacher module (``config.teacher="user"``); ``None``: a :func:`frozen_copy` of
            ``student`` now (``"dense_at_start"``). A passed teacher is frozen in place.
        logits_fn: picks the logits from the teacher's output (default: the tensor, ``.logits``,
            ``["logits"]`` or ``[0]``).
    """

    def __init__(self, student: nn.Module, config: DistillationConfig, teacher: nn.Module | None = None,
                 logits_fn: Callable[[Any], torch.Tensor] | None = None) -> None:
        if teacher is None and config.teacher == "user":
            raise ValueError("distillation teacher='user' needs the teacher module: prune(..., teacher=module)")
        if teacher is not None and config.teacher != "user":
            raise ValueError(f"a teacher module was passed but distillation teacher={config.teacher!r}: set "
                             "teacher='user' in the distillation config, or pass no module")
        if teacher is not None and not isinstance(teacher, nn.Module):
            raise TypeError(f"teacher must be a torch.nn.Module, got {type(teacher).__name__}")
        if teacher is student:
            raise ValueError("teacher is the student itself; pass a separate (e.g. copy.deepcopy) module")
        if teacher is None:
            teacher = frozen_copy(student)
        else:
            teacher.requires_grad_(False)
            teacher.eval()
        self.config = config
        self.teacher = teacher
        self.logits_fn = logits_fn or _logits_of
        self._student = _Recorder(student, config.features, "student")
        try:
            self._teacher = _Recorder(teacher, config.features, "teacher")
        except BaseException:
            self._student.remove()
            raise

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
        student's graph; 0 (no teacher pass) while ``w(step)`` is 0."""
        if not isinstance(student_logits, torch.Tensor):
            raise TypeError(f"student_logits must be a tensor (the model's logits), "
                            f"got {type(student_logits).__name__}")
        w = self.config.weight_at(step)
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
        self._teacher.remove()
