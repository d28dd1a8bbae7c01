"""Shared by the model-zoo tests: build models offline, prune, check every label removed what it stands for."""
import io
import warnings
from collections import Counter

import numpy as np
import timm
import torch
import torchvision
from torch import nn

from sparsify_torch.channels import UniformPruningLabelSelector, calibrate_model_for_pruning, prune_model
from sparsify_torch.channels.metrics import count_macs

tv = torchvision.models


def build(kind, name):
    torch.manual_seed(0)
    if kind == "torchvision":
        return tv.__dict__[name](weights=None)
    if kind == "segmentation":
        return tv.segmentation.__dict__[name](weights=None, weights_backbone=None)
    if kind == "detection":
        return tv.detection.__dict__[name](weights=None, weights_backbone=None)
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


def _size(model, name, role, dim):
    if role == "param":
        return int(model.get_parameter(name).shape[dim]) if name in dict(model.named_parameters()) \
            else int(model.get_buffer(name).shape[dim])
    m = model.get_submodule(name)
    if role == "out":
        return int(getattr(m, "out_channels", getattr(m, "out_features", 0)))
    if role == "in" or isinstance(m, nn.modules.conv._ConvNd):
        return int(getattr(m, "in_channels", getattr(m, "in_features", 0)))
    for attr in ("num_features", "num_channels", "num_parameters"):
        if hasattr(m, attr):
            return int(getattr(m, attr))
    return int(m.normalized_shape[0])


def assert_one_label_one_unit(original, pruned, info, labels):
    """Every layer lost exactly what the selected labels stand for; the root lost labels x width channels."""
    expected = Counter()
    for g, local in info.split_labels(labels).items():
        group = info.groups[g]
        chosen = np.isin(np.arange(group.n_labels), local)
        root = next(s for s in group.slots if s.name == group.root_name and s.role in ("out", "through"))
        per_label = np.bincount(root.labels, minlength=group.n_labels)
        at_root = per_label > 0  # a root holds every label of its group unless none does (a dense block)
        assert (per_label[at_root] == group.width).all(), f"group {g}: root channels per label {set(per_label)}"
        if at_root.all():  # the root loses exactly labels x width channels
            assert int(chosen[root.labels].sum()) == len(local) * group.width
        for s in group.slots:
            expected[(s.name, s.role, s.dim)] += int(chosen[s.labels].sum())
    for (name, role, dim), n in expected.items():
        lost = _size(original, name, role, dim) - _size(pruned, name, role, dim)
        assert lost == n, f"{name} ({role}) lost {lost} channels, the selected labels stand for {n}"


def prune_half_checked(model, inputs, loss, **kwargs):
    """Calibrate, select half of every group, prune a copy (checked), verify the label accounting."""
    info = calibrate_model_for_pruning(model, [inputs], loss, **kwargs)
    labels = UniformPruningLabelSelector(0.5).select(info)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "left unpruned" notes: asserted where they matter
        pruned = prune_model(model, info, labels, inplace=False)
    assert_one_label_one_unit(model, pruned, info, labels)
    return pruned, info, labels


def torch_pruning_macs_ratio(model, x, ratio=0.5):
    """Torch-Pruning run directly (MagnitudeImportance, the 1000-class classifier ignored): MACs after / before."""
    import torch_pruning as tp
    macs = count_macs(model, x)
    ignored = [m for m in model.modules() if isinstance(m, nn.Linear) and m.out_features == 1000]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pruner = tp.pruner.MetaPruner(model, x, importance=tp.importance.MagnitudeImportance(p=2),
                                      pruning_ratio=ratio, ignored_layers=ignored)
        pruner.step()
    return count_macs(model, x) / macs
