"""bench/bench_lm.py end to end on a tiny configuration (a few training steps), and its building blocks."""
from __future__ import annotations

import doctest
import json
import math
import platform
import re
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from bench import bench_lm  # noqa: E402
from bench.lm import data as lm_data, model as lm_model, oneshot as lm_oneshot, peer as lm_peer  # noqa: E402
from bench.lm import permutation as lm_permutation, report as lm_report, plot as lm_plot  # noqa: E402
from bench.lm import records as lm_records, train as lm_train, gradual as lm_gradual  # noqa: E402
from bench.lm import finetune as lm_finetune  # noqa: E402
from bench._results import cpu_model  # noqa: E402
from sparsify import exact_prune_count  # noqa: E402

TINY = ["--seeds", "0", "--steps", "5", "--d-model", "32", "--layers", "1", "--calib", "16", "--val-limit", "4",
        "--no-write"]


@pytest.mark.parametrize("module", [lm_data, lm_model, lm_train, lm_oneshot, lm_report, lm_peer, lm_permutation,
                                    lm_gradual, lm_records, lm_plot, lm_finetune],
                         ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.slow
def test_short_run_records_every_arm_and_reports(tmp_path):
    out = tmp_path / "lm.json"
    args = TINY + ["--dense", "--oneshot", "--settings", "50", "2:4+perm", "--out-json", str(out),
                   "--cache", str(tmp_path / "cache")]
    data = bench_lm.main(args)
    assert json.loads(out.read_text())["runs"] == data["runs"]
    assert sorted((r["arm"], r["setting"]) for r in data["runs"]) == sorted(
        [("dense", "0")] + [(a, s) for a in ("magnitude", "wanda", "sparsegpt") for s in ("50", "2:4+perm")])
    assert all(math.isfinite(r["bpc"]) and r["bpc"] > 0 for r in data["runs"])
    assert data["corpus"]["sha256"] == lm_data.load_corpus().sha256
    assert data["corpus"]["python"] == platform.python_version()
    table = lm_report.render(data)
    assert "| sparsegpt |" in table and "2:4+perm" in table
    again = bench_lm.main(args)                # the dense model comes from the cache: same figures
    assert [r["bpc"] for r in again["runs"]] == [r["bpc"] for r in data["runs"]]


def test_gradual_arms_reach_their_target(tmp_path):
    args = TINY + ["--gradual", "--gradual-targets", "50", "--out-json", str(tmp_path / "lm.json"),
                   "--cache", str(tmp_path / "cache")]
    data = bench_lm.main(args)
    assert sorted(r["arm"] for r in data["runs"]) == ["dense", "gradual/default", "gradual/erk_rigl",
                                                      "gradual/erk_wanda", "gradual/rigl", "gradual/sr_ste",
                                                      "gradual/sr_ste_at_start", "gradual/torch.ao"]
    assert "| gradual/erk_wanda |" in lm_report.render(data) and "| gradual/erk_rigl |" in lm_report.render(data)


def test_an_arm_that_cannot_run_a_setting_is_refused_before_training(tmp_path, capsys):
    out = tmp_path / "lm.json"
    with pytest.raises(SystemExit):
        bench_lm.main(TINY + ["--gradual", "--gradual-targets", "90", "2:4", "--gradual-arms", "default", "rigl",
                              "--out-json", str(out), "--cache", str(tmp_path / "cache")])
    assert "--gradual-arms rigl at --gradual-targets 2:4: regrowth='rigl' works on single weights" \
        in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "cache").exists()


