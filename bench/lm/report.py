"""The LM benchmark's tables: bits per character per arm and setting, mean ± std over seeds.

Example:
    >>> runs = [{"seed": s, "arm": a, "setting": "50", "bpc": b} for s, a, b in
    ...         [(0, "sparsegpt", 2.0), (1, "sparsegpt", 2.1), (0, "llmc_sparsegpt", 2.1), (1, "llmc_sparsegpt", 2.3)]]
    >>> print(paired_line(runs, "sparsegpt", "llmc_sparsegpt", "50"))
    | sparsegpt - llmc_sparsegpt | 50 | -0.1500 ± 0.0707 | 2/2 |
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["render", "paired_line", "machines_note", "ARM_ORDER", "TEACHER_GRADUAL"]

ARM_ORDER = ("dense", "magnitude", "wanda", "sparsegpt", "llmc_wanda", "llmc_sparsegpt", "sparsegpt+ft",
             "sparsegpt+distill_ft",
             "gradual/default",
             "gradual/erk_wanda", "gradual/sr_ste", "gradual/sr_ste_at_start", "gradual/rigl", "gradual/erk_rigl",
             "gradual/sr_ste_distill", "gradual/torch.ao")
OUR_GRADUAL = ("default", "erk_wanda", "sr_ste", "sr_ste_at_start", "rigl", "erk_rigl")
#: our gradual arms taught by the trained dense model (distillation): their own rows in the gap table
TEACHER_GRADUAL = ("sr_ste_distill",)
TFMOT = "tfkeras/gradual/tfmot"
PEER_NOTES = (
    "The peer runs on the same trained weights exported as a `GPT2LMHeadModel` built from a `GPT2Config` "
    "(largest logit difference from ours {diff:.1e}), with the same calibration windows (batches of 16), "
    "`SparseGPTModifier(block_size=128, dampening_frac=0.01)` and `WandaPruningModifier`, every linear of the "
    "blocks, `pipeline=\"sequential\"`. llm-compressor 0.14.0.1 hooks only modules whose class is named "
    "`Linear`/`Conv1d`/`Conv2d`/`Conv3d`, so GPT-2's `transformers.Conv1D` layers were never pruned (every run "
    "came back dense); the export therefore swaps each `Conv1D` for the `nn.Linear` computing the same. "
    "Differences that remain: its sequential pipeline calibrates all layers of a block on the block's dense "
    "inputs (ours: one layer at a time, each after the earlier ones are pruned), it fuses q/k/v into one "
    "`c_attn` weight (one count for the three), accumulates the Hessian in float32 (ours float64), and its "
    "unstructured SparseGPT prunes `int(n*s) + 1` entries per block (50.02-50.1% per layer; ours exactly "
    "50%).")
SETTING_ORDER = ("0", "50", "60", "70", "80", "90", "2:4", "2:4+perm", "2:4+aperm")


def _values(runs: list[dict], arm: str, setting: str) -> dict[int, float]:
    return {r["seed"]: r["bpc"] for r in runs if r["arm"] == arm and r["setting"] == setting}


def _cell(values: list[float]) -> str:
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}"


def _main_table(runs: list[dict]) -> str:
    settings = [s for s in SETTING_ORDER if any(r["setting"] == s for r in runs)]
    arms = [a for a in ARM_ORDER if any(r["arm"] == a for r in runs)]
    lines = ["| arm | " + " | ".join("dense" if s == "0" else (s + "%" if s.isdigit() else s) for s in settings) + " |",
             "|---" * (len(settings) + 1) + "|"]
    for arm in arms:
        cells = [_cell(list(_values(runs, arm, s).values())) for s in settings]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_line(runs: list[dict], a: str, b: str, setting: str, setting_b: str | None = None) -> str | None:
    """``| a - b | setting | mean ± std of the per-seed difference | seeds where a is better/seeds |``
    (``b`` at ``setting_b`` when given)."""
    va, vb = _values(runs, a, setting), _values(runs, b, setting_b or setting)
    seeds = sorted(set(va) & set(vb))
    if not seeds:
        return None
    d = np.array([va[s] - vb[s] for s in seeds])
    std = float(np.std(d, ddof=1)) if len(d) > 1 else float("nan")
    name = f"{a} - {b}" if setting_b is None else f"{a} {setting} - {b} {setting_b}"
    return f"| {name} | {setting} | {d.mean():+.4f} ± {std:.4f} | {int((d < 0).sum())}/{len(d)} |"


def machines_note(runs: list[dict]) -> str:
    """A sentence naming which runs came from which processor when they came from more than one ('' else): the
    same seed gives other bits per character on another processor (its floating-point paths differ), so pairs
    are exact only within one machine. Runs without a ``cpu`` field come from a machine that was not recorded.

    Example:
        >>> runs = [{"arm": "dense", "setting": "0", "seed": 0}, {"arm": "gradual/sr_ste", "setting": "2:4",
        ...          "seed": 0, "cpu": "AMD EPYC (x86_64)"}, {"arm": "gradual/sr_ste", "setting": "2:4", "seed": 1,
        ...          "cpu": "AMD EPYC (x86_64)"}]
        >>> print(machines_note(runs))    # doctest: +NORMALIZE_WHITESPACE
        Runs from 2 machines (a seed gives slightly other figures on another processor, so pairs are exact within
        one machine): AMD EPYC (x86_64): gradual/sr_ste at 2:4 (2 runs); the other runs on an earlier machine
        whose processor was not recorded.
    """
    by_cpu: dict[str, list[dict]] = {}
    for r in runs:
        by_cpu.setdefault(r.get("cpu", ""), []).append(r)
    if len(by_cpu) < 2:
        return ""
    parts = []
    for cpu in sorted(c for c in by_cpu if c):
        groups: dict[tuple[str, str], int] = {}
        for r in by_cpu[cpu]:
            groups[(r["arm"], r["setting"])] = groups.get((r["arm"], r["setting"]), 0) + 1
        parts.append(f"{cpu}: " + ", ".join(f"{arm} at {setting} ({n} run{'s' if n > 1 else ''})" for (arm, setting), n in sorted(
            groups.items(), key=lambda g: (SETTING_ORDER.index(g[0][1]) if g[0][1] in SETTING_ORDER else 99, g[0]))))
    rest = "; the other runs on an earlier machine whose processor was not recorded" if "" in by_cpu else ""
    return (f"Runs from {len(by_cpu)} machines (a seed gives slightly other figures on another processor, so pairs "
            f"are exact within one machine): " + "; ".join(parts) + rest + ".")


def _variants(setting: str) -> tuple[str, ...]:
    return (setting, setting + "+perm", setting + "+aperm") if setting == "2:4" else (setting,)


def _ppl_table(runs: list[dict]) -> str:
    """Our SparseGPT against llm-compressor's, as per-character perplexity ``2 ** bpc`` (mean over seeds)."""
    lines = ["| setting | ours: sparsegpt | llm-compressor: sparsegpt | ratio | ours best | llm-compressor best |",
             "|---|---|---|---|---|---|"]
    for setting, ours_best in (("50", ("sparsegpt", "wanda", "magnitude")),
                               ("2:4", ("sparsegpt", "wanda", "magnitude"))):
        peer = _values(runs, "llmc_sparsegpt", setting)
        if not peer:
            continue
        ours = _values(runs, "sparsegpt", setting)
        seeds = sorted(set(ours) & set(peer))
        p_ours = float(np.mean([2 ** ours[s] for s in seeds]))
        p_peer = float(np.mean([2 ** peer[s] for s in seeds]))
        cand = [(float(np.mean([2 ** v for v in _values(runs, a, st).values()])), f"{a} {st}")
                for a in ours_best for st in _variants(setting)
                if _values(runs, a, st)]
        peers = [(float(np.mean([2 ** v for v in _values(runs, a, setting).values()])), a)
                 for a in ("llmc_sparsegpt", "llmc_wanda") if _values(runs, a, setting)]
        best, pbest = min(cand), min(peers)
        lines.append(f"| {setting} | {p_ours:.4f} | {p_peer:.4f} | {p_ours / p_peer:.4f} | "
                     f"{best[0]:.4f} ({best[1]}) | {pbest[0]:.4f} ({pbest[1]}) |")
    return "\n".join(lines)


