"""LM bits per character with int8: sparse fp32 against sparse + PTQ int8 at 50% and 2:4, and the recipe
one-shot SparseGPT + distilled fine-tune + int8, on the bench LM (issue 60).

The LM is ``bench_lm``'s default (smallest) configuration: ``bench/lm/model.py``'s CharLM, d_model 128,
2 layers, 4 heads, context 64, trained dense for 1800 steps (batch 32) per seed, cached under ``--cache``
with ``bench_lm``'s file names (a model either script trained is reused by the other); ``--d-model`` adds
other widths (a second configuration: ``--d-model 128 64``), each over the same seeds and recipe. Per seed and setting
(``50``: 50% unstructured; ``2:4``):

* **sparsegpt**: one-shot SparseGPT (``bench/lm/oneshot.py``'s arm, 64 calibration windows of the seed);
* **sparsegpt+distill_ft**: then ``--finetune`` steps with the masks fixed, taught by the dense model
  (``bench/lm/finetune.py``, the Sparse-Llama recipe);

each in float32 and after ``sparsify_torch.quantization.quantize_model_int8`` (PTQ): weight-only (int8
weights, float32 activations) and dynamic (``torch.ao`` int8 ``Linear``: activations quantized per batch
too). Quantized: the six ``Linear`` of each block (the pruned weights); the embeddings (and the head tied
to ``wte``) and the LayerNorms stay float32. Every int8 model is checked to keep every pruned zero.
Metric: validation bits per character (``bench_lm``'s, every 64-character window of the held-out text).

Usage:
    python -m bench.bench_quant_lm                       # seeds 0 1, writes the "bench_quant_lm" section
    python -m bench.bench_quant_lm --seeds 0 --steps 200 --finetune 20 --val-limit 64 --no-write
    python -m bench.bench_quant_lm --d-model 128 64      # two LM configurations, seeds 0 1
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["SETTINGS", "int8_bpc", "render", "main"]

SETTINGS = ("50", "2:4")


def _dense(cfg: Any, corpus: Any, seed: int, steps: int, batch_size: int, cache: str) -> Any:
    """The trained dense model of ``seed``, from ``bench_lm``'s cache file when there is one."""
    from bench.lm.model import CharLM
    from bench.lm.train import train_dense

    path = Path(cache) / f"d{cfg.d_model}_l{cfg.n_layers}_c{cfg.context}_s{steps}_b{batch_size}_seed{seed}.pt"
    model = CharLM(cfg)
    if path.exists():
        model.load_state_dict(torch.load(path)["state"])
    else:
        model, info = train_dense(cfg, corpus, seed, steps, batch_size)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"state": model.state_dict(), "info": info}, path)
    return model.eval()


def int8_bpc(model: torch.nn.Module, val: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    """bits/char of ``model`` in float32 and after weight-only and dynamic PTQ int8 (copies; zeros checked)."""
    from bench.lm.model import bits_per_char
    from sparsify_torch.quantization import int8_weights, quantize_model_int8

    zeros = {n: (p == 0) for n, p in model.named_parameters() if n.endswith("weight") and p.dim() == 2}
    out = {"fp32": bits_per_char(model, *val)}
    for mode in ("weight_only", "dynamic"):
        q, report = quantize_model_int8(copy.deepcopy(model), mode=mode)
        assert all(r.lost_zeros == 0 for r in report.values()), report
        weights = int8_weights(q)
        assert all(bool(np.all(weights[n][0][zeros[n].numpy()] == 0)) for n in weights)
        out[mode] = bits_per_char(q, *val)
    return out


def _mean_std(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):+.4f} +- {sd:.4f}"


