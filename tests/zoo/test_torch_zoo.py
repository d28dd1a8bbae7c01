"""Model-zoo tier (PyTorch): the models users bring, built offline from small configs (random weights).

Hugging Face ``transformers``: Llama, Qwen2 (causal LMs), BERT (sequence classification), ViT (image
classification), T5 (encoder-decoder) and GPT-2 (its blocks are ``transformers``' ``Conv1D``, weight stored
``(in, out)``), each pruned on its blocks' projection weights (embeddings and heads left dense, as Wanda and
SparseGPT do). torchvision: resnet18, mobilenet_v3_small, efficientnet_b0, convnext_tiny, swin_t (32x32 inputs)
and vit_b_16's architecture (``VisionTransformer`` with vit_b_16's patch size, heads and widths, so every layer's
weights have vit_b_16's shapes, but 2 encoder layers instead of 12 and 32x32 images: ``vit_b_16()`` takes only
224x224 images, and its 86M weights took a minute and a half per resume test on 2 busy cores), every prunable weight.

What each model goes through, as a user would:

* gradual pruning (``prune`` + optimizer steps + ``pruner.step()``) ends with every selected weight holding
  exactly ``min(ceil(target * n - 0.5), n - 1)`` pruned weights (docs/design.md, rule 5, written out here), and
  nothing else masked;
* ``remove()`` then ``save_pretrained`` / ``from_pretrained`` (HF) or ``state_dict`` through ``torch.save`` /
  ``torch.load(weights_only=True)`` (torchvision): the same outputs, bit for bit;
* resume: the model's, the optimizer's and the pruner's state dicts, saved mid-pruning and loaded into a freshly
  built (differently initialised) and pruned model, continue bit-exactly as the uninterrupted run;
* one-shot pruning (``prune_oneshot``): magnitude (exact per layer) and Wanda (exact per row), SparseGPT 2:4 on
  the language models (every group of 4 along the input holds 2 zeros);
* ``to_sparse_inference``: the CSR copy's outputs are close to the pruned model's (and greedy generation of the
  causal LMs is the same);
* channel removal (``sparsify_torch.channels``) on resnet18, mobilenet_v3_small, efficientnet_b0 and
  convnext_tiny: every channel group loses exactly its share, and the narrowed model saves and loads.

The module runs as one file under ``--dist loadfile``; each test uses one torch thread (2-core CI).
"""
from __future__ import annotations

import copy
import io
import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch
import torchvision
import transformers
from torch import nn
from torch.nn.utils import parametrize
from transformers.pytorch_utils import Conv1D

import sparsify_torch
from sparsify_torch import prunable_weights, prune, prune_oneshot, to_sparse_inference

