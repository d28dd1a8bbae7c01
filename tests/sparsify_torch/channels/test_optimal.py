"""OptimalPruningLabelSelector: the search's phases, exact latency calls, scoring, errors."""
import copy
import math

import numpy as np
import optuna
import pytest
import torch
from torch import nn

from conftest import mse_loss
from sparsify.channels.selection import ChannelScores
from sparsify_torch.channels import OptimalPruningLabelSelector, PruningCalibrator, calibrate_model_for_pruning
from sparsify_torch.channels.metrics import count_macs
from sparsify_torch.channels.optimal import OutputDiscrepancy

ONE = lambda n: (1, 1)  # noqa: E731  every channel count from 1 to n


def calibrated(net, batches):
    return calibrate_model_for_pruning(net, batches, mse_loss)


def macs_of(x):
    return lambda model: float(count_macs(model, x))


def kept(model):
    return model.conv1.out_channels, model.stem.out_channels + model.side.out_channels, model.head.out_channels


class Recorder:
    """Latency function that records every candidate it measures."""

    def __init__(self, x):
        self.macs = macs_of(x)
        self.seen = []

    def __call__(self, model):
        self.seen.append((kept(model), self.macs(model)))
        return self.seen[-1][1]


def test_selector_attributes_and_minimal_network(residual_net, batches):
    info = calibrated(residual_net, batches)
    latency = macs_of(batches[0][:1])
    selector = OptimalPruningLabelSelector(residual_net, latency, 0.7 * latency(residual_net), n_search_steps=15,
                                           architecture_optimization_strategy=lambda n: (max(1, n // 4), 1))
    assert selector.n_search_steps == 15 and selector.pruning_cfg is None and selector.baseline_latency is None
    labels = selector.select(info)
    assert selector.baseline_latency == latency(residual_net) == 57584.0
    # minimal network: conv1 keeps 6 // 4 = 1; the stem/side concat group keeps 12 // 4 = 3 = 8 // 4 from the
    # stem stream + 4 // 4 from "side" (each source layer keeps its own minimum); head keeps 1. MACs on 8x8:
    # stem 64*2*3*9 + conv1 64*1*2*9 + conv2 64*2 + side 64*2 + dw 64*3*9 + head 64*3 + fc 3*16
    assert selector.minimal_network_latency == 3456 + 1152 + 128 + 128 + 1728 + 192 + 48 == 6832.0
    assert selector.labels_for_pruning == labels and len(selector.pruning_cfg) == 3
    assert sum(selector.pruning_cfg) == len(labels) > 0 and selector.n_latency_calls == 15


def test_every_latency_call_is_a_distinct_candidate_and_the_best_scored_feasible_one_wins(residual_net, batches):
    info = calibrated(residual_net, batches)
    latency = Recorder(batches[0][:1])
    target = 0.5 * latency.macs(residual_net)
    scores = {}

    def evaluation(model):
        scores[kept(model)] = float(model.conv1.out_channels - model.head.out_channels)  # any deterministic score
        return scores[kept(model)]

    selector = OptimalPruningLabelSelector(residual_net, latency, target, architecture_optimization_strategy=ONE,
                                           n_search_steps=40, evaluation_function=evaluation, show_tqdm=False)
    config = selector.get_config_for_pruning(info)
    configs = [k for k, _ in latency.seen]
    assert len(configs) == 40 == len(set(configs))  # no candidate measured twice
    assert configs[0] == (6, 12, 5) and latency.seen[0][1] == selector.baseline_latency  # unpruned first
    assert configs[1] == (1, 2, 1) and latency.seen[1][1] == selector.minimal_network_latency  # then the smallest
    # only feasible candidates are scored; the winner has the lowest score
    assert sorted(scores) == sorted(k for k, lat in latency.seen if lat <= target)
    best = (6 - config[0], 12 - config[1], 5 - config[2])
    assert scores[best] == min(scores.values())


def test_bisection_over_uniform_ratios_comes_before_the_sampler(residual_net, batches):
    """Phase 3 measures uniform configurations (one ratio for every group) closing in on the target, so the
    result is never worse, by the score, than the best uniform candidate found."""
    info = calibrated(residual_net, batches)
    latency = Recorder(batches[0][:1])
    target = 0.5 * latency.macs(residual_net)
    selector = OptimalPruningLabelSelector(residual_net, latency, target, architecture_optimization_strategy=ONE,
                                           n_search_steps=30)
    selector.select(info)
    uniform = {tuple(max(1, n - math.ceil(r * n - 0.5)) for n in (6, 12, 5)) for r in np.linspace(0, 1, 2001)}
    leading = []
    for config, lat in latency.seen[2:]:
        if config not in uniform:
            break
        leading.append(lat <= target)
    assert len(leading) >= 3  # feasible and infeasible uniform ratios alternate towards the boundary
    assert set(leading) == {True, False}


def test_target_at_or_above_the_baseline_prunes_nothing_with_one_call(residual_net, batches):
    info = calibrated(residual_net, batches)
    latency = Recorder(batches[0][:1])
    selector = OptimalPruningLabelSelector(residual_net, latency, 1e9, n_search_steps=50)
    assert selector.select(info) == [] and selector.pruning_cfg == [0, 0, 0]
    assert len(latency.seen) == 1 and selector.minimal_network_latency is None


def test_a_search_space_smaller_than_n_search_steps_is_measured_once_per_candidate(residual_net, batches):
    info = calibrated(residual_net, batches)
    latency = Recorder(batches[0][:1])
    strategy = lambda n: (n - 1, 1) if n > 6 else (n, 1)  # conv1 and head fixed, 2 choices for the concat group
    selector = OptimalPruningLabelSelector(residual_net, latency, 0.99 * latency.macs(residual_net),
                                           architecture_optimization_strategy=strategy, n_search_steps=50)
    assert selector.select(info) != []
    assert [k for k, _ in latency.seen] == [(6, 12, 5), (6, 11, 5)]


def test_same_seed_same_result_and_optuna_verbosity_is_restored(residual_net, batches):
    info = calibrated(residual_net, batches)
    latency = macs_of(batches[0][:1])
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.DEBUG)
    try:
        results = [OptimalPruningLabelSelector(residual_net, latency, 0.5 * latency(residual_net), seed=5,
                                               architecture_optimization_strategy=ONE, n_search_steps=25).select(info)
                   for _ in range(2)]
        assert optuna.logging.get_verbosity() == optuna.logging.DEBUG
    finally:
        optuna.logging.set_verbosity(before)
    assert results[0] == results[1]


def test_the_user_model_is_never_run_or_changed(residual_net, batches):
    info = calibrated(residual_net, batches)
    state = {k: v.clone() for k, v in residual_net.state_dict().items()}
    seen = []
    latency = lambda model: seen.append(model) or float(count_macs(model, batches[0][:1]))
    OptimalPruningLabelSelector(residual_net, latency, 0.5 * latency(copy.deepcopy(residual_net)),
                                architecture_optimization_strategy=ONE, n_search_steps=10).select(info)
    assert all(model is not residual_net for model in seen)
    assert all(torch.equal(v, state[k]) for k, v in residual_net.state_dict().items())


def test_selector_needs_a_model_pruning_info(residual_net):
    selector = OptimalPruningLabelSelector(residual_net, lambda m: 1.0, 0.5)
    with pytest.raises(TypeError, match="needs the ModelPruningInfo of a calibration, got ChannelScores"):
        selector.select(ChannelScores([np.arange(2)], [np.ones(2)]))


def test_evaluation_function_failure_names_the_candidate(residual_net, batches):
    info = calibrated(residual_net, batches)
    latency = macs_of(batches[0][:1])

    def broken(model):
        raise KeyError("no validation data")

    selector = OptimalPruningLabelSelector(residual_net, latency, 0.5 * latency(residual_net), n_search_steps=5,
                                           architecture_optimization_strategy=ONE, evaluation_function=broken)
    with pytest.raises(RuntimeError, match="evaluation_function raised KeyError: 'no validation data' \\(latency "
                                           "search step 2, candidate with channels kept: conv1: 1/6, dw: 2/12, "
                                           "head: 1/5\\)"):
        selector.select(info)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(target_latency=0), ValueError, "target_latency must be a positive finite number, got 0"),
    (dict(target_latency=float("inf")), ValueError, "target_latency must be a positive finite number"),
    (dict(n_search_steps=1), ValueError, "n_search_steps must be an integer >= 2 .*got 1"),
    (dict(n_search_steps=2.5), ValueError, "n_search_steps must be an integer >= 2"),
    (dict(latency_calculation_function=None), TypeError, "latency_calculation_function must be callable"),
    (dict(model="m"), TypeError, "model must be a torch.nn.Module, got str"),
    (dict(architecture_optimization_strategy=5), TypeError, "architecture_optimization_strategy must be callable"),
    (dict(seed=1.5), TypeError, "seed must be an integer or None, got 1.5"),
    (dict(evaluation_function=3), TypeError, "evaluation_function must be callable or None, got int"),
    (dict(show_tqdm="yes"), TypeError, "show_tqdm must be True, False or None"),
    (dict(n_jobs=2), TypeError, "unexpected keyword argument\\(s\\) \\['n_jobs'\\]"),
])
def test_selector_bad_arguments(residual_net, kwargs, error, match):
    args = dict(model=residual_net, latency_calculation_function=lambda m: 1.0, target_latency=0.5)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        OptimalPruningLabelSelector(**args)


