"""Tied parameters (GPT-2's wte/lm_head, Llama with tie_word_embeddings=True) are one weight with one mask:
pruned once under the first name, the tie kept, in gradual and one-shot pruning (issue 57)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from sparsify_torch import prune, prune_oneshot

transformers = pytest.importorskip("transformers")
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig,  # noqa: E402  (their import: at collection)
                          LlamaForCausalLM)


def gpt2(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


def llama(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=True, bos_token_id=0,
                      eos_token_id=0, pad_token_id=0)
    return LlamaForCausalLM(cfg)


def tokens(n: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 64, (2, 12), generator=g) for _ in range(n)]


def train(model: nn.Module, pruner, opt, steps: int) -> None:
    model.train()
    for batch in tokens(steps):
        opt.zero_grad()
        model(batch, labels=batch).loss.backward()
        opt.step()
        pruner.step()


@pytest.mark.parametrize("build, embed, head", [(gpt2, "transformer.wte", "lm_head"),
                                                (llama, "model.embed_tokens", "lm_head")])
def test_a_target_only_config_prunes_a_tied_model_once_and_keeps_the_tie(build, embed, head):
    model = build()
    e, h = model.get_submodule(embed), model.get_submodule(head)
    assert h.weight is e.weight
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 2, "pruning_frequency": 1},
                   optimizer=opt)
    assert f"{embed}.weight" in pruner.names and f"{head}.weight" not in pruner.names
    train(model, pruner, opt, 3)
    # while pruning, both layers compute with the one masked weight
    assert torch.equal(h.weight, e.weight) and float((h.weight == 0).float().mean()) == 0.5
    assert h.parametrizations.weight.original is e.parametrizations.weight.original
    assert h.parametrizations.weight[0] is e.parametrizations.weight[0]       # one mask
    rows = {r.name: r for r in pruner.summary()}
    assert rows[f"{head}.weight"].reason == f"tied to '{embed}.weight' (one weight, pruned with it)"
    masked = e.weight.detach().clone()
    pruner.remove()
    assert h.weight is e.weight and isinstance(e.weight, nn.Parameter)
    assert torch.equal(e.weight, masked)
    assert set(dict(model.named_parameters())) == set(dict(build().named_parameters()))   # plain names again


def test_optimizer_steps_the_tied_weight_once_under_its_mask():
    model = gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}, optimizer=opt)
    train(model, pruner, opt, 2)
    w = model.transformer.wte
    original, mask = w.parametrizations.weight.original, w.parametrizations.weight[0].mask
    assert sum(p is original for p in model.parameters()) == 1
    assert torch.equal(original * mask, model.lm_head.weight)


def test_explicit_op_names_selecting_both_names_prune_under_the_first():
    model = gpt2()
    pruner = prune(model, {"target_sparsity": 0.5, "op_names": ["wte", "lm_head"], "start_step": 0, "end_step": 0})
    assert pruner.names == ["transformer.wte.weight"]
    rows = {r.name: r for r in pruner.summary()}
    assert rows["lm_head.weight"].reason.startswith("tied to 'transformer.wte.weight'")
    assert float((model.lm_head.weight == 0).float().mean()) == 0.5


def test_op_names_selecting_the_second_name_only_prune_under_it():
    model = gpt2()
    pruner = prune(model, {"target_sparsity": 0.5, "op_names": ["lm_head"], "start_step": 0, "end_step": 0})
    assert pruner.names == ["lm_head.weight"]
    assert {r.name: r.reason for r in pruner.summary()}["transformer.wte.weight"] == \
        "tied to 'lm_head.weight' (one weight, pruned with it)"
    pruner.remove()
    assert model.lm_head.weight is model.transformer.wte.weight
    assert float((model.transformer.wte.weight == 0).float().mean()) == 0.5


def test_excluding_one_name_of_a_tied_weight_keeps_it_dense():
    model = gpt2()
    pruner = prune(model, {"target_sparsity": 0.5, "excluded_op_names": ["lm_head"], "start_step": 0,
                           "end_step": 0})
    assert "transformer.wte.weight" not in pruner.names and "transformer.wpe.weight" in pruner.names
    assert int((model.lm_head.weight == 0).sum()) == 0
    rows = {r.name: r.reason for r in pruner.summary()}
    assert rows["transformer.wte.weight"] == "tied to 'lm_head.weight', which excluded_op_names excludes"
    assert rows["lm_head.weight"] == "excluded by excluded_op_names ('lm_head')"


def test_a_pruner_state_of_a_tied_model_round_trips():
    model, other = gpt2(), gpt2(seed=5)                     # other weights: other masks until loaded
    cfg = {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}
    state = prune(model, cfg).state_dict()
    assert "lm_head.weight" not in state["masks"]
    twin = prune(other, cfg)
    wte = "transformer.wte.weight"
    assert not torch.equal(twin.state_dict()["masks"][wte], state["masks"][wte])
    twin.load_state_dict(state)
    loaded = twin.state_dict()["masks"]
    assert loaded.keys() == state["masks"].keys()
    assert all(torch.equal(loaded[n], state["masks"][n]) for n in loaded)
    assert torch.equal(other.lm_head.weight != 0, loaded[wte] & (other.lm_head.weight != 0))   # the head too


@pytest.mark.parametrize("build", [gpt2, llama])
def test_one_shot_magnitude_on_a_tied_model_keeps_the_tie(build):
    model = build()
    prune_oneshot(model, {"target_sparsity": 0.5})
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    assert head.weight is embed.weight
    assert float((embed.weight == 0).float().mean()) == 0.5


def test_wanda_and_sparsegpt_refuse_a_weight_two_layers_read():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    model[2].weight = model[0].weight
    batches = [torch.randn(4, 8)]
    with pytest.raises(ValueError, match=r"criterion 'wanda' reads the inputs.*\{'0.weight': \['2.weight'\]\}"):
        prune_oneshot(model, {"target_sparsity": 0.5, "criterion": "wanda"}, batches)
    with pytest.raises(ValueError, match=r"method='sparsegpt'.*\['0.weight'\] are tied.*\['2.weight'\]"):
        prune_oneshot(model, {"target_sparsity": 0.5}, batches, method="sparsegpt")
    assert not any(hasattr(m, "parametrizations") for m in model.modules())
    assert model[2].weight is model[0].weight
