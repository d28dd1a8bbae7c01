"""Prune while ``transformers.Trainer`` trains: :class:`SparsifyCallback`, a ``TrainerCallback``.

Importing this module imports ``transformers`` (nothing else in ``sparsify_torch`` does).

* **Pruning by the Trainer's step.** ``on_train_begin`` calls :func:`sparsify_torch.prune` on the model
  with the optimizer the Trainer built (accelerate's ``AcceleratedOptimizer``, unwrapped); each
  ``on_step_end`` advances the pruner to ``state.global_step`` (one step per optimizer step, gradient
  accumulation included). The pruner is :attr:`SparsifyCallback.pruner`.
* **Logs.** ``on_log`` adds ``sparsity/total`` (and with ``log_layers=True`` ``sparsity/<weight>``) to
  the Trainer's logs and ``state.log_history``. The Trainer calls its callbacks in order, and puts the
  ones given to ``Trainer(callbacks=...)`` after its reporting ones (TensorBoard, W&B, ...):
  :meth:`SparsifyCallback.attach` puts the callback first so that they get the figures too.
* **Checkpoints.** The model being pruned saves like the plain model: a checkpoint holds the model's own
  parameter names with the masked values, so ``from_pretrained`` loads it with no missing or unexpected
  key. ``on_save`` writes the pruning state beside it, ``checkpoint-<step>/sparsify_pruner.pt``
  (masks, the values under them, step counters, criterion state; see
  :mod:`sparsify_torch.integrations.training_state`). ``trainer.train(resume_from_checkpoint=...)``
  then continues exactly: the Trainer loads the weights and the optimizer, and ``on_train_begin``
  loads this file from ``<output_dir>/checkpoint-<global_step>`` (or from ``resume_from``). With
  ``load_best_model_at_end`` the masks of the best checkpoint come back with its weights.
* **Distillation** (``distillation=`` a :class:`sparsify.DistillationConfig` or its dict): the
  callback adds ``pruner.distill_loss(inputs, logits)`` to the loss the model returns in training
  (a forward hook; the teacher runs on the same inputs without ``labels``), so the plain Trainer
  trains on ``task loss + distillation``, which its logs show as ``loss`` (when the Trainer passes
  ``num_items_in_batch`` to the model, whose loss is then already a share of the step's, the term is
  divided by the accumulation steps, and by the processes with ``average_tokens_across_devices``, so
  that it weighs as the task loss does). The model must compute
  its loss itself (``labels`` in the batch; not with ``label_smoothing_factor`` or
  ``compute_loss_func``, which take the labels away from it: a ``RuntimeError`` says so).
* **The end.** ``model.save_pretrained`` writes a plain model at any time. With ``remove_at_end=True``
  ``on_train_end`` bakes the masks into plain parameters (:meth:`sparsify_torch.Pruner.remove`).

Example:
    >>> cb = SparsifyCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    >>> cb.pruner is None
    True
    >>> SparsifyCallback({"target_sparsity": 2.0})
    Traceback (most recent call last):
    ...
    ValueError: target_sparsity must be in [0, 1), got 2.0
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import torch
from torch import nn
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from sparsify import PruningConfig

from ..entry import prune
from ..optimizer_order import unwrap_optimizer
from .training_state import advance_to_step, checked_callback_settings, pruning_state, restore_pruning_state

__all__ = ["SparsifyCallback", "STATE_FILE"]

#: The file the callback writes into each checkpoint folder.
STATE_FILE = "sparsify_pruner.pt"


class SparsifyCallback(TrainerCallback):
    """Gradual pruning (and distillation) inside ``transformers.Trainer``; see the module.

    Args:
        config: a :class:`sparsify.PruningConfig`, its dict or a YAML path (steps are optimizer steps).
        distillation: a :class:`sparsify.DistillationConfig` (or its dict, or a YAML path): the loss the
            model returns in training gets the distillation term.
        teacher: the teacher module with ``distillation={"teacher": "user", ...}`` (on the model's device).
        logits_fn: picks the logits from an output that has no ``.logits`` (teacher and student).
        select: a one-word selection passed to :func:`sparsify_torch.prune` (``"transformer_blocks"``).
        log_layers: also log ``sparsity/<weight>`` for every pruned weight.
        remove_at_end: bake the masks into plain parameters at the end of ``train()``.
        resume_from: the checkpoint folder to read the pruning state from when the Trainer resumes
            (default: ``<output_dir>/checkpoint-<global_step>``, the folder the Trainer wrote).

    Attributes:
        pruner: the :class:`sparsify_torch.Pruner` once training began (None before).
    """

    def __init__(self, config: PruningConfig | Mapping[str, Any] | str, *, distillation: Any = None,
                 teacher: nn.Module | None = None, logits_fn: Any = None, select: str | None = None,
                 log_layers: bool = False, remove_at_end: bool = False,
                 resume_from: str | os.PathLike[str] | None = None) -> None:
        self.config = PruningConfig.coerce(config)
        distillation = checked_callback_settings(distillation, teacher,
                                                 {"log_layers": log_layers, "remove_at_end": remove_at_end})
        if resume_from is not None and not isinstance(resume_from, (str, os.PathLike)):
            raise TypeError(f"resume_from must be a checkpoint folder (a path), got {type(resume_from).__name__}")
        self.distillation = distillation
        self.teacher = teacher
        self.logits_fn = logits_fn
        self.select = select
        self.log_layers = log_layers
        self.remove_at_end = remove_at_end
        self.resume_from = resume_from
        self.pruner: Any = None
        self._hook: Any = None
        self._accumulation = 1
        self._world = 1

    def attach(self, trainer: Any) -> SparsifyCallback:
        """Put this callback first among ``trainer``'s callbacks (before the reporting ones, so that
        TensorBoard, W&B... get ``sparsity/total``); returns it.

        Example:
            >>> class Handler:                      # what a Trainer holds: trainer.callback_handler.callbacks
            ...     callbacks = [TrainerCallback()]
            >>> class FakeTrainer:
            ...     callback_handler = Handler()
            >>> t = FakeTrainer()
            >>> cb = SparsifyCallback({"target_sparsity": 0.5}).attach(t)
            >>> t.callback_handler.callbacks[0] is cb
            True
        """
        callbacks = trainer.callback_handler.callbacks
        if self in callbacks:
            callbacks.remove(self)
        callbacks.insert(0, self)
        return self

    # ----- training ---------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: nn.Module | None = None,
                       optimizer: Any = None, **kwargs: Any) -> None:
        if model is None:
            raise RuntimeError("SparsifyCallback.on_train_begin got no model from the Trainer")
        optimizer = unwrap_optimizer(optimizer)
        if self.pruner is not None and not self.pruner.removed:
            if self.pruner.model is not model or self.pruner.optimizer is not optimizer:
                raise RuntimeError("this SparsifyCallback already prunes another model or with another optimizer; "
                                   "use one callback per Trainer (call callback.pruner.remove() to end it)")
        else:
            self.pruner = prune(model, self.config, optimizer=optimizer, distillation=self.distillation,
                                teacher=self.teacher, logits_fn=self.logits_fn, select=self.select)
        if state.global_step > 0 and self.pruner.step_count != state.global_step:
            restore_pruning_state(self.pruner, _load(self._checkpoint(args, state.global_step)))
        self._accumulation = max(int(args.gradient_accumulation_steps), 1)
        self._world = max(int(getattr(args, "world_size", 1)), 1) if getattr(args, "average_tokens_across_devices",
                                                                            False) else 1
        if self.distillation is not None and self._hook is None:
            self._hook = model.register_forward_hook(self._add_distillation, with_kwargs=True)

    def _checkpoint(self, args: Any, step: int) -> str:
        """The pruning state file of a resumed run (a clear error if there is none)."""
        folder = self.resume_from if self.resume_from is not None else \
            os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")
        path = os.path.join(os.fspath(folder), STATE_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"the Trainer resumes at step {step}, but there is no pruning state at {path!r} "
                                    f"(SparsifyCallback writes it into each checkpoint); pass the checkpoint folder "
                                    f"as SparsifyCallback(..., resume_from=folder)")
        return path

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.pruner is not None and not self.pruner.removed:
            advance_to_step(self.pruner, state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
               **kwargs: Any) -> None:
        if self.pruner is None or self.pruner.removed or logs is None:
            return
        figures = {"sparsity/total": self.pruner.total_sparsity()}
        if self.log_layers:
            figures.update({f"sparsity/{n}": s for n, s in self.pruner.sparsity().items() if s is not None})
        logs.update(figures)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(figures)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.pruner is None or self.pruner.removed:
            return
        saved = pruning_state(self.pruner)          # on every process (collective with some criteria)
        if args.should_save:
            folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            os.makedirs(folder, exist_ok=True)
            tmp = os.path.join(folder, STATE_FILE + ".tmp")
            torch.save(saved, tmp)
            os.replace(tmp, os.path.join(folder, STATE_FILE))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.pruner is None or self.pruner.removed:
            return
        best = getattr(state, "best_model_checkpoint", None)
        if args.load_best_model_at_end and best is not None:     # the Trainer loaded its weights: now its masks
            path = os.path.join(best, STATE_FILE)
            if os.path.isfile(path):
                restore_pruning_state(self.pruner, _load(path))
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.remove_at_end:
            self.pruner.remove()

    # ----- distillation -----------------------------------------------------------------------
    def _add_distillation(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        """Forward hook: in training, ``output.loss += distill_loss(inputs without labels, output.logits)``."""
        if not (module.training and torch.is_grad_enabled()) or self.pruner is None or self.pruner.removed:
            return None
        loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
        if loss is None:
            raise RuntimeError("SparsifyCallback(distillation=...) adds its term to the loss the model returns, "
                               "but the model returned none: pass labels in the batch and let the model compute "
                               "its loss (no label_smoothing_factor, no compute_loss_func)")
        scaled = kwargs.get("num_items_in_batch") is not None    # the model's loss is already a share of the step's
        inputs: Any = {k: v for k, v in kwargs.items() if k not in ("labels", "num_items_in_batch")}
        if args:
            inputs = tuple(args) if not inputs else inputs
        logits = self.logits_fn(output) if self.logits_fn is not None else output["logits"]
        term = self.pruner.distill_loss(inputs, logits)
        if scaled:          # the Trainer neither divides such a loss by the accumulation steps nor (it multiplies
            term = term / (self._world * self._accumulation)     # it by the processes) averages it: do it here
        output["loss"] = loss + term
        return output


def _load(path: str) -> Any:
    return torch.load(path, map_location="cpu", weights_only=True)