def _gap_lines(runs: list[dict], framework: str, dense_arm: str, peer_arm: str, ours: tuple[str, ...]) -> list[str]:
    """Per gradual setting: dense, the peer, our best arm among ``ours`` and the share of the gap it closes
    (means over the seeds every column ran: those of dense and the peer, or, when none of ``ours`` ran them all,
    the most of them that one arm ran)."""
    dense = _values(runs, dense_arm, "0")
    out = []
    for setting in ("50", "80", "90", "2:4"):
        peer = _values(runs, peer_arm, setting)
        common = set(dense) & set(peer)
        covered = {a: sorted(common & set(_values(runs, a, setting))) for a in ours}
        most = max((len(c) for c in covered.values()), default=0)
        if not most:
            continue
        seeds = next(c for c in covered.values() if len(c) == most)
        cands = [(float(np.mean([_values(runs, a, setting)[s] for s in seeds])), a) for a in ours
                 if set(seeds) <= set(covered[a])]
        d, p = float(np.mean([dense[s] for s in seeds])), float(np.mean([peer[s] for s in seeds]))
        best, arm = min(cands)
        out.append(f"| {framework} | {setting} | {d:.3f} | {p:.3f} ({peer_arm.rsplit('/', 1)[-1]}) | {best:.3f} "
                   f"({arm}) | {(p - best) / (p - d):.0%} | {len(seeds)} |")
    return out


