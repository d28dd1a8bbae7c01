"""bench/lm/keras_runs.py: the Keras 3 LM computes torch's logits, trains on torch's batches, prunes to the target.

Each test runs Keras in a child process under ``KERAS_BACKEND=jax`` (the backend is fixed when Keras is
first imported); skipped where jax or Keras is missing.
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
if importlib.util.find_spec("jax") is None or importlib.util.find_spec("keras") is None:
    pytest.skip("needs jax and Keras 3", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--steps", "6", "--batch-size", "4", "--d-model", "16", "--layers", "1", "--context", "8",
        "--val-limit", "4"]


def _run(args: list[str], backend: str = "jax", check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


def _script(code: str) -> dict:
    """Run ``code`` (which prints one JSON line last) under Keras/JAX; the parsed line."""
    return json.loads(_run(["-c", textwrap.dedent(code)]).stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def checks(tmp_path_factory) -> dict:
    """One child process: logits of both frameworks, the doctests, a pruned and a dense short run (and
    torch's dense run), and the CLI's answer to an ``--out-json`` of another configuration."""
    other = tmp_path_factory.mktemp("keras") / "other.json"
    other.write_text(json.dumps({"runs": [], "model": {"d_model": 32}, "train": {"steps": 6, "batch_size": 4}}))
    before = other.read_text()
    res = _script(f"""
        import doctest, json
        import numpy as np, torch
        from bench.lm import keras_runs as lm_keras
        from bench.lm.data import load_corpus, validation_windows
        from bench.lm.model import LMConfig, bits_per_char, build_model
        from bench.lm.train import train_dense
        from sparsify_keras import find_prunable_weights

        res = {{}}
        cfg = LMConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=4, context=8)
        keras_model, torch_model = lm_keras.build_keras_model(cfg, 3), build_model(cfg, 3)
        x = np.random.default_rng(0).integers(0, 11, (3, 8))
        res["logits"] = {{}}
        for t in (8, 5):                          # a full window and a shorter one (positions 0..4)
            ours = np.asarray(keras_model(x[:, :t].astype("int32")))
            ref = torch_model(torch.from_numpy(x[:, :t])).detach().numpy()
            res["logits"][t] = [float(np.abs(ours - ref).max()), float(np.abs(ref).max())]
        doc = doctest.testmod(lm_keras)
        res["doctest"] = [doc.attempted, doc.failed]

        corpus = load_corpus()
        cfg = LMConfig(vocab_size=corpus.vocab_size, d_model=16, n_layers=1, context=8)
        val = validation_windows(corpus, cfg.context, limit=8)
        config = lm_keras.gradual_config("default", "50", 6)
        model, info = lm_keras.train_keras(cfg, corpus, 0, 6, batch_size=4, config=config)
        zeros = {{w.path: float((np.asarray(w.variable) == 0).mean()) for w in find_prunable_weights(model)}}
        res["pruned"] = {{"end_step": config["end_step"], "steps": info["steps"], "sparsity": info["sparsity"],
                          "zeros": zeros, "bpc": lm_keras.bits_per_char_keras(model, *val)}}
        model, info = lm_keras.train_keras(cfg, corpus, 0, 6, batch_size=4)
        ref, ref_info = train_dense(cfg, corpus, 0, 6, batch_size=4)
        res["dense"] = {{"loss": [info["final_loss"], ref_info["final_loss"]],
                         "bpc": [lm_keras.bits_per_char_keras(model, *val), bits_per_char(ref, *val)]}}
        try:
            lm_keras.main(["--out-json", {str(other)!r}, *{TINY!r}])
        except SystemExit as exc:
            res["refusal"] = str(exc)
        print(json.dumps(res))
        """)
    res["other_unchanged"] = other.read_text() == before
    return res


def test_logits_equal_torch_and_docstring_examples(checks):
    for t, (diff, scale) in checks["logits"].items():
        assert diff < 1e-5 and scale > 0.1, (t, diff, scale)
    assert checks["doctest"][0] > 0 and checks["doctest"][1] == 0


def test_train_keras_prunes_to_target_and_follows_torch(checks):
    """A few steps pruned to 50% (update points at steps 0..4): every kernel ends exactly half zeros; the
    dense run's loss and validation bpc match torch's ``train_dense`` on the same batches."""
    pruned = {f"block_0/{n}/kernel" for n in ("q", "k", "v", "o", "fc1", "fc2")}
    run = checks["pruned"]
    assert run["end_step"] == 4 and run["steps"] == 6
    assert run["sparsity"] == {**{p: 0.5 for p in pruned}, "total": 0.5}
    assert {p: z for p, z in run["zeros"].items() if p in pruned} == {p: 0.5 for p in pruned}
    assert all(z < 0.01 for p, z in run["zeros"].items() if p not in pruned)     # embeddings untouched
    assert 0 < run["bpc"] < 10
    (loss, ref_loss), (bpc, ref_bpc) = checks["dense"]["loss"], checks["dense"]["bpc"]
    assert loss == pytest.approx(ref_loss, rel=1e-5) and bpc == pytest.approx(ref_bpc, rel=1e-5)


def test_cli_refuses_another_configuration(checks):
    assert "holds runs of model {'d_model': 32}" in checks["refusal"]
    assert "use another --out-json" in checks["refusal"] and checks["other_unchanged"]


def test_cli_appends_records(tmp_path):
    out = tmp_path / "keras.json"
    cache = tmp_path / "cache"
    args = ["-m", "bench.lm.keras_runs", "--seeds", "0", "--targets", "50", "--arms", "dense", "sr_ste",
            "sr_ste_distill", "--out-json", str(out), "--cache", str(cache), *TINY]
    done = _run(args)
    assert "keras/gradual/sr_ste" in done.stdout
    data = json.loads(out.read_text())
    assert data["keras_backend"] == "jax" and data["keras"].startswith("3.")
    assert data["model"]["d_model"] == 16 and data["train"] == {"steps": 6, "batch_size": 4}
    assert sorted((r["seed"], r["arm"], r["setting"]) for r in data["runs"]) == [
        (0, "keras/dense", "0"), (0, "keras/gradual/sr_ste", "50"), (0, "keras/gradual/sr_ste_distill", "50")]
    for run in data["runs"]:
        assert 0 < run["bpc"] < 10 and run["seconds"] > 0
    by_arm = {r["arm"]: r for r in data["runs"]}
    assert by_arm["keras/gradual/sr_ste"]["sparsity"] == by_arm["keras/gradual/sr_ste_distill"]["sparsity"] == 0.5
    # the teacher (the dense arm's model, trained once and cached) changes the SR-STE run
    assert by_arm["keras/gradual/sr_ste_distill"]["bpc"] != by_arm["keras/gradual/sr_ste"]["bpc"]
    key = "keras_d16_l1_c8_s6_b4_seed0"
    assert sorted(p.name for p in cache.iterdir()) == [f"{key}.json", f"{key}.weights.h5"]
    assert json.loads((cache / f"{key}.json").read_text())["seconds"] == by_arm["keras/dense"]["seconds"]


def test_cli_refuses_a_backend_that_cannot_train(tmp_path):
    done = _run(["-m", "bench.lm.keras_runs", "--out-json", str(tmp_path / "k.json"), *TINY], backend="numpy", check=False)
    assert done.returncode != 0 and "needs Keras 3 on one of jax, torch, tensorflow" in done.stderr
    assert not (tmp_path / "k.json").exists()
