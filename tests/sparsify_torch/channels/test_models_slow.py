"""The slowest zoo models (run by CI like every test file): transformers at 224x224 and a two-stage detector.

Attention blocks are followed op by op; what enters a matmul or an ``nn.MultiheadAttention`` is not pruned, the
MLPs and convolutions around it are. Every prune is checked against the original with the pruned channels zeroed.
"""
import copy
import warnings

import pytest
import torch

from sparsify_torch.channels import UniformPruningLabelSelector, calibrate_model_for_pruning
from sparsify_torch.channels.metrics import count_macs
from sparsify_torch.channels.surgery import select_and_prune
from zoo_helpers import assert_one_label_one_unit, build, prune_half_checked, roundtrip

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")


def select_and_prune_half(model, data, loss, **kwargs):
    """What ``calibrate_and_prune_model_equal`` does, keeping the info and the original for the accounting."""
    info = calibrate_model_for_pruning(model, data, loss, **kwargs)
    original = copy.deepcopy(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pruned = select_and_prune(model, info, UniformPruningLabelSelector(0.5), asked_ratio=0.5)
    assert_one_label_one_unit(original, pruned, info, info.pruned_labels)
    return pruned, info, " ".join(str(w.message) for w in caught)


def image(size=224):
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name,size,left", [
    ("vit_b_16", 224, "inputs of MultiheadAttention 'encoder.layers.encoder_layer_0.self_attention'"),
    ("swin_t", 64, "in 'features.1.0.attn' (1 group)"),  # the shifted-window attention
])
def test_transformers_prune_their_mlps(name, size, left):
    model = build("torchvision", name).eval()
    if name == "vit_b_16":     # torchvision zero-initialises the head: no loss would depend on any channel
        with torch.no_grad():
            model.heads.head.weight.normal_(std=0.02, generator=torch.Generator().manual_seed(0))
    x = image(size)
    macs = count_macs(model, x)
    pruned, info, _ = prune_half_checked(model, x, lambda out, s: out.pow(2).mean())
    assert info.unpruned_summary().startswith("left unpruned:") and left in info.unpruned_summary()
    assert count_macs(pruned, x) < 0.6 * macs
    with torch.no_grad():
        assert torch.equal(roundtrip(pruned)(x), pruned(x))


def test_maxvit_leaves_out_the_streams_its_attention_reshapes_by_size():
    model = build("torchvision", "maxvit_t").eval()
    x = image()
    macs = count_macs(model, x)
    pruned, info, notes = select_and_prune_half(model, [x], lambda out, s: out.pow(2).mean())
    broke = [i for i, g in enumerate(info.groups) if g.reason.startswith("pruning it breaks the model")]
    assert len(broke) == 4 and notes.count("left unpruned, pruning it breaks the model") == 4
    assert all("RuntimeError: shape" in info.groups[i].reason and "attn_layer.1" in info.groups[i].reason
               for i in broke)
    assert count_macs(pruned, x) < 0.7 * macs


def test_two_stage_detector_prunes_exactly_in_train_and_eval_mode():
    """faster-RCNN: calibrated on the training losses over the whole model, checked on the detections."""
    model = build("detection", "fasterrcnn_mobilenet_v3_large_320_fpn")
    images = [torch.rand(3, 64, 64, generator=torch.Generator().manual_seed(0))]
    targets = [{"boxes": torch.tensor([[4.0, 4.0, 40.0, 40.0]]), "labels": torch.tensor([1])}]
    model.eval()
    macs = count_macs(model, images)
    model.train()
    pruned, info, notes = select_and_prune_half(model, [(images, targets)], lambda out, s: sum(out.values()),
                                                sample_to_model_inputs=lambda s: (s, {}), n_steps=1)
    assert "op roi_align may mix channels in 'roi_heads.box_roi_pool'" in notes  # the FPN outputs stay whole
    pruned.eval()
    assert count_macs(pruned, images) < 0.6 * macs
    pruned.train()
    losses = pruned(images, targets)  # the pruned detector still trains
    assert torch.isfinite(sum(losses.values()))
