"""Sparse + int8: file sizes of the bench models, and accuracy of PTQ and QAT int8 beside sparse float32.

Two measurements, both in torch (``sparsify_torch.quantization``, ``sparsify.int8_format``):

* **File sizes** of the bench MLP (``bench.bench_torch.TokenMLP``), the MNIST-1D CNN
  (``bench.accuracy``, 25 channels), the MobileNet-style CNN of ``bench_deploy`` (``TorchMobileNet``) and the
  LM (``bench.lm.model.CharLM``, d_model 256, 2 blocks, vocab 96),
  pruned by magnitude (one shot, every prunable weight, local scope) at 0/50/70/90% and 2:4: the dense float32
  ``state_dict`` (``torch.save``), the compressed float32 state_dict (``sparsify_torch.export``, bitmask +
  float32 values) and the int8 ``.npz`` (``sparsify_torch.quantization.save_int8_npz``: bitmask + int8 values
  + float32 scales per output channel; biases and norms float32), each as a fraction of the dense file.
  Weights are random (the sizes do not depend on training, except through the compression of the values).
* **Accuracy** on the MNIST-1D CNN at each ``--accuracy`` setting (``bench.accuracy.problems.SETTINGS``:
  ``90`` by default; ``2:4`` trains the 32-channel variant, as ``bench_accuracy`` does) with the recipe of
  ``bench_accuracy`` (Adam 1e-2, batch 100, gradual cubic schedule, its 6000 steps scaled to ``--steps``,
  3000 by default), paired by seed: the pruned model is then fine-tuned ``--finetune`` steps with
  its masks fixed (Adam 1e-3, the same batches) twice from the same state, in float32 and with
  ``add_fake_quant`` (QAT). Reported: sparse fp32 (after the float32 fine-tune), PTQ int8 of that model
  (``quantize_model_int8``, weight-only) and QAT int8 (the exported int8 model), with the paired differences
  (mean +- sample std over seeds). Every run checks that the int8 model keeps every pruned zero.

Usage:
    python -m bench.bench_quant                     # writes the "bench_quant" section of bench/RESULTS.md
    python -m bench.bench_quant --seeds 2 --steps 600 --finetune 100 --no-write
    python -m bench.bench_quant --accuracy 90 2:4    # the 90% runs and a second configuration, paired alike

Example:
    >>> ratios = file_sizes({"tiny": lambda key: torch.nn.Sequential(torch.nn.Linear(64, 64))}, ["90"])
    >>> ratios[0]["model"], ratios[0]["setting"], ratios[0]["int8"] < ratios[0]["fp32_sparse"] < 1
    ('tiny', '90', True)
"""
from __future__ import annotations

import argparse
import copy
import io
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np
import torch
from torch.nn import functional as F

import sparsify_torch
from sparsify_torch.export import save_compressed_state_dict
from sparsify.int8_format import int8_npz_bytes
from sparsify_torch.quantization import add_fake_quant, int8_document, int8_weights, quantize_model_int8

__all__ = ["SETTINGS", "models", "file_sizes", "accuracy_runs", "render", "main"]

#: Pruning settings of the size table: name -> (target sparsity, pattern).
SETTINGS = {"0": (0.0, "1x1"), "50": (0.5, "1x1"), "70": (0.7, "1x1"), "90": (0.9, "1x1"), "2:4": (0.5, "2:4")}


def models() -> dict[str, Callable[[str], torch.nn.Module]]:
    """The bench models, each built from seed 0 for a setting of :data:`SETTINGS`."""
    from bench.accuracy.problems import init_weights, problem, setting
    from bench.accuracy.torch_runs import Net
    from bench.bench_torch import make_model
    from bench.lm.model import LMConfig, build_model

    spec = problem("mnist1d")

    def cnn(key: str) -> torch.nn.Module:
        s = setting("2:4" if key == "2:4" else "90")          # 2:4 needs the 32-channel variant, as in bench_accuracy
        return Net(spec.layers(s), init_weights(spec, s, 0))

    def mobilenet(key: str) -> torch.nn.Module:
        from bench.bench_deploy import TorchMobileNet

        torch.manual_seed(0)
        return TorchMobileNet()

    return {"bench MLP (TokenMLP 128-512-128 x2 + head)": lambda key: make_model(),
            "MNIST-1D CNN (25 ch; 32 for 2:4)": cnn,
            "MobileNet-style CNN (bench_deploy, 8 dw+pw pairs)": mobilenet,
            "LM (CharLM d256 x2, vocab 96)": lambda key: build_model(LMConfig(vocab_size=96, d_model=256, n_layers=2,
                                                                               n_heads=4, context=64), seed=0)}


def _nbytes(save: Callable[[Any], Any]) -> int:
    buf = io.BytesIO()
    save(buf)
    return len(buf.getvalue())