def render(rows: list[dict[str, Any]], command: str, steps: int, finetune: int, seconds: float) -> str:
    """The RESULTS.md section."""
    lines = [f"Command: `{command}`", "",
             f"Validation bits/char of the bench LM (CharLM, 2 layers, 4 heads, context 64, the row's d_model; "
             f"{steps} dense steps), pruned one shot by SparseGPT "
             f"(and then {finetune} fine-tune steps taught by the dense model: `+distill_ft`), in float32 and after "
             "PTQ int8 of the blocks' Linear weights (`quantize_model_int8`: weight-only, and dynamic = int8 "
             "activations per batch too); embeddings, tied head and LayerNorms float32. No int8 model lost a "
             "pruned zero.", "",
             "| LM | seed | setting | arm | dense fp32 | sparse fp32 | + int8 weight-only | + int8 dynamic | "
             "weight-only - fp32 | dynamic - fp32 |", "|---|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.get('lm', 'd128')} | {r['seed']} | {r['setting']} | {r['arm']} | {r['dense']:.4f} | "
                     f"{r['fp32']:.4f} | "
                     f"{r['weight_only']:.4f} | {r['dynamic']:.4f} | {r['weight_only'] - r['fp32']:+.4f} | "
                     f"{r['dynamic'] - r['fp32']:+.4f} |")
    lines += ["", "Paired difference int8 - fp32 (bits/char, mean +- sample std over seeds):", ""]
    for lm in dict.fromkeys(r.get("lm", "d128") for r in rows):
        for setting in dict.fromkeys(r["setting"] for r in rows):
            for arm in dict.fromkeys(r["arm"] for r in rows):
                sel = [r for r in rows if r.get("lm", "d128") == lm and r["setting"] == setting and r["arm"] == arm]
                if sel:
                    wo = _mean_std([r["weight_only"] - r["fp32"] for r in sel])
                    lines.append(f"* {lm} {setting} {arm}: weight-only {wo}"
                                 f", dynamic {_mean_std([r['dynamic'] - r['fp32'] for r in sel])} ({len(sel)} seeds)")
    lines += ["", f"Whole run {seconds:.0f} s (dense models from the cache when present)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    from bench.lm.data import calibration_windows, load_corpus, validation_windows
    from bench.lm.finetune import oneshot_finetune
    from bench.lm.model import LMConfig, bits_per_char
    from bench.lm.oneshot import calibration_batches, prune_arm

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--steps", type=int, default=1800, help="dense training steps (bench_lm's)")
    ap.add_argument("--finetune", type=int, default=180, help="distilled fine-tune steps (bench_lm's)")
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--d-model", type=int, nargs="+", default=[128], help="LM widths, each a configuration")
    ap.add_argument("--val-limit", type=int, default=None, help="validation windows (default: all)")
    ap.add_argument("--cache", default="/tmp/sparsify_lm", help="folder of trained dense models (bench_lm's)")
    ap.add_argument("--no-write", action="store_true", help="print the section without writing RESULTS.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    corpus = load_corpus()
    rows = []
    for d_model in args.d_model:
        cfg = LMConfig(vocab_size=corpus.vocab_size, d_model=d_model, n_layers=2, context=64)
        val = validation_windows(corpus, cfg.context, args.val_limit)
        for seed in args.seeds:
            dense = _dense(cfg, corpus, seed, args.steps, 32, args.cache)
            dense_bpc = bits_per_char(dense, *val)
            calib = calibration_batches(calibration_windows(corpus, seed, 64, cfg.context))
            for setting in args.settings:
                head = {"lm": f"d{d_model}", "seed": seed, "setting": setting, "dense": dense_bpc}
                pruned, _ = prune_arm(dense, "sparsegpt", setting, calib)
                rows.append({**head, "arm": "sparsegpt", **int8_bpc(pruned, val)})
                print(rows[-1], f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
                teacher = copy.deepcopy(dense).requires_grad_(False)
                tuned, info = oneshot_finetune(copy.deepcopy(pruned), corpus, seed, setting, args.finetune,
                                               teacher=teacher)
                assert info["kept_zeros"], "the fine-tune masks are not the one-shot zeros"
                rows.append({**head, "arm": "sparsegpt+distill_ft", **int8_bpc(tuned.eval(), val)})
                print(rows[-1], f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    command = "python -m bench.bench_quant_lm" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    from bench._results import publish

    body = render(rows, command.replace(" --no-write", ""), args.steps, args.finetune, time.perf_counter() - t0)
    publish("bench_quant_lm", body, write=not args.no_write)
    return body


if __name__ == "__main__":
    main()
