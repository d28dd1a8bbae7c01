"""Language-model benchmark: a character-level transformer on CPython's ``pydoc_data/topics.py``.

The model (``bench/lm/model.py``): GPT-2 shaped, pre-LayerNorm, learned positions,
2 layers, d_model 128, 4 heads, context 64, head tied to the embedding; initial
weights drawn with NumPy from the seed. Text (``bench/lm/data.py``): the topics
joined in key order, the last 10% held out; its sha256 and the Python version are
recorded with the results. Metric: validation bits per character over every
non-overlapping 64-character window of the held-out text (lower is better;
perplexity per character is ``2 ** bpc``).

Modes:
    ``--dense``: train one dense model per seed (single thread; cached under ``--cache``).
    ``--oneshot``: magnitude, Wanda and SparseGPT (``bench/lm/oneshot.py``) at 50/60/70 % and
    2:4 (with and without channel permutation) on each trained dense model, the same
    calibration windows (64 training windows from the seed) for every arm.
    ``--gradual``: prune while training (``bench/lm/gradual.py``): our default, ``erk_wanda``, ``sr_ste``
    (SR-STE), ``rigl``, ``erk_rigl`` and torch.ao's WeightNormSparsifier at ``--gradual-targets`` (percent, or
    ``2:4``; ERK scope and RigL are unstructured only), same initial weights and batches. The Keras arms run
    apart: Keras 3 in ``bench/lm/keras_runs.py``, tf-keras and tfmot (the Keras peer) in ``bench/lm/tfkeras_runs.py``.
    ``--peer``: llm-compressor's SparseGPTModifier and WandaPruningModifier on the same weights
    exported as a Hugging Face ``GPT2LMHeadModel`` (``bench/lm/peer.py``, run in a child process
    with ``--peer-path`` on its ``PYTHONPATH``); a failure is recorded with its command and error.

Run: ``python -m bench.bench_lm --dense --oneshot --peer --seeds 0 1 2`` (writes
``bench/lm_results.json`` and the ``bench_lm`` section of bench/RESULTS.md).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._results import publish
from .lm.data import calibration_windows, load_corpus, validation_windows
from .lm.gradual import DISTILL_ARMS, GRADUAL_ARMS, gradual_attach, gradual_config, needs_teacher, setting_target
from .lm.model import CharLM, LMConfig, bits_per_char
from .lm.finetune import FINETUNE_ARMS, oneshot_finetune
from .lm.oneshot import ARMS, SETTINGS, calibration_batches, permuted_base, prune_arm
from .lm.plot import FIGURE, plot
from .lm.records import record_run
from .lm.report import render
from .lm.train import train_dense

__all__ = ["main"]

HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "lm_results.json"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dense", action="store_true", help="train (or load) the dense models and record "
                   "their figures; every mode does, except --gradual alone when --out-json has them already")
    p.add_argument("--oneshot", action="store_true", help="one-shot arms on the dense models")
    p.add_argument("--peer", action="store_true", help="llm-compressor's one-shot modifiers")
    p.add_argument("--finetune", action="store_true",
                   help="one-shot SparseGPT at --settings, then a short fine-tune with and without the dense "
                        "model as teacher (--finetune-arms; bench/lm/finetune.py)")
    p.add_argument("--finetune-steps", type=int, default=180, help="fine-tune steps (default: 10%% of --steps' 1800)")
    p.add_argument("--finetune-arms", nargs="+", default=list(FINETUNE_ARMS), choices=list(FINETUNE_ARMS),
                   help="with a teacher (sparsegpt+distill_ft) and without (sparsegpt+ft)")
    p.add_argument("--gradual", action="store_true", help="prune while training (bench/lm/gradual.py)")
    p.add_argument("--gradual-arms", nargs="+", default=[a for a in GRADUAL_ARMS if a not in DISTILL_ARMS],
                   help="default: every arm without a teacher (teacher arms, e.g. sr_ste_distill, when named)")
    p.add_argument("--gradual-targets", nargs="+", default=["90", "80", "50"], help="percent, or 2:4")
    p.add_argument("--gradual-only", action="store_true",
                   help="no dense run of the seed unless an arm needs its teacher (e.g. SR-STE over the steps a "
                        "teacher and its student cost together, for an equal-compute arm)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=1800)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--calib", type=int, default=64, help="calibration windows")
    p.add_argument("--val-limit", type=int, default=None, help="cap on validation windows (smoke tests)")
    p.add_argument("--arms", nargs="+", default=list(ARMS))
    p.add_argument("--settings", nargs="+", default=list(SETTINGS))
    p.add_argument("--cache", default="/tmp/sparsify_lm", help="folder of trained dense models")
    p.add_argument("--peer-path", default="/tmp/llmc", help="PYTHONPATH holding llm-compressor and transformers")
    p.add_argument("--out-json", default=str(RESULTS_JSON))
    p.add_argument("--no-write", action="store_true", help="do not write bench/RESULTS.md")
    p.add_argument("--report", action="store_true", help="only render --out-json into bench/RESULTS.md")
    args = p.parse_args(argv)
    if args.finetune and (bad := [s for s in args.settings if s not in ("50", "60", "70", "2:4")]):
        p.error(f"--finetune: --settings among 50, 60, 70, 2:4, got {bad}")
    if args.gradual:                          # every pair checked before any training
        for target in args.gradual_targets:
            for arm in args.gradual_arms:
                if arm not in GRADUAL_ARMS:
                    p.error(f"--gradual-arms: one of {', '.join(GRADUAL_ARMS)}, got {arm!r}")
                try:
                    setting_target(target)
                    if arm != "torch.ao":
                        gradual_config(arm, target, args.steps)
                except ValueError as exc:
                    p.error(f"--gradual-arms {arm} at --gradual-targets {target}: {exc}")
    return args


def _dense(cfg: LMConfig, corpus, args, seed: int, data: dict) -> CharLM:
    """The trained dense model of ``seed`` (from the cache when its settings match), recorded in ``data``."""
    key = f"d{cfg.d_model}_l{cfg.n_layers}_c{cfg.context}_s{args.steps}_b{args.batch_size}_seed{seed}"
    path = Path(args.cache) / f"{key}.pt"
    model = CharLM(cfg)
    if path.exists():
        saved = torch.load(path)
        model.load_state_dict(saved["state"])
        info = saved["info"]
    else:
        model, info = train_dense(cfg, corpus, seed, args.steps, args.batch_size)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"state": model.state_dict(), "info": info}, path)
    data["dense"].setdefault(str(seed), {}).update(info, weights=str(path))
    return model.eval()


def _peer(args, cfg: LMConfig, seed: int, weights: str, calib_path: str, data: dict) -> None:
    """Run ``bench/lm/peer.py`` in a child process; record its runs or its failure."""
    out = Path(args.cache) / f"peer_seed{seed}.json"
    cmd = [sys.executable, "-m", "bench.lm.peer", "--weights", weights, "--calib", calib_path, "--out", str(out),
           "--config", json.dumps(cfg.to_dict()), "--settings", *[s for s in args.settings if s in ("50", "2:4")]]
    if args.val_limit:
        cmd += ["--val-limit", str(args.val_limit)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([args.peer_path, str(HERE.parent)])}
    proc = subprocess.run(cmd, env=env, cwd=HERE.parent, capture_output=True, text=True)
    if proc.returncode != 0:
        data["peer_error"] = {"command": f"PYTHONPATH={env['PYTHONPATH']} {shlex.join(cmd)}",
                              "error": proc.stderr.strip().splitlines()[-20:]}
        print("llm-compressor failed:\n" + proc.stderr[-3000:], flush=True)
        return
    data.pop("peer_error", None)
    peer = json.loads(out.read_text())
    data["peer_versions"] = peer["versions"]
    for run in peer["runs"]:
        record_run(data, seed, run["arm"], run["setting"], run["bpc"],
                   {"seconds": run["seconds"], "layer_sparsity_range": run["sparsity"]})
    data["dense"][str(seed)].update(hf_bpc=peer["dense_bpc"], export_max_abs_diff=peer["export_max_abs_diff"])


def _gradual(args, cfg: LMConfig, corpus, seed: int, val: tuple[np.ndarray, np.ndarray], data: dict) -> None:
    """One training run per gradual arm and target, each recorded (and saved) as it ends."""
    teacher = _dense(cfg, corpus, args, seed, data) if any(map(needs_teacher, args.gradual_arms)) else None
    for target in args.gradual_targets:
        for arm in args.gradual_arms:
            attach = gradual_attach(arm, target, args.steps, teacher if needs_teacher(arm) else None)
            model, info = train_dense(cfg, corpus, seed, args.steps, args.batch_size, attach=attach)
            record_run(data, seed, f"gradual/{arm}", target, bits_per_char(model, *val), {"seconds": info["seconds"]})
            _save(args.out_json, data)


def _finetune(args, corpus, seed: int, dense: CharLM, calib: list, val: tuple, data: dict[str, Any]) -> None:
    """Per setting and fine-tune arm: the one-shot arm, then its fine-tune (taught by the dense model or not),
    recorded and saved."""
    for setting in args.settings:
        for name in args.finetune_arms:
            arm, taught = FINETUNE_ARMS[name]
            pruned, info = prune_arm(dense, arm, setting, calib)
            model, ft = oneshot_finetune(pruned, corpus, seed, setting, args.finetune_steps, args.batch_size,
                                         teacher=dense if taught else None)
            if not ft["kept_zeros"]:
                raise RuntimeError(f"{name} at {setting}: the fine-tune's masks are not the one-shot zeros")
            record_run(data, seed, name, setting, bits_per_char(model, *val),
                       {"seconds": ft["seconds"], "oneshot_seconds": info["seconds"], "steps": ft["steps"]})
            _save(args.out_json, data)


def _save(path: str, data: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)


def _load(path: str) -> dict[str, Any]:
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    return {"runs": [], "dense": {}}


def _publish(data: dict[str, Any], write: bool) -> None:
    """The RESULTS.md section, and the headline figure when it is written."""
    body = render(data)
    if write and plot(data, FIGURE):
        body += "\n\n![bits per character vs sparsity](../docs/img/lm_bpc_vs_sparsity.png)"
    publish("bench_lm", body, write=write)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the modes asked for and return the results (also written to ``--out-json``)."""
    args = _parse(argv)
    if args.report:
        data = _load(args.out_json)
        _publish(data, write=not args.no_write)
        return data
    torch.set_num_threads(1)
    corpus = load_corpus()
    cfg = LMConfig(vocab_size=corpus.vocab_size, d_model=args.d_model, n_layers=args.layers, context=args.context)
    data = _load(args.out_json)
    train = {"steps": args.steps, "batch_size": args.batch_size}
    same_runs = data.get("model") == cfg.to_dict() and data.get("train") == train
    command = "python -m bench.bench_lm " + shlex.join(sys.argv[1:] if argv is None else argv)
    data["commands"] = [c for c in data.get("commands", []) if c != command] + [command]
    data.update(corpus={"source": "pydoc_data/topics.py", "python": corpus.python, "sha256": corpus.sha256,
                        "characters": len(corpus.text), "vocab": corpus.vocab_size},
                model=cfg.to_dict(), train=train,
                torch=torch.__version__, machine=platform.machine(), calibration_windows=args.calib)
    val_x, val_y = validation_windows(corpus, cfg.context, args.val_limit)
    for seed in args.seeds:
        recorded = same_runs and str(seed) in data["dense"]
        if args.dense or args.oneshot or args.peer or args.finetune or not (recorded or args.gradual_only):
            dense = _dense(cfg, corpus, args, seed, data)   # gradual runs alone reuse a recorded dense figure
            record_run(data, seed, "dense", "0", bits_per_char(dense, val_x, val_y),
                       {"seconds": data["dense"][str(seed)]["seconds"]})
        windows = calibration_windows(corpus, seed, args.calib, cfg.context)
        if args.oneshot:
            calib = calibration_batches(windows)
            for setting in args.settings:
                start = time.perf_counter()
                base, perm_info = permuted_base(dense, setting, calib)
                perm_info["permutation_seconds"] = time.perf_counter() - start
                for arm in args.arms:
                    model, info = prune_arm(base, arm, setting, calib)
                    record_run(data, seed, arm, setting, bits_per_char(model, val_x, val_y), {**info, **perm_info})
        if args.finetune:
            _finetune(args, corpus, seed, dense, calibration_batches(windows), (val_x, val_y), data)
        if args.peer:
            calib_path = str(Path(args.cache) / f"calib_seed{seed}.npy")
            np.save(calib_path, windows)
            _peer(args, cfg, seed, data["dense"][str(seed)]["weights"], calib_path, data)
        _save(args.out_json, data)
        if args.gradual:
            _gradual(args, cfg, corpus, seed, (val_x, val_y), data)
    _publish(data, write=not args.no_write)
    return data


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"done in {time.perf_counter() - start:.0f} s")