def file_sizes(builders: dict[str, Callable[[str], torch.nn.Module]], settings: list[str]) -> list[dict[str, Any]]:
    """Per model and setting: bytes of the dense fp32 file, and the compressed fp32 / int8 files' fractions of it."""
    rows = []
    for name, build in builders.items():
        for key in settings:
            target, pattern = SETTINGS[key]
            model = build(key).eval()
            if target:
                sparsify_torch.prune(model, {"target_sparsity": target, "pattern": pattern, "start_step": 0,
                                             "end_step": 0, "skip_incompatible_layers": True}).remove()
            params = sum(p.numel() for p in model.parameters())
            dense = _nbytes(lambda f: torch.save(model.state_dict(), f))
            sparse = _nbytes(lambda f: save_compressed_state_dict(model, f))
            before = {n: p.detach().clone() for n, p in model.state_dict().items()}
            _, report = quantize_model_int8(model)
            int8 = len(int8_npz_bytes(int8_document(model)))       # what save_int8_npz writes
            zeros = sum(r.zeros_before for r in report.values())
            weights = sum(r.size for r in report.values())
            assert all(r.lost_zeros == 0 for r in report.values())
            assert all(np.all(int8_weights(model)[n][0][before[n].numpy() == 0] == 0) for n in report)
            rows.append({"model": name, "setting": key, "dense_bytes": dense, "fp32_sparse": sparse / dense,
                         "int8": int8 / dense, "int8_bytes": int8, "params": params, "sparsity": zeros / weights,
                         "new_zeros": sum(r.new_zeros for r in report.values()) / weights})
    return rows


def _evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def _finetune(model: torch.nn.Module, pruner: Any, x: torch.Tensor, y: torch.Tensor, order: torch.Tensor) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for idx in order:
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        pruner.step()


def _masked(model: torch.nn.Module, target: float, pattern: str = "1x1") -> Any:
    """Masks fixed at ``model``'s zeros: magnitude pruning to the target (and pattern) it was pruned to picks
    exactly them (layers the pattern does not fit stay dense, as in training)."""
    zeros = {n: (p == 0) for n, p in model.named_parameters() if n.endswith("weight")}
    pruner = sparsify_torch.prune(model, {"target_sparsity": target, "pattern": pattern, "start_step": 0,
                                          "end_step": 0, "skip_incompatible_layers": pattern != "1x1"})
    for n, keep in pruner.masks().items():
        assert torch.equal(~keep, zeros[n]), f"{n}: the fine-tune masks are not the trained zeros"
    return pruner


def accuracy_runs(seeds: list[int], steps: int, finetune: int, setting_name: str = "90") -> list[dict[str, Any]]:
    """Per seed: test accuracy of sparse fp32, PTQ int8 and QAT int8 on the MNIST-1D CNN (see the module doc).

    ``setting_name``: a setting of ``bench.accuracy.problems.SETTINGS`` (target, pattern, model width)."""
    from bench.accuracy.problems import batch_order, init_weights, load_data, problem, setting, sparsify_config
    from bench.accuracy.torch_runs import Net

    torch.set_num_threads(1)
    spec, s = problem("mnist1d"), setting(setting_name)
    target = s.target
    spec = spec.scaled(steps) if steps != spec.steps else spec
    x, y, xt, yt = (torch.from_numpy(a) for a in load_data(spec.name))
    out = []
    for seed in seeds:
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        order = torch.from_numpy(batch_order(spec, len(x), seed))
        ft_order = torch.from_numpy(batch_order(spec.scaled(finetune), len(x), 50_000 + seed))
        model = Net(spec.layers(s), init_weights(spec, s, seed))
        opt = torch.optim.Adam(model.parameters(), lr=spec.lr)
        pruner = sparsify_torch.prune(model, sparsify_config(spec, s, {}), optimizer=opt)
        for idx in order:
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            pruner.step()
        pruner.remove()
        trained = _evaluate(model, xt, yt)
        fp32, qat = model, copy.deepcopy(model)
        _finetune(fp32, _masked(fp32, target, s.pattern), x, y, ft_order)
        acc_fp32 = _evaluate(fp32, xt, yt)
        ptq = copy.deepcopy(fp32)
        _, r_ptq = quantize_model_int8(ptq)
        qat_pruner = _masked(qat, target, s.pattern)
        add_fake_quant(qat)
        _finetune(qat, qat_pruner, x, y, ft_order)
        _, r_qat = quantize_model_int8(qat)
        lost = sum(r.lost_zeros for r in (*r_ptq.values(), *r_qat.values()))
        pruned_zero = all(np.all(int8_weights(qat)[n][0][(~k).numpy()] == 0) for n, k in qat_pruner.masks().items())
        out.append({"setting": setting_name, "channels": spec.width(s), "seed": seed, "trained": trained,
                    "fp32": acc_fp32, "ptq": _evaluate(ptq, xt, yt),
                    "qat": _evaluate(qat, xt, yt), "lost_zeros": lost, "pruned_zero": bool(pruned_zero),
                    "seconds": time.perf_counter() - t0})
        print(f"seed {seed}: {out[-1]}", file=sys.stderr)
    return out


