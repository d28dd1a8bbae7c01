"""Latency-driven label selection with optuna's TPE sampler.

For every prunable group the search picks how many channels to keep, from the
range allowed by ``architecture_optimization_strategy``; the least important
channels are pruned. A group that spans a concatenation keeps, in every
source layer (segment), at least the strategy's minimum for that layer, so
every candidate is a valid network. A candidate is feasible when the pruned
copy of the model meets ``target_latency``; among feasible candidates the one
that removes the least total importance wins. All selection math (pruning
order, costs, config checks) lives in :mod:`sparsify.channel_selection`; this
module only measures latencies of pruned copies.

Example:
    >>> import torch
    >>> from sparsify_torch.channels import PruningCalibrator
    >>> from sparsify_torch.channels.metrics import count_macs
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 2, 1))
    >>> x = torch.randn(2, 3, 8, 8)
    >>> with PruningCalibrator(net) as c:
    ...     net(x).sum().backward()
    >>> latency = lambda m: count_macs(m, x[:1])
    >>> sel = OptimalPruningLabelSelector(net, latency, target_latency=0.6 * latency(net), n_search_steps=20)
    >>> labels = sel.select(c.pruning_info)
    >>> sel.baseline_latency > sel.minimal_network_latency
    True
"""
from __future__ import annotations

import math
from typing import Callable, List, Optional, Sequence, Tuple

from torch import nn

from sparsify.channel_selection import (architecture_search_space, check_pruning_config, cumulative_pruning_cost,
                                        default_architecture_optimization_strategy,
                                        get_least_important_labels_by_config, iterate_over_gate_criteria,
                                        strategy_min_channels)

from .info import ModelPruningInfo
from .selection import PruningLabelSelector
from .surgery import prune_model

__all__ = ["OptimalPruningLabelSelector"]


class OptimalPruningLabelSelector(PruningLabelSelector):
    """Search per-group pruning amounts that meet a latency target.

    Args:
        model: the calibrated model (not modified; candidates are pruned copies).
        latency_calculation_function: ``f(model) -> float``, any monotone cost
            (seconds, MACs, ...).
        target_latency: the cost the pruned model must not exceed.
        architecture_optimization_strategy: ``f(n_channels) -> (min_channels, step)``; ``min_channels``
            also applies to each source layer (segment) of a concatenated group.
        n_search_steps: number of optuna trials (>= 1).
        seed: sampler seed, for reproducible searches.

    Attributes (after ``select``):
        baseline_latency, minimal_network_latency, pruning_cfg (channels pruned per group).

    Raises:
        TypeError: ``model``, ``latency_calculation_function`` or the strategy of the wrong type.
        ValueError: ``target_latency`` not positive, ``n_search_steps`` < 1 (at
            construction) or below the minimal network's latency (at ``select``).
    """

    def __init__(self, model: nn.Module, latency_calculation_function: Callable[[nn.Module], float],
                 target_latency: float,
                 architecture_optimization_strategy: Callable[[int], Tuple[int, int]] =
                 default_architecture_optimization_strategy,
                 n_search_steps: int = 200, seed: Optional[int] = 0) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(latency_calculation_function):
            raise TypeError("latency_calculation_function must be callable, got "
                            f"{type(latency_calculation_function).__name__}")
        if isinstance(target_latency, bool) or not isinstance(target_latency, (int, float)) \
                or not math.isfinite(target_latency) or target_latency <= 0:
            raise ValueError(f"target_latency must be a positive finite number, got {target_latency!r}")
        if isinstance(n_search_steps, bool) or not isinstance(n_search_steps, int) or n_search_steps < 1:
            raise ValueError(f"n_search_steps must be a positive integer, got {n_search_steps!r}")
        self.model = model
        self.latency_calculation_function = latency_calculation_function
        self.target_latency = float(target_latency)
        if not callable(architecture_optimization_strategy):
            raise TypeError("architecture_optimization_strategy must be callable, got "
                            f"{type(architecture_optimization_strategy).__name__}")
        self.architecture_optimization_strategy = architecture_optimization_strategy
        self._min_channels = strategy_min_channels(architecture_optimization_strategy)
        self.n_search_steps = n_search_steps
        self.seed = seed
        self.baseline_latency: Optional[float] = None
        self.minimal_network_latency: Optional[float] = None
        self.pruning_cfg: Optional[List[int]] = None

    def _latency(self, pruning_info: ModelPruningInfo, cfg: Sequence[int]) -> float:
        labels = get_least_important_labels_by_config(pruning_info, cfg, self._min_channels)
        if not labels:
            return float(self.latency_calculation_function(self.model))
        candidate = prune_model(self.model, pruning_info, labels, inplace=False, check=False)  # a throwaway copy
        return float(self.latency_calculation_function(candidate))

    def _select(self, pruning_info: ModelPruningInfo) -> Sequence[int]:
        import optuna

        # every source layer (segment) of a concatenation keeps the strategy's minimum for its own size
        space = architecture_search_space(pruning_info, self.architecture_optimization_strategy)  # kept counts
        sizes = [choices[-1] for choices in space]
        segments = getattr(pruning_info, "group_segments", None) or [None] * len(sizes)
        # cost of pruning k channels of group i: least total importance, segments respected
        cost = [cumulative_pruning_cost(c, seg, self._min_channels)
                for (_, c), seg in zip(iterate_over_gate_criteria(pruning_info), segments)]
        self.baseline_latency = self._latency(pruning_info, [0] * len(sizes))
        minimal_cfg = [n - choices[0] for n, choices in zip(sizes, space)]
        self.minimal_network_latency = self._latency(pruning_info, minimal_cfg)
        if self.target_latency < self.minimal_network_latency:
            raise ValueError(f"target_latency={self.target_latency:g} is below the latency of the smallest network "
                             f"the search space allows ({self.minimal_network_latency:g}; baseline "
                             f"{self.baseline_latency:g})")
        if self.target_latency >= self.baseline_latency:
            self.pruning_cfg = [0] * len(sizes)
            return []

        def objective(trial) -> float:
            cfg = [n - int(trial.suggest_categorical(f"g{i}", choices)) if len(choices) > 1 else 0
                   for i, (n, choices) in enumerate(zip(sizes, space))]
            latency = min(self._latency(pruning_info, cfg), 1e300)
            trial.set_user_attr("latency", latency)
            trial.set_user_attr("cfg", cfg)
            trial.set_user_attr("violation", max(0.0, latency - self.target_latency))
            trial.set_constraint("latency", latency - self.target_latency)
            return float(sum(c[k] for c, k in zip(cost, cfg)))

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=min(10, self.n_search_steps))
        study = optuna.create_study(direction="minimize", sampler=sampler)
        # the minimal network (feasible: checked above) is the first trial
        study.enqueue_trial({f"g{i}": choices[0] for i, choices in enumerate(space) if len(choices) > 1})
        study.optimize(objective, n_trials=self.n_search_steps)
        feasible = [t for t in study.trials if t.value is not None and t.user_attrs.get("violation", 1.0) <= 0]
        # the enqueued minimal network is feasible unless the latency function is noisy
        self.pruning_cfg = list(min(feasible, key=lambda t: (t.value, t.number)).user_attrs["cfg"]) if feasible \
            else minimal_cfg
        check_pruning_config(self.pruning_cfg, pruning_info, self._min_channels)
        return get_least_important_labels_by_config(pruning_info, self.pruning_cfg, self._min_channels)
