"""One-call structured pruning: calibrate, select labels, prune, optionally re-estimate BatchNorm.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
    ...                           torch.nn.Conv2d(8, 2, 1))
    >>> data = [torch.randn(2, 3, 8, 8)]
    >>> small = calibrate_and_prune_model_equal(net, data, lambda out, x: out.pow(2).mean(), pruning_ratio=0.5)
    >>> small[0].out_channels
    4
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import torch
from torch import nn

from sparsify.channels.selection import check_pruning_ratio, default_architecture_optimization_strategy

from .calibration import run_calibration
from .optimal import OptimalPruningLabelSelector
from .progress import check_show_tqdm
from .samples import default_sample_to_model_inputs, default_sample_to_n_samples
from .selection import PruningLabelSelector, UniformPruningLabelSelector
from .surgery import select_and_prune

__all__ = ["calibrate_and_prune_model", "calibrate_and_prune_model_equal", "calibrate_and_prune_model_optimal",
           "finetune_batchnorm"]

LossFunction = Callable[[Any, Any], torch.Tensor]
SampleToInputs = Callable[[Any], Tuple[Tuple[Any, ...], Dict[str, Any]]]


def finetune_batchnorm(model: nn.Module, dataloader: Iterable[Any], n_steps: Optional[int] = None,
                       sample_to_model_inputs: SampleToInputs = default_sample_to_model_inputs) -> int:
    """Re-estimate BatchNorm running statistics from ``dataloader`` (cumulative average).

    Only BatchNorm buffers change; the model's modes are restored. Returns the
    number of batches used. When ``dataloader`` yields nothing (e.g. a generator
    that calibration already consumed) or the model raises, the statistics are
    left as they were (a ``RuntimeWarning`` says so for an empty dataloader).

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.BatchNorm2d(2))
        >>> finetune_batchnorm(net, [torch.ones(2, 1, 3, 3)])
        1
    """
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not bns:
        return 0
    modes = {m: m.training for m in model.modules()}
    momenta = {m: m.momentum for m in bns}
    saved = {m: {k: b.clone() for k, b in m.named_buffers(recurse=False)} for m in bns}
    steps = 0
    try:
        model.eval()
        for m in bns:
            m.reset_running_stats()
            m.momentum = None
            m.train()
        with torch.no_grad():
            for sample in dataloader:
                args, kwargs = sample_to_model_inputs(sample)
                model(*args, **kwargs)
                steps += 1
                if n_steps is not None and steps >= n_steps:
                    break
    except BaseException:
        _restore_buffers(saved)
        raise
    finally:
        for m, mode in modes.items():
            m.training = mode
        for m, momentum in momenta.items():
            m.momentum = momentum
    if steps == 0:
        _restore_buffers(saved)
        warnings.warn("finetune_batchnorm: dataloader yielded no samples (a generator or iterator already "
                      "consumed?); BatchNorm statistics were kept as they were. Pass a re-iterable dataloader "
                      "(a list or a torch DataLoader)", RuntimeWarning, stacklevel=2)
    return steps


@torch.no_grad()
def _restore_buffers(saved: Dict[nn.Module, Dict[str, torch.Tensor]]) -> None:
    for m, buffers in saved.items():
        for k, b in buffers.items():
            getattr(m, k).copy_(b)


def calibrate_and_prune_model(
    label_selector: PruningLabelSelector,
    model: nn.Module,
    dataloader: Iterable[Any],
    loss_function: LossFunction,
    finetune_bn: bool = False,
    calibration_steps: Optional[int] = None,
    calibration_epochs: int = 1,
    sample_to_n_samples: Callable[[Any], int] = default_sample_to_n_samples,
    sample_to_model_inputs: SampleToInputs = default_sample_to_model_inputs,
    show_tqdm: Optional[bool] = None,
    entry_point: str = "forward",
    max_prunable_labels: int = 4096,
) -> nn.Module:
    """Calibrate ``model``, choose labels with ``label_selector`` and prune it in place.

    Args:
        label_selector: any :class:`PruningLabelSelector`.
        model: model to prune (pruned in place and returned).
        dataloader: calibration samples.
        loss_function: ``loss_function(model_output, sample) -> scalar tensor``.
        finetune_bn: re-estimate BatchNorm statistics on the calibration data after pruning.
        calibration_steps: number of calibration batches (None: ``calibration_epochs`` passes).
        calibration_epochs: passes over ``dataloader`` when ``calibration_steps`` is None.
        sample_to_n_samples: batch size of a sample.
        sample_to_model_inputs: sample -> ``(args, kwargs)`` for ``model``.
        show_tqdm: progress bar during calibration; None (default) shows it when stderr is a terminal.
        entry_point: traced method, e.g. ``"backbone.forward"`` for detectors.
        max_prunable_labels: groups with more channels are not pruned.

    Returns:
        The pruned model (a plain ``nn.Module``).

    Raises:
        TypeError / ValueError: bad arguments; the model is then unchanged.
    """
    if not isinstance(label_selector, PruningLabelSelector):
        raise TypeError(f"label_selector must be a PruningLabelSelector, got {type(label_selector).__name__}")
    if not isinstance(finetune_bn, bool):
        raise TypeError(f"finetune_bn must be a bool, got {finetune_bn!r}")
    check_show_tqdm(show_tqdm)
    calibrator = run_calibration(model, dataloader, loss_function, n_steps=calibration_steps,
                                 epochs=calibration_epochs, sample_to_n_samples=sample_to_n_samples,
                                 sample_to_model_inputs=sample_to_model_inputs, show_tqdm=show_tqdm,
                                 entry_point=entry_point, max_prunable_labels=max_prunable_labels)
    info = calibrator.pruning_info
    pruned = select_and_prune(model, info, label_selector, asked_ratio=getattr(label_selector, "pruning_ratio", None))
    if finetune_bn:
        finetune_batchnorm(pruned, dataloader, n_steps=calibration_steps, sample_to_model_inputs=sample_to_model_inputs)
    return pruned


def calibrate_and_prune_model_equal(
    model: nn.Module,
    dataloader: Iterable[Any],
    loss_function: LossFunction,
    pruning_ratio: float = 0.5,
    finetune_bn: bool = False,
    calibration_steps: Optional[int] = None,
    calibration_epochs: int = 1,
    sample_to_n_samples: Callable[[Any], int] = default_sample_to_n_samples,
    sample_to_model_inputs: SampleToInputs = default_sample_to_model_inputs,
    show_tqdm: Optional[bool] = None,
    entry_point: str = "forward",
    max_prunable_labels: int = 4096,
) -> nn.Module:
    """Prune the same fraction ``pruning_ratio`` (in [0, 1)) of every prunable group.

    See :func:`calibrate_and_prune_model` for the other arguments.
    """
    check_pruning_ratio(pruning_ratio)
    return calibrate_and_prune_model(UniformPruningLabelSelector(pruning_ratio), model, dataloader, loss_function,
                                     finetune_bn=finetune_bn, calibration_steps=calibration_steps,
                                     calibration_epochs=calibration_epochs, sample_to_n_samples=sample_to_n_samples,
                                     sample_to_model_inputs=sample_to_model_inputs, show_tqdm=show_tqdm,
                                     entry_point=entry_point, max_prunable_labels=max_prunable_labels)


def calibrate_and_prune_model_optimal(
    model: nn.Module,
    dataloader: Iterable[Any],
    loss_function: LossFunction,
    latency_calculation_function: Callable[[nn.Module], float],
    target_latency: float,
    finetune_bn: bool = False,
    calibration_steps: Optional[int] = None,
    calibration_epochs: int = 1,
    sample_to_n_samples: Callable[[Any], int] = default_sample_to_n_samples,
    sample_to_model_inputs: SampleToInputs = default_sample_to_model_inputs,
    show_tqdm: Optional[bool] = None,
    architecture_optimization_strategy: Callable[[int], Tuple[int, int]] = default_architecture_optimization_strategy,
    n_search_steps: int = 200,
    entry_point: str = "forward",
    *,
    max_prunable_labels: int = 4096,
    **kwargs: Any,
) -> nn.Module:
    """Prune to meet ``target_latency`` as measured by ``latency_calculation_function``.

    Calibrates, then searches per-group pruning amounts with
    :class:`OptimalPruningLabelSelector`: ``n_search_steps`` candidates (pruned
    copies), each measured by ``latency_calculation_function`` exactly once and,
    when it meets the target, scored by how close its outputs stay to the
    original model's on the first calibration batch. ``show_tqdm`` also shows the
    search's progress. ``finetune_bn=True`` is recommended: candidates are scored
    with re-estimated BatchNorm statistics.

    Args:
        latency_calculation_function: ``f(model) -> float`` (seconds, MACs, ...).
        target_latency: the value the pruned model must not exceed (same units).
        architecture_optimization_strategy: ``f(n_channels) -> (min_channels, step)``.
        n_search_steps: number of candidates measured (latency function calls), >= 2.
        **kwargs: passed to the label selector: ``seed``, ``evaluation_function``.

    See :func:`calibrate_and_prune_model` for the other arguments.
    """
    check_show_tqdm(show_tqdm)
    selector = OptimalPruningLabelSelector(model, latency_calculation_function, target_latency,
                                           architecture_optimization_strategy=architecture_optimization_strategy,
                                           n_search_steps=n_search_steps, **{"show_tqdm": show_tqdm, **kwargs})
    return calibrate_and_prune_model(selector, model, dataloader, loss_function, finetune_bn=finetune_bn,
                                     calibration_steps=calibration_steps, calibration_epochs=calibration_epochs,
                                     sample_to_n_samples=sample_to_n_samples,
                                     sample_to_model_inputs=sample_to_model_inputs, show_tqdm=show_tqdm,
                                     entry_point=entry_point, max_prunable_labels=max_prunable_labels)
