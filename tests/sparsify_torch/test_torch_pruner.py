"""prune()/Pruner: selection, literal masks, schedules, criteria, training behaviour."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn
from torch.nn.utils import parametrize

from sparsify import PruningEngine, criteria
from sparsify.layout import to_2d
from sparsify_torch import MaskParametrization, prune
from torch_helpers import accuracy, batch, cnn, digits, expected_pruned, mlp, train_step

ONE_SHOT = {"start_step": 0, "end_step": 0}


def linear(w, bias=False) -> nn.Linear:
    w = torch.tensor(w, dtype=torch.float32)
    lin = nn.Linear(w.shape[1], w.shape[0], bias=bias)
    with torch.no_grad():
        lin.weight.copy_(w)
    return lin


def kept(m: nn.Module, name: str = "weight") -> list:
    return (getattr(m, name) != 0).tolist()


def count_engines(monkeypatch) -> list:
    """Every PruningEngine built from now on (the core's engine, which coerces the config)."""
    built, init = [], PruningEngine.__init__

    def counting(self, *args, **kwargs):
        built.append(args[0] if args else kwargs.get("config"))
        init(self, *args, **kwargs)

    monkeypatch.setattr(PruningEngine, "__init__", counting)
    return built


def test_prune_checks_coerces_and_builds_one_engine(monkeypatch):
    built = count_engines(monkeypatch)
    pruner = prune(mlp(), {"target_sparsity": 0.5, "op_names": ["fc"], **ONE_SHOT})
    assert len(built) == 1 and built[0] is pruner.config       # the config prune() coerced, once
    assert pruner.names == ["fc1.weight", "fc2.weight"]


# ----- literal masks -------------------------------------------------------------------------
def test_unstructured_local_literal():
    lin = linear([[1, 2, 3, 4], [5, 6, 7, 8]])
    pruner = prune(lin, {"target_sparsity": 0.5, **ONE_SHOT})
    assert kept(lin) == [[False, False, False, False], [True, True, True, True]]
    assert pruner.masks()["weight"].tolist() == kept(lin)


def test_two_in_four_literal():
    lin = linear([[1, 2, 3, 4], [5, 6, 7, 8]])
    prune(lin, {"target_sparsity": 0.5, "pattern": "2:4", **ONE_SHOT})
    assert kept(lin) == [[False, False, True, True], [False, False, True, True]]


def test_block_4x1_literal():
    lin = linear([[1, 0.1], [2, 0.1], [3, 0.1], [4, 0.1]])   # (out=4, in=2): two 4x1 blocks (columns)
    prune(lin, {"target_sparsity": 0.5, "pattern": "4x1", **ONE_SHOT})
    assert kept(lin) == [[True, False]] * 4


def test_channel_literal_on_conv():
    conv = nn.Conv2d(2, 3, 1, bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([[1.0, 1.0], [-5.0, 0.0], [0.5, 0.5]]).view(3, 2, 1, 1))
    prune(conv, {"target_sparsity": 0.34, "pattern": "1xchannel", **ONE_SHOT})   # 1 row by all columns
    assert kept(conv) == [[[[True]], [[True]]], [[[True]], [[False]]], [[[False]], [[False]]]]  # 0 stays 0
    assert conv.parametrizations.weight[0].bool_mask().view(3, 2).tolist() == [[True, True], [True, True],
                                                                               [False, False]]


def test_conv_weights_reach_core_in_canonical_layout():
    # 2-D view of (out, in, kh, kw) is (out, kh*kw*in) with the input channel fastest, so a
    # "1x2" block covers both input channels of one kernel position.
    conv = nn.Conv2d(2, 1, (1, 2), bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([[[[1.0, 3.0]], [[1.0, 0.5]]]]))   # w[0, c, 0, k]
    pruner = prune(conv, {"target_sparsity": 0.5, "pattern": "1x2", **ONE_SHOT})
    assert pruner.masks()["weight"].tolist() == [[[[False, True]], [[False, True]]]]


def test_global_scope_literal_with_layer_cap():
    model = nn.Sequential(linear([[1, -3], [0.5, 2]]), linear([[4, 6], [-7, 5]]))
    prune(model, {"target_sparsity": 0.5, "pruning_scope": "global", **ONE_SHOT})
    # 4 of 8 pruned; layer 0 may keep no fewer than one weight, so the 4th goes to layer 1.
    assert kept(model[0]) == [[False, True], [False, False]]
    assert kept(model[1]) == [[False, True], [True, True]]
    local = nn.Sequential(linear([[1, -3], [0.5, 2]]), linear([[4, 6], [-7, 5]]))
    prune(local, {"target_sparsity": 0.5, **ONE_SHOT})
    assert kept(local[0]) == [[False, True], [False, True]]
    assert kept(local[1]) == [[False, True], [True, False]]


# ----- selection -----------------------------------------------------------------------------
class Zoo(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.c1 = nn.Conv1d(8, 4, 2)
        self.features = nn.Sequential(nn.Conv3d(1, 2, 2), nn.ConvTranspose2d(2, 4, 2))
        self.norm = nn.LayerNorm(4)

    def forward(self, tok):
        h = self.emb(tok)
        h, _ = self.attn(h, h, h)
        h = self.c1(h.transpose(1, 2))
        return h


def test_selects_every_supported_layer_by_parameter_name():
    torch.manual_seed(0)
    model = Zoo()
    pruner = prune(model, {"target_sparsity": 0.5, **ONE_SHOT})
    assert pruner.names == ["emb.weight", "attn.in_proj_weight.q", "attn.in_proj_weight.k", "attn.in_proj_weight.v",
                            "attn.out_proj.weight", "c1.weight", "features.0.weight", "features.1.weight"]
    assert all(s == 0.5 for s in pruner.sparsity().values())
    assert not parametrize.is_parametrized(model.norm)
    # MultiheadAttention really uses the masked projections.
    tok = torch.randint(0, 10, (2, 5))
    h = model.emb(tok)
    plain = nn.MultiheadAttention(8, 2, batch_first=True)
    with torch.no_grad():
        plain.in_proj_weight.copy_(model.attn.in_proj_weight)
        plain.in_proj_bias.copy_(model.attn.in_proj_bias)
        plain.out_proj.weight.copy_(model.attn.out_proj.weight)
        plain.out_proj.bias.copy_(model.attn.out_proj.bias)
    assert torch.equal(model.attn(h, h, h)[0], plain(h, h, h)[0])
    assert model(tok).shape == (2, 4, 4)


def test_op_names_and_excluded_op_names():
    model = nn.Sequential(OrderedDict(features=nn.Sequential(nn.Conv2d(1, 4, 3), nn.Conv2d(4, 4, 3)),
                                      classifier=nn.Linear(4, 2)))
    pruner = prune(model, {"target_sparsity": 0.5, "op_names": [r"^features\."],
                           "excluded_op_names": [r"\.1\.weight$"], **ONE_SHOT})
    assert pruner.names == ["features.0.weight"]
    assert parametrize.is_parametrized(model.features[0], "weight")
    assert not parametrize.is_parametrized(model.features[1])
    assert not parametrize.is_parametrized(model.classifier)


def test_masks_match_core_for_canonical_weights():
    """The core sees q, k, v of MultiheadAttention as three weights and a transposed conv with output
    channels as rows (docs/design.md, rule 1); conversions written here, independently of the adapter."""
    torch.manual_seed(1)
    model = Zoo()
    raw = {n: p.detach().numpy().copy() for n, p in model.named_parameters() if p.ndim >= 2}
    e = model.attn.embed_dim
    canon = {"emb.weight": raw["emb.weight"], "attn.out_proj.weight": raw["attn.out_proj.weight"],
             "c1.weight": raw["c1.weight"], "features.0.weight": raw["features.0.weight"],
             "features.1.weight": raw["features.1.weight"].transpose(1, 0, 2, 3)}      # (in, out, k) -> (out, in, k)
    for i, part in enumerate("qkv"):
        canon[f"attn.in_proj_weight.{part}"] = raw["attn.in_proj_weight"][i * e:(i + 1) * e]
    cfg = {"target_sparsity": 0.7, "pruning_scope": "global", **ONE_SHOT}
    pruner = prune(model, cfg)
    want = PruningEngine(cfg).compute_masks({n: canon[n] for n in pruner.names}, 0)
    got = pruner.masks()
    for n in pruner.names:
        expected = want[n].transpose(1, 0, 2, 3) if n == "features.1.weight" else want[n]
        np.testing.assert_array_equal(got[n].numpy(), expected, err_msg=n)
    fused = model.attn.parametrizations.in_proj_weight[0].mask.bool().numpy()
    np.testing.assert_array_equal(fused, np.concatenate([want[f"attn.in_proj_weight.{p}"] for p in "qkv"]))


def test_transposed_conv_channel_patterns_prune_output_channels():
    layer = nn.ConvTranspose2d(3, 4, 2)                 # weight (in=3, out=4, 2, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.arange(1.0, 49.0).view(3, 4, 2, 2))
    prune(layer, {"target_sparsity": 0.5, "pattern": "1x12", **ONE_SHOT})   # a whole row of the (4, 12) view
    out_alive = (layer.weight != 0).any(dim=(0, 2, 3)).tolist()
    assert out_alive == [False, False, True, True]      # whole output channels, the lowest two


# ----- training ------------------------------------------------------------------------------
def test_mlp_training_exact_sparsity_zero_weights_and_grads():
    x, y = digits()
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    cfg = {"target_sparsity": 0.8, "start_step": 0, "end_step": 40, "pruning_frequency": 10,
           "excluded_op_names": ["head"]}
    pruner = prune(model, cfg)
    engine = PruningEngine(cfg)
    updates = []
    for step in range(1, 51):
        xb, yb = batch(x, y, step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        for n in pruner.names:
            mod = getattr(model, n.split(".")[0])
            orig = mod.parametrizations.weight.original
            mask = mod.parametrizations.weight[0].bool_mask()
            assert torch.all(orig.grad[~mask] == 0)               # gradients of pruned weights are zero
        opt.step()
        pruner.step()
        assert pruner.step_count == step
        for n in pruner.names:
            mod = getattr(model, n.split(".")[0])
            mask = mod.parametrizations.weight[0].bool_mask()
            assert torch.all(mod.weight[~mask] == 0)              # pruned weights are exactly zero
            if step % 10 == 0 and step <= 40:
                n_pruned = int((~mask).sum())
                assert n_pruned == expected_pruned(engine.target_sparsity(step), mask.numel()), (n, step)
        if step % 10 == 0 and step <= 40:
            updates.append(pruner.done_step)
    assert updates == [10, 20, 30, 40]
    assert pruner.sparsity()["fc1.weight"] == pytest.approx(0.8, abs=1 / 2048)
    assert accuracy(model, x, y) > 0.6


def _check_structure(pattern: str, mask2d: np.ndarray) -> None:
    if pattern == "4x1":
        blocks = mask2d.reshape(mask2d.shape[0] // 4, 4, mask2d.shape[1])
        assert (blocks == blocks[:, :1]).all()
    elif pattern == "1xchannel":                   # one row (output channel) by all columns
        assert (mask2d == mask2d[:, :1]).all()
    elif pattern == "2:4":
        per_group = mask2d.reshape(mask2d.shape[0], -1, 4).sum(-1)
        assert set(np.unique(per_group)) <= {2, 4}


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("pattern", ["1x1", "4x1", "2:4", "1xchannel"])
def test_cnn_training_every_pattern_and_scope(pattern, scope):
    x, y = digits(256)
    model = cnn()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    cfg = {"target_sparsity": 0.5, "pattern": pattern, "pruning_scope": scope, "start_step": 0,
           "end_step": 12, "pruning_frequency": 4, "excluded_op_names": ["head"]}
    pruner = prune(model, cfg)
    engine = PruningEngine(cfg)
    for step in range(1, 15):
        train_step(model, opt, *batch(x, y, step))
        before = {n: m.numpy() for n, m in pruner.masks().items()}
        weights = {n: getattr(model, n.split(".")[0]).weight.detach().numpy().copy() for n in pruner.names}
        pruner.step()
        masks = {n: m.numpy() for n, m in pruner.masks().items()}
        if step % 4 == 0 and step <= 12:
            want = engine.compute_masks(weights, step, pre_masks=before)
            for n in pruner.names:
                np.testing.assert_array_equal(masks[n], want[n])
                assert not (masks[n] & ~before[n]).any()           # monotone
                _check_structure(pattern, to_2d(masks[n]))
            if pattern == "1xchannel":   # units are whole rows (output channels), counted as units
                rows = [to_2d(m)[:, 0] for m in masks.values()]
                total, n_pruned = sum(r.size for r in rows), sum(int((~r).sum()) for r in rows)
            else:
                total = sum(m.size for m in masks.values())
                n_pruned = sum(int((~m).sum()) for m in masks.values())
            if scope == "local" and pattern == "1x1":
                for m in masks.values():
                    assert int((~m).sum()) == expected_pruned(engine.target_sparsity(step), m.size)
            else:
                assert abs(n_pruned / total - engine.target_sparsity(step)) < 0.05
        else:
            for n in pruner.names:
                np.testing.assert_array_equal(masks[n], before[n])
    if pattern != "1xchannel":
        assert pruner.total_sparsity() == pytest.approx(0.5, abs=0.02)


def test_steps_follow_the_core_protocol_skipped_steps_and_release():
    """Step bookkeeping is the core's (tests/sparsify/test_protocol.py); this checks the wiring:
    a jump over update points applies the latest one, and the release keeps the last zeros."""
    model = mlp()
    cfg = {"target_sparsity": 0.9, "start_step": 0, "end_step": 100, "pruning_frequency": 10,
           "leave_enabled": False}
    pruner = prune(model, cfg)
    engine = PruningEngine(cfg)
    n = model.fc1.weight.numel()
    assert pruner.sparsity()["fc1.weight"] == 0.0              # gradual: 0 at the start
    pruner.step(num_steps=25)                                  # jumps over 10 and 20
    assert pruner.done_step == 25
    assert int((model.fc1.weight == 0).sum()) == expected_pruned(engine.target_sparsity(20), n)
    pruner.step(num_steps=3)                                   # no update point in (25, 28]
    assert pruner.done_step == 25
    pruner.step(num_steps=72)
    assert pruner.done_step == 100 and pruner.sparsity()["fc1.weight"] == expected_pruned(0.9, n) / n
    pruner.step()                                              # released after end_step
    assert pruner.sparsity()["fc1.weight"] == 0.0
    assert int((model.fc1.weight == 0).sum()) == expected_pruned(0.9, n)   # released, not regrown yet
    assert pruner.state_dict()["released"] is True


# ----- gradient criteria ---------------------------------------------------------------------
def _grads_and_weights(model, names):
    mods = {n: getattr(model, n.split(".")[0]) for n in names}
    return ({n: m.parametrizations.weight.original.grad.clone() for n, m in mods.items()},
            {n: m.parametrizations.weight.original.detach().clone() for n, m in mods.items()})


def test_snip_uses_accumulated_gradients_and_waits_for_them():
    x, y = digits(128)
    model = mlp()
    cfg = {"target_sparsity": 0.5, "criterion": "snip", **ONE_SHOT}
    pruner = prune(model, cfg)
    assert pruner.done_step == -1 and pruner.sparsity()["fc1.weight"] == 0.0  # no gradients yet
    for step in (0, 1):                                                      # gradient accumulation
        nn.functional.cross_entropy(model(batch(x, y, step)[0]), batch(x, y, step)[1]).backward()
    grads, weights = _grads_and_weights(model, pruner.names)
    pruner.step()                                                            # the step-0 update, not lost
    assert pruner.done_step == 1
    scores = {n: criteria.snip(weights[n], grads[n]).numpy() for n in pruner.names}
    want = PruningEngine(cfg).compute_masks({n: w.numpy() for n, w in weights.items()}, 1, scores=scores)
    for n, m in pruner.masks().items():
        np.testing.assert_array_equal(m.numpy(), want[n])
    # snip differs from magnitude here, so the gradients really were used
    mag = PruningEngine({**cfg, "criterion": "magnitude"}).compute_masks({n: w.numpy() for n, w in weights.items()}, 1)
    assert any((mag[n] != want[n]).any() for n in pruner.names)


def test_snip_momentum_running_average():
    x, y = digits(128)
    model = mlp()
    cfg = {"target_sparsity": 0.6, "criterion": "snip_momentum", "criterion_momentum": 0.5,
           "start_step": 3, "end_step": 3}
    pruner = prune(model, cfg)
    avg = {n: None for n in pruner.names}
    for step in range(1, 4):
        model.zero_grad()
        nn.functional.cross_entropy(model(batch(x, y, step)[0]), batch(x, y, step)[1]).backward()
        grads, weights = _grads_and_weights(model, pruner.names)
        avg = {n: criteria.snip_momentum(avg[n], weights[n], grads[n], 0.5) for n in pruner.names}
        pruner.step()
    assert pruner.done_step == 3
    want = PruningEngine(cfg).compute_masks({n: w.numpy() for n, w in weights.items()}, 3,
                                            scores={n: a.numpy() for n, a in avg.items()})
    for n, m in pruner.masks().items():
        np.testing.assert_array_equal(m.numpy(), want[n])
    assert all(torch.equal(pruner.state_dict()["scores"][n], avg[n]) for n in pruner.names)


def test_parametrization_is_an_in_place_buffer():
    model = mlp()
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2})
    par = model.fc1.parametrizations.weight[0]
    assert isinstance(par, MaskParametrization)
    buf = par.mask
    ptr = buf.data_ptr()
    assert dict(par.named_buffers())["mask"] is buf
    for _ in range(4):
        pruner.step()
    assert par.mask is buf and buf.data_ptr() == ptr and pruner.sparsity()["fc1.weight"] == 0.5
    # the model saves the plain layer (issue 57): the masked weight under its own name, the mask in the pruner
    assert list(model.fc1.state_dict()) == ["weight", "bias"]
    assert torch.equal(model.fc1.state_dict()["weight"], model.fc1.weight)


# ----- properties over many shapes -----------------------------------------------------------
@st.composite
def layers(draw):
    kind = draw(st.sampled_from(["linear", "conv1d", "conv2d", "conv_transpose2d", "embedding"]))
    a, b, k = draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.integers(1, 3))
    layer = {"linear": lambda: nn.Linear(a, b), "conv1d": lambda: nn.Conv1d(a, b, k),
             "conv2d": lambda: nn.Conv2d(a, b, (k, 2)), "conv_transpose2d": lambda: nn.ConvTranspose2d(a, b, k),
             "embedding": lambda: nn.Embedding(a + 1, b)}[kind]()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(draw(st.lists(st.integers(-4, 4), min_size=layer.weight.numel(),
                                                        max_size=layer.weight.numel())),
                                        dtype=torch.float32).view_as(layer.weight) / 2)
    return layer


