"""`sparsify_torch.to_sparse_inference`: pruned Linear and 1x1 Conv2d layers on sparse CSR/BSR weights, with
the same outputs as the dense-with-zeros model, and a clear refusal of what torch cannot run sparse."""
from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

import sparsify_torch
from sparsify_torch import SparseConv1x1, SparseLinear, sparse_inference_plan, to_sparse_inference
from sparsify_torch.sparse_inference import sparse_layers

from torch_helpers import digits, mlp


def _pruned_mlp(pattern: str = "1x1", sparsity: float = 0.9, **config) -> nn.Module:
    model = mlp()
    sparsify_torch.prune(model, {"target_sparsity": sparsity, "pattern": pattern, "start_step": 0, "end_step": 0,
                                 **config}).remove()
    return model


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(OrderedDict(
        stem=nn.Conv2d(3, 8, 3, stride=2, padding=1), act=nn.ReLU(),
        dw=nn.Conv2d(8, 8, 3, padding=1, groups=8), pw=nn.Conv2d(8, 16, 1), act2=nn.ReLU(),
        pool=nn.AdaptiveAvgPool2d(1), flat=nn.Flatten(), head=nn.Linear(16, 4)))


def test_csr_mlp_pruned_by_sparsify_matches_dense_and_keeps_its_nonzeros():
    model = _pruned_mlp()
    x, _ = digits(32)
    fast = to_sparse_inference(model, x)
    assert sparse_layers(fast) == ["fc1", "fc2", "head"]
    # 90% of 64*32, 32*16, 16*10 weights pruned (nearest count, a half rounded down): 205, 51, 16 kept
    assert [fast.get_submodule(n).weight._nnz() for n in ("fc1", "fc2", "head")] == [205, 51, 16]
    assert fast.fc1.weight.layout == torch.sparse_csr
    torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
    assert isinstance(model.fc1, nn.Linear) and model.fc1.weight.layout == torch.strided   # original unchanged
    assert model.training and not fast.training


def test_bsr_follows_a_block_pattern():
    model = _pruned_mlp("4x4", 0.75, excluded_op_names=["head"])     # head: 10 rows, not a multiple of 4
    x, _ = digits(8)
    fast = to_sparse_inference(model, x, layout="bsr", blocksize=4, modules=["fc1", "fc2"])
    w = fast.fc1.weight
    assert w.layout == torch.sparse_bsr and tuple(w.values().shape[1:]) == (4, 4)
    assert w._nnz() == 32                    # 128 blocks of 4x4 in a 32x64 weight, 75% pruned
    torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)


def test_cnn_converts_1x1_convs_and_linear_and_leaves_other_convs_dense():
    model = _cnn()
    sparsify_torch.prune(model, {"target_sparsity": 0.8, "start_step": 0, "end_step": 0}).remove()
    x = torch.randn(2, 3, 9, 9)
    assert sparse_inference_plan(model) == {
        "stem": "a (3, 3) convolution: torch has sparse kernels for matrix products only (1x1)",
        "dw": "a (3, 3) convolution: torch has sparse kernels for matrix products only (1x1)",
        "pw": None, "head": None}
    fast = to_sparse_inference(model, x)
    assert isinstance(fast.pw, SparseConv1x1) and isinstance(fast.head, SparseLinear)
    assert isinstance(fast.stem, nn.Conv2d)
    torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)


def test_while_pruning_the_masked_weight_is_taken_and_3d_inputs_work():
    model = mlp()
    sparsify_torch.prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    x = torch.randn(2, 5, 64)                                    # (batch, sequence, features)
    fast = to_sparse_inference(model, x, modules=["fc1"])
    assert sparse_layers(fast) == ["fc1"] and fast.fc1.weight._nnz() == 1024
    assert fast(x).shape == (2, 5, 10)


def test_min_sparsity_leaves_denser_layers_dense():
    model = _pruned_mlp()
    with torch.no_grad():
        model.head.weight.fill_(0.5)
    fast = to_sparse_inference(model, digits(4)[0], min_sparsity=0.5)
    assert sparse_layers(fast) == ["fc1", "fc2"]
    assert sparse_inference_plan(model, min_sparsity=0.5)["head"] == "sparsity 0.000 is below min_sparsity 0.5"


@pytest.mark.parametrize("kwargs, match", [
    ({"layout": "coo"}, r"layout must be one of \('csr', 'bsr'\), got 'coo'"),
    ({"layout": "bsr"}, r"blocksize must be a positive int or a pair of positive ints for layout='bsr', got None"),
    ({"layout": "bsr", "blocksize": (4, 0)}, r"got \(4, 0\)"),
    ({"layout": "bsr", "blocksize": (2, 4)}, r"blocksize must be square .* got \(2, 4\)"),
    ({"blocksize": 4}, r"blocksize is for layout='bsr'; got blocksize=4 with layout='csr'"),
    ({"min_sparsity": 1.0}, r"min_sparsity must be a number in \[0, 1\), got 1.0"),
    ({"modules": ["nope"]}, r"modules \['nope'\] are not modules of the model"),
    ({"modules": ["act"]}, r"'act': a ReLU; only nn.Linear and 1x1 nn.Conv2d layers are converted"),
    ({"layout": "bsr", "blocksize": 8}, r"'head': weight 10x16 is not divided by blocksize 8x8"),
])
def test_bad_arguments_and_layers_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        to_sparse_inference(_pruned_mlp(), digits(4)[0], **kwargs)


def test_a_named_conv_torch_cannot_run_sparse_is_refused():
    model = _cnn()
    with pytest.raises(ValueError, match=r"'dw': a \(3, 3\) convolution"):
        to_sparse_inference(model, torch.randn(1, 3, 8, 8), modules=["pw", "dw"])
    strided = nn.Sequential(nn.Conv2d(3, 4, 1, stride=2))
    with pytest.raises(ValueError, match=r"model has no layer to convert"):
        to_sparse_inference(strided, torch.randn(1, 3, 4, 4))
    assert sparse_inference_plan(strided)["0"] == ("a 1x1 convolution with stride (2, 2); only (1, 1) is a plain "
                                                   "matrix product")


def test_half_precision_is_refused_naming_the_layer():
    model = _pruned_mlp().half()
    with pytest.raises(ValueError, match=r"'fc1': weight dtype torch.float16"):
        to_sparse_inference(model, digits(4)[0].half())


class _Drifting(nn.Module):
    """A model whose output changes with every call (state kept between calls): the check must catch it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.fc(x) + self.calls


def test_outputs_that_differ_are_an_error():
    with pytest.raises(ValueError, match=r"output 0 differs from the dense model's \(max abs diff 1.0"):
        to_sparse_inference(_Drifting(), torch.ones(1, 4))


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2 ** 16), st.sampled_from([("csr", None), ("bsr", (2, 2)), ("bsr", 8)]),
       st.floats(0.0, 0.99, allow_subnormal=False))
def test_any_mask_gives_the_dense_outputs(seed, layout_block, density_cut):
    layout, block = layout_block
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 8))
    with torch.no_grad():
        for lin in (model[0], model[2]):
            lin.weight.mul_((torch.rand(lin.weight.shape, generator=g) >= density_cut).float())
    x = torch.randn(3, 16, generator=g)
    fast = to_sparse_inference(model, x, layout=layout, blocksize=block)
    torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
