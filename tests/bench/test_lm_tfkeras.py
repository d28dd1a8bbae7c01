"""bench/lm/tfkeras_runs.py: the tf-keras LM computes torch's logits, follows torch's dense run, prunes to the target
with our tf-keras callback and (where tfmot is importable, ``TFMOT_PATH``) with tfmot.

Each test runs in a child process (``TF_USE_LEGACY_KERAS=1`` must be set before TensorFlow is imported).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

pytest.importorskip("torch")
if importlib.util.find_spec("tf_keras") is None:
    pytest.skip("needs tf-keras", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--steps", "6", "--batch-size", "4", "--d-model", "16", "--layers", "1", "--context", "8",
        "--val-limit", "4"]
TFMOT_PATH = os.environ.get("TFMOT_PATH", "")


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


@pytest.fixture(scope="module")
def checks(tmp_path_factory) -> dict:
    """One child process: logits of both frameworks, the doctests, pruned and dense short runs (and torch's
    dense run), and the CLI's answer to an ``--out-json`` of another configuration."""
    other = tmp_path_factory.mktemp("tfkeras") / "other.json"
    other.write_text(json.dumps({"runs": [], "model": {"d_model": 32}, "train": {"steps": 6, "batch_size": 4}}))
    before = other.read_text()
    code = textwrap.dedent(f"""
        import doctest, json
        import numpy as np, torch
        from bench.lm import tfkeras_runs as lm_tfkeras
        from bench.lm.data import load_corpus, validation_windows
        from bench.lm.model import LMConfig, bits_per_char, build_model
        from bench.lm.train import train_dense

        res = {{}}
        cfg = LMConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=4, context=8)
        ours, ref = lm_tfkeras.build_tfkeras_model(cfg, 3), build_model(cfg, 3)
        x = np.random.default_rng(0).integers(0, 11, (3, 8))
        res["logits"] = {{}}
        for t in (8, 5):
            a = np.asarray(ours(x[:, :t].astype("int32")))
            b = ref(torch.from_numpy(x[:, :t])).detach().numpy()
            res["logits"][t] = [float(np.abs(a - b).max()), float(np.abs(b).max())]
        doc = doctest.testmod(lm_tfkeras)
        res["doctest"] = [doc.attempted, doc.failed]

        corpus = load_corpus()
        cfg = LMConfig(vocab_size=corpus.vocab_size, d_model=16, n_layers=1, context=8)
        val = validation_windows(corpus, cfg.context, limit=8)
        res["pruned"] = {{}}
        arms = ["default"] + (["tfmot"] if {bool(TFMOT_PATH)!r} else [])
        if {bool(TFMOT_PATH)!r}:
            import sys
            sys.path.append({TFMOT_PATH!r})
        for arm in arms:
            model, info = lm_tfkeras.train_tfkeras(cfg, corpus, 0, 6, arm, "50", batch_size=4)
            zeros = {{k: float((v == 0).mean()) for k, v in lm_tfkeras.pruned_kernels(model).items()}}
            others = [float((np.asarray(model.wte.embeddings) == 0).mean())]
            res["pruned"][arm] = {{"steps": info["steps"], "sparsity": info["sparsity"], "zeros": zeros,
                                   "others": others, "bpc": lm_tfkeras.bits_per_char_tfkeras(model, *val)}}
        model, info = lm_tfkeras.train_tfkeras(cfg, corpus, 0, 6, "dense", batch_size=4)
        ref, ref_info = train_dense(cfg, corpus, 0, 6, batch_size=4)
        res["dense"] = {{"bpc": [lm_tfkeras.bits_per_char_tfkeras(model, *val), bits_per_char(ref, *val)]}}
        try:
            lm_tfkeras.train_tfkeras(cfg, corpus, 0, 6, "sr_ste", "50", batch_size=4)
        except ValueError as exc:
            res["sr_ste"] = str(exc)
        try:
            lm_tfkeras.main(["--out-json", {str(other)!r}, "--arms", "dense", *{TINY!r}])
        except SystemExit as exc:
            res["refusal"] = str(exc)
        print(json.dumps(res))
        """)
    res = json.loads(_run(["-c", code]).stdout.strip().splitlines()[-1])
    res["other_unchanged"] = other.read_text() == before
    return res


def test_logits_equal_torch_and_docstring_examples(checks):
    for t, (diff, scale) in checks["logits"].items():
        assert diff < 1e-5 and scale > 0.1, (t, diff, scale)
    assert checks["doctest"][0] > 0 and checks["doctest"][1] == 0


def test_our_callback_prunes_the_block_kernels_to_the_target(checks):
    run = checks["pruned"]["default"]
    names = {f"block_0/{n}" for n in ("q", "k", "v", "o", "fc1", "fc2")}
    assert run["steps"] == 6 and run["sparsity"] == 0.5
    assert run["zeros"] == {n: 0.5 for n in names} and run["others"] == [0.0]
    assert 0 < run["bpc"] < 10


@pytest.mark.skipif(not TFMOT_PATH, reason="tfmot is a peer, not a dependency: set TFMOT_PATH to a folder holding it")
def test_tfmot_prunes_the_same_kernels_to_the_target(checks):
    run = checks["pruned"]["tfmot"]
    assert run["steps"] == 6 and run["sparsity"] == 0.5 and set(run["zeros"].values()) == {0.5}
    assert run["others"] == [0.0] and 0 < run["bpc"] < 10


def test_dense_run_follows_torch(checks):
    bpc, ref = checks["dense"]["bpc"]
    assert bpc == pytest.approx(ref, rel=1e-4)


def test_straight_through_arms_are_refused_with_the_reason(checks):
    assert "got 'sr_ste' (straight-through gradients: Keras 3 or torch only" in checks["sr_ste"]


def test_cli_refuses_another_configuration(checks):
    assert "holds runs of model {'d_model': 32}" in checks["refusal"]
    assert "use another --out-json" in checks["refusal"] and checks["other_unchanged"]


def test_cli_appends_records(tmp_path):
    out = tmp_path / "tfkeras.json"
    done = _run(["-m", "bench.lm.tfkeras_runs", "--seeds", "0", "--targets", "50", "--arms", "dense", "default",
                 "--out-json", str(out), *TINY])
    assert "tfkeras/gradual/default" in done.stdout
    data = json.loads(out.read_text())
    assert data["tf_keras"].startswith("2.") and data["model"]["d_model"] == 16
    assert sorted((r["seed"], r["arm"], r["setting"]) for r in data["runs"]) == [
        (0, "tfkeras/dense", "0"), (0, "tfkeras/gradual/default", "50")]
    assert [r["sparsity"] for r in data["runs"] if r["arm"] == "tfkeras/gradual/default"] == [0.5]
