"""The canonical order of a Functional model (docs/design.md): call order, not Keras's layer order by depth.

A Dense branch defined and concatenated first, and a deeper Conv2D -> Flatten branch, joined by one
Concatenate: with every weight tied, global scope prunes the Dense branch first in every Keras, as torch
prunes the same modules defined in that order (Keras's own order puts the deeper convolution first)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsify_torch
from sparsify_keras import prune_oneshot
from sparsify_keras.layers import find_prunable_weights, in_model_order


def _functional(K):
    L = K.layers
    a, b = K.Input((6,)), K.Input((4, 4, 2))
    d = L.Dense(3, name="dense")(a)
    c = L.Conv2D(3, 3, name="conv")(b)
    x = L.Concatenate()([d, L.Flatten()(c)])
    return K.Model([a, b], L.Dense(2, name="head")(x))


class TorchTwoBranch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(6, 3)
        self.conv = torch.nn.Conv2d(2, 3, 3)
        self.head = torch.nn.Linear(3 + 12, 2)


@pytest.mark.parametrize("flavor", ["keras", "tf_keras"])
def test_functional_branches_break_global_ties_as_torch_does(flavor):
    K = __import__(flavor)
    model = _functional(K)
    assert [w.path for w in in_model_order(model, find_prunable_weights(model))] == [
        "dense/kernel", "conv/kernel", "head/kernel"]
    keras_order = [layer.name for layer in model.layers if layer.name in ("dense", "conv")]
    assert keras_order == ["conv", "dense"]            # Keras's own order: the deeper branch first
    config = {"target_sparsity": 0.4, "pruning_scope": "global"}
    for pw in find_prunable_weights(model):
        pw.variable.assign(np.full(pw.tf_shape, 0.25, np.float32))
    prune_oneshot(model, config)
    tnet = TorchTwoBranch()
    with torch.no_grad():
        for p in tnet.parameters():
            p.fill_(0.25)
    sparsify_torch.prune_oneshot(tnet, config)
    kept = {pw.path.split("/")[0]: pw.to_canonical(pw.variable.numpy()) != 0 for pw in find_prunable_weights(model)}
    want = {"dense": tnet.dense.weight.detach().numpy() != 0, "conv": tnet.conv.weight.detach().numpy() != 0,
            "head": tnet.head.weight.detach().numpy() != 0}
    total = sum(v.size for v in want.values())          # 18 + 54 + 30 = 102 weights, 41 pruned
    assert sum(int((~v).sum()) for v in want.values()) == round(0.4 * total)
    assert (~want["dense"]).sum() == 17 and want["head"].all()     # ties fall on the first-defined layers (dense
    assert (~want["conv"]).sum() == 24                              # up to its 0.98 cap, then conv), not the head
    for name in want:
        np.testing.assert_array_equal(kept[name], want[name], err_msg=f"{flavor} {name}")