def test_arguments_after_target_latency_are_keyword_only(residual_net):
    with pytest.raises(TypeError):
        OptimalPruningLabelSelector(residual_net, lambda m: 1.0, 0.5, ONE)


def test_bad_strategy(residual_net, batches):
    with PruningCalibrator(residual_net) as calibrator:
        mse_loss(residual_net(batches[0]), None).backward()
    selector = OptimalPruningLabelSelector(residual_net, lambda m: 1.0, 0.5, n_search_steps=2,
                                           architecture_optimization_strategy=lambda n: (0, 1))
    with pytest.raises(ValueError, match="architecture_optimization_strategy\\(6\\) returned \\(0, 1\\)"):
        selector.select(calibrator.pruning_info)


# --- the default score ---------------------------------------------------------------------------------
def test_output_discrepancy_literal():
    net = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[1.0, 2.0]]))
    x = torch.tensor([[1.0, 1.0], [2.0, 0.0]])  # outputs 3 and 2: squared norm 13
    score = OutputDiscrepancy(net, [((x,), {})])
    other = copy.deepcopy(net)
    with torch.no_grad():
        other.weight.copy_(torch.tensor([[1.0, 1.0]]))  # outputs 2 and 2: squared error 1
    assert score(other) == pytest.approx(1 / 13) and score(copy.deepcopy(net)) == 0.0
    assert net.weight.tolist() == [[1.0, 2.0]]


