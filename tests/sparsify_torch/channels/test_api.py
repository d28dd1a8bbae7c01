"""High-level calls: equal, optimal, generic, finetune_bn."""
import pytest
import torch

from conftest import mse_loss
from sparsify_torch.channels import (OptimalPruningLabelSelector, PruningCalibrator, TopKPruningLabelSelector,
                                     calibrate_and_prune_model, calibrate_and_prune_model_equal,
                                     calibrate_and_prune_model_optimal, default_sample_to_model_inputs,
                                     default_sample_to_n_samples)
from sparsify_torch.channels.api import finetune_batchnorm
from sparsify_torch.channels.metrics import count_macs


def state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def same_state(model, saved):
    now = model.state_dict()
    return now.keys() == saved.keys() and all(torch.equal(now[k], saved[k]) for k in saved)


def test_equal_prunes_half_of_every_group(residual_net, batches):
    pruned = calibrate_and_prune_model_equal(residual_net, batches, mse_loss, pruning_ratio=0.5)
    assert (pruned.conv1.out_channels, pruned.stem.out_channels + pruned.side.out_channels,
            pruned.head.out_channels, pruned.fc.out_features) == (3, 6, 2, 3)
    assert pruned(batches[0]).shape == (2, 3)


def test_one_call_traces_once_and_matches_the_step_by_step_result(residual_net, batches, monkeypatch):
    import copy

    import sparsify_torch.channels.calibration as calibration
    from sparsify_torch.channels import UniformPruningLabelSelector, calibrate_model_for_pruning, prune_model

    reference = copy.deepcopy(residual_net)
    info = calibrate_model_for_pruning(reference, batches, mse_loss)
    expected = prune_model(reference, info, UniformPruningLabelSelector(0.5).select(info))
    traces = []
    original = calibration.build_dependency_graph

    def counting(*args, **kwargs):
        traces.append(args[1])
        return original(*args, **kwargs)

    monkeypatch.setattr(calibration, "build_dependency_graph", counting)
    pruned = calibrate_and_prune_model_equal(residual_net, batches, mse_loss, pruning_ratio=0.5)
    assert traces == ["forward"]  # surgery works from the calibration's groups: no second trace
    assert same_state(pruned, expected.state_dict())


def test_generic_with_topk_and_tuple_samples(residual_net, batches):
    data = [(x, torch.zeros(2)) for x in batches]
    pruned = calibrate_and_prune_model(TopKPruningLabelSelector([1, 0, 4]), residual_net, data, mse_loss,
                                       calibration_steps=1)
    assert (pruned.conv1.out_channels, pruned.dw.in_channels, pruned.head.out_channels) == (5, 12, 1)


def test_finetune_bn_reestimates_statistics(residual_net, batches):
    pruned = calibrate_and_prune_model_equal(residual_net, batches, mse_loss, finetune_bn=True)
    # running stats now equal the statistics of the pruned model's BN inputs over the calibration batches
    inputs = []
    hook = pruned.stem_bn.register_forward_hook(lambda m, i, o: inputs.append(i[0]))
    with torch.no_grad():
        for x in batches:
            pruned(x)
    hook.remove()
    allx = torch.cat(inputs)
    torch.testing.assert_close(pruned.stem_bn.running_mean, allx.mean(dim=(0, 2, 3)))
    assert pruned.bn1.momentum == 0.1 and int(pruned.bn1.num_batches_tracked) == 2
    assert not pruned.training


def test_finetune_batchnorm_literal():
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1, bias=False), torch.nn.BatchNorm2d(1))
    torch.nn.init.ones_(net[0].weight)
    assert finetune_batchnorm(net, [torch.full((2, 1, 2, 2), 3.0), torch.full((2, 1, 2, 2), 5.0)]) == 2
    assert net[1].running_mean.tolist() == [4.0] and net[1].running_var.tolist() == [0.0]
    assert finetune_batchnorm(torch.nn.Linear(2, 2), [torch.zeros(1, 2)]) == 0


def test_sample_defaults():
    x = torch.zeros(3, 2)
    assert default_sample_to_n_samples(x) == 3
    assert default_sample_to_n_samples([x, 1]) == 3
    assert default_sample_to_n_samples({"a": x}) == 3
    assert default_sample_to_n_samples(7) == 1
    args, kwargs = default_sample_to_model_inputs((x, "target"))
    assert args[0] is x and kwargs == {}
    assert default_sample_to_model_inputs({"a": 1}) == ((), {"a": 1})
    assert default_sample_to_model_inputs(x)[0][0] is x
    with pytest.raises(ValueError, match="sample is an empty sequence"):
        default_sample_to_model_inputs(())


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(pruning_ratio=1.0), ValueError, "pruning_ratio must be a number in \\[0, 1\\), got 1.0"),
    (dict(pruning_ratio=-0.1), ValueError, "pruning_ratio must be a number in \\[0, 1\\), got -0.1"),
    (dict(dataloader=[]), ValueError, "dataloader yielded no samples"),
    (dict(entry_point="missing.forward"), ValueError, "the model has no submodule 'missing'"),
    (dict(finetune_bn="yes"), TypeError, "finetune_bn must be a bool, got 'yes'"),
    (dict(calibration_steps=0), ValueError, "n_steps must be None or a positive integer, got 0"),
])
def test_equal_bad_input_leaves_model_unchanged(residual_net, batches, kwargs, error, match):
    args = dict(model=residual_net, dataloader=batches, loss_function=mse_loss)
    args.update(kwargs)
    saved = state(residual_net)
    with pytest.raises(error, match=match):
        calibrate_and_prune_model_equal(**args)
    assert same_state(residual_net, saved)


