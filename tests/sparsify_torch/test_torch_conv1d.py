"""transformers' ``Conv1D`` (GPT-2's blocks, weight stored ``(in, out)``) and user-registered layer types are
pruned as the ``nn.Linear`` holding the transposed weight: the same masks, N:M along the input dimension, in
gradual pruning, Wanda, SparseGPT, regrowth, distillation, sparse inference and the 2:4 export check (issue 57)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import sparsify_torch
from sparsify_torch import prune, prune_oneshot, register_prunable, unregister_prunable
from sparsify_torch.export import semi_structured_report
from sparsify_torch.layers import prunable_weights
from sparsify_torch.sparse_inference import sparse_layers, to_sparse_inference

transformers = pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402  (their import: at collection)
from transformers.pytorch_utils import Conv1D  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BLOCK_WEIGHTS = [f"transformer.h.{i}.{n}.weight" for i in range(2)
                 for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]


def gpt2(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def tokens(n: int = 4, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 64, (2, 16), generator=g) for _ in range(n)]


def pair(seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """The same two-layer network with Conv1D layers and with nn.Linear layers (weights transposed)."""
    torch.manual_seed(seed)
    conv = nn.Sequential(Conv1D(16, 8), nn.ReLU(), Conv1D(4, 16))
    for m in conv:
        if isinstance(m, Conv1D):
            nn.init.normal_(m.weight)
            nn.init.normal_(m.bias)
    lin = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    with torch.no_grad():
        for c, li in ((conv[0], lin[0]), (conv[2], lin[2])):
            li.weight.copy_(c.weight.T)
            li.bias.copy_(c.bias)
    return conv, lin


def groups_of_four_along_input(weight_in_out: torch.Tensor) -> torch.Tensor:
    """Kept weights per group of 4 consecutive inputs of each output, for an (in, out) weight."""
    w = weight_in_out.T
    return w.reshape(w.shape[0], -1, 4).ne(0).sum(-1)


def test_conv1d_weights_are_candidates_in_the_cores_layout():
    weights = {w.name: w for w in prunable_weights(gpt2())}
    assert [n for n in weights if n.startswith("transformer.h")] == BLOCK_WEIGHTS
    assert weights["transformer.h.0.attn.c_attn.weight"].shape == (96, 32)        # torch stores (32, 96)
    assert weights["transformer.h.0.mlp.c_proj.weight"].shape == (32, 128)        # torch stores (128, 32)
    assert all(weights[n].transposed for n in BLOCK_WEIGHTS)
    assert not weights["lm_head.weight"].transposed


@pytest.mark.parametrize("config", [
    {"target_sparsity": 0.5, "pattern": "2:4", "pruning_scope": "global"},
    {"target_sparsity": 0.6, "pattern": "1x1", "pruning_scope": "global"},
    {"target_sparsity": 0.5, "pattern": "4x1"},
    {"target_sparsity": 0.5, "pattern": "1x4"},
    {"target_sparsity": 0.5, "pattern": "1x1", "pruning_scope": "row"},
])
def test_gradual_masks_equal_the_linear_holding_the_transposed_weight(config):
    conv, lin = pair()
    cfg = {**config, "start_step": 0, "end_step": 4, "pruning_frequency": 2}
    pc, pl = prune(conv, cfg), prune(lin, cfg)
    for _ in range(4):
        pc.step()
        pl.step()
    mc, ml = pc.masks(), pl.masks()
    assert mc["0.weight"].shape == (8, 16) and ml["0.weight"].shape == (16, 8)
    for n in ("0.weight", "2.weight"):
        assert torch.equal(mc[n], ml[n].T)
        assert torch.equal(pc.state_dict()["masks"][n], pl.state_dict()["masks"][n])   # canonical: (out, in)
    assert pc.sparsity() == pl.sparsity()
    x = torch.randn(5, 8)
    torch.testing.assert_close(conv(x), lin(x))


def test_wanda_and_sparsegpt_masks_equal_the_linear_ones():
    batches = [torch.randn(6, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    for kwargs in ({"method": "criterion"}, {"method": "sparsegpt", "block_size": 4}):
        conv, lin = pair()
        cfg = {"target_sparsity": 0.5, "pattern": "2:4"}
        if kwargs["method"] == "criterion":
            cfg["criterion"] = "wanda"
        prune_oneshot(conv, cfg, batches, **kwargs)
        prune_oneshot(lin, cfg, batches, **kwargs)
        for c, li in ((conv[0], lin[0]), (conv[2], lin[2])):
            assert torch.equal(c.weight.T, li.weight), kwargs                  # masks and SparseGPT's updates
            assert groups_of_four_along_input(c.weight).eq(2).all()


@pytest.mark.parametrize("how", ["gradual", "wanda", "sparsegpt"])
def test_gpt2_block_weights_are_pruned_to_exactly_the_target_2_4_along_the_input(how):
    model = gpt2()
    cfg = {"target_sparsity": 0.5, "pattern": "2:4"}
    if how == "gradual":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        pruner = prune(model, {**cfg, "start_step": 0, "end_step": 4, "pruning_frequency": 2},
                       select="transformer_blocks", optimizer=opt)
        model.train()
        for batch in tokens(5):
            opt.zero_grad()
            model(batch, labels=batch).loss.backward()
            opt.step()
            pruner.step()
        assert pruner.names == BLOCK_WEIGHTS
        assert all(s == 0.5 for s in pruner.sparsity().values())
        pruner.remove()
    elif how == "wanda":
        prune_oneshot(model, {**cfg, "criterion": "wanda"}, tokens(), select="transformer_blocks")
    else:
        prune_oneshot(model, cfg, tokens(), method="sparsegpt", select="transformer_blocks", block_size=8)
    modules = dict(model.named_modules())
    for name in BLOCK_WEIGHTS:
        w = modules[name.rsplit(".", 1)[0]].weight
        assert float((w == 0).float().mean()) == 0.5, name
        assert groups_of_four_along_input(w).eq(2).all(), name
    for dense in ("transformer.wte", "transformer.wpe", "lm_head"):
        assert int((modules[dense].weight == 0).sum()) == 0, dense


def test_gpt2_wanda_masks_equal_those_of_linear_layers_holding_the_transposed_weights():
    """The whole model: each Conv1D swapped for the nn.Linear of its transposed weight gives the same masks."""
    model = gpt2()
    twin = gpt2()
    for name, m in list(twin.named_modules()):
        if isinstance(m, Conv1D):
            lin = nn.Linear(m.nx, m.nf)
            with torch.no_grad():
                lin.weight.copy_(m.weight.T)
                lin.bias.copy_(m.bias)
            parent, _, attr = name.rpartition(".")
            setattr(twin.get_submodule(parent), attr, lin)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens(1)[0]).logits, twin(tokens(1)[0]).logits)
    cfg = {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row"}
    prune_oneshot(model, cfg, tokens(), select="transformer_blocks")
    prune_oneshot(twin, cfg, tokens(), select="transformer_blocks")
    m, t = dict(model.named_modules()), dict(twin.named_modules())
    for name in BLOCK_WEIGHTS:
        layer = name.rsplit(".", 1)[0]
        assert torch.equal(m[layer].weight.T, t[layer].weight), name


def test_regrowth_and_distillation_run_on_conv1d_weights():
    model = gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    pruner = prune(model, {"target_sparsity": 0.7, "start_step": 0, "end_step": 4, "pruning_frequency": 2,
                           "regrowth": "rigl", "regrowth_fraction": 0.3},
                   select="transformer_blocks", optimizer=opt,
                   distillation={"temperature": 2.0, "weight": 0.5})
    model.train()
    before = None
    for batch in tokens(5):
        opt.zero_grad()
        out = model(batch, labels=batch)
        (out.loss + pruner.distill_loss(batch, out.logits)).backward()
        opt.step()
        pruner.step()
        if pruner.step_count == 2:
            before = {n: m.clone() for n, m in pruner.masks().items()}
    after = pruner.masks()
    for n in BLOCK_WEIGHTS:                        # the core's exact count: ceil(0.7 n - 0.5) pruned
        assert int((~after[n]).sum()) == math.ceil(0.7 * after[n].numel() - 0.5), n
    assert any(not torch.equal(before[n], after[n]) for n in BLOCK_WEIGHTS)        # RigL moved weights
    for n in BLOCK_WEIGHTS:
        layer = model.get_submodule(n.rsplit(".", 1)[0])
        assert torch.equal(layer.weight != 0, after[n] & (layer.parametrizations.weight.original != 0))


def test_sparse_inference_and_the_2_4_report_take_conv1d():
    model = gpt2()
    prune_oneshot(model, {"target_sparsity": 0.5, "pattern": "2:4"}, select="transformer_blocks")
    x = tokens(1)[0]
    fast = to_sparse_inference(model, (x,))
    assert [n for n in sparse_layers(fast) if n != "lm_head"] == [n.rsplit(".", 1)[0] for n in BLOCK_WEIGHTS]
    with torch.no_grad():
        torch.testing.assert_close(fast(x).logits, model(x).logits, rtol=1e-4, atol=1e-5)
    report = semi_structured_report(model, dtype=torch.float16)
    assert all(report[n] is None for n in BLOCK_WEIGHTS[:3])     # (out, in) views meet the groups of 4
    assert report["lm_head.weight"] is not None


class Dense(nn.Module):
    """A user's linear layer storing its kernel (in, out), as Keras does."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(n_in, n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.kernel


