"""Prune while ``lightning.pytorch.Trainer`` trains: :class:`SparsifyCallback`, a Lightning ``Callback``.

Importing this module imports ``lightning`` (nothing else in ``sparsify_torch`` does).

* **Pruning by the Trainer's step.** ``on_fit_start`` calls :func:`sparsify_torch.prune` on the
  LightningModule with its first optimizer (the one ``configure_optimizers`` returned); each
  ``on_train_batch_end`` advances the pruner to ``trainer.global_step`` (optimizer steps, gradient
  accumulation included). The pruner is :attr:`SparsifyCallback.pruner`. ``sparsity/total`` is logged
  with ``pl_module.log`` (to the Trainer's loggers, and the progress bar with ``prog_bar=True``).
* **Checkpoints.** The module being pruned saves like the plain module: ``state_dict`` in a checkpoint
  (``trainer.save_checkpoint``, ``ModelCheckpoint``) holds the plain parameter names with the masked
  values, so ``LitModule.load_from_checkpoint`` or a plain ``load_state_dict(strict=True)`` load it.
  The pruning state (masks, the values under them, step counters, criterion state, a
  ``"dense_at_start"`` teacher) is this callback's ``state_dict()``, in the checkpoint's
  ``callbacks`` entry; ``trainer.fit(module, ckpt_path=...)`` loads it back and the run continues
  exactly (Lightning restores the weights, then the callback, then the optimizer).
* **Distillation**: ``distillation=`` (and ``teacher=``) go to :func:`sparsify_torch.prune`; a
  ``training_step`` adds the term itself, ``loss = task_loss + callback.pruner.distill_loss(x, logits)``
  (Lightning has no hook that changes the loss a ``training_step`` returns).
* **The end.** With ``remove_at_end=True`` ``on_fit_end`` bakes the masks into plain parameters.

Example:
    >>> cb = SparsifyCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 10})
    >>> cb.pruner is None, cb.state_dict()
    (True, {})
"""
from __future__ import annotations

from typing import Any, Mapping

from lightning.pytorch.callbacks import Callback
from torch import nn

from sparsify import PruningConfig

from ..entry import prune
from ..optimizer_order import unwrap_optimizer
from .training_state import advance_to_step, checked_callback_settings, pruning_state, restore_pruning_state

__all__ = ["SparsifyCallback"]


class SparsifyCallback(Callback):
    """Gradual pruning inside ``lightning.pytorch.Trainer.fit``; see the module.

    Args:
        config: a :class:`sparsify.PruningConfig`, its dict or a YAML path (steps are optimizer steps).
        distillation: a :class:`sparsify.DistillationConfig` (or its dict): ``callback.pruner.distill_loss``.
        teacher: the teacher module with ``distillation={"teacher": "user", ...}``.
        logits_fn: picks the logits from the teacher's output when it is not a tensor.
        select: a one-word selection passed to :func:`sparsify_torch.prune` (``"transformer_blocks"``).
        log_sparsity: log ``sparsity/total`` with ``pl_module.log`` (at each mask update and epoch start).
        remove_at_end: bake the masks into plain parameters at the end of ``fit``.

    Attributes:
        pruner: the :class:`sparsify_torch.Pruner` once ``fit`` began (None before).
    """

    def __init__(self, config: PruningConfig | Mapping[str, Any] | str, *, distillation: Any = None,
                 teacher: nn.Module | None = None, logits_fn: Any = None, select: str | None = None,
                 log_sparsity: bool = True, remove_at_end: bool = False) -> None:
        self.config = PruningConfig.coerce(config)
        distillation = checked_callback_settings(distillation, teacher,
                                                 {"log_sparsity": log_sparsity, "remove_at_end": remove_at_end})
        self.distillation = distillation
        self.teacher = teacher
        self.logits_fn = logits_fn
        self.select = select
        self.log_sparsity = log_sparsity
        self.remove_at_end = remove_at_end
        self.pruner: Any = None
        self._pending: Mapping[str, Any] | None = None

    def on_fit_start(self, trainer: Any, pl_module: nn.Module) -> None:
        optimizer = unwrap_optimizer(trainer.optimizers[0]) if trainer.optimizers else None
        if self.pruner is None or self.pruner.removed:
            self.pruner = prune(pl_module, self.config, optimizer=optimizer, distillation=self.distillation,
                                teacher=self.teacher, logits_fn=self.logits_fn, select=self.select)
        elif self.pruner.model is not pl_module or self.pruner.optimizer is not optimizer:
            raise RuntimeError("this SparsifyCallback already prunes another module or with another optimizer; "
                               "use one callback per fit (call callback.pruner.remove() to end it)")
        if self._pending is not None:                  # the checkpoint's state, loaded before the pruner existed
            state, self._pending = self._pending, None
            restore_pruning_state(self.pruner, state)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.pruner is None or self.pruner.removed:
            return
        before = self.pruner.done_step
        advance_to_step(self.pruner, trainer.global_step)
        if self.log_sparsity and (self.pruner.done_step != before or batch_idx == 0):
            pl_module.log("sparsity/total", self.pruner.total_sparsity(), on_step=True, on_epoch=False)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.remove_at_end and self.pruner is not None and not self.pruner.removed:
            self.pruner.remove()

    # ----- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The pruning state (:func:`~sparsify_torch.integrations.training_state.pruning_state`); empty
        before ``fit`` and after the masks are removed."""
        if self.pruner is None or self.pruner.removed:
            return dict(self._pending) if self._pending is not None else {}
        return pruning_state(self.pruner)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output: now if the pruner exists, else when ``fit`` builds it."""
        if not state_dict:
            return
        if self.pruner is not None and not self.pruner.removed:
            restore_pruning_state(self.pruner, state_dict)
        else:
            self._pending = state_dict
