"""llm-compressor as the one-shot peer: the benchmark LM exported as a Hugging Face ``GPT2LMHeadModel``.

Run by ``bench/bench_lm.py --peer`` in a child process whose ``PYTHONPATH`` holds
llm-compressor, compressed-tensors and transformers (installed into a temporary
folder, never into this project's dependencies)::

    python -m bench.lm.peer --weights W.pt --calib C.npy --out peer.json

The export builds ``GPT2LMHeadModel(GPT2Config(...))`` (no download) and copies our
weights into it: GPT-2's ``Conv1D`` holds ``(in, out)``, so every linear is
transposed, and ``c_attn`` is q, k and v side by side; the ``Conv1D`` modules are then
swapped for equivalent ``nn.Linear`` (llm-compressor 0.14.0.1 does not hook ``Conv1D``, see
:func:`_conv1d_to_linear`). The export is checked: the
largest difference of its logits from ours on validation windows is recorded
(``export_max_abs_diff``) and must stay below 1e-4. Then ``oneshot`` runs
``SparseGPTModifier`` and ``WandaPruningModifier`` (sparsity 0.5, ``mask_structure``
``"0:0"`` or ``"2:4"``, block size 128, dampening 0.01, every ``Linear`` but ``lm_head``)
on a copy of the model each, with the calibration windows as a DataLoader of batches of 16,
and the validation bits per character are measured.

Example (the mapping needs no transformers):
    >>> from bench.lm.model import build_model
    >>> model = build_model(LMConfig(vocab_size=5, d_model=8, n_layers=1, n_heads=2, context=4), seed=0)
    >>> sd = gpt2_state_dict(model.state_dict(), 1)
    >>> tuple(sd["transformer.h.0.attn.c_attn.weight"].shape), tuple(sd["transformer.h.0.mlp.c_fc.weight"].shape)
    ((8, 24), (8, 32))
"""
from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from typing import Any

import numpy as np
import torch

from .data import load_corpus, validation_windows
from .model import CharLM, LMConfig, bits_per_char

__all__ = ["gpt2_state_dict", "build_gpt2", "char_tokenizer", "run_peer"]

_BLOCK_MAP = {"ln1": "ln_1", "ln2": "ln_2", "o": "attn.c_proj", "fc1": "mlp.c_fc", "fc2": "mlp.c_proj"}