VOCAB, SEQ, BATCH = 64, 8, 2


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread per test process (CI runs ``-n 2`` on 2 cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pruned_count(target: float, n: int) -> int:
    """Units pruned of ``n`` at ``target``: the nearest integer, a half rounded down, one unit kept."""
    return min(math.ceil(target * n - 0.5), n - 1)


def roundtrip(obj: Any) -> Any:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def canonical_2d(module: nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """A weight as rows = output units, columns = inputs (Conv1D stores ``(in, out)``; convs flatten the kernel)."""
    if isinstance(module, Conv1D):
        return weight.t()
    return weight.reshape(weight.shape[0], -1)


def states_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----- Hugging Face transformers ------------------------------------------------------------------------
@dataclass(frozen=True)
class HFCase:
    """One transformers model: how to build it, its blocks (regex on module names), its batches."""

    name: str
    build: Callable[[], nn.Module]
    blocks: str
    kind: str                                 # "causal", "tokens" (classify a sequence), "image", "seq2seq"
    excluded: tuple[str, ...] = field(default=())

    def config(self, **fields: Any) -> dict[str, Any]:
        return {"op_names": [self.blocks], "excluded_op_names": list(self.excluded), **fields}

    def block_weights(self, model: nn.Module) -> list[str]:
        """Written independently of the library: every Linear (Conv1D) weight inside the blocks."""
        return [f"{n}.weight" for n, m in model.named_modules()
                if isinstance(m, (nn.Linear, Conv1D)) and re.search(self.blocks, f"{n}.weight")]

    def inputs(self, seed: int) -> dict[str, torch.Tensor]:
        """Model inputs (no labels) of batch ``seed``."""
        g = torch.Generator().manual_seed(seed)
        if self.kind == "image":
            return {"pixel_values": torch.randn(BATCH, 3, 16, 16, generator=g)}
        ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
        if self.kind == "seq2seq":
            return {"input_ids": ids, "decoder_input_ids": torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)}
        return {"input_ids": ids}

    def labels(self, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(10_000 + seed)
        if self.kind in ("tokens", "image"):
            return torch.randint(0, 3, (BATCH,), generator=g)
        return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)

    def positional(self, seed: int) -> tuple:
        """The inputs as positional arguments (``to_sparse_inference``'s example inputs)."""
        x = self.inputs(seed)
        if self.kind == "seq2seq":       # T5: forward(input_ids, attention_mask, decoder_input_ids)
            return x["input_ids"], None, x["decoder_input_ids"]
        return tuple(x.values())

    def loss(self, model: nn.Module, step: int) -> torch.Tensor:
        torch.manual_seed(step)          # dropout: the same masks at the same step, interrupted or not
        return model(**self.inputs(step), labels=self.labels(step)).loss


def _llama() -> nn.Module:
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=1, pad_token_id=2))


def _qwen2() -> nn.Module:
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=1, pad_token_id=2))


def _bert() -> nn.Module:
    return transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=32, num_labels=3))


def _vit() -> nn.Module:
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_labels=3))


def _t5() -> nn.Module:
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))


def _gpt2() -> nn.Module:
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=32, bos_token_id=1, eos_token_id=1))


HF_CASES = [
    HFCase("llama", _llama, r"^model\.layers\.", "causal"),
    HFCase("qwen2", _qwen2, r"^model\.layers\.", "causal"),
    HFCase("bert", _bert, r"^bert\.encoder\.layer\.", "tokens"),
    HFCase("vit", _vit, r"^vit\.layers\.", "image"),
    HFCase("t5", _t5, r"\.block\.\d+\.layer\.", "seq2seq", excluded=("relative_attention_bias",)),
    HFCase("gpt2", _gpt2, r"^transformer\.h\.", "causal"),      # Conv1D blocks; wte and lm_head tied
]
LMS = [c for c in HF_CASES if c.kind in ("causal", "seq2seq")]