def test_gradual_two_of_four_arms_end_two_of_four():
    """At setting 2:4 torch.ao (2 zeros per (1, 4) block) and both SR-STE arms end with exactly two zeros in every
    four consecutive weights of each pruned linear; ``sr_ste_at_start`` has them from the start step (2 of 20) on,
    the gradual ``sr_ste`` not yet."""
    cfg = lm_model.LMConfig(vocab_size=12, d_model=16, n_layers=1, context=8)

    def two_of_four(model):         # the weights the forward pass sees (straight-through keeps dense ones apart)
        weights = [m.weight for name, m in model.named_modules() if re.search(lm_model.PRUNABLE, f"{name}.weight")]
        assert len(weights) == 6
        return all(((w.detach().reshape(-1, 4) == 0).sum(1) == 2).all().item() for w in weights)

    for arm in ("torch.ao", "sr_ste", "sr_ste_at_start"):
        model = lm_model.CharLM(cfg)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        after_step, finish = lm_gradual.gradual_attach(arm, "2:4", 20)(model, opt)
        x = torch.randint(0, 12, (4, 8))
        for step in range(1, 21):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
            opt.step()
            after_step(step)
            if step == 2 and arm != "torch.ao":
                assert two_of_four(model) == (arm == "sr_ste_at_start"), arm
        finish()
        for name, w in model.named_parameters():
            if re.search(lm_model.PRUNABLE, name):
                zeros = (w.detach().reshape(-1, 4) == 0).sum(1)
                assert (zeros == 2).all(), (arm, name)
    with pytest.raises(ValueError, match="--gradual-targets: a percent in \\[0, 100\\) or '2:4', got '4x1'"):
        lm_gradual.setting_target("4x1")


def test_corpus_is_the_joined_topics():
    corpus = lm_data.load_corpus()
    if platform.python_version() == "3.11.7":
        assert len(corpus.text) == 464_970
    assert corpus.valid.size == len(corpus.text) // 10
    assert "".join(corpus.chars[i] for i in corpus.valid[:50]) == corpus.text[-corpus.valid.size:][:50]