def gpt2_state_dict(state: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """Our parameter names and layout -> ``GPT2LMHeadModel``'s (Conv1D weights transposed, q/k/v fused)."""
    out = {"transformer.wte.weight": state["wte.weight"], "transformer.wpe.weight": state["wpe.weight"],
           "transformer.ln_f.weight": state["ln_f.weight"], "transformer.ln_f.bias": state["ln_f.bias"],
           "lm_head.weight": state["wte.weight"]}
    for i in range(n_layers):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        for a, b in _BLOCK_MAP.items():
            w = state[ours + a + ".weight"]
            out[theirs + b + ".weight"] = w if a.startswith("ln") else w.T.contiguous()
            out[theirs + b + ".bias"] = state[ours + a + ".bias"]
        out[theirs + "attn.c_attn.weight"] = torch.cat([state[ours + p + ".weight"].T for p in "qkv"], dim=1)
        out[theirs + "attn.c_attn.bias"] = torch.cat([state[ours + p + ".bias"] for p in "qkv"])
    return out


def build_gpt2(model: CharLM, folder: str):
    """A ``GPT2LMHeadModel`` computing what ``model`` computes, its config saved in ``folder`` (``oneshot``
    reads the config back from ``config.name_or_path``)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.cfg
    config = GPT2Config(vocab_size=c.vocab_size, n_positions=c.context, n_embd=c.d_model, n_layer=c.n_layers,
                        n_head=c.n_heads, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    hf = GPT2LMHeadModel(config)
    missing, unexpected = hf.load_state_dict(gpt2_state_dict(model.state_dict(), c.n_layers), strict=False)
    missing = [k for k in missing if not k.endswith("attn.bias") and not k.endswith("masked_bias")]
    if missing or unexpected:
        raise ValueError(f"GPT-2 export: missing {missing}, unexpected {unexpected}")
    _conv1d_to_linear(hf)
    config.save_pretrained(folder)
    hf.config._name_or_path = folder
    return hf.eval()


def _conv1d_to_linear(hf) -> None:
    """Swap every transformers ``Conv1D`` for the ``nn.Linear`` computing the same (weight transposed).

    llm-compressor 0.14.0.1 hooks the modules whose class name is one of ``Linear``, ``Conv1d``,
    ``Conv2d``, ``Conv3d`` (``PRUNABLE_LAYER_TYPES``), so GPT-2's ``Conv1D`` layers are never pruned:
    every run comes back dense. With ``nn.Linear`` in their place its modifiers prune them.
    """
    for name, module in list(hf.named_modules()):
        if type(module).__name__ != "Conv1D":
            continue
        parent, _, attr = name.rpartition(".")
        lin = torch.nn.Linear(module.weight.shape[0], module.weight.shape[1])
        with torch.no_grad():
            lin.weight.copy_(module.weight.T)
            lin.bias.copy_(module.bias)
        setattr(hf.get_submodule(parent), attr, lin)


def char_tokenizer(chars: str):
    """A ``PreTrainedTokenizerFast`` for our characters (llm-compressor's ``oneshot`` wants a processor even
    when it is handed token batches)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={c: i for i, c in enumerate(chars)}, unk_token=chars[0]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def _modifier(arm: str, setting: str):
    from llmcompressor.modifiers.pruning import SparseGPTModifier, WandaPruningModifier

    common = {"sparsity": 0.5, "mask_structure": "2:4" if setting == "2:4" else "0:0",
              "targets": ["Linear"], "ignore": ["re:.*lm_head"]}
    if arm == "llmc_sparsegpt":
        return SparseGPTModifier(block_size=128, dampening_frac=0.01, **common)
    return WandaPruningModifier(**common)


def run_peer(model: CharLM, chars: str, calib: np.ndarray, settings: list[str],
             val: tuple[np.ndarray, np.ndarray], folder: str) -> dict:
    """Export, check, prune with each llm-compressor modifier and measure; returns the runs."""
    import llmcompressor
    import transformers
    from llmcompressor import oneshot

    hf = build_gpt2(model, folder)
    x = torch.from_numpy(val[0][:16])
    with torch.no_grad():
        diff = float((hf(input_ids=x).logits - model(x)).abs().max())
    if diff > 1e-4:
        raise ValueError(f"the GPT-2 export computes something else: max |logits difference| = {diff}")
    processor = char_tokenizer(chars)
    loader = torch.utils.data.DataLoader([{"input_ids": torch.from_numpy(w)} for w in calib], batch_size=16)
    logits = lambda m: (lambda ids: m(input_ids=ids).logits)  # noqa: E731
    result: dict[str, Any] = {"versions": f"llmcompressor {llmcompressor.__version__}, transformers "
                                          f"{transformers.__version__}", "export_max_abs_diff": diff,
                              "dense_bpc": bits_per_char(logits(hf), *val), "runs": []}
    for setting in settings:
        for arm in ("llmc_sparsegpt", "llmc_wanda"):
            pruned = copy.deepcopy(hf)
            start = time.perf_counter()
            oneshot(model=pruned, dataset=loader, recipe=_modifier(arm, setting), processor=processor,
                    pipeline="sequential")
            seconds = time.perf_counter() - start
            zeros = [float((m.weight == 0).float().mean()) for n, m in pruned.named_modules()
                     if isinstance(m, torch.nn.Linear) and not n.endswith("lm_head")]
            if min(zeros) < 0.49:
                raise ValueError(f"{arm} at {setting} left a layer at sparsity {min(zeros):.3f}: it did not prune")
            result["runs"].append({"arm": arm, "setting": setting, "bpc": bits_per_char(logits(pruned.eval()), *val),
                                   "seconds": seconds, "sparsity": [min(zeros), max(zeros)]})
    return result


def main(argv: list[str] | None = None) -> None:
    """Command line of the child process (see the module docstring)."""
    p = argparse.ArgumentParser()
    p.add_argument("--weights", required=True)
    p.add_argument("--calib", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--config", required=True, help="the model's LMConfig as JSON")
    p.add_argument("--settings", nargs="+", default=["50", "2:4"])
    p.add_argument("--val-limit", type=int, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    state = torch.load(args.weights)["state"]
    corpus = load_corpus()
    cfg = LMConfig(**json.loads(args.config))
    model = CharLM(cfg)
    model.load_state_dict(state)
    model.eval()
    val = validation_windows(corpus, cfg.context, args.val_limit)
    with tempfile.TemporaryDirectory() as folder:
        result = run_peer(model, corpus.chars, np.load(args.calib), args.settings, val, folder)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
