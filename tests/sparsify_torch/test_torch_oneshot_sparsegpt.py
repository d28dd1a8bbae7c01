"""prune_oneshot(..., method="sparsegpt") on small real models, called as a user calls it."""
import copy

import numpy as np
import pytest
import torch
from torch import nn

import sparsify_torch
from sparsify import exact_prune_count
from sparsify.sparsegpt import HessianAccumulator, sparsegpt_prune


def _digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    return torch.tensor(d.data / 16.0, dtype=torch.float32), torch.tensor(d.target)


def _trained_mlp(seed=0, steps=300):
    torch.manual_seed(seed)
    x, y = _digits()
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, 1200, (64,), generator=g)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, x, y


class TinyBlock(nn.Module):
    """A pre-LayerNorm transformer block with separate q/k/v projections and a 4x MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(b, t, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def _correlated_tokens(n, t=16, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    basis = torch.randn(4, d, generator=g)
    return [torch.randn(8, t, 4, generator=g) @ basis + 0.3 * torch.randn(8, t, d, generator=g) for _ in range(n)]


def _output_error(model, dense, batches):
    with torch.no_grad():
        return sum(float(((model(b) - dense(b)) ** 2).mean()) for b in batches)


def test_mlp_unstructured_exact_counts_and_better_than_magnitude():
    dense, x, y = _trained_mlp()
    calib = [x[i:i + 100] for i in range(0, 600, 100)]
    held = [x[1200 + i:1200 + i + 100] for i in range(0, 500, 100)]
    cfg = {"target_sparsity": 0.7}
    sgpt = sparsify_torch.prune_oneshot(copy.deepcopy(dense), cfg, calib, method="sparsegpt")
    mag = sparsify_torch.prune_oneshot(copy.deepcopy(dense), cfg)
    for i in (0, 2):
        w = sgpt[i].weight
        assert int((w == 0).sum()) == exact_prune_count(0.7, w.numel())
        assert type(w) is nn.Parameter
    assert _output_error(sgpt, dense, held) < 0.5 * _output_error(mag, dense, held)
    acc = lambda m: float((m(x[1200:]).argmax(1) == y[1200:]).float().mean())  # noqa: E731
    with torch.no_grad():
        assert acc(sgpt) > acc(mag)


def test_mlp_two_of_four():
    dense, x, _ = _trained_mlp()
    model = sparsify_torch.prune_oneshot(copy.deepcopy(dense), {"target_sparsity": 0.5, "pattern": "2:4"},
                                         [x[:256]], method="sparsegpt", block_size=32)
    for i in (0, 2):
        w = model[i].weight
        assert (w.reshape(w.shape[0], -1, 4).ne(0).sum(-1) == 2).all()


def test_single_linear_equals_the_core():
    torch.manual_seed(1)
    lin = nn.Linear(16, 8)
    batches = [torch.randn(32, 16) for _ in range(3)]
    acc = HessianAccumulator(16)
    for b in batches:
        acc.add(b.double().numpy())
    expected, _ = sparsegpt_prune(lin.weight.detach().double().numpy(), acc.hessian(), 0.5, block_size=8)
    sparsify_torch.prune_oneshot(lin, {"target_sparsity": 0.5}, batches, method="sparsegpt", block_size=8)
    np.testing.assert_array_equal(lin.weight.detach().numpy(), expected.astype(np.float32))


@pytest.mark.parametrize("sequential", [True, False])
def test_transformer_block_beats_wanda(sequential):
    torch.manual_seed(0)
    dense = TinyBlock()
    batches = _correlated_tokens(12)
    calib, held = batches[:8], batches[8:]
    cfg = {"target_sparsity": 0.5, "op_names": [r"\.?(q|k|v|o|fc1|fc2)\.weight"]}
    sgpt = sparsify_torch.prune_oneshot(copy.deepcopy(dense), cfg, calib, method="sparsegpt", sequential=sequential)
    wanda = sparsify_torch.prune_oneshot(copy.deepcopy(dense), {**cfg, "criterion": "wanda", "pruning_scope": "row"},
                                         calib)
    for name in ("q", "k", "v", "o", "fc1", "fc2"):
        w = getattr(sgpt, name).weight
        assert int((w == 0).sum()) == w.numel() // 2
    assert sgpt.ln1.weight.eq(1).all()
    assert _output_error(sgpt, dense, held) < _output_error(wanda, dense, held)


def test_sequential_sees_pruned_earlier_layers():
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 8))
    batches = [torch.randn(64, 16) for _ in range(2)]
    seq = sparsify_torch.prune_oneshot(copy.deepcopy(dense), {"target_sparsity": 0.5}, batches, method="sparsegpt")
    one = sparsify_torch.prune_oneshot(copy.deepcopy(dense), {"target_sparsity": 0.5}, batches, method="sparsegpt",
                                       sequential=False)
    assert torch.equal(seq[0].weight, one[0].weight)           # the first layer sees the same inputs
    assert not torch.equal(seq[2].weight, one[2].weight)       # the second sees the pruned first layer's outputs
    acc = HessianAccumulator(16)
    with torch.no_grad():
        for b in batches:
            acc.add(seq[1](seq[0](b)).double().numpy())
    expected, _ = sparsegpt_prune(dense[2].weight.detach().double().numpy(), acc.hessian(), 0.5)
    np.testing.assert_allclose(seq[2].weight.detach().numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs,config,match", [
    ({"method": "obs"}, {}, r"method must be one of \['criterion', 'sparsegpt'\], got 'obs'"),
    ({"dampening": 0.1}, {}, "dampening=0.1 applies to method='sparsegpt' only"),
    ({"method": "sparsegpt", "dampening": -1}, {}, "dampening must be a finite number >= 0"),
    ({"method": "sparsegpt", "block_size": 0}, {}, "block_size must be a positive integer"),
    ({"method": "sparsegpt", "sequential": 1}, {}, "sequential must be True or False, got 1"),
    ({"method": "sparsegpt"}, {"pruning_scope": "global"}, "pruning_scope must be 'local', got 'global'"),
    ({"method": "sparsegpt"}, {"criterion": "wanda"}, "leave criterion at 'magnitude'"),
    ({"method": "sparsegpt"}, {"pattern": "2:4", "target_sparsity": 0.25}, "must be N/M = 0.5, got 0.25"),
    ({"method": "sparsegpt"}, {"pattern": "4x1"}, "supports pattern '1x1'"),
])
def test_bad_arguments_are_named(kwargs, config, match):
    model = nn.Sequential(nn.Linear(8, 8))
    with pytest.raises(ValueError, match=match):
        sparsify_torch.prune_oneshot(model, {"target_sparsity": 0.5, **config}, [torch.randn(4, 8)], **kwargs)


def test_sparsegpt_refuses_convs_and_missing_batches():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4 * 36, 2))
    with pytest.raises(ValueError, match=r"plain nn.Linear weights only; exclude \['0.weight'\]"):
        sparsify_torch.prune_oneshot(model, {"target_sparsity": 0.5}, [torch.randn(2, 1, 8, 8)], method="sparsegpt")
    with pytest.raises(ValueError, match="pass calibration batches"):
        sparsify_torch.prune_oneshot(model, {"target_sparsity": 0.5, "excluded_op_names": ["^0"]},
                                     method="sparsegpt")
    before = model[2].weight.detach().clone()
    sparsify_torch.prune_oneshot(model, {"target_sparsity": 0.5, "excluded_op_names": ["^0"]},
                                 [torch.randn(2, 1, 8, 8)], method="sparsegpt")
    assert int((model[2].weight == 0).sum()) == before.numel() // 2
