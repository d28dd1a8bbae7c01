"""Latency-driven label selection: search per-group channel counts that meet a latency target.

For every prunable group the search picks how many channels to keep, from the
range allowed by ``architecture_optimization_strategy`` (every source layer of a
concatenated group keeps the strategy's minimum for its own size, so every
candidate is a valid network); the least important channels of each group go.
Each candidate is a pruned copy of the model: ``latency_calculation_function``
runs on it exactly once (``n_search_steps`` is the number of these calls) and,
when it meets ``target_latency``, the candidate is scored by
``evaluation_function`` (lower is better). The best feasible candidate wins.

The default score is :class:`OutputDiscrepancy`: how far the candidate's outputs
are from the original model's on the calibration inputs, with BatchNorm layers
using batch statistics (what ``finetune_bn=True`` re-estimates). Unlike the sum
of calibrated channel importances, it sees how much a layer can really lose
(importances are comparable within a layer, not between layers).

Search order: the unpruned model (its latency is ``baseline_latency``), the
smallest network of the search space (``minimal_network_latency``), a
bisection over uniform pruning ratios (so the result is never worse, by the
score, than the best uniform candidate found), then optuna's TPE sampler with
the latency target as a constraint.

Example:
    >>> import torch
    >>> from sparsify_torch.channels import PruningCalibrator
    >>> from sparsify_torch.channels.metrics import count_macs
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 2, 1))
    >>> x = torch.randn(2, 3, 8, 8)
    >>> with PruningCalibrator(net) as c:
    ...     net(x).sum().backward()
    >>> latency = lambda m: count_macs(m, x[:1])
    >>> sel = OptimalPruningLabelSelector(net, latency, target_latency=0.6 * latency(net), n_search_steps=10,
    ...                                   show_tqdm=False)
    >>> labels = sel.select(c.pruning_info)
    >>> sel.baseline_latency > sel.minimal_network_latency, sel.n_latency_calls
    (True, 10)
"""
from __future__ import annotations

import contextlib
import copy
import math
import warnings
from numbers import Real
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import nn

from sparsify.channels.selection import (architecture_search_space, default_architecture_optimization_strategy,
                                        least_important_labels, strategy_min_channels)

from .graph import resolve_entry_point
from .info import ModelPruningInfo
from .progress import check_show_tqdm, progress_bar
from .selection import TopKPruningLabelSelector
from .surgery import prune_model

__all__ = ["OptimalPruningLabelSelector", "OutputDiscrepancy"]

Inputs = Tuple[Tuple[Any, ...], Dict[str, Any]]
_SELECTOR_KWARGS = ("seed", "evaluation_function", "show_tqdm")


def _float_tensors(obj: Any) -> List[torch.Tensor]:
    """Floating-point tensors of a nest of tensors, tuples, lists and dicts, in a fixed order."""
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.is_floating_point() or obj.is_complex() else []
    if isinstance(obj, dict):
        return [t for key in obj for t in _float_tensors(obj[key])]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in _float_tensors(item)]
    return []