def test_output_discrepancy_uses_batch_statistics_for_batchnorm():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).eval()
    x = torch.randn(8, 3)
    score = OutputDiscrepancy(net, [((x,), {})])
    assert score.batch_statistics
    candidate = copy.deepcopy(net)
    with torch.no_grad():
        expected_out = nn.functional.batch_norm(candidate[0](x), None, None, candidate[1].weight,
                                                candidate[1].bias, training=True)
        reference = net(x)
    expected = float(((expected_out - reference) ** 2).sum() / (reference ** 2).sum())
    assert score(candidate) == pytest.approx(expected)
    assert not candidate.training and not candidate[1].training  # modes put back
    one = OutputDiscrepancy(net, [((x[:1],), {})])  # one sample: BatchNorm cannot use batch statistics
    assert not one.batch_statistics and one(copy.deepcopy(net)) == 0.0


def test_output_discrepancy_structure_errors():
    class Labels(nn.Module):
        def forward(self, x):
            return x.argmax(1)

    with pytest.raises(ValueError, match="returns no floating-point tensor.*evaluation_function"):
        OutputDiscrepancy(Labels(), [((torch.zeros(2, 3),), {})])
    score = OutputDiscrepancy(nn.Linear(2, 3), [((torch.zeros(1, 2),), {})])
    with pytest.raises(ValueError, match="returned tensors of shapes \\[\\(1, 4\\)\\] for input 0, the original "
                                         "model \\[\\(1, 3\\)\\]"):
        score(nn.Linear(2, 4))


def test_default_score_prefers_candidates_that_keep_the_output():
    """A channel that carries the output is kept, whatever the calibrated importances say."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 1), nn.ReLU(), nn.Conv2d(4, 4, 1), nn.ReLU(), nn.Conv2d(4, 1, 1))
    with torch.no_grad():
        for conv in (net[0], net[2]):
            conv.weight.copy_(torch.eye(4).view(4, 4, 1, 1)[:, :conv.in_channels] if conv is net[2]
                              else torch.ones(4, 1, 1, 1))
            conv.bias.zero_()
        net[4].weight.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]).view(1, 4, 1, 1))  # only channel 0 matters
        net[4].bias.zero_()
    x = torch.rand(4, 1, 3, 3) + 0.5
    info = calibrate_model_for_pruning(net, [x], lambda out, s: out.pow(2).mean())
    count = lambda m: float(count_macs(m, x[:1]))
    labels = OptimalPruningLabelSelector(net, count, 0.8 * count(net), architecture_optimization_strategy=ONE,
                                         n_search_steps=20).select(info)
    pruned_groups = info.split_labels(labels)
    assert all(0 not in local for local in pruned_groups.values())  # channel 0 of both groups survives