def _keras_part(data: dict[str, Any]) -> str:
    """The Keras 3 runs (``keras/...`` arms, ``bench/lm/keras_runs.py``) beside the torch runs of the same seeds."""
    runs = data["runs"]
    keras = [r for r in runs if r["arm"].startswith("keras/")]
    if not keras:
        return ""
    rows = ["| arm | setting | Keras 3 | torch | Keras 3 - torch (paired) |", "|---|---|---|---|---|"]
    for arm, setting in sorted({(r["arm"], r["setting"]) for r in keras},
                               key=lambda a: (SETTING_ORDER.index(a[1]) if a[1] in SETTING_ORDER else 99, a[0])):
        torch_arm = arm[len("keras/"):]
        k, t = _values(runs, arm, setting), _values(runs, torch_arm, setting)
        pair = paired_line(runs, arm, torch_arm, setting)
        diff = pair.split(" | ")[2] if pair else ""
        rows.append(f"| {torch_arm} | {setting} | {_cell(list(k.values()))} | {_cell(list(t.values()))} | {diff} |")
    pairs = [p for p in (paired_line(runs, "keras/gradual/sr_ste", "keras/gradual/default", s)
                         for s in ("50", "80", "90", "2:4")) if p]
    text = (f"Keras 3 ({data.get('keras', '')}, backend {data.get('keras_backend', '')}): the same model, initial "
            "weights and batches (`bench/lm/keras_runs.py`), pruned by `sparsify_keras.PruningCallback`; bits per "
            "character beside the torch runs of the same seeds:\n\n" + "\n".join(rows))
    if pairs:
        text += ("\n\n| pair | setting | mean ± std | first better |\n|---|---|---|---|\n" + "\n".join(pairs))
    return text


def _tfkeras_part(data: dict[str, Any]) -> str:
    """The tf-keras runs (``tfkeras/...``, ``bench/lm/tfkeras_runs.py``): tfmot, the Keras peer, beside ours."""
    runs = data["runs"]
    arms = [a for a in ("tfkeras/dense", TFMOT, *(f"tfkeras/gradual/{a}" for a in OUR_GRADUAL))
            if any(r["arm"] == a for r in runs)]
    if TFMOT not in arms:
        return ""
    settings = [s for s in SETTING_ORDER if any(r["setting"] == s and r["arm"] in arms for r in runs)]
    rows = ["| arm | " + " | ".join("dense" if s == "0" else (s + "%" if s.isdigit() else s) for s in settings)
            + " |", "|---" * (len(settings) + 1) + "|"]
    for arm in arms:
        rows.append(f"| {arm} | " + " | ".join(_cell(list(_values(runs, arm, s).values())) for s in settings) + " |")
    pairs = [p for s in ("50", "80", "90", "2:4") for p in (
        paired_line(runs, "tfkeras/gradual/default", TFMOT, s), paired_line(runs, "keras/gradual/default", TFMOT, s),
        paired_line(runs, "keras/gradual/sr_ste", TFMOT, s),
        paired_line(runs, "keras/gradual/sr_ste_at_start", TFMOT, s),
        paired_line(runs, TFMOT, "gradual/torch.ao", s),
        paired_line(runs, "tfkeras/dense", "dense", "0") if s == "50" else None) if p]
    return (f"tf-keras ({data.get('tf_keras', '')}) with tfmot {data.get('tfmot', '')}: the same model, initial "
            "weights and batches (`bench/lm/tfkeras_runs.py`); tfmot's `prune_low_magnitude` on each pruned Dense with "
            "`PolynomialDecay(0, target, begin_step=start + 1, end_step=end + 1, power=3, frequency)` (its masks "
            "change between the same updates as ours), our `sparsify_tf.keras.PruningCallback` at the torch "
            "settings. SR-STE (straight-through) was run in Keras 3 only "
            "(rows above):\n\n" + "\n".join(rows)
            + "\n\n| pair | setting | mean ± std | first better |\n|---|---|---|---|\n" + "\n".join(pairs))


