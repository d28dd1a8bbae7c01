"""calibrate_and_prune_model_equal(ratio 0.5) on the seed's model list, built offline (no weights).

Kept lean for CI (``-n 2`` on 2 cores, one torch thread per worker, see conftest): 32x32 inputs (the detectors
resize internally), batch 1 (2 where train-mode BatchNorm needs it), one calibration batch, one forward pass for
MACs + output structure before and after, and the calibration's traced graph is reused for the surgery.
"""
import io

import pytest
import timm
import torch
import torchvision

from sparsify_torch.channels import calibrate_and_prune_model_equal
from sparsify_torch.channels.metrics import count_macs, count_params

tv = torchvision.models
CLASSIFIERS = ["resnet18", "resnet34", "resnet50", "wide_resnet50_2", "densenet161", "mobilenet_v2",
               "mobilenet_v3_large", "efficientnet_b0"]
SEGMENTERS = ["fcn_resnet50", "fcn_resnet101", "deeplabv3_resnet50", "deeplabv3_resnet101",
              "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]
TIMM = ["efficientnet_b0", "resnet18", "resnet34", "resnet50", "wide_resnet50_2", "densenet161", "mobilenetv2_100",
        "mobilenetv3_large_100"]


def build(kind, name):
    torch.manual_seed(0)
    if kind == "torchvision":
        return tv.__dict__[name](weights=None)
    if kind == "segmentation":
        return tv.segmentation.__dict__[name](weights=None, weights_backbone=None)
    return timm.create_model(name, pretrained=False)


def structure(out):
    if isinstance(out, dict):
        return {k: structure(v) for k, v in out.items()}
    if isinstance(out, (list, tuple)):
        return [structure(v) for v in out]
    return tuple(out.shape)


def roundtrip(model):
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def seg_loss(out, x):
    return out["out"].pow(2).mean() if isinstance(out, dict) else out.pow(2).mean()


def main_output(out):
    return out["out"] if isinstance(out, dict) else out


@pytest.mark.parametrize("kind,name", [("torchvision", n) for n in CLASSIFIERS] +
                         [("segmentation", n) for n in SEGMENTERS] + [("timm", n) for n in TIMM],
                         ids=lambda v: v)
def test_equal_half_on_model_zoo(kind, name):
    model = build(kind, name).eval()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    macs, before = count_macs(model, x, return_output=True)
    params = count_params(model)
    pruned = calibrate_and_prune_model_equal(model, [x], seg_loss, pruning_ratio=0.5)
    macs1, out = count_macs(pruned, x, return_output=True)
    # every prunable group loses half its channels: conv costs fall to roughly a quarter to two thirds
    assert macs1 < 0.7 * macs and count_params(pruned) < 0.75 * params
    assert structure(out) == structure(before)
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in pruned.modules())  # a plain module
    with torch.no_grad():
        assert torch.equal(main_output(roundtrip(pruned)(x)), main_output(out))


def detection_data(n_images):
    images = [torch.rand(3, 64, 64, generator=torch.Generator().manual_seed(i)) for i in range(n_images)]
    targets = [{"boxes": torch.tensor([[4.0, 4.0, 40.0, 40.0]]), "labels": torch.tensor([1])}] * n_images
    return images, targets


# ssdlite's train-mode BatchNorm needs 2 images; both resize to 320 / 300 internally, so the image size is moot
@pytest.mark.parametrize("name,n_images", [("ssdlite320_mobilenet_v3_large", 2), ("ssd300_vgg16", 1)])
def test_equal_half_on_detectors(name, n_images):
    """Detectors: calibrate in train mode on the detection losses, trace only the backbone."""
    torch.manual_seed(0)
    model = tv.detection.__dict__[name](weights=None, weights_backbone=None)
    images, targets = detection_data(n_images)
    model.eval()
    macs, params = count_macs(model, images[:1]), count_params(model)
    model.train()
    pruned = calibrate_and_prune_model_equal(model, [(images, targets)], lambda out, s: sum(out.values()),
                                             sample_to_model_inputs=lambda s: (s, {}), calibration_steps=1,
                                             entry_point="backbone.forward")
    pruned.eval()
    macs1, out = count_macs(pruned, images[:1], return_output=True)
    assert macs1 < 0.7 * macs and count_params(pruned) < 0.7 * params
    with torch.no_grad():
        again = roundtrip(pruned)(images[:1])
    assert isinstance(out, list) and sorted(out[0]) == ["boxes", "labels", "scores"]
    assert out[0]["boxes"].shape[1:] == (4,)
    torch.testing.assert_close(again[0]["scores"], out[0]["scores"])