@settings(max_examples=30, deadline=None)
@given(layer=layers(), ratio=st.floats(0.0, 0.95), pattern=st.sampled_from(["1x1", "channelx1", "1xchannel"]))
def test_any_layer_masks_equal_core_and_pruned_weights_are_zero(layer, ratio, pattern):
    raw = layer.weight.detach().numpy().copy()
    cfg = {"target_sparsity": ratio, "pattern": pattern, **ONE_SHOT}
    pruner = prune(layer, cfg)
    mask = pruner.masks()["weight"]
    if isinstance(layer, nn.ConvTranspose2d):            # the core sees (out, in, k): output channels as rows
        want = PruningEngine(cfg).compute_masks({"weight": raw.transpose(1, 0, 2, 3)}, 0)["weight"].transpose(1, 0, 2, 3)
    else:
        want = PruningEngine(cfg).compute_masks({"weight": raw}, 0)["weight"]
    np.testing.assert_array_equal(mask.numpy(), want)
    assert torch.all(layer.weight[~mask] == 0) and torch.equal(layer.weight[mask], torch.from_numpy(raw)[mask])
    (layer.weight * torch.arange(layer.weight.numel()).view_as(layer.weight)).sum().backward()
    assert torch.all(layer.parametrizations.weight.original.grad[~mask] == 0)
    assert mask.dtype == torch.bool and tuple(mask.shape) == tuple(raw.shape)