def hf_model(case: HFCase, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return case.build()


GRADUAL = {"target_sparsity": 0.75, "start_step": 0, "end_step": 4, "pruning_frequency": 2}


def hf_train(case: HFCase, model: nn.Module, opt: torch.optim.Optimizer, pruner: Any, steps: range) -> None:
    model.train()
    for step in steps:
        opt.zero_grad()
        case.loss(model, step).backward()
        opt.step()
        pruner.step()


def hf_gradual(case: HFCase, steps: int = 6) -> tuple[nn.Module, Any]:
    model = hf_model(case)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pruner = prune(model, case.config(**GRADUAL))
    hf_train(case, model, opt, pruner, range(1, steps + 1))
    return model, pruner


def assert_exact_block_sparsity(case: HFCase, model: nn.Module, target: float) -> None:
    """Every block weight holds exactly its count of zeros; every other weight of 2+ dims the zeros it was
    built with (an embedding's padding row)."""
    blocks = set(case.block_weights(model))
    built = dict(hf_model(case).named_parameters())
    for name, p in model.named_parameters():
        if p.ndim < 2:
            continue
        zeros = int((p == 0).sum())
        want = pruned_count(target, p.numel()) if name in blocks else int((built[name] == 0).sum())
        assert zeros == want, f"{case.name} {name}: {zeros} zeros, expected {want}"


@pytest.mark.parametrize("case", HF_CASES, ids=lambda c: c.name)
def test_hf_gradual_pruning_reaches_exact_counts_on_the_blocks(case):
    model, pruner = hf_gradual(case)
    assert pruner.names == case.block_weights(model)
    assert pruner.step_count == 6 and pruner.done_step == 4
    masks = pruner.masks()
    for name in pruner.names:
        module = model.get_submodule(name.rsplit(".", 1)[0])
        mask = masks[name]
        assert int((~mask.bool()).sum()) == pruned_count(0.75, mask.numel()), name
        assert torch.equal(module.weight == 0, ~mask.bool()), name      # the model computes with the mask
    parametrized = {f"{n}.weight" for n, m in model.named_modules() if parametrize.is_parametrized(m, "weight")}
    assert parametrized == set(pruner.names)
    pruner.remove()
    assert_exact_block_sparsity(case, model, 0.75)


@pytest.mark.parametrize("case", HF_CASES, ids=lambda c: c.name)
def test_hf_removed_model_saves_and_loads_with_save_pretrained(case, tmp_path):
    model, pruner = hf_gradual(case)
    pruner.remove()
    model.eval()
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path).eval()
    assert states_equal(loaded.state_dict(), model.state_dict())
    x = case.inputs(99)
    with torch.no_grad():
        assert torch.equal(loaded(**x).logits, model(**x).logits)
    assert_exact_block_sparsity(case, loaded, 0.75)


@pytest.mark.parametrize("case", HF_CASES, ids=lambda c: c.name)
def test_hf_resume_mid_pruning_is_bit_exact(case):
    model, pruner = hf_gradual(case, steps=6)                       # the uninterrupted run
    first = hf_model(case)
    opt = torch.optim.Adam(first.parameters(), lr=1e-3)
    first_pruner = prune(first, case.config(**GRADUAL))
    hf_train(case, first, opt, first_pruner, range(1, 4))           # stopped between the updates at 2 and 4
    saved = roundtrip({"model": first.state_dict(), "opt": opt.state_dict(), "pruner": first_pruner.state_dict()})
    resumed = hf_model(case, seed=1)                                # other initial weights
    resumed_opt = torch.optim.Adam(resumed.parameters(), lr=1e-3)   # built as before: the same parameter order
    resumed_pruner = prune(resumed, case.config(**GRADUAL))
    resumed.load_state_dict(saved["model"])
    resumed_opt.load_state_dict(saved["opt"])
    resumed_pruner.load_state_dict(saved["pruner"])
    hf_train(case, resumed, resumed_opt, resumed_pruner, range(4, 7))
    assert resumed_pruner.step_count == pruner.step_count and resumed_pruner.done_step == pruner.done_step
    assert states_equal(resumed.state_dict(), model.state_dict())  # weights under the masks, and the masks
    assert states_equal(resumed_pruner.masks(), pruner.masks())


@pytest.mark.parametrize("case", HF_CASES, ids=lambda c: c.name)
def test_hf_oneshot_magnitude_and_wanda(case):
    model = hf_model(case)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    prune_oneshot(model, case.config(target_sparsity=0.6))
    assert_exact_block_sparsity(case, model, 0.6)
    blocks = set(case.block_weights(model))
    for name, p in model.named_parameters():
        kept = p != 0
        assert torch.equal(p[kept], before[name][kept]), name       # masked, not changed
    assert not any(parametrize.is_parametrized(m) for m in model.modules())

    wanda = hf_model(case)
    calibration = [case.inputs(seed) for seed in range(3)]
    prune_oneshot(wanda, case.config(target_sparsity=0.5, criterion="wanda", pruning_scope="row"), calibration)
    for name in blocks:
        module = wanda.get_submodule(name.rsplit(".", 1)[0])
        rows = canonical_2d(module, module.weight)
        per_row = (rows == 0).sum(dim=1)
        assert per_row.tolist() == [pruned_count(0.5, rows.shape[1])] * rows.shape[0], name
    # Wanda weighs each input by its norm over the calibration tokens: its masks are not magnitude's
    magnitude = hf_model(case)
    prune_oneshot(magnitude, case.config(target_sparsity=0.5, pruning_scope="row"))
    assert any(not torch.equal(wanda.get_parameter(n) == 0, magnitude.get_parameter(n) == 0) for n in blocks)


