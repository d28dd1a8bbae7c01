"""`sparsify_torch.prune(..., log_dir=)`: the Keras callback's sparsity scalars, through the shared TensorBoard writer."""
from __future__ import annotations

import threading

import pytest
import torch

import sparsify_torch
from sparsify.protocol import sparsity_figures
from sparsify_torch.tensorboard import read_scalars


@pytest.mark.slow
def test_sparsity_scalars_at_every_mask_update(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    cfg = {"target_sparsity": 0.75, "start_step": 0, "end_step": 10, "pruning_frequency": 5}
    pruner = sparsify_torch.prune(model, cfg, log_dir=tmp_path / "tb")
    seen = {0: pruner.sparsity() | {"total": pruner.total_sparsity()}}
    for step in range(1, 13):
        pruner.step()
        if step in (5, 10):
            seen[step] = pruner.sparsity() | {"total": pruner.total_sparsity()}
    pruner.remove()                                           # closes the event file
    scalars = read_scalars(tmp_path / "tb")
    # the tags of Keras' PruningCallback(log_dir=): sparsity/total and sparsity/<weight>
    assert sorted(scalars) == ["sparsity/0.weight", "sparsity/2.weight", "sparsity/total"]
    assert [s for s, _ in scalars["sparsity/total"]] == [0, 5, 10]
    for step, values in seen.items():
        for tag in ("0.weight", "2.weight", "total"):
            assert dict(scalars[f"sparsity/{tag}"])[step] == pytest.approx(values[tag], abs=1e-6)
    assert scalars["sparsity/total"][-1][1] == pytest.approx(0.75, abs=1e-3)
    assert set(sparsity_figures({"0.weight": [1]})) == {"sparsity", "sparsity/0.weight"}


def test_bad_log_dir_leaves_the_model_untouched():
    model = torch.nn.Linear(4, 4)
    with pytest.raises(TypeError, match="log_dir must be a directory path or None, got 3"):
        sparsify_torch.prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}, log_dir=3)
    assert not torch.nn.utils.parametrize.is_parametrized(model) and int((model.weight == 0).sum()) == 0


def _event_writer_threads() -> list:
    return [t for t in threading.enumerate() if type(t).__name__ == "_AsyncWriterThread"]


def test_prune_failing_at_its_first_update_closes_the_event_file(tmp_path):
    model = torch.nn.Linear(4, 4)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    writers = len(_event_writer_threads())
    with pytest.raises(ValueError, match="layer 'weight'.*NaN"):
        sparsify_torch.prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}, log_dir=tmp_path)
    assert len(_event_writer_threads()) == writers                # no writer thread left running
    assert not torch.nn.utils.parametrize.is_parametrized(model)
    assert all(torch.equal(v.nan_to_num(), before[k].nan_to_num()) for k, v in model.state_dict().items())