def _mean_std(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):+.2f} +- {100 * sd:.2f}"


def render(sizes: list[dict[str, Any]], runs: list[dict[str, Any]], command: str, steps: int, finetune: int) -> str:
    """The RESULTS.md section: the size table, then one accuracy table per setting of ``runs``."""
    lines = [f"Command: `{command}`", "",
             "File size as a fraction of the dense float32 `state_dict` (`torch.save`): compressed float32 "
             "(`sparsify_torch.export.save_compressed_state_dict`, bitmask + float32 values) and int8 "
             "(`sparsify_torch.quantization.save_int8_npz`: bitmask + int8 values + a float32 scale per output "
             "channel, biases and norms float32). Magnitude pruning of every prunable weight (local scope); "
             "sparsity counts the int8 layers' pruned zeros, new zeros the small weights int8 rounding zeroed. "
             "No int8 layer turned a zero non-zero.", "",
             "| model | setting | params | dense fp32 | sparse fp32 | int8 | int8 file | sparsity | new zeros |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sizes:
        lines.append(f"| {r['model']} | {r['setting']} | {r.get('params', 0):,} | {r['dense_bytes'] / 1024:.0f} KiB "
                     f"| {r['fp32_sparse']:.3f}x | {r['int8']:.3f}x | {r.get('int8_bytes', 0):,} B "
                     f"| {r['sparsity']:.2%} | {r['new_zeros']:.2%} |")
    for name in dict.fromkeys(r.get("setting", "90") for r in runs):
        sel = [r for r in runs if r.get("setting", "90") == name]
        width = f", {sel[0]['channels']} channels" if "channels" in sel[0] else ""
        lines += ["", f"MNIST-1D CNN at {name}{width} ({steps} training steps, then {finetune} fine-tune steps with "
                  "the masks fixed, in float32 and in QAT from the same state), test accuracy, paired by seed:", "",
                  "| seed | sparse fp32 | sparse + PTQ int8 | sparse + QAT int8 | zeros lost |",
                  "|---:|---:|---:|---:|---:|"]
        for r in sel:
            lines.append(f"| {r['seed']} | {r['fp32']:.4f} | {r['ptq']:.4f} | {r['qat']:.4f} | {r['lost_zeros']} |")
        ptq = [r["ptq"] - r["fp32"] for r in sel]
        qat = [r["qat"] - r["fp32"] for r in sel]
        lines += ["", f"{name}, over {len(sel)} seeds (accuracy points, mean +- sample std of the paired "
                  f"difference): PTQ int8 - fp32 {_mean_std(ptq)}; QAT int8 - fp32 {_mean_std(qat)}; "
                  f"sparse fp32 mean {100 * statistics.mean(r['fp32'] for r in sel):.2f}%."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds of the accuracy runs (0 skips them)")
    ap.add_argument("--steps", type=int, default=3000, help="training steps of the MNIST-1D recipe (its 6000 "
                    "scaled: schedule window and frequency alike)")
    ap.add_argument("--finetune", type=int, default=500, help="fine-tune steps (fp32 and QAT) after pruning")
    ap.add_argument("--settings", default="0,50,70,90,2:4", help="comma-separated size settings")
    ap.add_argument("--accuracy", nargs="+", default=["90"], help="settings of the accuracy runs "
                    "(bench.accuracy.problems.SETTINGS: 80 90 95 4x1 2:4), each over the same seeds")
    ap.add_argument("--no-write", action="store_true", help="print the section without writing RESULTS.md")
    args = ap.parse_args(argv)
    settings = [k for k in args.settings.split(",") if k]
    bad = [k for k in settings if k not in SETTINGS]
    if bad:
        ap.error(f"--settings: unknown {bad}; choose from {list(SETTINGS)}")
    from bench.accuracy.problems import SETTINGS as ACCURACY_SETTINGS

    bad = [k for k in args.accuracy if k not in ACCURACY_SETTINGS]
    if bad:
        ap.error(f"--accuracy: unknown {bad}; choose from {list(ACCURACY_SETTINGS)}")
    sizes = file_sizes(models(), settings)
    runs = [r for key in args.accuracy for r in accuracy_runs(list(range(args.seeds)), args.steps, args.finetune, key)
            ] if args.seeds else []
    command = "python -m bench.bench_quant" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    from bench._results import publish

    body = render(sizes, runs, command.replace(" --no-write", ""), args.steps, args.finetune)
    publish("bench_quant", body, write=not args.no_write)
    return body


if __name__ == "__main__":
    main()