@pytest.mark.parametrize("case", LMS, ids=lambda c: c.name)
def test_hf_sparsegpt_two_of_four_on_the_language_models(case):
    model = hf_model(case).eval()
    dense = copy.deepcopy(model)
    calibration = [case.inputs(seed) for seed in range(4)]
    prune_oneshot(model, case.config(target_sparsity=0.5, pattern="2:4"), calibration, method="sparsegpt")
    blocks = set(case.block_weights(model))
    for name, p in model.named_parameters():
        if name in blocks:
            module = model.get_submodule(name.rsplit(".", 1)[0])
            rows = canonical_2d(module, p)
            groups = (rows == 0).reshape(rows.shape[0], -1, 4).sum(dim=-1)
            assert bool((groups == 2).all()), name                   # 2 of every 4 inputs, every row
        else:
            assert torch.equal(p, dense.get_parameter(name)), name
    # SparseGPT updates the kept weights to make up for the pruned ones: closer to the dense model's logits on
    # the calibration batches than 2:4 by magnitude alone
    magnitude = copy.deepcopy(dense)
    prune_oneshot(magnitude, case.config(target_sparsity=0.5, pattern="2:4"))
    with torch.no_grad():
        err = {m: sum(float((net(**x).logits - dense(**x).logits).pow(2).sum()) for x in calibration)
               for m, net in (("sparsegpt", model), ("magnitude", magnitude))}
    assert err["sparsegpt"] < err["magnitude"], err


@pytest.mark.parametrize("case", HF_CASES, ids=lambda c: c.name)
def test_hf_to_sparse_inference_matches_the_pruned_model(case):
    model, pruner = hf_gradual(case)
    pruner.remove()
    model.eval()
    fast = to_sparse_inference(model, case.positional(0))
    converted = {n for n, m in fast.named_modules() if isinstance(m, sparsify_torch.SparseLinear)}
    assert {f"{n}.weight" for n in converted} >= set(case.block_weights(model))
    x = case.positional(5)
    with torch.no_grad():
        torch.testing.assert_close(fast(*x).logits, model(*x).logits, rtol=1e-4, atol=1e-5)
    if case.kind == "causal":
        ids = case.inputs(7)["input_ids"][:1, :4]
        with torch.no_grad():
            want = model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=2)
            got = fast.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=2)
        assert torch.equal(got, want)


# ----- torchvision --------------------------------------------------------------------------------------
def vit_b_16_small() -> nn.Module:
    """vit_b_16's layers (patch 16, 12 heads, 768 wide, MLP 3072: each layer's weights have vit_b_16's shapes) in
    2 encoder layers instead of 12, for 32x32 images; the head (zeros in torchvision) drawn at random, so that
    pruning it is seen."""
    model = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=12,
                                                 hidden_dim=768, mlp_dim=3072)
    nn.init.normal_(model.heads.head.weight, std=0.02)
    return model


TV_BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "resnet18": lambda: torchvision.models.resnet18(weights=None),
    "mobilenet_v3_small": lambda: torchvision.models.mobilenet_v3_small(weights=None),
    "efficientnet_b0": lambda: torchvision.models.efficientnet_b0(weights=None),
    "convnext_tiny": lambda: torchvision.models.convnext_tiny(weights=None),
    "swin_t": lambda: torchvision.models.swin_t(weights=None),
    "vit_b_16": vit_b_16_small,
}
FAST_TV = ("resnet18", "mobilenet_v3_small", "efficientnet_b0")


