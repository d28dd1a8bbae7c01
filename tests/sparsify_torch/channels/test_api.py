"""High-level calls: equal, optimal, generic, finetune_bn; signatures as in ENOT's documentation."""
import inspect

import pytest
import torch

from conftest import mse_loss
from sparsify_torch.channels import (TopKPruningLabelSelector, calibrate_and_prune_model,
                                     calibrate_and_prune_model_equal, calibrate_and_prune_model_optimal,
                                     default_architecture_optimization_strategy, default_sample_to_model_inputs,
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
            pruned.head.out_channels, pruned.fc.out_features) == (3, 6, 3, 3)   # 5 * 0.5 = 2.5 -> 2 pruned
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


def _trained_bn_net() -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Conv2d(8, 2, 1))
    for _ in range(3):
        net(torch.randn(4, 3, 8, 8) * 3 + 2)
    return net.eval()


def test_finetune_batchnorm_keeps_the_statistics_without_samples_or_on_error():
    net = _trained_bn_net()
    saved = state(net)
    with pytest.warns(RuntimeWarning, match="dataloader yielded no samples.*statistics were kept"):
        assert finetune_batchnorm(net, iter([])) == 0
    assert same_state(net, saved)
    with pytest.raises(RuntimeError, match="to have 3 channels"):     # the second batch has 4 channels
        finetune_batchnorm(net, [torch.randn(2, 3, 8, 8), torch.randn(2, 4, 8, 8)])
    assert same_state(net, saved)
    assert not net.training and net[1].momentum == 0.1


def test_finetune_bn_after_a_one_shot_generator_keeps_the_statistics():
    """Calibration consumes a generator; finetune_bn then sees nothing and must not wipe the statistics."""
    net = _trained_bn_net()
    mean, var = net[1].running_mean.clone(), net[1].running_var.clone()
    data = (torch.randn(2, 3, 8, 8) for _ in range(2))
    with pytest.warns(RuntimeWarning, match="dataloader yielded no samples"):
        small = calibrate_and_prune_model_equal(net, data, lambda out, x: out.pow(2).mean(), pruning_ratio=0.5,
                                                finetune_bn=True)
    kept = small[0].out_channels
    assert kept == 4 and int(small[1].num_batches_tracked) == 3
    assert set(small[1].running_mean.tolist()) <= set(mean.tolist()) and small[1].running_var.numel() == kept
    assert set(small[1].running_var.tolist()) <= set(var.tolist())


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


