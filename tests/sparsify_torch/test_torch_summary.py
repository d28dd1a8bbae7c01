"""``Pruner.summary()`` lists what is pruned and what is left dense and why; ``prune()`` logs a one-line count;
``select="transformer_blocks"`` picks a transformer LM's block projections (issue 57)."""
from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch import nn

from sparsify.selection_summary import SelectionSummary, SummaryRow
from sparsify_torch import PruningSummary, prune, prune_oneshot, transformer_block_weights


class Gate(nn.Module):
    """A 2-D weight in a layer type sparsify_torch does not know."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.ones(6, 6))
        self.scale = nn.Parameter(torch.ones(6))          # 1-D: not listed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.table * self.scale


def net() -> nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")               # weight_norm is deprecated
        normed = nn.utils.weight_norm(nn.Linear(6, 6))
    return nn.Sequential(nn.Linear(4, 6), Gate(), normed, nn.Linear(6, 6), nn.Linear(6, 2))


def test_summary_lists_the_pruned_weights_and_every_unpruned_2d_tensor_with_why():
    model = net()
    with pytest.warns(UserWarning, match="old-style hook"):
        pruner = prune(model, {"target_sparsity": 0.5, "op_names": ["^0", "^3", "^4"], "excluded_op_names": ["^4"],
                               "start_step": 0, "end_step": 0})
    summary = pruner.summary()
    assert isinstance(summary, SelectionSummary) and all(isinstance(r, SummaryRow) for r in summary)
    assert summary.selected == (
        SummaryRow("0.weight", "Linear", (6, 4), "1x1", 0.5, sparsity=0.5),
        SummaryRow("3.weight", "Linear", (6, 6), "1x1", 0.5, sparsity=0.5))
    assert [(r.name, r.layer_type, r.shape, r.reason) for r in summary.skipped] == [
        ("1.table", "Gate", (6, 6), "unsupported type Gate: sparsify_torch.register_prunable adds layer types"),
        ("2.weight", "Linear", (6, 6), "computed by an old-style hook (weight_norm): remove the hook to prune it"),
        ("4.weight", "Linear", (2, 6), "excluded by excluded_op_names ('^4')")]
    assert summary.total_parameters == sum(p.numel() for p in model.parameters())
    assert summary.pruned_parameters == 24 + 36
    text = str(summary).splitlines()
    assert text[0] == f"pruned: 2 weights, 60 of {summary.total_parameters} parameters (pattern 1x1, scope local, " \
                      "target 0.5)"
    assert text[1].split() == ["0.weight", "Linear", "(6,", "4)", "1x1", "target", "0.5", "sparsity", "0.5"]
    assert text[3] == "left dense: 3"
    assert text[4].split()[:3] == ["1.table", "Gate", "(6,"]


def test_a_weight_op_names_do_not_match_is_listed_as_such():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    pruner = prune(model, {"target_sparsity": 0.5, "op_names": ["^1"], "start_step": 0, "end_step": 0})
    assert [(r.name, r.reason) for r in pruner.summary().skipped] == [("0.weight", "not matched by op_names ['^1']")]


def test_summary_follows_the_sparsity_and_survives_remove():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    pruner = prune(model, {"target_sparsity": 0.75, "start_step": 0, "end_step": 4, "pruning_frequency": 2,
                           "sparsity_decay_type": "linear"})
    assert [r.sparsity for r in pruner.summary().selected] == [0.0, 0.0]
    pruner.step(2)
    assert [r.sparsity for r in pruner.summary().selected] == [0.375, 0.375]
    pruner.step(2)
    pruner.remove()
    assert [r.sparsity for r in pruner.summary().selected] == [0.75, 0.75]


def test_skipped_incompatible_layers_are_listed_with_the_reason():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 3))
    with pytest.warns(UserWarning):
        pruner = prune(model, {"target_sparsity": 0.5, "pattern": "4x1", "skip_incompatible_layers": True,
                               "start_step": 0, "end_step": 0})
    (row,) = pruner.summary().skipped
    assert row.name == "1.weight" and row.reason.startswith("the pattern does not fit: ")


def test_prune_logs_a_one_line_count(caplog):
    model = net()
    with caplog.at_level(logging.INFO, logger="sparsify_torch"), pytest.warns(UserWarning, match="old-style"):
        prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    (record,) = [r for r in caplog.records if r.name == "sparsify_torch"]
    total = sum(p.numel() for p in model.parameters())
    assert record.levelno == logging.INFO
    assert record.getMessage() == (f"pruning 3 weights ({24 + 36 + 12} of {total} parameters); 2 tensors with 2+ "
                                   "dimensions left dense: see Pruner.summary()")


def test_the_count_of_large_models_is_in_millions():
    rows = (SummaryRow("a", "Linear", (4000, 3000), "1x1", 0.5),)
    from sparsify import PruningConfig
    assert PruningSummary(rows, PruningConfig(), 17_100_000).line() == \
        "pruning 1 weight (12.0M of 17.1M parameters): see Pruner.summary()"


transformers = pytest.importorskip("transformers")
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig,  # noqa: E402  (their import: at collection)
                          LlamaForCausalLM)


def gpt2() -> nn.Module:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0))


def llama() -> nn.Module:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=False, bos_token_id=0,
        eos_token_id=0, pad_token_id=0))


def test_transformer_blocks_selects_the_block_projections_of_gpt2_and_llama():
    names = [r.strip("^$").replace("\\", "") for r in transformer_block_weights(gpt2())]
    assert names == [f"transformer.h.{i}.{n}.weight" for i in range(2)
                     for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]
    model = llama()
    pruner = prune(model, {"target_sparsity": 0.5, "start_step": 0, "end_step": 0}, select="transformer_blocks")
    assert pruner.names == [f"model.layers.{i}.{n}.weight" for i in range(2)
                            for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
    skipped = {r.name: r.reason for r in pruner.summary().skipped}
    assert skipped == {"model.embed_tokens.weight": "not selected by select='transformer_blocks'",
                       "lm_head.weight": "not selected by select='transformer_blocks'"}


def test_transformer_blocks_with_excluded_op_names_and_in_one_shot():
    model = gpt2()
    prune_oneshot(model, {"target_sparsity": 0.5, "excluded_op_names": ["c_attn"]}, select="transformer_blocks")
    zeros = {n: float((p == 0).float().mean()) for n, p in model.named_parameters() if p.dim() == 2}
    assert {n for n, z in zeros.items() if z == 0.5} == {f"transformer.h.{i}.{n}.weight" for i in range(2)
                                                         for n in ("attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
    assert all(z == 0 for n, z in zeros.items() if "c_attn" in n or "wte" in n or "wpe" in n)


def test_select_is_validated_before_anything_changes():
    model = gpt2()
    with pytest.raises(ValueError, match=r"select must be one of \('transformer_blocks',\) or None, got 'blocks'"):
        prune(model, {"target_sparsity": 0.5}, select="blocks")
    with pytest.raises(ValueError, match=r"select='transformer_blocks' chooses the weights itself; the config's "
                                         r"op_names=\['c_fc'\]"):
        prune(model, {"target_sparsity": 0.5, "op_names": ["c_fc"]}, select="transformer_blocks")
    with pytest.raises(ValueError, match="select must be one of"):
        prune_oneshot(model, {"target_sparsity": 0.5}, select=1)
    with pytest.raises(ValueError, match="found no transformer blocks in Sequential"):
        prune(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), {"target_sparsity": 0.5}, select="transformer_blocks")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        transformer_block_weights("gpt2")
    assert not any(hasattr(m, "parametrizations") for m in model.modules())


def test_transformer_blocks_of_torch_encoder_layers_leave_multihead_attention_out():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
    model = nn.Sequential(nn.Embedding(10, 8), nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False))
    names = [r.strip("^$").replace("\\", "") for r in transformer_block_weights(model)]
    assert names == [f"1.layers.{i}.{n}.weight" for i in range(2) for n in ("linear1", "linear2")]
    pruned = prune_oneshot(model, {"target_sparsity": 0.5, "criterion": "wanda"}, [torch.randint(0, 10, (2, 5))],
                           select="transformer_blocks")
    assert float((pruned[1].layers[0].linear1.weight == 0).float().mean()) == 0.5
    assert int((pruned[1].layers[0].self_attn.out_proj.weight == 0).sum()) == 0


def test_the_torch_summary_is_the_cores_selection_summary_with_a_global_scope_having_no_row_target():
    model = nn.Sequential(nn.Linear(8, 8), nn.Embedding(10, 8), nn.LazyLinear(4))
    pruner = prune(model, {"target_sparsity": 0.5, "pruning_scope": "global", "op_names": ["^0"],
                           "start_step": 0, "end_step": 0})
    summary = pruner.summary()
    # a lazy layer's tensors have no shape yet (the bias too): listed with shape ()
    assert summary.headline() == "1 weight selected (64 parameters), 3 skipped (80 parameters: 1 not matched by " \
                                 "op_names ['^0'], 2 uninitialized (lazy) parameter: run a forward pass before prune())"
    assert summary.to_dict()["selected"] == [{"name": "0.weight", "layer_type": "Linear", "shape": [8, 8],
                                              "pattern": "1x1", "target": None, "selected": True, "reason": "",
                                              "sparsity": 0.5}]
    assert summary["2.weight"].shape == () and summary["2.weight"].size == 0
    assert str(summary).splitlines()[1].split() == ["0.weight", "Linear", "(8,", "8)", "1x1", "sparsity", "0.5"]
    assert repr(summary) == "PruningSummary(pruning 1 weight (64 of 152 parameters); 3 tensors with 2+ " \
                            "dimensions left dense: see Pruner.summary())"
