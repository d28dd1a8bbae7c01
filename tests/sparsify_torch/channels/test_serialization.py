"""`sparsify_torch.channels.serialization`: a structured-pruned model saved without pickled code loads back
(from a constructor you pass, or the stored one when trusted) with the same outputs (issue 14)."""
from __future__ import annotations

import pickle

import pytest
import torch
import torchvision

from sparsify.cli.report import build_report
from sparsify_torch.channels import calibrate_and_prune_model_equal
from sparsify_torch.channels.serialization import (FORMAT, load_pruned_model, pruned_model_document,
                                                   save_pruned_model)


@pytest.fixture(scope="module")
def pruned_resnet():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    images, labels = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    small = calibrate_and_prune_model_equal(model, [(images, labels)],
                                            lambda out, b: torch.nn.functional.cross_entropy(out, b[1]),
                                            pruning_ratio=0.5, sample_to_model_inputs=lambda b: ((b[0],), {}))
    return small.eval()


def test_resnet_round_trip(pruned_resnet, tmp_path):
    path = tmp_path / "small.pt"
    save_pruned_model(pruned_resnet, path, "torchvision.models:resnet18", num_classes=10)
    torch.save(pruned_resnet, tmp_path / "pickled.pt")      # the whole module: loading it means running pickled code
    with pytest.raises(pickle.UnpicklingError):
        torch.load(tmp_path / "pickled.pt", weights_only=True)
    doc = torch.load(path, weights_only=True)                # ours: tensors, strings, ints only
    assert doc["format"] == FORMAT and doc["modules"]["layer1.0.conv1"]["attributes"]["out_channels"] == 32
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = pruned_resnet(x)
        for loaded in (load_pruned_model(path),                                      # the stored, trusted constructor
                       load_pruned_model(path, lambda: torchvision.models.resnet18(num_classes=10)),
                       load_pruned_model(path, torchvision.models.resnet18(num_classes=10))):
            assert torch.equal(loaded.eval()(x), want)
            assert loaded.layer1[0].conv1.out_channels == 32
            assert loaded.fc.in_features == pruned_resnet.fc.in_features < 512
    rep = build_report(path).to_dict()                       # `sparsify report` reads it
    assert rep["format"] == "torch" and "conv1.weight" in {t["name"] for t in rep["tensors"]}


def test_untrusted_or_missing_constructor_and_wrong_model(pruned_resnet, tmp_path):
    path = tmp_path / "small.pt"
    save_pruned_model(pruned_resnet, path, "mypackage.models:build")
    with pytest.raises(ValueError, match="whose package is not trusted"):
        load_pruned_model(path)
    assert load_pruned_model(path, trusted_packages=("mypackage",), model=torchvision.models.resnet18(num_classes=10))
    save_pruned_model(pruned_resnet, path)
    with pytest.raises(ValueError, match="stores no constructor of the dense model; pass model="):
        load_pruned_model(path)
    with pytest.raises(ValueError, match="the model has no module 'layer1.0.conv1'|is a .*, the file has"):
        load_pruned_model(path, torch.nn.Sequential(torch.nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="constructor must look like"):
        save_pruned_model(pruned_resnet, path, "resnet18")
    with pytest.raises(TypeError, match="must be a plain value"):
        pruned_model_document(pruned_resnet, "torchvision.models:resnet18", {"norm_layer": torch.nn.BatchNorm2d})