def test_generic_bad_selector(residual_net, batches):
    with pytest.raises(TypeError, match="label_selector must be a PruningLabelSelector, got float"):
        calibrate_and_prune_model(0.5, residual_net, batches, mse_loss)


def macs_of(x):
    return lambda model: float(count_macs(model, x))


def test_optimal_meets_target(residual_net, batches):
    latency = macs_of(batches[0][:1])
    base = latency(residual_net)
    target = 0.6 * base
    strategy = lambda n: (1, 1)
    pruned = calibrate_and_prune_model_optimal(residual_net, batches, mse_loss, latency, target,
                                               n_search_steps=30, architecture_optimization_strategy=strategy)
    assert latency(pruned) <= target
    assert pruned(batches[0]).shape == (2, 3)


def test_optimal_selector_attributes(residual_net, batches):
    with PruningCalibrator(residual_net) as calibrator:
        mse_loss(residual_net(batches[0]), None).backward()
    info = calibrator.pruning_info
    latency = macs_of(batches[0][:1])
    selector = OptimalPruningLabelSelector(residual_net, latency, 0.7 * latency(residual_net), n_search_steps=15,
                                           architecture_optimization_strategy=lambda n: (max(1, n // 4), 1))
    assert selector.n_search_steps == 15 and selector.pruning_cfg is None
    labels = selector.select(info)
    assert selector.baseline_latency == latency(residual_net) == 57584.0
    # minimal network: conv1 keeps 6 // 4 = 1; the stem/side concat group keeps 12 // 4 = 3 = 8 // 4 from the
    # stem stream + 4 // 4 from "side" (each source layer keeps its own minimum); head keeps 1. MACs on 8x8:
    # stem 64*2*3*9 + conv1 64*1*2*9 + conv2 64*2 + side 64*2 + dw 64*3*9 + head 64*3 + fc 3*16
    assert selector.minimal_network_latency == 3456 + 1152 + 128 + 128 + 1728 + 192 + 48 == 6832.0
    assert selector.labels_for_pruning == labels and len(selector.pruning_cfg) == 3
    assert sum(selector.pruning_cfg) == len(labels) > 0
    # target at or above the baseline prunes nothing
    assert OptimalPruningLabelSelector(residual_net, latency, 1e9, n_search_steps=1).select(info) == []


def test_optimal_target_below_minimal_network(residual_net, batches):
    latency = macs_of(batches[0][:1])
    saved = state(residual_net)
    with pytest.raises(ValueError, match="target_latency=10 is below the latency of the smallest network"):
        calibrate_and_prune_model_optimal(residual_net, batches, mse_loss, latency, 10.0, n_search_steps=5)
    assert same_state(residual_net, saved) and residual_net.conv1.out_channels == 6


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(target_latency=0), ValueError, "target_latency must be a positive finite number, got 0"),
    (dict(target_latency=float("inf")), ValueError, "target_latency must be a positive finite number"),
    (dict(n_search_steps=0), ValueError, "n_search_steps must be a positive integer, got 0"),
    (dict(latency_calculation_function=None), TypeError, "latency_calculation_function must be callable"),
    (dict(model="m"), TypeError, "model must be a torch.nn.Module, got str"),
    (dict(architecture_optimization_strategy=5), TypeError, "architecture_optimization_strategy must be callable"),
])
def test_optimal_selector_bad_arguments(residual_net, kwargs, error, match):
    args = dict(model=residual_net, latency_calculation_function=lambda m: 1.0, target_latency=0.5)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        OptimalPruningLabelSelector(**args)


def test_optimal_bad_strategy(residual_net, batches):
    with PruningCalibrator(residual_net) as calibrator:
        mse_loss(residual_net(batches[0]), None).backward()
    selector = OptimalPruningLabelSelector(residual_net, lambda m: 1.0, 0.5, n_search_steps=2,
                                           architecture_optimization_strategy=lambda n: (0, 1))
    with pytest.raises(ValueError, match="architecture_optimization_strategy\\(6\\) returned \\(0, 1\\)"):
        selector.select(calibrator.pruning_info)