def tv_params(names: tuple[str, ...] | list[str]) -> list:
    return [pytest.param(n, marks=() if n in FAST_TV else pytest.mark.slow, id=n) for n in names]


def tv_model(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return TV_BUILDERS[name]()


def images(seed: int, n: int = BATCH) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def tv_targets(seed: int, n: int = BATCH) -> torch.Tensor:
    return torch.randint(0, 1000, (n,), generator=torch.Generator().manual_seed(10_000 + seed))


# efficientnet_b0 trains on 4 images: with 2 images of 32x32 its last BatchNorms see 2 values per channel, and its
# eval outputs are NaN after three SGD steps, pruned or not
TRAIN_BATCH = {"efficientnet_b0": 4}


TV_GRADUAL = {"target_sparsity": 0.8, "start_step": 0, "end_step": 2, "pruning_frequency": 1}


def tv_start(name: str, seed: int) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    """A freshly built model, its optimizer (built before ``prune``, as a user does) and its pruner."""
    model = tv_model(name, seed)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    return model, opt, prune(model, TV_GRADUAL)


def tv_train(name: str, model: nn.Module, opt: torch.optim.Optimizer, pruner: Any, steps: range) -> None:
    model.train()
    n = TRAIN_BATCH.get(name, BATCH)
    for step in steps:
        opt.zero_grad()
        torch.manual_seed(step)                          # stochastic depth / dropout, the same when resumed
        nn.functional.cross_entropy(model(images(step, n)), tv_targets(step, n)).backward()
        opt.step()
        pruner.step()


def expected_zeros(model: nn.Module, target: float) -> dict[str, int]:
    """Per parameter, the zeros pruning every prunable weight to ``target`` leaves (MultiheadAttention's
    fused ``in_proj_weight`` is three weights of a third each)."""
    params = {id(p): n for n, p in model.named_parameters()}
    out: dict[str, int] = {}
    for w in prunable_weights(model):
        p = w.module._parameters[w.tensor_name]
        n = params[id(p)]
        out[n] = out.get(n, 0) + pruned_count(target, math.prod(w.shape))
    return out


@pytest.mark.parametrize("name", tv_params(list(TV_BUILDERS)))
def test_torchvision_gradual_pruning_exact_resumed_saved_and_loaded(name):
    want = expected_zeros(tv_model(name), 0.8)
    model, opt, pruner = tv_start(name, 0)                          # the uninterrupted run
    tv_train(name, model, opt, pruner, range(1, 4))
    assert pruner.done_step == 2
    for n, mask in pruner.masks().items():
        assert int((~mask.bool()).sum()) == pruned_count(0.8, mask.numel()), n

    # resume: stopped after step 1 (between updates), the states loaded into another freshly built model
    first, first_opt, first_pruner = tv_start(name, 0)
    tv_train(name, first, first_opt, first_pruner, range(1, 2))
    saved = roundtrip({"model": first.state_dict(), "opt": first_opt.state_dict(),
                       "pruner": first_pruner.state_dict()})
    resumed, resumed_opt, resumed_pruner = tv_start(name, 1)
    resumed.load_state_dict(saved["model"])
    resumed_opt.load_state_dict(saved["opt"])
    resumed_pruner.load_state_dict(saved["pruner"])
    tv_train(name, resumed, resumed_opt, resumed_pruner, range(2, 4))
    assert resumed_pruner.step_count == pruner.step_count == 3 and resumed_pruner.done_step == 2
    assert states_equal(resumed.state_dict(), model.state_dict())   # weights, masks, BatchNorm statistics
    assert states_equal(resumed_pruner.masks(), pruner.masks())

    # remove() bakes the masks; the plain state dict loads into a freshly built model
    pruner.remove()
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert {n: int((p == 0).sum()) for n, p in model.named_parameters() if n in want} == want
    model.eval()
    loaded = tv_model(name, seed=1)
    loaded.load_state_dict(roundtrip(model.state_dict()))
    loaded.eval()
    with torch.no_grad():
        assert torch.equal(loaded(images(99)), model(images(99)))


# Wanda reads each pruned layer's inputs through the layer's forward: torch's MultiheadAttention projections are
# not plain layers (refused), and swin_t's attention never calls its qkv / proj Linears (it passes their weights
# to a function; the masked weights are used, but the inputs are not seen: a ValueError naming them)
WANDA_EXCLUDED = {"vit_b_16": [r"self_attention\."], "swin_t": [r"\.attn\."]}


@pytest.mark.parametrize("name", tv_params(list(TV_BUILDERS)))
def test_torchvision_oneshot_magnitude_wanda_and_sparse_inference(name):
    model = tv_model(name).eval()
    want = expected_zeros(model, 0.7)
    prune_oneshot(model, {"target_sparsity": 0.7})
    assert {n: int((p == 0).sum()) for n, p in model.named_parameters() if n in want} == want
    fast = to_sparse_inference(model, images(0))
    assert any(isinstance(m, sparsify_torch.SparseLinear) for m in fast.modules())
    with torch.no_grad():
        torch.testing.assert_close(fast(images(5)), model(images(5)), rtol=1e-4, atol=1e-4)

    wanda = tv_model(name).eval()
    excluded = WANDA_EXCLUDED.get(name, [])
    prune_oneshot(wanda, {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row",
                          "excluded_op_names": excluded}, [images(1)])
    chosen = [w for w in prunable_weights(wanda) if not any(re.search(r, w.name) for r in excluded)]
    assert chosen
    for w in chosen:
        rows = canonical_2d(w.module, getattr(w.module, w.tensor_name))
        assert (rows == 0).sum(dim=1).tolist() == [pruned_count(0.5, rows.shape[1])] * rows.shape[0], w.name


# ----- channel removal ----------------------------------------------------------------------------------
CHANNEL_MODELS = ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny")


@pytest.mark.parametrize("name", tv_params(CHANNEL_MODELS))
def test_torchvision_channel_removal_exact_and_saved(name, tmp_path):
    from sparsify_torch.channels import UniformPruningLabelSelector, calibrate_model_for_pruning, prune_model
    from sparsify_torch.channels.serialization import load_pruned_model, save_pruned_model

    model = tv_model(name).eval()
    x = images(0, n=1)
    info = calibrate_model_for_pruning(model, [(x, tv_targets(0)[:1])],
                                       lambda out, sample: nn.functional.cross_entropy(out, sample[1]))
    assert info.unpruned_groups() == []
    labels = UniformPruningLabelSelector(0.5).select(info)
    small = prune_model(model, info, labels, inplace=False)
    chosen = info.split_labels(labels)
    for g in info.prunable_group_indices:
        group = info.groups[g]
        lost = len(chosen.get(g, []))
        assert lost == pruned_count(0.5, group.n_labels), (g, group.root_name)
        root, before = small.get_submodule(group.root_name), model.get_submodule(group.root_name)
        width = lambda m: getattr(m, "out_channels", getattr(m, "out_features", None))   # noqa: E731
        assert width(before) - width(root) == lost * group.width, group.root_name
    with torch.no_grad():
        assert small(images(5)).shape == (BATCH, 1000)
    path = tmp_path / f"{name}.pt"
    save_pruned_model(small, path, f"torchvision.models:{name}")
    loaded = load_pruned_model(path).eval()
    with torch.no_grad():
        assert torch.equal(loaded(images(5)), small.eval()(images(5)))
    # the narrowed model is a plain module: unstructured pruning takes it as any other
    pruner = prune(loaded, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    for n, mask in pruner.masks().items():
        assert int((~mask.bool()).sum()) == pruned_count(0.5, mask.numel()), n