class Counting:
    """A latency function that counts its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, model):
        self.calls += 1
        return self.fn(model)


DOCUMENTED_TAIL = ["finetune_bn", "calibration_steps", "calibration_epochs", "sample_to_n_samples",
                   "sample_to_model_inputs", "show_tqdm"]


@pytest.mark.parametrize("function,head,tail", [
    (calibrate_and_prune_model_equal, ["model", "dataloader", "loss_function", "pruning_ratio"], ["entry_point"]),
    (calibrate_and_prune_model, ["label_selector", "model", "dataloader", "loss_function"], ["entry_point"]),
    (calibrate_and_prune_model_optimal, ["model", "dataloader", "loss_function", "latency_calculation_function",
                                         "target_latency"],
     ["architecture_optimization_strategy", "n_search_steps", "entry_point"]),
])
def test_signatures_follow_the_document(function, head, tail):
    params = inspect.signature(function).parameters
    positional = [n for n, p in params.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    documented = head + DOCUMENTED_TAIL + tail
    assert positional[:len(documented)] == documented
    defaults = {n: params[n].default for n in documented if params[n].default is not inspect.Parameter.empty}
    assert defaults["finetune_bn"] is False and defaults["calibration_steps"] is None
    assert defaults["calibration_epochs"] == 1 and defaults["entry_point"] == "forward"
    assert defaults["sample_to_n_samples"] is default_sample_to_n_samples
    assert defaults["sample_to_model_inputs"] is default_sample_to_model_inputs
    assert defaults["show_tqdm"] is None  # ours: on when stderr is a terminal (the document: False)
    if function is calibrate_and_prune_model_optimal:
        assert defaults["n_search_steps"] == 200
        assert defaults["architecture_optimization_strategy"] is default_architecture_optimization_strategy
        assert params["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    if function is calibrate_and_prune_model_equal:
        assert defaults["pruning_ratio"] == 0.5


def test_optimal_in_documented_positional_order_calls_latency_n_search_steps_times(residual_net, batches):
    latency = Counting(macs_of(batches[0][:1]))
    target = 0.6 * latency(residual_net)
    latency.calls = 0
    strategy = lambda n: (1, 1)
    pruned = calibrate_and_prune_model_optimal(residual_net, batches, mse_loss, latency, target, False, None, 1,
                                               default_sample_to_n_samples, default_sample_to_model_inputs, False,
                                               strategy, 12, "forward", seed=3)
    assert latency.calls == 12  # "equal to the number of latency_calculation_function executions"
    assert latency.fn(pruned) <= target
    assert pruned(batches[0]).shape == (2, 3)


@pytest.mark.parametrize("n_search_steps", [2, 5, 30])
def test_n_search_steps_is_the_number_of_latency_calls(residual_net, batches, n_search_steps):
    latency = Counting(macs_of(batches[0][:1]))
    target = 0.5 * latency(residual_net)
    latency.calls = 0
    pruned = calibrate_and_prune_model_optimal(residual_net, batches, mse_loss, latency, target,
                                               n_search_steps=n_search_steps, show_tqdm=False,
                                               architecture_optimization_strategy=lambda n: (1, 1))
    assert latency.calls == n_search_steps
    assert latency.fn(pruned) <= target


def test_optimal_kwargs_reach_the_selector(residual_net, batches):
    import copy
    latency = macs_of(batches[0][:1])
    target = 0.6 * latency(residual_net)
    strategy = lambda n: (1, 1)
    scores = []

    def evaluation(model):
        scores.append(model.conv1.out_channels)
        return float(-model.conv1.out_channels)  # prefers keeping conv1: anything else is pruned instead

    pruned = calibrate_and_prune_model_optimal(copy.deepcopy(residual_net), batches, mse_loss, latency, target,
                                               architecture_optimization_strategy=strategy, n_search_steps=20,
                                               seed=7, evaluation_function=evaluation)
    assert scores and pruned.conv1.out_channels == max(scores)
    runs = [calibrate_and_prune_model_optimal(copy.deepcopy(residual_net), batches, mse_loss, latency, target,
                                              architecture_optimization_strategy=strategy, n_search_steps=15,
                                              seed=seed) for seed in (1, 1)]
    assert same_state(runs[0], runs[1].state_dict())  # one seed, one result
    saved = state(residual_net)
    with pytest.raises(TypeError, match="unexpected keyword argument\\(s\\) \\['sed'\\].*'seed', "
                                        "'evaluation_function', 'show_tqdm'"):
        calibrate_and_prune_model_optimal(residual_net, batches, mse_loss, latency, target, sed=1)
    assert same_state(residual_net, saved)


@pytest.mark.slow
def test_optimal_meets_target_with_default_settings(batches):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 48, 3, padding=1), torch.nn.BatchNorm2d(48), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(48, 3)).eval()
    latency = Counting(macs_of(batches[0][:1]))
    target = 0.5 * latency(net)
    latency.calls = 0
    pruned = calibrate_and_prune_model_optimal(net, batches, mse_loss, latency, target)
    assert latency.calls == 200 and latency.fn(pruned) <= target
    # the default strategy keeps max(16, 25%) of each group
    assert 16 <= pruned[0].out_channels < 32 and 16 <= pruned[3].out_channels < 48


def test_latency_function_failure_is_a_clear_error_without_optuna_output(residual_net, batches, capsys, caplog):
    """Issue 15: optuna's own traceback leaked from the latency search."""
    calls = []
    base = macs_of(batches[0][:1])

    def fragile(model):
        calls.append(1)
        if len(calls) == 4:
            raise ZeroDivisionError("division by zero in the user's timer")
        return base(model)

    saved = state(residual_net)
    with pytest.raises(RuntimeError, match="latency_calculation_function raised ZeroDivisionError: division by zero "
                                           "in the user's timer \\(latency search step 4 of 30, candidate with "
                                           "channels kept: .*conv1: \\d/6") as err:
        calibrate_and_prune_model_optimal(residual_net, batches, mse_loss, fragile, 0.6 * base(residual_net),
                                          n_search_steps=30, architecture_optimization_strategy=lambda n: (1, 1))
    assert isinstance(err.value.__cause__, ZeroDivisionError)
    out = capsys.readouterr()
    assert "Trial" not in out.err + out.out and "optuna" not in out.err + out.out
    assert not [r for r in caplog.records if r.name.startswith("optuna")]
    assert same_state(residual_net, saved) and residual_net.conv1.out_channels == 6


@pytest.mark.parametrize("value", [float("nan"), "fast", None])
def test_latency_function_returning_no_number(residual_net, batches, value):
    with pytest.raises(ValueError, match="latency_calculation_function must return a finite number, got .* "
                                         "\\(latency search step 1, candidate with channels kept: unpruned\\)"):
        calibrate_and_prune_model_optimal(residual_net, batches, mse_loss, lambda m: value, 1.0, n_search_steps=5)


def test_search_progress_is_shown(residual_net, batches, capsys):
    latency = macs_of(batches[0][:1])
    calibrate_and_prune_model_optimal(residual_net, batches, mse_loss, latency, 0.6 * latency(residual_net),
                                      n_search_steps=6, show_tqdm=True,
                                      architecture_optimization_strategy=lambda n: (1, 1))
    err = capsys.readouterr().err
    assert "calibration" in err and "latency search" in err and "6/6" in err and "best_score" in err


def test_optimal_target_below_minimal_network(residual_net, batches):
    latency = Counting(macs_of(batches[0][:1]))
    saved = state(residual_net)
    with pytest.raises(ValueError, match="target_latency=10 is below the latency of the smallest network"):
        calibrate_and_prune_model_optimal(residual_net, batches, mse_loss, latency, 10.0, n_search_steps=5,
                                          architecture_optimization_strategy=lambda n: (1, 1))
    assert latency.calls == 2  # the unpruned and the smallest network
    assert same_state(residual_net, saved) and residual_net.conv1.out_channels == 6