class Lin(nn.Module):
    """A user's linear layer storing its matrix (out, in) under another name."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.matrix = nn.Parameter(torch.randn(n_out, n_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.matrix.T


@pytest.fixture
def registered():
    register_prunable(Dense, tensor_name="kernel", layout="in_out")
    register_prunable(Lin, tensor_name="matrix")
    yield
    unregister_prunable(Dense)
    unregister_prunable(Lin)


def test_registered_layers_prune_like_linear_in_gradual_and_wanda(registered):
    torch.manual_seed(0)
    custom = nn.Sequential(Dense(8, 12), nn.ReLU(), Lin(12, 4))
    lin = nn.Sequential(nn.Linear(8, 12, bias=False), nn.ReLU(), nn.Linear(12, 4, bias=False))
    with torch.no_grad():
        lin[0].weight.copy_(custom[0].kernel.T)
        lin[2].weight.copy_(custom[2].matrix)
    assert [(w.name, w.shape) for w in prunable_weights(custom)] == [("0.kernel", (12, 8)), ("2.matrix", (4, 12))]
    batches = [torch.randn(5, 8, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    cfg = {"target_sparsity": 0.5, "pattern": "2:4", "criterion": "wanda"}
    prune_oneshot(custom, cfg, batches)
    prune_oneshot(lin, cfg, batches)
    assert torch.equal(custom[0].kernel.T, lin[0].weight)
    assert torch.equal(custom[2].matrix, lin[2].weight)


def test_register_prunable_checks_its_arguments(registered):
    with pytest.raises(TypeError, match="module_type must be an nn.Module subclass"):
        register_prunable("Conv1D")
    with pytest.raises(ValueError, match="Linear is supported already"):
        register_prunable(nn.Linear, layout="in_out")
    with pytest.raises(ValueError, match=r"layout must be one of \('out_in', 'in_out'\).*got 'io'"):
        register_prunable(Dense, layout="io")
    with pytest.raises(ValueError, match="tensor_name must be an attribute name"):
        register_prunable(Dense, tensor_name="ker nel")
    with pytest.raises(TypeError, match="tensor_name must be the name"):
        register_prunable(Dense, tensor_name=3)
    with pytest.raises(ValueError, match="is not registered"):
        unregister_prunable(nn.ReLU)

    class Cube(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(2, 3, 4))

    register_prunable(Cube, layout="in_out")
    try:
        with pytest.raises(ValueError, match=r"layout='in_out'.*'weight' \('0.weight'\) has shape \(2, 3, 4\)"):
            prune(nn.Sequential(Cube()), {"target_sparsity": 0.5})
    finally:
        unregister_prunable(Cube)


def test_a_subclass_of_a_registered_type_is_prunable_and_unregistering_ends_it(registered):
    class Wider(Dense):
        pass

    assert [w.name for w in prunable_weights(nn.Sequential(Wider(4, 4)))] == ["0.kernel"]
    unregister_prunable(Dense)
    try:
        assert prunable_weights(nn.Sequential(Wider(4, 4))) == []
    finally:
        register_prunable(Dense, tensor_name="kernel", layout="in_out")


def test_sparse_inference_keeps_registered_layers_dense(registered):
    torch.manual_seed(0)
    model = nn.Sequential(Dense(8, 8), nn.Linear(8, 4))
    prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}).remove()
    fast = to_sparse_inference(model, torch.randn(2, 8))
    assert sparse_layers(fast) == ["1"] and isinstance(fast[0], Dense)


@pytest.mark.slow
def test_pruning_a_model_without_conv1d_does_not_import_transformers():
    code = ("import sys, json, torch, sparsify_torch\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))\n"
            "p = sparsify_torch.prune(m, {'target_sparsity': 0.5, 'start_step': 0, 'end_step': 0})\n"
            "str(p.summary()); p.remove()\n"
            "print(json.dumps('transformers' in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.splitlines()[-1]) is False


def test_sparsify_torch_exports_the_registration():
    assert sparsify_torch.register_prunable is register_prunable
    assert {"register_prunable", "unregister_prunable", "transformer_block_weights", "PruningSummary"} \
        <= set(sparsify_torch.__all__)


def test_channel_removal_on_conv1d_equals_the_linear_one():
    from sparsify_torch.channels import calibrate_and_prune_model_equal

    conv, lin = pair()
    batches = [torch.randn(5, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    loss = lambda out, x: out.pow(2).mean()       # noqa: E731
    small_conv = calibrate_and_prune_model_equal(conv, batches, loss)
    small_lin = calibrate_and_prune_model_equal(lin, batches, loss)
    assert (small_conv[0].nf, small_conv[0].nx, small_conv[2].nx) == (8, 8, 8)        # 16 -> 8 hidden channels
    for c, li in ((small_conv[0], small_lin[0]), (small_conv[2], small_lin[2])):
        assert torch.equal(c.weight.T, li.weight) and torch.equal(c.bias, li.bias)
    torch.testing.assert_close(small_conv(batches[0]), small_lin(batches[0]))


def test_channel_removal_shrinks_gpt2_mlps():
    from sparsify_torch.channels import calibrate_and_prune_model_equal

    model = gpt2()
    with pytest.warns(UserWarning, match="cannot be reached"):      # attention heads and the residual stay
        small = calibrate_and_prune_model_equal(model, [{"input_ids": t} for t in tokens(2)],
                                                lambda out, x: out.logits.pow(2).mean())
    for block in small.transformer.h:
        assert tuple(block.mlp.c_fc.weight.shape) == (32, 64) and block.mlp.c_fc.nf == 64
        assert tuple(block.mlp.c_proj.weight.shape) == (64, 32) and block.mlp.c_proj.nx == 64
    assert small(tokens(1)[0]).logits.shape == (2, 16, 64)


@pytest.mark.slow
def test_fsdp2_refuses_a_conv1d_weight_and_a_tied_weight_naming_them():
    """FSDP2 shards rows of the stored (in, out) weight, which are not the core's rows: a clear refusal."""
    code = """
import json, os, socket, torch, torch.distributed as dist
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo", rank=0, world_size=1)
from torch.distributed.fsdp import fully_shard
from transformers.pytorch_utils import Conv1D
import sparsify_torch
out = []
for tie in (False, True):
    m = torch.nn.Sequential(torch.nn.Linear(8, 8) if tie else Conv1D(8, 8), torch.nn.Linear(8, 8))
    if tie:                      # one FSDP group holds both layers: the tie survives sharding
        m[1].weight = m[0].weight
    else:
        for layer in m:
            fully_shard(layer)
    fully_shard(m)
    assert (m[1].weight is m[0].weight) == tie
    try:
        sparsify_torch.prune(m, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
        out.append("pruned")
    except ValueError as e:
        out.append(str(e))
dist.destroy_process_group()
print(json.dumps(out))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2"))
    assert res.returncode == 0, res.stderr[-3000:]
    conv1d, tied = json.loads(res.stdout.splitlines()[-1])
    assert conv1d.startswith("weight '0.weight' (FSDPConv1D) is stored (in, out): its rows in the core's layout")
    assert tied.startswith("weight '0.weight' is tied to ['1.weight']; tied weights are not pruned sharded")


def test_onnx_export_stores_pruned_conv1d_weights_sparse(tmp_path):
    pytest.importorskip("onnx")
    from sparsify_torch.onnx_export import export_onnx

    conv, _ = pair()
    prune(conv, {"target_sparsity": 0.8, "start_step": 0, "end_step": 0}).remove()
    report = export_onnx(conv, torch.randn(3, 8), tmp_path / "m.onnx")
    assert report["sparse"] == ["0.weight", "2.weight"]
    assert report["bytes"] < report["dense_bytes"]