@contextlib.contextmanager
def _batchnorm_batch_statistics(model: nn.Module) -> Iterator[None]:
    """BatchNorm layers normalise with the statistics of the batch (as after re-estimating them)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    modes = [(m, m.training, m.momentum) for m in norms]
    try:
        for m in norms:
            m.train()
            m.momentum = 0.0  # running statistics stay as they are
        yield
    finally:
        for m, mode, momentum in modes:
            m.training = mode
            m.momentum = momentum


class OutputDiscrepancy:
    """Score of a pruned candidate: squared distance of its outputs from the original model's, relative.

    ``sum ||candidate(x) - original(x)||^2 / sum ||original(x)||^2`` over the
    floating-point tensors the entry point returns, for every ``x`` in
    ``inputs``. The original model runs in its own mode; the candidate with
    BatchNorm layers using batch statistics (when the inputs allow it), so the
    score reflects what the architecture can do once BatchNorm statistics are
    re-estimated (``finetune_bn=True``) rather than statistics that pruning
    made stale.

    Args:
        model: the original model (not modified; a copy is run once).
        inputs: ``(args, kwargs)`` for the entry point, one pair per batch.
        entry_point: the method to run, e.g. ``"forward"`` or ``"backbone.forward"``.

    Raises:
        ValueError: the entry point returns no floating-point tensor, or (at
            call time) a candidate returns a different output structure.

    Example:
        >>> net = torch.nn.Linear(2, 2)
        >>> score = OutputDiscrepancy(net, [((torch.ones(3, 2),), {})])
        >>> score(copy.deepcopy(net))
        0.0
    """

    def __init__(self, model: nn.Module, inputs: Sequence[Inputs], entry_point: str = "forward") -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.inputs = list(inputs)
        if not self.inputs:
            raise ValueError("OutputDiscrepancy needs at least one (args, kwargs) input pair")
        self.entry_point = entry_point
        reference = copy.deepcopy(model)
        self.reference = [[t.detach().double() for t in _float_tensors(out)] for out in self._run(reference)]
        if not any(self.reference):
            raise ValueError(f"the entry point {entry_point!r} returns no floating-point tensor, so candidates "
                             "cannot be compared with the original model; pass evaluation_function=...")
        self.norm = max(sum(float((t ** 2).sum()) for ts in self.reference for t in ts), 1e-300)
        try:
            with _batchnorm_batch_statistics(reference):
                self._run(reference)
            self.batch_statistics = True
        except (ValueError, RuntimeError):  # e.g. one value per channel: BatchNorm cannot use batch statistics
            self.batch_statistics = False

    def _run(self, model: nn.Module) -> List[Any]:
        owner, method = resolve_entry_point(model, self.entry_point)
        call = getattr(owner, method)
        with torch.no_grad():
            return [call(*args, **kwargs) for args, kwargs in self.inputs]

    def __call__(self, candidate: nn.Module) -> float:
        with _batchnorm_batch_statistics(candidate) if self.batch_statistics else contextlib.nullcontext():
            outputs = self._run(candidate)
        total = 0.0
        for i, (out, ref) in enumerate(zip(outputs, self.reference)):
            got = _float_tensors(out)
            if [tuple(t.shape) for t in got] != [tuple(t.shape) for t in ref]:
                raise ValueError(f"a pruned candidate's entry point {self.entry_point!r} returned tensors of shapes "
                                 f"{[tuple(t.shape) for t in got]} for input {i}, the original model "
                                 f"{[tuple(t.shape) for t in ref]}; pass evaluation_function=... to score "
                                 "candidates another way")
            total += sum(float(((g.double() - r) ** 2).sum()) for g, r in zip(got, ref))
        value = total / self.norm
        return value if math.isfinite(value) else math.inf


class OptimalPruningLabelSelector(TopKPruningLabelSelector):
    """Search per-group pruning amounts that meet a latency target (optuna TPE, see the module docstring).

    Args:
        model: the calibrated model (not modified; candidates are pruned copies).
        latency_calculation_function: ``f(model) -> float``, any cost (seconds,
            MACs, ...) of a pruned copy; called exactly ``n_search_steps`` times.
        target_latency: the cost the pruned model must not exceed.
        architecture_optimization_strategy: ``f(n_channels) -> (min_channels, step)``;
            ``min_channels`` also applies to each source layer (segment) of a
            concatenated group.
        n_search_steps: number of candidates measured (= latency function calls), >= 2.
        **kwargs: ``seed`` (sampler seed, default 0; None: random),
            ``evaluation_function`` (``f(pruned_model) -> float``, lower is
            better; default :class:`OutputDiscrepancy` on the calibration example
            inputs), ``show_tqdm`` (progress bar; default: when stderr is a terminal).

    Attributes (after ``select``): ``baseline_latency``, ``minimal_network_latency``,
    ``pruning_cfg`` (channels pruned per group), ``n_latency_calls``.

    Raises:
        TypeError: arguments of the wrong type or unknown keyword arguments.
        ValueError: ``target_latency`` not positive, ``n_search_steps`` < 2 (at
            construction), or a target below the minimal network's latency (at ``select``).
        RuntimeError: (at ``select``) the latency or evaluation function failed
            on a candidate; the message names the candidate.
    """

    def __init__(self, model: nn.Module, latency_calculation_function: Callable[[nn.Module], float],
                 target_latency: float, *,
                 architecture_optimization_strategy: Callable[[int], Tuple[int, int]] =
                 default_architecture_optimization_strategy,
                 n_search_steps: int = 200, **kwargs: Any) -> None:
        super().__init__()
        unknown = sorted(set(kwargs) - set(_SELECTOR_KWARGS))
        if unknown:
            raise TypeError(f"OptimalPruningLabelSelector got unexpected keyword argument(s) {unknown}; the "
                            f"selector's extra arguments are {list(_SELECTOR_KWARGS)}")
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(latency_calculation_function):
            raise TypeError("latency_calculation_function must be callable, got "
                            f"{type(latency_calculation_function).__name__}")
        if isinstance(target_latency, bool) or not isinstance(target_latency, Real) \
                or not math.isfinite(target_latency) or target_latency <= 0:
            raise ValueError(f"target_latency must be a positive finite number, got {target_latency!r}")
        if isinstance(n_search_steps, bool) or not isinstance(n_search_steps, int) or n_search_steps < 2:
            raise ValueError(f"n_search_steps must be an integer >= 2 (the search measures the unpruned and the "
                             f"smallest network first), got {n_search_steps!r}")
        if not callable(architecture_optimization_strategy):
            raise TypeError("architecture_optimization_strategy must be callable, got "
                            f"{type(architecture_optimization_strategy).__name__}")
        seed = kwargs.get("seed", 0)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an integer or None, got {seed!r}")
        evaluation_function = kwargs.get("evaluation_function")
        if evaluation_function is not None and not callable(evaluation_function):
            raise TypeError(f"evaluation_function must be callable or None, got {type(evaluation_function).__name__}")
        check_show_tqdm(kwargs.get("show_tqdm"))
        self.model = model
        self.latency_calculation_function = latency_calculation_function
        self.target_latency = float(target_latency)
        self.architecture_optimization_strategy = architecture_optimization_strategy
        self._n_search_steps = n_search_steps
        self.seed = seed
        self.evaluation_function = evaluation_function
        self.show_tqdm = kwargs.get("show_tqdm")
        self._baseline_latency: Optional[float] = None
        self._minimal_latency: Optional[float] = None
        self.n_latency_calls = 0

    # --- documented properties -------------------------------------------------------------------
    @property
    def n_search_steps(self) -> int:
        """Number of candidate models measured (latency function calls) during the search."""
        return self._n_search_steps

    @property
    def baseline_latency(self) -> Optional[float]:
        """Latency of the unpruned model (None before ``select``)."""
        return self._baseline_latency

    @property
    def minimal_network_latency(self) -> Optional[float]:
        """Latency of the smallest network the strategy allows (None before ``select``, or when the target
        is at or above the baseline and the search stopped early)."""
        return self._minimal_latency

    # --- the search --------------------------------------------------------------------------------
    def get_config_for_pruning(self, pruning_info: ModelPruningInfo) -> List[int]:
        """Run the search; return the number of channels to prune in each prunable group."""
        if not isinstance(pruning_info, ModelPruningInfo):
            raise TypeError("OptimalPruningLabelSelector measures pruned copies of the model, so it needs the "
                            f"ModelPruningInfo of a calibration, got {type(pruning_info).__name__}")
        space = architecture_search_space(pruning_info, self.architecture_optimization_strategy)  # kept counts
        self.n_latency_calls = 0
        self._baseline_latency = self._minimal_latency = None
        search = _Search(self, pruning_info, space, strategy_min_channels(self.architecture_optimization_strategy))
        try:
            kept = search.run()
        finally:
            search.close()
            self._baseline_latency, self._minimal_latency = search.baseline_latency, search.minimal_latency
        return [n - k for n, k in zip(search.sizes, kept)]


def _uniform_kept(space: Sequence[Sequence[int]], ratio: float) -> Tuple[int, ...]:
    """Kept counts for pruning ``ratio`` of every group, on the search grid (at most ``ratio`` pruned)."""
    out = []
    for choices in space:
        n = choices[-1]
        want = n - min(math.ceil(ratio * n - 0.5), n)
        out.append(next((c for c in choices if c >= want), choices[-1]))
    return tuple(out)


class _Search:
    """One run of the latency search: candidates measured once each, the best feasible one kept.

    ``baseline_latency`` and ``minimal_latency`` are set as they are measured (the selector reports them).
    """

    def __init__(self, selector: OptimalPruningLabelSelector, info: ModelPruningInfo,
                 space: List[List[int]], min_channels) -> None:
        self.selector = selector
        self.info = info
        self.space = space
        self.sizes = [choices[-1] for choices in space]
        self.dims = [i for i, choices in enumerate(space) if len(choices) > 1]
        self.n_configs = math.prod(len(space[i]) for i in self.dims)
        self.target = selector.target_latency
        self.budget = selector.n_search_steps
        self.min_channels = min_channels
        self.results: Dict[Tuple[int, ...], Tuple[float, float]] = {}  # kept -> (latency, score)
        self.evaluate = selector.evaluation_function
        self.bar = progress_bar(selector.show_tqdm, total=self.budget, desc="latency search", unit="model")
        self.baseline_latency: Optional[float] = None
        self.minimal_latency: Optional[float] = None

    def close(self) -> None:
        self.bar.close()

    # --- measuring one candidate -----------------------------------------------------------------
    def describe(self, kept: Sequence[int]) -> str:
        names = [self.info.groups[g].root_name for g in self.info.prunable_group_indices]
        return ", ".join(f"{name}: {k}/{n}" for name, k, n in zip(names, kept, self.sizes) if k != n) or "unpruned"

    def measure(self, kept: Tuple[int, ...]) -> Tuple[float, float]:
        if kept in self.results:
            return self.results[kept]
        selector = self.selector
        labels = least_important_labels(self.info, [n - k for n, k in zip(self.sizes, kept)],
                                                      self.min_channels)
        candidate = prune_model(selector.model, self.info, labels, inplace=False, check=False)  # a throwaway copy
        step = selector.n_latency_calls + 1
        try:
            raw = selector.latency_calculation_function(candidate)
        except Exception as err:
            raise RuntimeError(f"latency_calculation_function raised {type(err).__name__}: {err} (latency search "
                               f"step {step} of {self.budget}, candidate with channels kept: "
                               f"{self.describe(kept)})") from err
        selector.n_latency_calls = step
        try:
            latency = float(raw)
        except (TypeError, ValueError, RuntimeError):
            latency = math.nan
        if not math.isfinite(latency):
            raise ValueError(f"latency_calculation_function must return a finite number, got {raw!r} (latency "
                             f"search step {step}, candidate with channels kept: {self.describe(kept)})")
        score = math.inf
        if latency <= self.target and step > 1:  # the unpruned model needs no score: it is never chosen
            if self.evaluate is None:
                self.evaluate = OutputDiscrepancy(selector.model, [self.info.example_inputs], self.info.entry_point)
            try:
                score = float(self.evaluate(candidate))
            except Exception as err:
                raise RuntimeError(f"evaluation_function raised {type(err).__name__}: {err} (latency search step "
                                   f"{step}, candidate with channels kept: {self.describe(kept)})") from err
            if math.isnan(score):
                score = math.inf
        self.results[kept] = (latency, score)
        self.bar.update(1)
        best = self.best()
        if best is not None:
            self.bar.set_postfix(best_score=f"{self.results[best][1]:.4g}",
                                 best_latency=f"{self.results[best][0]:.4g}")
        return latency, score

    def best(self) -> Optional[Tuple[int, ...]]:
        feasible = [k for k, (lat, _) in self.results.items() if lat <= self.target]
        # lowest score; among equal scores the least pruned (highest latency within the target)
        return min(feasible, key=lambda k: (self.results[k][1], -self.results[k][0])) if feasible else None

    def remaining(self) -> int:
        return self.budget - self.selector.n_latency_calls

    # --- the phases --------------------------------------------------------------------------------
    def run(self) -> Tuple[int, ...]:
        full = tuple(self.sizes)
        self.baseline_latency = self.measure(full)[0]
        if self.target >= self.baseline_latency:
            return full
        minimal = tuple(choices[0] for choices in self.space)
        self.minimal_latency = self.measure(minimal)[0]
        if self.target < self.minimal_latency:
            raise ValueError(f"target_latency={self.target:g} is below the latency of the smallest network the "
                             f"search space allows ({self.minimal_latency:g}; baseline "
                             f"{self.baseline_latency:g}); lower the strategy's minimum channels or raise "
                             "the target")
        history = [full, minimal] + self.bisect_uniform()
        if self.remaining() > 0 and len(self.results) < self.n_configs:
            self.tpe(history)
        return self.best()

    def bisect_uniform(self) -> List[Tuple[int, ...]]:
        """Bisection over one pruning ratio for all groups: the boundary of the target, ~log2(channels) steps."""
        measured: List[Tuple[int, ...]] = []
        lo, hi = 0.0, 1.0  # ratio 0 is infeasible (the baseline), 1 feasible (the minimal network)
        resolution = 0.5 / max(self.sizes + [1])
        while hi - lo > resolution and self.remaining() > 0:
            mid = 0.5 * (lo + hi)
            kept = _uniform_kept(self.space, mid)
            if kept == _uniform_kept(self.space, lo):
                lo = mid
                continue
            if kept == _uniform_kept(self.space, hi):
                hi = mid
                continue
            latency, _ = self.measure(kept)
            measured.append(kept)
            if latency <= self.target:
                hi = mid
            else:
                lo = mid
        return measured

    def tpe(self, history: List[Tuple[int, ...]]) -> None:
        import optuna

        distributions = {f"g{i}": optuna.distributions.CategoricalDistribution(self.space[i]) for i in self.dims}
        use_set_constraint = hasattr(optuna.trial.Trial, "set_constraint")
        with warnings.catch_warnings(), _quiet_optuna():
            warnings.simplefilter("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
            sampler_kwargs = dict(seed=self.selector.seed, multivariate=True, n_startup_trials=10)
            if not use_set_constraint:  # optuna < 5
                sampler_kwargs["constraints_func"] = lambda trial: [trial.user_attrs["constraint"]]
            study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(**sampler_kwargs))

            def tell(trial, kept: Tuple[int, ...]) -> None:
                latency, score = self.measure(kept)
                if use_set_constraint:
                    trial.set_constraint("latency", latency - self.target)
                else:
                    trial.set_user_attr("constraint", latency - self.target)
                study.tell(trial, score)

            for kept in history:  # what the earlier phases measured, so the sampler starts from it
                study.enqueue_trial({f"g{i}": kept[i] for i in self.dims})
                tell(study.ask(distributions), kept)
            asks = 0
            while self.remaining() > 0 and len(self.results) < self.n_configs and asks < 50 * self.budget:
                asks += 1
                trial = study.ask(distributions)
                kept = tuple(int(trial.params[f"g{i}"]) if i in self.dims else self.space[i][0]
                             for i in range(len(self.space)))
                tell(trial, kept)


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """optuna logs at WARNING only inside the search; the user's verbosity is restored afterwards."""
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)
