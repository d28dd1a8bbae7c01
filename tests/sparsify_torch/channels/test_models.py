"""calibrate_and_prune_model_equal(ratio 0.5) on the seed's model list, built offline (no weights)."""
import io
import warnings

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


@pytest.mark.parametrize("kind,name", [("torchvision", n) for n in CLASSIFIERS] +
                         [("segmentation", n) for n in SEGMENTERS] + [("timm", n) for n in TIMM],
                         ids=lambda v: v)
def test_equal_half_on_model_zoo(kind, name):
    model = build(kind, name).eval()
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = structure(model(x[:1]))
    macs, params = count_macs(model, x[:1]), count_params(model)
    pruned = calibrate_and_prune_model_equal(model, [x], seg_loss, pruning_ratio=0.5)
    macs1, params1 = count_macs(pruned, x[:1]), count_params(pruned)
    # every prunable group loses half its channels: conv costs fall to roughly a quarter to two thirds
    assert macs1 < 0.7 * macs and params1 < 0.75 * params
    with torch.no_grad():
        out = pruned(x[:1])
        assert structure(out) == before
        assert torch.equal(roundtrip(pruned)(x[:1]) if not isinstance(out, dict) else
                           roundtrip(pruned)(x[:1])["out"], out if not isinstance(out, dict) else out["out"])


def detection_data(n_images):
    images = [torch.rand(3, 64, 64, generator=torch.Generator().manual_seed(i)) for i in range(n_images)]
    targets = [{"boxes": torch.tensor([[4.0, 4.0, 40.0, 40.0]]), "labels": torch.tensor([1])}] * n_images
    return images, targets


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
    assert count_macs(pruned, images[:1]) < 0.7 * macs and count_params(pruned) < 0.7 * params
    with torch.no_grad():
        out = pruned(images[:1])
        again = roundtrip(pruned)(images[:1])
    assert isinstance(out, list) and sorted(out[0]) == ["boxes", "labels", "scores"]
    assert out[0]["boxes"].shape[1:] == (4,)
    torch.testing.assert_close(again[0]["scores"], out[0]["scores"])
