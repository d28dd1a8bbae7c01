"""Uniform pruning at ratio 0.5 on the seed's model list and the models Torch-Pruning handles, built offline.

Kept lean for CI (``-n 2`` on 2 cores, one torch thread per worker, see conftest): 32x32 inputs (64x64 where
the comparison with Torch-Pruning needs the last stages to be larger than 1x1; the detectors resize
internally), batch 1 (2 where train-mode BatchNorm needs it), one calibration batch. Every prune is checked by
``prune_model`` against the original with the pruned channels zeroed, and every layer must lose exactly what the
selected labels stand for. The slowest models (transformers at 224x224, a two-stage detector) are in
test_models_slow.py.
"""
import pytest
import torch

from sparsify_torch.channels.metrics import count_macs, count_params
from zoo_helpers import (build, main_output, prune_half_checked, roundtrip, seg_loss, structure,
                         torch_pruning_macs_ratio, tv)

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

CLASSIFIERS = ["resnet18", "resnet34", "resnet50", "wide_resnet50_2", "densenet161", "mobilenet_v2",
               "mobilenet_v3_large", "efficientnet_b0"]
SEGMENTERS = ["fcn_resnet50", "fcn_resnet101", "deeplabv3_resnet50", "deeplabv3_resnet101",
              "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]
TIMM = ["efficientnet_b0", "resnet18", "resnet34", "resnet50", "wide_resnet50_2", "densenet161", "mobilenetv2_100",
        "mobilenetv3_large_100"]


@pytest.mark.parametrize("kind,name", [("torchvision", n) for n in CLASSIFIERS] +
                         [("segmentation", n) for n in SEGMENTERS] + [("timm", n) for n in TIMM],
                         ids=lambda v: v)
def test_equal_half_on_model_zoo(kind, name):
    model = build(kind, name).eval()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    macs, before = count_macs(model, x, return_output=True)
    params = count_params(model)
    pruned, info, _ = prune_half_checked(model, x, seg_loss)
    assert info.unpruned_groups() == []  # everything but the outputs prunes
    macs1, out = count_macs(pruned, x, return_output=True)
    # every prunable group loses half its channels: conv costs fall to roughly a quarter to two thirds
    assert macs1 < 0.7 * macs and count_params(pruned) < 0.75 * params
    assert structure(out) == structure(before)
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in pruned.modules())  # a plain module
    with torch.no_grad():
        assert torch.equal(main_output(roundtrip(pruned)(x)), main_output(out))


# Torch-Pruning prunes grouped and depthwise convolutions by whole groups or equally per group: so do we
@pytest.mark.parametrize("name", ["regnet_y_400mf", "regnet_x_400mf", "resnext50_32x4d", "convnext_tiny"])
def test_grouped_convolutions_match_torch_pruning(name):
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    model = build("torchvision", name).eval()
    macs = count_macs(model, x)
    pruned, info, _ = prune_half_checked(model, x, seg_loss)
    assert info.unpruned_groups() == []
    if name == "convnext_tiny":  # depthwise blocks, LayerNorms and layer scales on the stream
        assert any("param" in m for g in info.groups for m in g.members)
    else:  # grouped convolutions: a label is the same position of every block
        assert any(g.width > 1 for g in info.groups)
    ours = count_macs(pruned, x) / macs
    assert abs(ours - torch_pruning_macs_ratio(build("torchvision", name).eval(), x)) <= 0.02
    with torch.no_grad():
        assert torch.equal(roundtrip(pruned)(x), pruned(x))


@pytest.mark.parametrize("kind,name,min_ratio", [
    ("torchvision", "shufflenet_v2_x1_0", 0.45),  # the shuffle ties channel pairs; two stage streams stay whole
    ("timm", "cspresnet50", 0.5),  # the stored CSP split size is rewritten after pruning
    ("timm", "mixnet_s", 0.5),  # MixedConv2d's stored split sizes are rewritten after pruning
    ("timm", "ghostnet_100", 0.5),  # a channel and its depthwise copy are one label
])
def test_shuffles_stored_splits_and_ghost_copies(kind, name, min_ratio):
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    model = build(kind, name).eval()
    macs, before = count_macs(model, x, return_output=True)
    pruned, info, labels = prune_half_checked(model, x, seg_loss)
    assert info.achieved_ratio >= min_ratio - 0.005
    macs1, out = count_macs(pruned, x, return_output=True)
    assert macs1 < 0.5 * macs and structure(out) == structure(before)
    if name == "shufflenet_v2_x1_0":
        assert {info.groups[i].reason for i in info.unpruned_groups()} == set()  # only single labels stay whole
        assert sum(1 for g in info.groups if not g.prunable and g.n_labels == 1) == 2


def detection_data(n_images):
    images = [torch.rand(3, 64, 64, generator=torch.Generator().manual_seed(i)) for i in range(n_images)]
    targets = [{"boxes": torch.tensor([[4.0, 4.0, 40.0, 40.0]]), "labels": torch.tensor([1])}] * n_images
    return images, targets


# ssdlite's train-mode BatchNorm needs 2 images; both resize to 320 / 300 internally, so the image size is moot
@pytest.mark.parametrize("name,n_images", [("ssdlite320_mobilenet_v3_large", 2), ("ssd300_vgg16", 1)])
def test_equal_half_on_detectors(name, n_images):
    """Detectors: calibrate in train mode on the detection losses, trace only the backbone."""
    model = build("detection", name)
    images, targets = detection_data(n_images)
    model.eval()
    macs, params = count_macs(model, images[:1]), count_params(model)
    model.train()
    pruned, _, _ = prune_half_checked(model, (images, targets), lambda out, s: sum(out.values()),
                                      sample_to_model_inputs=lambda s: (s, {}), n_steps=1,
                                      entry_point="backbone.forward")
    pruned.eval()
    macs1, out = count_macs(pruned, images[:1], return_output=True)
    assert macs1 < 0.7 * macs and count_params(pruned) < 0.7 * params
    with torch.no_grad():
        again = roundtrip(pruned)(images[:1])
    assert isinstance(out, list) and sorted(out[0]) == ["boxes", "labels", "scores"]
    assert out[0]["boxes"].shape[1:] == (4,)
    torch.testing.assert_close(again[0]["scores"], out[0]["scores"])
