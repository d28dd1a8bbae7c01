"""Bad input: clear errors, raised before anything changes."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from sparsify_torch import MaskParametrization, prune
from torch_helpers import cnn, digits, mlp

ONE_SHOT = {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}


def _untouched(model: nn.Module, before: dict) -> None:
    assert not any(parametrize.is_parametrized(m) for m in model.modules())
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], before[k]) for k in before)


def test_model_must_be_a_module():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got dict"):
        prune({"w": torch.ones(2, 2)}, ONE_SHOT)


def test_bad_config_names_the_field():
    model = mlp()
    with pytest.raises(ValueError, match="target_sparsity must be in \\[0, 1\\), got 1.5"):
        prune(model, {"target_sparsity": 1.5})
    with pytest.raises(ValueError, match="pattern"):
        prune(model, {"pattern": "3y1"})
    _untouched(model, mlp().state_dict())


def test_config_matching_no_parameter():
    model = mlp()
    before = model.state_dict()
    with pytest.raises(ValueError, match=r"match no prunable weight.*fc1\.weight, fc2\.weight, head\.weight"):
        prune(model, {**ONE_SHOT, "op_names": ["conv"]})
    _untouched(model, before)


def test_model_without_prunable_layers():
    with pytest.raises(ValueError, match="no prunable weights; supported layers are Linear"):
        prune(nn.Sequential(nn.ReLU(), nn.LayerNorm(3)), ONE_SHOT)


def test_pattern_that_does_not_fit_applies_nothing():
    model = cnn()                       # head 2-D view (10, 32): 10 rows do not split into 4x1 blocks
    before = model.state_dict()
    with pytest.raises(ValueError, match=r"layer 'head.weight' with 2-D view \(10, 32\) does not fit pattern '4x1'"):
        prune(model, {**ONE_SHOT, "pattern": "4x1"})
    _untouched(model, before)            # conv1/conv2/fc fit, but none of them was parametrized
    with pytest.warns(UserWarning, match=r"pattern '4x1' does not fit 1 of 4 selected layers, left dense "
                                         r"\(skip_incompatible_layers=True\): 'head.weight' \(2-D view \(10, 32\)"):
        pruner = prune(model, {**ONE_SHOT, "pattern": "4x1", "skip_incompatible_layers": True})
    # a skipped layer is told apart from one not pruned yet: None, and the protocol says why
    assert pruner.sparsity()["head.weight"] is None and pruner.sparsity()["fc.weight"] == 0.5
    assert pruner.protocol.skipped == {"head.weight": "2-D view (10, 32): block 4x1 does not divide it"}


def test_pruning_twice_and_foreign_parametrizations():
    model = mlp()
    prune(model, ONE_SHOT)
    with pytest.raises(ValueError, match="already pruned"):
        prune(model, ONE_SHOT)
    other = mlp()
    parametrize.register_parametrization(other.fc2, "weight", MaskParametrization(torch.ones(16, 32)))
    with pytest.raises(ValueError, match="already pruned"):
        prune(other, ONE_SHOT)
    third = mlp()
    parametrize.register_parametrization(third.fc2, "weight", nn.Identity())
    with pytest.raises(ValueError, match="weight 'fc2.weight' already has a parametrization"):
        prune(third, ONE_SHOT)
    assert not parametrize.is_parametrized(third.fc1)


def test_tied_weights():
    # one weight, one mask, pruned under its first name (issue 57; tests/sparsify_torch/test_torch_tied.py)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    pruner = prune(model, ONE_SHOT)
    assert pruner.names == ["0.weight"] and parametrize.is_parametrized(model[1])
    pruner.remove()
    assert model[1].weight is model[0].weight
    with pytest.raises(ValueError, match="match no prunable weight"):     # excluding one name keeps it dense
        prune(model, {**ONE_SHOT, "excluded_op_names": ["^1"]})


def test_step_arguments_and_missing_gradients():
    pruner = prune(mlp(), ONE_SHOT)
    with pytest.raises(ValueError, match="num_steps must be a positive integer, got 0"):
        pruner.step(0)
    assert pruner.step_count == 0
    snip = prune(mlp(), {**ONE_SHOT, "criterion": "snip"})
    with pytest.raises(RuntimeError, match="needs gradients.*loss.backward"):
        snip.step()


def test_step_and_load_after_remove():
    pruner = prune(mlp(), ONE_SHOT)
    state = pruner.state_dict()
    pruner.remove()
    with pytest.raises(RuntimeError, match=r"Pruner.step\(\) called after Pruner.remove\(\)"):
        pruner.step()
    with pytest.raises(RuntimeError, match=r"Pruner.load_state_dict\(\) called after Pruner.remove\(\)"):
        pruner.load_state_dict(state)


def test_state_dict_from_a_different_model_changes_nothing():
    x, _ = digits(8)
    model = mlp()
    pruner = prune(model, ONE_SHOT)
    masks, out = pruner.masks(), model(x)
    other = prune(cnn(), ONE_SHOT).state_dict()
    with pytest.raises(ValueError, match=r"state was saved for pruned weights \['conv1.weight'"):
        pruner.load_state_dict(other)
    narrow = prune(nn.Sequential(nn.Linear(64, 16)), ONE_SHOT).state_dict()
    narrow["names"] = pruner.names
    narrow["masks"] = {n: torch.ones(2, 2, dtype=torch.bool) for n in pruner.names}
    with pytest.raises(ValueError, match=r"masks\['fc1.weight'\] has shape \(2, 2\), but the weight's canonical shape is \(32, 64\)"):
        pruner.load_state_dict(narrow)
    good = pruner.state_dict()        # the masks are checked as ShardedPruner checks them (one validation)
    with pytest.raises(ValueError, match=r"^state\['masks'\] must hold a mask per pruned weight \['fc1.weight', "
                                         r"'fc2.weight', 'head.weight'\], got \['fc1.weight', 'head.weight'\]$"):
        pruner.load_state_dict({**good, "masks": {n: m for n, m in good["masks"].items() if n != "fc2.weight"}})
    with pytest.raises(ValueError, match=r"^state\['masks'\]\['fc2.weight'\] must be a tensor, got ndarray$"):
        pruner.load_state_dict({**good, "masks": {**good["masks"], "fc2.weight": good["masks"]["fc2.weight"].numpy()}})
    with pytest.raises(ValueError, match="missing keys"):
        pruner.load_state_dict({"step": 3})
    with pytest.raises(TypeError, match="state must be a dict"):
        pruner.load_state_dict([1, 2])
    assert pruner.step_count == 0 and torch.equal(model(x), out)
    assert all(torch.equal(pruner.masks()[n], masks[n]) for n in masks)


def test_mask_parametrization_checks():
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        MaskParametrization([1, 0])
    p = MaskParametrization(torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"mask shape \(3,\) differs from the parametrized weight's shape \(2, 2\)"):
        p.set_mask(torch.ones(3))


# ----- models sparsify_torch cannot mask: each refused or reported, naming the layer ---------
def test_torchscript_model_is_refused_with_what_to_do():
    with pytest.raises(TypeError, match="TorchScript module.*call prune\\(\\) on the eager model"):
        prune(torch.jit.script(nn.Sequential(nn.Linear(4, 4))), ONE_SHOT)


def test_old_style_weight_norm_is_reported_by_layer():
    with pytest.warns(FutureWarning):                  # torch deprecates the old-style hook itself
        model = nn.Sequential(nn.utils.weight_norm(nn.Linear(4, 4)), nn.Linear(4, 4))
    with pytest.warns(UserWarning, match=r"layers \['0'\] compute their weight with an old-style hook \(weight_norm\)"):
        pruner = prune(model, ONE_SHOT)
    assert pruner.names == ["1.weight"]


def test_old_style_spectral_norm_layer_is_pruned_through_weight_orig(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.utils.spectral_norm(nn.Linear(8, 8)))
    x = torch.randn(16, 8)
    model(x)                                            # one power iteration: weight = weight_orig / sigma
    effective = model[2].weight.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # nothing to warn about: the layer is pruned
        pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0, "op_names": ["2"]})
    assert pruner.names == ["2.weight"]
    # the smallest half of the weight the layer computes is pruned, and the computed weight holds the zeros
    order = effective.abs().flatten().argsort()
    expected = torch.ones(64, dtype=torch.bool)
    expected[order[:32]] = False
    assert torch.equal(pruner.masks()["2.weight"].flatten(), expected)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    for _ in range(3):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        pruner.step()
    model(x)
    assert torch.equal(model[2].weight != 0, expected.reshape(8, 8))
    assert pruner.sparsity() == {"2.weight": 0.5}
    # a checkpoint of the pruned model (plain names, issue 57) and of its pruner load into another pruned one;
    # remove() bakes the zeros into weight_orig
    assert set(model.state_dict()) == set(nn.Sequential(nn.Linear(8, 8), nn.ReLU(),
                                                        nn.utils.spectral_norm(nn.Linear(8, 8))).state_dict())
    torch.save({"model": model.state_dict(), "pruner": pruner.state_dict()}, tmp_path / "m.pt")
    other = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.utils.spectral_norm(nn.Linear(8, 8)))
    other_pruner = prune(other, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0, "op_names": ["2"]})
    saved = torch.load(tmp_path / "m.pt", weights_only=True)
    other.load_state_dict(saved["model"])
    other_pruner.load_state_dict(saved["pruner"])
    other_pruner.remove()
    other(x)
    assert torch.equal(other[2].weight != 0, expected.reshape(8, 8))
    assert torch.equal(other[2].weight_orig != 0, expected.reshape(8, 8))


@pytest.mark.parametrize("wrap, kind", [(nn.utils.parametrizations.weight_norm, "_WeightNorm"),
                                        (nn.utils.parametrizations.spectral_norm, "_SpectralNorm")])
def test_parametrized_weights_are_refused_naming_the_weight(wrap, kind):
    model = nn.Sequential(wrap(nn.Linear(4, 4)))
    with pytest.raises(ValueError, match=rf"weight '0.weight' already has a parametrization \({kind}\).*"
                                         r"remove_parametrizations"):
        prune(model, ONE_SHOT)
    assert not any(isinstance(m, MaskParametrization) for m in model.modules())


def test_meta_device_model_is_refused_naming_the_weight():
    model = nn.Sequential(nn.Linear(4, 4, device="meta"))
    with pytest.raises(ValueError, match="weight '0.weight' is on the meta device"):
        prune(model, ONE_SHOT)
    assert not any(isinstance(m, MaskParametrization) for m in model.modules())


def test_load_state_dict_refuses_bad_values_and_another_config():
    model = mlp()
    pruner = prune(model, ONE_SHOT)
    good = pruner.state_dict()
    for change, match in [({"masks": {n: m.float() * 3 for n, m in good["masks"].items()}}, "only 0 and 1"),
                          ({"step": -100}, r"state\['step'\] must be >= 0"),
                          ({"done_step": 10 ** 6}, r"done_step'\] in \[-1, step\]"),
                          ({"config": {**good["config"], "pattern": "2:4"}}, "pattern: saved '2:4', now '1x1'")]:
        with pytest.raises(ValueError, match=match):
            pruner.load_state_dict({**good, **change})
    assert pruner.state_dict()["step"] == good["step"] and pruner.sparsity()["fc1.weight"] == 0.5



@pytest.mark.parametrize("criterion", ["magnitude", "snip_momentum"])
def test_failed_update_changes_nothing_and_the_retry_matches_an_uninterrupted_run(criterion):
    """NaN weights at an update point: step() raises naming the layer; the step counter, masks,
    weights and criterion state stay as they were, and step() after the fix does the update."""
    cfg = {"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2, "criterion": criterion}
    x, y = digits(32)

    def backward(model: nn.Module) -> None:
        model.zero_grad()
        nn.functional.cross_entropy(model(x).nan_to_num(), y).backward()

    def run(poison: bool) -> tuple[dict, dict]:
        model = mlp()
        pruner = prune(model, cfg)
        backward(model)
        pruner.step()                                   # step 1
        if poison:
            original = model.fc2.parametrizations.weight.original
            kept_value, state, out = original[0, 0].item(), pruner.state_dict(), model(x)
            with torch.no_grad():
                original[0, 0] = float("nan")
            backward(model)
            with pytest.raises(ValueError, match="layer 'fc2.weight'.*NaN"):
                pruner.step()                           # step 2 is an update point
            after = pruner.state_dict()
            assert after["step"] == state["step"] == 1 and after["done_step"] == state["done_step"]
            assert all(torch.equal(after["masks"][n], state["masks"][n]) for n in state["masks"])
            assert after["scores"].keys() == state["scores"].keys()
            assert all(torch.equal(after["scores"][n], state["scores"][n]) for n in state["scores"])
            with torch.no_grad():
                original[0, 0] = kept_value
            assert torch.equal(model(x), out)
        backward(model)
        pruner.step()                                   # step 2: the update
        assert pruner.step_count == pruner.done_step == 2
        return pruner.state_dict(), {k: v.clone() for k, v in model.state_dict().items()}

    (want, want_model), (got, got_model) = run(False), run(True)
    assert all(torch.equal(got["masks"][n], want["masks"][n]) for n in want["masks"])
    assert got["scores"].keys() == want["scores"].keys()
    assert all(torch.equal(got["scores"][n], want["scores"][n]) for n in want["scores"])
    assert all(torch.equal(got_model[k], want_model[k]) for k in want_model)


def test_load_state_dict_names_what_is_wrong_with_the_scores():
    x, y = digits(32)
    model = mlp()
    pruner = prune(model, {**ONE_SHOT, "criterion": "snip_momentum"})
    nn.functional.cross_entropy(model(x), y).backward()
    pruner.step()
    good = pruner.state_dict()
    assert sorted(good["scores"]) == ["fc1.weight", "fc2.weight", "head.weight"]
    score = good["scores"]["fc2.weight"]
    for bad, match in [({"fc9.weight": score}, r"state\['scores'\] holds 'fc9.weight', which is not a pruned weight "
                                               r"\(of \['fc1.weight', 'fc2.weight', 'head.weight'\]\)"),
                       ({"fc2.weight": score[:3]}, r"\['fc2.weight'\] must be a finite float tensor of shape "
                                                   r"\(16, 32\), got torch.float32 tensor of shape \(3, 32\)$"),
                       ({"fc2.weight": score.long()}, r"got torch.int64 tensor of shape \(16, 32\)$"),
                       ({"fc2.weight": score.numpy()}, r"of shape \(16, 32\), got ndarray$"),
                       ({"fc2.weight": score * float("nan")}, r"got torch.float32 tensor of shape \(16, 32\) "
                                                              "holding NaN or inf$")]:
        with pytest.raises(ValueError, match=match):
            pruner.load_state_dict({**good, "scores": {**good["scores"], **bad}})
    after = pruner.state_dict()
    assert all(torch.equal(after["scores"][n], good["scores"][n]) for n in good["scores"])