def render(data: dict[str, Any]) -> str:
    """Markdown for the ``bench_lm`` section of bench/RESULTS.md."""
    runs = data["runs"]
    seeds = sorted({r["seed"] for r in runs})
    corpus, model, train = data["corpus"], data["model"], data["train"]
    secs = [d["seconds"] for d in data["dense"].values()]
    parts = [
        f"Character-level GPT-2-shaped transformer ({model['n_layers']} layers, d_model {model['d_model']}, "
        f"{model['n_heads']} heads, context {model['context']}, vocab {corpus['vocab']}) on CPython "
        f"{corpus['python']}'s `pydoc_data/topics.py` ({corpus['characters']:,} characters, sha256 "
        f"`{corpus['sha256'][:16]}…`), last 10% held out. Dense training: {train['steps']} steps of "
        f"{train['batch_size']} x {model['context']} characters, 1 CPU thread, "
        + (f"{np.mean(secs):.0f} s per run" if secs else "no dense run here (--gradual-only)")
        + f" (torch {data['torch']}). One-shot on the trained model with "
        f"{data['calibration_windows']} calibration windows of the training text; the blocks' linear weights "
        f"are pruned (not embeddings or the tied head). Validation bits per character, mean ± std over "
        f"the seeds each cell ran, of {seeds} (lower is better).",
        _main_table([r for r in runs if not r["arm"].startswith("gradual/")]),
    ]
    if note := machines_note(runs):
        parts.insert(1, note)
    if ft := [r for r in runs if r["arm"] == "sparsegpt+distill_ft"]:
        parts.append(f"`sparsegpt+distill_ft`: our one-shot SparseGPT, then {ft[0].get('steps', '?')} steps of "
                     "fine-tuning with its zeros fixed, taught by the dense model of the seed (task loss + KL at "
                     "temperature 1, weight 1; AdamW, peak learning rate 3e-4; `bench/lm/finetune.py`): the "
                     "SparseGPT-then-distillation recipe, against llm-compressor's one-shot; `sparsegpt+ft`: the "
                     "same fine-tune without the teacher (task loss alone).")
    gradual = [r for r in runs if r["arm"].startswith("gradual/")]
    if gradual:
        parts.append("Gradual pruning while training (same initial weights and batches as the dense run; cubic "
                     "schedule from 10% to 70% of the steps, an update every 2.5%; unstructured or 2:4, every "
                     "layer of the blocks; `default`: local magnitude, `erk_wanda`: ERK scope + Wanda scores, "
                     "`sr_ste`: SR-STE (straight-through gradients, `pruned_decay=6e-4`, masks every step, "
                     "`monotone=False`), `sr_ste_at_start`: SR-STE with the whole target from the schedule's start "
                     "(`sparsity_decay_type=\"constant\"`, as its paper trains N:M), `rigl`/`erk_rigl`: RigL "
                     "regrowth (local or ERK scope), `sr_ste_distill`: SR-STE plus distillation from the trained "
                     "dense model of the seed (task loss + KL at temperature 1, weight 1; the teacher's own "
                     "training is not counted in the arm's steps), `torch.ao`: "
                     "WeightNormSparsifier at the same steps and values, 2:4 as 2 zeros per (1, 4) block):\n\n"
                     + _main_table(gradual + [r for r in runs if r["arm"] == "dense"]))
    pairs = [paired_line(runs, *p) for p in
             (("sparsegpt", "wanda", "50"), ("sparsegpt", "wanda", "2:4"), ("sparsegpt", "llmc_sparsegpt", "50"),
              ("sparsegpt", "llmc_sparsegpt", "2:4"), ("wanda", "llmc_wanda", "50"), ("wanda", "llmc_wanda", "2:4"),
              ("sparsegpt", "sparsegpt", "2:4+perm", "2:4"), ("sparsegpt", "sparsegpt", "2:4+aperm", "2:4"),
              ("sparsegpt", "llmc_sparsegpt", "2:4+aperm", "2:4"))]
    pairs += [paired_line(runs, "sparsegpt+distill_ft", b, t) for t in ("50", "60", "70", "2:4")
              for b in ("llmc_sparsegpt", "sparsegpt", "sparsegpt+ft")]
    pairs += [paired_line(runs, f"gradual/{a}", "gradual/torch.ao", t) for t in ("50", "80", "90", "2:4")
              for a in OUR_GRADUAL]
    pairs.append(paired_line(runs, "gradual/sr_ste_at_start", "gradual/sr_ste", "2:4"))
    pairs += [paired_line(runs, f"gradual/{a}", b, t) for t in ("50", "80", "90", "2:4") for a in TEACHER_GRADUAL
              for b in ("gradual/torch.ao", "gradual/sr_ste")]
    pairs += [paired_line(runs, f"keras/gradual/{a}", b, t) for t in ("50", "80", "90", "2:4") for a in TEACHER_GRADUAL
              for b in (TFMOT, "keras/gradual/sr_ste")]
    pairs = [p for p in pairs if p]
    if pairs:
        parts.append("Paired differences (bits/char, per seed; negative: the first is better):\n\n"
                     "| pair | setting | mean ± std | first better |\n|---|---|---|---|\n" + "\n".join(pairs))
    closed = _gap_lines(runs, "torch", "dense", "gradual/torch.ao", tuple(f"gradual/{a}" for a in OUR_GRADUAL))
    closed += _gap_lines(runs, "torch + teacher", "dense", "gradual/torch.ao",
                         tuple(f"gradual/{a}" for a in TEACHER_GRADUAL))
    closed += _gap_lines(runs, "Keras", "tfkeras/dense", TFMOT,
                         tuple(f"{k}/gradual/{a}" for k in ("keras", "tfkeras") for a in OUR_GRADUAL))
    closed += _gap_lines(runs, "Keras 3 + teacher", "tfkeras/dense", TFMOT,
                         tuple(f"keras/gradual/{a}" for a in TEACHER_GRADUAL))
    if closed:
        parts.append("Share of the gap between the peer and dense that our best gradual arm closes (means over "
                     "the seeds every column ran, bits/char; Keras: dense and tfmot in tf-keras, ours the best of "
                     "Keras 3 and tf-keras; `torch + teacher`, `Keras 3 + teacher`: with distillation from the dense model of the seed, Keras 3 on JAX):\n\n| framework | setting | dense | peer | ours best | share closed | "
                     "seeds |\n|---|---|---|---|---|---|---|\n" + "\n".join(closed))
    for part in (_keras_part(data), _tfkeras_part(data)):
        if part:
            parts.append(part)
    if any(r["arm"].startswith("llmc_") for r in runs):
        parts.append(f"Against llm-compressor ({data.get('peer_versions', '')}), per-character perplexity "
                     f"`2 ** bpc`, mean over seeds:\n\n" + _ppl_table(runs) + "\n\n"
                     + PEER_NOTES.format(diff=max(d.get("export_max_abs_diff", 0.0) for d in data["dense"].values())))
    if data.get("peer_error"):
        err = data["peer_error"]
        parts.append("llm-compressor could not run:\n\n```text\n" + err["command"] + "\n" + "\n".join(err["error"])
                     + "\n```")
    if data.get("commands"):
        parts.append("Commands: " + "; ".join(f"`{c}`" for c in data["commands"]))
    return "\n\n".join(parts)