# ----- the end-of-training warning -------------------------------------------------------------
def test_remove_warns_once_when_training_stopped_before_end_step():
    from sparsify.target_check import TargetNotReachedWarning

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 2))
    pruner = prune(model, {"target_sparsity": 0.8, "end_step": 2000, "pruning_frequency": 10})
    for _ in range(20):
        pruner.step()
    with pytest.warns(TargetNotReachedWarning, match=r"Pruner.remove\(\): training ended at step 20 .* "
                                                      r"last mask update was at step 20 .*end_step 2000"):
        pruner.remove()


def test_remove_is_silent_when_the_target_was_reached():
    import warnings

    model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 2))
    pruner = prune(model, {"target_sparsity": 0.8, "end_step": 20, "pruning_frequency": 10})
    for _ in range(20):
        pruner.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pruner.remove()
    assert float((model[0].weight == 0).float().mean()) == pytest.approx(0.8, abs=0.01)

# ----- reads hand the core views, not copies (docs/design.md, the adapter contract) ----------------------------
def test_read_weights_are_views_of_float32_cpu_parameters():
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3))
    pruner = prune(model, {"target_sparsity": 0.5, **ONE_SHOT, "num_threads": 2})
    reads = pruner.read_weights()
    assert list(reads) == ["0.weight", "2.weight"]
    for i, array in zip((0, 2), reads.values()):
        original = model[i].parametrizations.weight.original
        assert array.dtype == np.float32 and np.shares_memory(array, original.detach().numpy())
    half = nn.Linear(8, 4).to(torch.bfloat16)                    # another dtype: converted once, into float32
    reads = prune(half, {"target_sparsity": 0.5, **ONE_SHOT}).read_weights()
    original = half.parametrizations.weight.original.detach()
    assert reads["weight"].dtype == np.float32 and np.array_equal(reads["weight"], original.float().numpy())
    assert (half.weight != 0).sum() == 16                         # dense under the mask: the read keeps all 32