def test_initial_weights_come_from_the_seed():
    cfg = lm_model.LMConfig(vocab_size=7, d_model=8, n_layers=2, n_heads=2, context=4)
    a, b = lm_model.init_weights(cfg, 3), lm_model.init_weights(cfg, 4)
    assert all(np.array_equal(a[k], lm_model.init_weights(cfg, 3)[k]) for k in a)
    assert not np.array_equal(a["blocks.0.q.weight"], b["blocks.0.q.weight"])
    assert np.std(a["blocks.1.fc2.weight"]) < np.std(a["blocks.1.fc1.weight"])  # residual projections scaled
    model = lm_model.build_model(cfg, 3)
    assert all(np.array_equal(p.detach().numpy(), a[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize("arm", sorted(lm_oneshot.ARMS))
@pytest.mark.parametrize("setting", ["60", "2:4"])
def test_arms_prune_exactly_the_blocks(arm, setting):
    corpus = lm_data.load_corpus()
    cfg = lm_model.LMConfig(vocab_size=corpus.vocab_size, d_model=32, n_layers=1, n_heads=2, context=16)
    dense = lm_model.build_model(cfg, 0)
    calib = lm_oneshot.calibration_batches(lm_data.calibration_windows(corpus, 0, 16, 16), batch_size=8)
    base, _ = lm_oneshot.permuted_base(dense, setting, calib)
    model, _ = lm_oneshot.prune_arm(base, arm, setting, calib)
    for name, p in model.named_parameters():
        zeros = int((p == 0).sum())
        if name.endswith("weight") and name.startswith("blocks.0.") and ".ln" not in name:
            if setting == "2:4":
                assert (p.reshape(p.shape[0], -1, 4).ne(0).sum(-1) == 2).all(), name
            elif arm == "wanda":                   # compared within output rows, as in the paper
                assert (p.eq(0).sum(1) == exact_prune_count(0.6, p.shape[1])).all(), name
            else:
                assert zeros == exact_prune_count(0.6, p.numel()), name
        elif name in ("wte.weight", "wpe.weight"):
            assert zeros == 0


def test_gpt2_export_computes_the_same_logits(tmp_path):
    pytest.importorskip("transformers")
    corpus = lm_data.load_corpus()
    model = lm_model.build_model(lm_model.LMConfig(vocab_size=corpus.vocab_size, d_model=32, n_layers=2,
                                                   n_heads=4, context=16), 0)
    hf = lm_peer.build_gpt2(model, str(tmp_path))
    x = torch.from_numpy(lm_data.calibration_windows(corpus, 0, 4, 16))
    with torch.no_grad():
        assert float((hf(input_ids=x).logits - model(x)).abs().max()) < 1e-5


def test_gradual_alone_reuses_the_recorded_dense_figures(tmp_path):
    out, cache = tmp_path / "lm.json", tmp_path / "cache"
    args = TINY + ["--gradual", "--gradual-targets", "50", "--gradual-arms", "default", "--out-json", str(out),
                   "--cache", str(cache)]
    first = bench_lm.main(args)
    shutil.rmtree(cache)
    again = bench_lm.main(args)             # no dense training: nothing is cached anew
    assert not cache.exists()
    assert again["dense"] == first["dense"]
    assert [r["bpc"] for r in again["runs"]] == [r["bpc"] for r in first["runs"]]
    longer = bench_lm.main(args + ["--steps", "7"])
    assert cache.exists() and longer["train"]["steps"] == 7   # other settings: the dense model is trained


def test_gradual_only_trains_no_dense_model_unless_an_arm_needs_its_teacher(tmp_path):
    """``--gradual-only`` (the equal-compute arm: SR-STE over the teacher's and the student's steps): no dense
    run of the seed, nothing cached; a teacher arm still trains the dense model it is taught by."""
    out, cache = tmp_path / "lm.json", tmp_path / "cache"
    args = TINY + ["--gradual", "--gradual-only", "--gradual-targets", "50", "--out-json", str(out),
                   "--cache", str(cache)]
    data = bench_lm.main(args + ["--gradual-arms", "sr_ste"])
    assert not cache.exists() and data["dense"] == {}
    assert [r["arm"] for r in data["runs"]] == ["gradual/sr_ste"]
    data = bench_lm.main(args + ["--gradual-arms", "sr_ste_distill"])
    assert cache.exists() and "0" in data["dense"]
    assert [r["arm"] for r in data["runs"]] == ["gradual/sr_ste", "gradual/sr_ste_distill"]


def test_report_shows_the_share_of_the_gap_closed_and_the_keras_runs():
    runs = [{"seed": s, "arm": a, "setting": st, "bpc": b + 0.01 * s} for s in (0, 1) for a, st, b in
            [("dense", "0", 1.8), ("gradual/torch.ao", "90", 1.9), ("gradual/default", "90", 1.9),
             ("gradual/sr_ste", "90", 1.875), ("keras/dense", "0", 1.81), ("keras/gradual/sr_ste", "90", 1.88),
             ("tfkeras/dense", "0", 1.82), ("tfkeras/gradual/tfmot", "90", 1.93),
             ("tfkeras/gradual/default", "90", 1.925)]]
    data = {"runs": runs, "corpus": {"vocab": 11, "python": "3.11", "characters": 9, "sha256": "0" * 64},
            "model": {"n_layers": 1, "d_model": 16, "n_heads": 2, "context": 8}, "train": {"steps": 3, "batch_size": 2},
            "dense": {"0": {"seconds": 1.0}}, "torch": "x", "calibration_windows": 4, "keras": "3.15.1",
            "keras_backend": "jax"}
    text = lm_report.render(data)
    assert "| torch | 90 | 1.805 | 1.905 (torch.ao) | 1.880 (gradual/sr_ste) | 25% | 2 |" in text
    assert "| Keras | 90 | 1.825 | 1.935 (tfmot) | 1.885 (keras/gradual/sr_ste) | 45% | 2 |" in text
    assert "| tfkeras/gradual/tfmot |  | 1.935 ± 0.007 |" in text
    assert "| tfkeras/gradual/default - tfkeras/gradual/tfmot | 90 | -0.0050 ± 0.0000 | 2/2 |" in text
    assert "| tfkeras/gradual/tfmot - gradual/torch.ao | 90 | +0.0300 ± 0.0000 | 0/2 |" in text
    assert "| gradual/sr_ste | 90 | 1.885 ± 0.007 | 1.880 ± 0.007 | +0.0050 ± 0.0000 |" in text
    assert "| dense | 0 | 1.815 ± 0.007 | 1.805 ± 0.007 | +0.0100 ± 0.0000 |" in text
    assert "backend jax" in text


def test_runs_name_their_processor_and_the_report_says_when_there_are_two():
    data = {"runs": []}
    lm_records.record_run(data, 0, "gradual/sr_ste", "2:4", 1.81, {"seconds": 1.0})
    assert data["runs"][0]["cpu"] == cpu_model()
    assert lm_report.machines_note(data["runs"]) == ""            # one machine: nothing to say
    older = [{"seed": s, "arm": "gradual/torch.ao", "setting": "2:4", "bpc": 1.82} for s in (0, 1)]
    note = lm_report.machines_note(older + data["runs"])
    assert note.startswith("Runs from 2 machines") and f"{cpu_model()}: gradual/sr_ste at 2:4 (1 run)" in note
    assert note.endswith("the other runs on an earlier machine whose processor was not recorded.")


def test_teacher_arm_trains_with_the_dense_model_and_the_report_shows_it(tmp_path):
    args = TINY + ["--gradual", "--gradual-targets", "50", "--gradual-arms", "sr_ste_distill", "--out-json",
                   str(tmp_path / "lm.json"), "--cache", str(tmp_path / "cache")]
    data = bench_lm.main(args)
    assert sorted(r["arm"] for r in data["runs"]) == ["dense", "gradual/sr_ste_distill"]
    assert all(math.isfinite(r["bpc"]) for r in data["runs"])
    with pytest.raises(ValueError, match="arm 'sr_ste_distill': a teacher is needed"):
        lm_gradual.gradual_attach("sr_ste_distill", "50", 10)
    runs = [{"seed": s, "arm": a, "setting": "80", "bpc": b + 0.01 * s} for s in (0, 1) for a, b in
            [("gradual/torch.ao", 1.9), ("gradual/sr_ste", 1.89), ("gradual/sr_ste_distill", 1.87)]]
    runs += [{"seed": s, "arm": "dense", "setting": "0", "bpc": 1.8 + 0.01 * s} for s in (0, 1)]
    text = lm_report.render({**data, "runs": runs})
    assert "| torch | 80 | 1.805 | 1.905 (torch.ao) | 1.895 (gradual/sr_ste) | 10% | 2 |" in text
    assert "| torch + teacher | 80 | 1.805 | 1.905 (torch.ao) | 1.875 (gradual/sr_ste_distill) | 30% | 2 |" in text
    assert "| gradual/sr_ste_distill - gradual/sr_ste | 80 | -0.0200 ± 0.0000 | 2/2 |" in text
    more = [{"seed": 2, "arm": a, "setting": s, "bpc": b} for a, s, b in
            [("dense", "0", 1.9), ("gradual/torch.ao", "80", 2.0), ("gradual/sr_ste", "80", 1.95)]]
    text = lm_report.render({**data, "runs": runs + more})      # the teacher ran 2 of the 3 seeds
    assert "| torch | 80 | 1.837 | 1.937 (torch.ao) | 1.913 (gradual/sr_ste) | 23% | 3 |" in text
    assert "| torch + teacher | 80 | 1.805 | 1.905 (torch.ao) | 1.875 (gradual/sr_ste_distill) | 30% | 2 |" in text


def test_oneshot_then_distilled_finetune_keeps_the_oneshot_zeros_and_learns(tmp_path):
    args = TINY + ["--finetune", "--finetune-steps", "6", "--settings", "50", "2:4", "--out-json",
                   str(tmp_path / "lm.json"), "--cache", str(tmp_path / "cache")]
    data = bench_lm.main(args)
    runs = {(r["arm"], r["setting"]): r for r in data["runs"]}
    assert sorted(runs) == [("dense", "0"), ("sparsegpt+distill_ft", "2:4"), ("sparsegpt+distill_ft", "50"),
                            ("sparsegpt+ft", "2:4"), ("sparsegpt+ft", "50")]
    assert runs[("sparsegpt+distill_ft", "50")]["steps"] == 6
    corpus = lm_data.load_corpus()
    cfg = lm_model.LMConfig(vocab_size=corpus.vocab_size, d_model=32, n_layers=1)
    dense, _ = lm_train.train_dense(cfg, corpus, 0, 5)
    calib = lm_oneshot.calibration_batches(lm_data.calibration_windows(corpus, 0, 16, cfg.context))
    pruned, _ = lm_oneshot.prune_arm(dense, "sparsegpt", "2:4", calib)
    before = {n: p.detach().clone() for n, p in pruned.named_parameters()}
    tuned, info = lm_finetune.oneshot_finetune(pruned, corpus, 0, "2:4", 4, teacher=dense)
    assert info["kept_zeros"] and info["steps"] == 4
    for name, p in tuned.named_parameters():
        if re.search(lm_model.PRUNABLE, name):
            assert torch.equal(p == 0, before[name] == 0), name       # the one-shot zeros, no more, no fewer
    assert any(not torch.equal(p, before[n]) for n, p in tuned.named_parameters())   # it trained
    assert not any(p.requires_grad for p in dense.parameters())      # the teacher stayed frozen
    text = lm_report.render(data)
    assert "| sparsegpt+distill_ft |" in text and "then 6 steps of fine-tuning" in text
    assert "| sparsegpt+distill_ft - sparsegpt+ft | 50 |" in text
    with pytest.raises(SystemExit):
        bench_lm.main(TINY + ["--finetune", "--settings", "2:4+perm", "--out-json", str(tmp_path / "x.json")])


def test_merge_brings_runs_of_parallel_files_into_the_results_file(tmp_path, capsys):
    base = {"model": {"d": 1}, "train": {"steps": 3}, "runs": [{"seed": 0, "arm": "dense", "setting": "0", "bpc": 1.8},
                                                               {"seed": 0, "arm": "gradual/sr_ste", "setting": "80",
                                                                "bpc": 1.9}], "commands": ["a"]}
    part = {"model": {"d": 1}, "train": {"steps": 3}, "commands": ["b"],
            "runs": [{"seed": 0, "arm": "dense", "setting": "0", "bpc": 1.7},
                     {"seed": 0, "arm": "gradual/sr_ste_distill", "setting": "80", "bpc": 1.85}]}
    into, src, other = tmp_path / "r.json", tmp_path / "p.json", tmp_path / "o.json"
    into.write_text(json.dumps(base))
    src.write_text(json.dumps(part))
    other.write_text(json.dumps({**part, "train": {"steps": 4}}))
    lm_records.main(["--merge", str(src), "--into", str(into)])
    got = json.loads(into.read_text())
    assert [(r["arm"], r["bpc"]) for r in got["runs"]] == [("dense", 1.8), ("gradual/sr_ste", 1.9),
                                                          ("gradual/sr_ste_distill", 1.85)]
    assert got["commands"] == ["a", "b"]
    with pytest.raises(SystemExit, match="holds runs of another model or training"):
        lm_records.main(["--merge", str(other), "--into", str(into)])


def test_default_teacher_arms_take_their_teacher_at_start_step_or_at_prune():
    """``sr_ste_default_teacher``: ``distillation={}``, the teacher the model at the pruning start_step (issue 58);
    ``sr_ste_init_teacher``: the model when prune() is called, as the default did before. Neither needs the
    trained dense model."""
    assert not lm_gradual.needs_teacher("sr_ste_default_teacher") and lm_gradual.needs_teacher("sr_ste_distill")
    with pytest.raises(ValueError, match="arm 'sr_ste_default_teacher': a teacher is not used"):
        lm_gradual.gradual_attach("sr_ste_default_teacher", "90", 40, torch.nn.Linear(1, 1))
    cfg = lm_model.LMConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2, context=8)
    x = torch.randint(0, 20, (2, 8))
    for arm in ("sr_ste_default_teacher", "sr_ste_init_teacher"):
        model = lm_model.build_model(cfg, 0)
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        opt = torch.optim.AdamW(model.parameters())
        _, _, term = lm_gradual.gradual_attach(arm, "90", 40)(model, opt)
        distiller = term.__self__.distiller
        if arm == "sr_ste_default_teacher":
            assert (distiller.start_step, distiller.teacher) == (lm_gradual.window(40)[0], None)
            assert float(term(x, model(x)).detach()) == 0.0
        else:
            assert all(torch.equal(v, initial[k]) for k, v in distiller.teacher.state_dict().items())


def test_decaying_default_teacher_arms_weigh_the_term_from_1_to_0_over_the_pruning_window():
    """``sr_ste_default_teacher_decay`` (``_half``): the default teacher, its weight linear from 1 at the pruning
    start_step to 0 at its end_step (halfway through the window), as the attached pruner's distiller computes it."""
    start, end, _ = lm_gradual.window(600)
    assert lm_gradual.distill_settings("sr_ste_default_teacher_decay", 600) == {
        "weight_schedule": "linear", "init_weight": 1.0, "weight": 0.0, "start_step": start, "end_step": end}
    assert lm_gradual.distill_settings("sr_ste_distill", 600) == lm_gradual.DISTILL_ARMS["sr_ste_distill"]
    with pytest.raises(ValueError, match="arm: one of the teacher arms .* got 'sr_ste'"):
        lm_gradual.distill_settings("sr_ste", 600)
    cfg = lm_model.LMConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2, context=8)
    for arm, zero_at, half_at in (("sr_ste_default_teacher_decay", 420, 240),
                                  ("sr_ste_default_teacher_decay_half", 240, 150)):
        model = lm_model.build_model(cfg, 0)
        _, _, term = lm_gradual.gradual_attach(arm, "90", 600)(model, torch.optim.AdamW(model.parameters()))
        distiller = term.__self__.distiller
        assert (distiller.start_step, distiller.teacher, distiller.config.teacher) == (60, None, "dense_at_start")
        assert [distiller.config.weight_at(s) for s in (60, half_at, zero_at, 599)] == [1.0, 0.5, 0.0, 0.0], arm


def test_the_default_teacher_arm_gets_the_library_default_weight_and_the_constant_arm_weight_1():
    """``sr_ste_default_teacher``: ``distillation={}``, whose weight is the library's fade (1 at the pruning
    start_step 60, 0 at 60 + (420 - 60) // 2 = 240: the ``_decay_half`` arm's ramp); ``..._constant``: weight 1."""
    cfg = lm_model.LMConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2, context=8)
    weights = {}
    for arm in ("sr_ste_default_teacher", "sr_ste_default_teacher_decay_half", "sr_ste_default_teacher_constant"):
        assert not lm_gradual.needs_teacher(arm)
        model = lm_model.build_model(cfg, 0)
        _, _, term = lm_gradual.gradual_attach(arm, "90", 600)(model, torch.optim.AdamW(model.parameters()))
        weights[arm] = [term.__self__.distiller.config.weight_at(s) for s in (60, 150, 240, 599)]
    assert lm_gradual.DISTILL_ARMS["sr_ste_default_teacher"] == {}
    assert weights["sr_ste_default_teacher"] == weights["sr_ste_default_teacher_decay_half"] == [1.0, 0.5, 0.0, 0.0]
    assert weights["sr_ste_default_teacher_constant"] == [1.0, 1.0, 1.0, 1.0]
