"""Calibration: per-channel gates that measure first-order Taylor importance.

Inside :class:`PruningCalibrator` every conv/linear that reads a prunable
channel multiplies that input channel by a gate ``g_c = 1`` (one gate per group
channel, shared by all its readers), so the outputs are bit-identical. After
each backward pass ``(dL/dg_c)^2`` is added to the channel's importance: the
squared first-order estimate of the loss change when the channel is removed.

The model is left exactly as it was, in train and in eval mode: a
:class:`~sparsify_torch.channels.model_state.ModelSnapshot` restores modes,
buffers, gradients, hooks and the modules' own Python attributes on exit, and
puts those attributes back before every step, so modules that cache tensors
between calls (timm's LeViT and EfficientFormer attention-bias caches in eval
mode) never make a step backpropagate through another step's graph.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    >>> with PruningCalibrator(net) as calibrator:
    ...     net(torch.randn(8, 3)).pow(2).mean().backward()
    >>> calibrator.pruning_info.n_prunable_groups
    1
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from sparsify.patching import patch, unpatch

from .graph import analyze_channel_groups, build_dependency_graph, resolve_entry_point
from .info import ModelPruningInfo
from .model_state import ModelSnapshot
from .progress import check_show_tqdm, progress_bar
from .samples import default_sample_to_model_inputs, default_sample_to_n_samples, map_tensors
from .tracing import input_channel_dim

__all__ = ["PruningCalibrator", "calibrate_model_for_pruning", "run_calibration", "check_importance"]


def _check_max_labels(max_prunable_labels: int) -> None:
    if isinstance(max_prunable_labels, bool) or not isinstance(max_prunable_labels, int) or max_prunable_labels < 2:
        raise ValueError(f"max_prunable_labels must be an integer >= 2, got {max_prunable_labels!r}")


class PruningCalibrator:
    """Context manager that collects channel importances while the user runs backward passes.

    On exit the model is exactly as on entry: modes, buffers, parameter
    gradients (the backward passes inside the context leave none behind),
    ``requires_grad`` flags, hooks and module attributes. ``pruning_info`` is
    None until a context in which the entry point ran has exited normally.

    Args:
        model: the model to calibrate; it is left unchanged.
        entry_point: the method traced for dependency analysis, e.g. ``"forward"``
            or ``"backbone.forward"`` (only channels inside it are pruned).
        max_prunable_labels: groups with more channels than this are not pruned.

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` or ``entry_point`` is not a string.
        ValueError: ``entry_point`` does not exist or ``max_prunable_labels`` < 2.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 1, 1))
        >>> with PruningCalibrator(net) as c:
        ...     net(torch.randn(2, 1, 6, 6)).sum().backward()
        >>> c.pruning_info.group_criteria[0].shape
        (4,)
    """

    def __init__(self, model: nn.Module, entry_point: str = "forward", max_prunable_labels: int = 4096) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        resolve_entry_point(model, entry_point)
        _check_max_labels(max_prunable_labels)
        self.model = model
        self.entry_point = entry_point
        self.max_prunable_labels = max_prunable_labels
        self._info: Optional[ModelPruningInfo] = None
        self._active = False
        self._snapshot: Optional[ModelSnapshot] = None

    # --- context protocol -------------------------------------------------------------------------
    def __enter__(self) -> "PruningCalibrator":
        if self._active:
            raise RuntimeError("PruningCalibrator is already active; it cannot be entered twice")
        self._owner, self._method = resolve_entry_point(self.model, self.entry_point)
        self._groups = None
        self._example = None
        self._gates: Dict[int, torch.Tensor] = {}
        self._importance: Dict[int, np.ndarray] = {}
        self._handles: List[Any] = []
        self._n_steps = 0
        self._info = None
        self._snapshot = ModelSnapshot(self.model, ignore=[(self._owner, self._method)])
        self._active = True

        def make(original):
            self._original = original

            def entry(*args, **kwargs):
                if self._groups is None:
                    self._setup(args, kwargs)
                self._snapshot.restore_attributes()  # every step starts from the user's module state
                self._fold_gradients()
                self._n_steps += 1
                return original(*args, **kwargs)
            return entry

        # nest=True: an entry point wrapped already (by another calibrator) is wrapped as it is, and given back
        patch(self._owner, self._method, make, nest=True)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self._fold_gradients()
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles = []
            unpatch(self._owner, self._method)
            self._active = False
            snapshot, self._snapshot = self._snapshot, None
            snapshot.restore()
        if exc_type is None and self._groups is not None:
            criteria = {i: self._importance[i] for i in self._gates}
            self._info = ModelPruningInfo(self._groups, criteria, self.entry_point, self._example, self._n_steps)
        self._gates = {}

    # --- results ----------------------------------------------------------------------------------
    @property
    def pruning_info(self) -> Optional[ModelPruningInfo]:
        """The :class:`ModelPruningInfo` of the last completed context.

        None before the calibrator was used as a context manager, while the
        context is still open, when the entry point was never called inside
        it, or when the context ended with an exception.
        """
        return None if self._active else self._info

    @property
    def n_gates(self) -> int:
        """Number of prunable groups gated in the open context (0 before the first forward)."""
        return len(self._gates)

    # --- internals --------------------------------------------------------------------------------
    def _setup(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        example = (map_tensors(args, lambda t: t.detach().clone()), map_tensors(kwargs, lambda t: t.detach().clone()))
        graph = build_dependency_graph(self.model, self.entry_point, args, kwargs, call=self._original)
        self._groups = analyze_channel_groups(self.model, self.entry_point, args, kwargs,
                                              self.max_prunable_labels, graph_and_outputs=graph)
        self._example = example
        modules = dict(self.model.named_modules())
        device = next((p.device for p in self.model.parameters()), torch.device("cpu"))
        slots: Dict[str, List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {}
        for i, group in enumerate(self._groups):
            if not group.prunable:
                continue
            gate = torch.ones(group.n_labels, device=device, requires_grad=True)
            self._gates[i] = gate
            self._importance[i] = np.zeros(group.n_labels, dtype=np.float64)
            for slot in group.consumers:
                slots.setdefault(slot.module_name, []).append(
                    (gate, torch.as_tensor(slot.input_idxs, device=device), torch.as_tensor(slot.root_idxs,
                                                                                          device=device)))
        for name, entries in slots.items():
            self._handles.append(modules[name].register_forward_pre_hook(_make_gate_hook(modules[name], entries)))

    def _fold_gradients(self) -> None:
        for i, gate in self._gates.items():
            if gate.grad is not None:
                self._importance[i] += gate.grad.detach().double().cpu().numpy() ** 2
                gate.grad = None


def _make_gate_hook(module: nn.Module, entries):
    dim = input_channel_dim(module)
    needed = max(int(idx.max()) for _, idx, _ in entries) + 1

    def hook(_module, args):
        if not args or not isinstance(args[0], torch.Tensor) or args[0].ndim < 2:
            return None
        x = args[0]
        n = x.shape[dim]
        if n < needed or not torch.is_grad_enabled():
            return None
        g = torch.ones(n, dtype=x.dtype, device=x.device)
        for gate, idx, ridx in entries:
            g = g.index_put((idx,), gate[ridx].to(x.dtype))
        shape = [1] * x.ndim
        shape[dim] = n
        return (x * g.view(shape),) + tuple(args[1:])

    return hook


_REUSED_GRAPH_ERRORS = ("backward through the graph a second time", "modified by an inplace operation")


def check_importance(pruning_info: ModelPruningInfo) -> None:
    """Refuse criteria that cannot rank channels; warn about groups whose channels all tie.

    Raises:
        ValueError: every prunable channel has importance 0: the loss does not
            depend on the prunable channels, and pruning would follow channel
            index order.

    Warns:
        RuntimeWarning: naming the groups whose channels all have the same
            importance (they would be pruned in index order).
    """
    criteria = pruning_info.group_criteria
    if not criteria:
        return
    if all(not np.any(c) for c in criteria):
        raise ValueError(
            f"calibration measured zero importance for all {sum(c.size for c in criteria)} prunable channels of "
            f"{len(criteria)} groups: the loss does not depend on them (is loss_function computed from the model "
            "output, with autograd enabled?). Pruning would follow channel index order; nothing was pruned")
    names = [pruning_info.groups[g].root_name for g in pruning_info.prunable_group_indices]
    tied = [f"{name!r} ({c.size} channels, all {c[0]:.3g})" for name, c in zip(names, criteria)
            if c.size > 1 and np.all(c == c[0])]
    if tied:
        shown = ", ".join(tied[:5]) + (f" and {len(tied) - 5} more" if len(tied) > 5 else "")
        warnings.warn(f"channel importance is the same for every channel of {len(tied)} group(s) {shown}: their "
                      "channels cannot be ranked and would be pruned in index order (is the loss independent of "
                      "these layers?)", RuntimeWarning, stacklevel=3)


def run_calibration(
    model: nn.Module,
    dataloader: Iterable[Any],
    loss_function: Callable[[Any, Any], torch.Tensor],
    n_steps: Optional[int] = None,
    epochs: int = 1,
    sample_to_n_samples: Callable[[Any], int] = default_sample_to_n_samples,
    sample_to_model_inputs: Callable[[Any], Tuple[Tuple[Any, ...], Dict[str, Any]]] = default_sample_to_model_inputs,
    show_tqdm: Optional[bool] = None,
    entry_point: str = "forward",
    max_prunable_labels: int = 4096,
) -> PruningCalibrator:
    """Body of :func:`calibrate_model_for_pruning`; returns the calibrator (whose groups carry every index the
    surgery needs, so ``calibrate_and_prune_model`` prunes without tracing the model a second time)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if n_steps is not None and (isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1):
        raise ValueError(f"n_steps must be None or a positive integer, got {n_steps!r}")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if not callable(loss_function):
        raise TypeError(f"loss_function must be callable, got {type(loss_function).__name__}")
    check_show_tqdm(show_tqdm)
    calibrator = PruningCalibrator(model, entry_point=entry_point, max_prunable_labels=max_prunable_labels)
    total = n_steps
    if total is None:
        try:
            total = epochs * len(dataloader)  # type: ignore[arg-type]
        except TypeError:
            total = None
    bar = progress_bar(show_tqdm, total=total, desc="calibration", unit="batch")
    steps = samples = 0
    try:
        with calibrator:
            for p in model.parameters():  # only the gates need gradients; the calibrator restores the flags
                p.requires_grad_(False)
            for _ in range(epochs if n_steps is None else 10 ** 9):
                seen_in_epoch = 0
                for sample in dataloader:
                    seen_in_epoch += 1
                    args, kwargs = sample_to_model_inputs(sample)
                    output = model(*args, **kwargs)
                    loss = loss_function(output, sample)
                    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                        raise ValueError(f"loss_function must return a scalar tensor, got {loss!r}")
                    if loss.requires_grad:
                        _backward(loss, steps)
                    elif calibrator.n_gates:
                        raise ValueError(
                            f"loss_function returned a tensor that does not require grad (calibration step "
                            f"{steps + 1}): it does not depend on the model output through autograd (computed "
                            "under torch.no_grad(), from detached values or from the sample only?)")
                    steps += 1
                    samples += sample_to_n_samples(sample)
                    bar.update(1)
                    bar.set_postfix(samples=samples)
                    if n_steps is not None and steps >= n_steps:
                        break
                if seen_in_epoch == 0 or (n_steps is not None and steps >= n_steps):
                    break
    finally:
        bar.close()
    if steps == 0:
        raise ValueError("dataloader yielded no samples; calibration needs at least one batch")
    if calibrator.pruning_info is not None:
        check_importance(calibrator.pruning_info)
    return calibrator


def _backward(loss: torch.Tensor, step: int) -> None:
    try:
        loss.backward()
    except RuntimeError as err:
        if not any(text in str(err) for text in _REUSED_GRAPH_ERRORS):
            raise
        raise RuntimeError(
            f"calibration step {step + 1}: backward failed because the forward pass reused tensors computed in an "
            "earlier pass (a module keeps a tensor with autograd history between calls, e.g. a cache filled while "
            "the model ran with gradients before calibration). Clear that cache or call model.train() before "
            f"calibrating. torch said: {err}") from err


def calibrate_model_for_pruning(
    model: nn.Module,
    dataloader: Iterable[Any],
    loss_function: Callable[[Any, Any], torch.Tensor],
    n_steps: Optional[int] = None,
    epochs: int = 1,
    sample_to_n_samples: Callable[[Any], int] = default_sample_to_n_samples,
    sample_to_model_inputs: Callable[[Any], Tuple[Tuple[Any, ...], Dict[str, Any]]] = default_sample_to_model_inputs,
    show_tqdm: Optional[bool] = None,
    entry_point: str = "forward",
    max_prunable_labels: int = 4096,
) -> ModelPruningInfo:
    """Run forward + backward over calibration data and return the channel importances.

    The model runs in its current mode (train or eval) and is left exactly as
    it was: parameters get no gradients, buffers (BatchNorm statistics),
    modes, hooks and module attributes are restored.

    Args:
        model: model to calibrate.
        dataloader: iterable of samples (re-iterated once per epoch).
        loss_function: ``loss_function(model_output, sample) -> scalar tensor``.
        n_steps: stop after this many batches in total (None: ``epochs`` full passes).
        epochs: passes over ``dataloader`` when ``n_steps`` is None.
        sample_to_n_samples: batch size of a sample (for the progress bar).
        sample_to_model_inputs: sample -> ``(args, kwargs)`` of ``model``.
        show_tqdm: progress bar; None (default) shows it when stderr is a terminal.
        entry_point: traced method, see :class:`PruningCalibrator`.
        max_prunable_labels: groups with more channels are not pruned.

    Raises:
        ValueError: bad ``n_steps``/``epochs``, ``dataloader`` yields nothing,
            the loss is not a scalar or has no gradient, or every channel's
            importance is 0 (the loss does not depend on the channels).
        RuntimeError: a backward pass reused an earlier pass's graph (the
            message says what to do).

    Warns:
        RuntimeWarning: groups whose channels all have the same importance.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
        >>> data = [(torch.randn(4, 3), torch.randn(4, 1))]
        >>> info = calibrate_model_for_pruning(net, data, lambda out, s: ((out - s[1]) ** 2).mean())
        >>> info.n_steps
        1
    """
    return run_calibration(model, dataloader, loss_function, n_steps=n_steps, epochs=epochs,
                           sample_to_n_samples=sample_to_n_samples, sample_to_model_inputs=sample_to_model_inputs,
                           show_tqdm=show_tqdm, entry_point=entry_point,
                           max_prunable_labels=max_prunable_labels).pruning_info
