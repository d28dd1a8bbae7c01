"""The Keras zoo tier: keras_hub's GPT-2, BERT and Llama and keras.applications' ResNet50, MobileNetV3Small and
EfficientNetV2B0, built from small configs (random weights), pruned on the JAX and PyTorch Keras backends (ResNet50 on
PyTorch only: :data:`LEFT_OUT`).

Each backend runs :mod:`keras_zoo_scenarios` in its own process (Keras fixes the backend at first import); the
two backends of a group run side by side. Checked per model: every pruned kernel holds exactly the core's count
of zeros (2:4 groups on the language models), the summary lists what is pruned and why the rest is not, a
``.keras`` file that ``ModelCheckpoint`` wrote mid-pruning loads with the masked weights, ``strip_pruning`` +
save + load gives the same weights and outputs; on the language models ``BackupAndRestore`` resumes to exactly
the uninterrupted run (weights, masks, step), and one-shot Wanda / SparseGPT prune exactly.
"""
from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow        # spawns a process per backend

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BACKENDS = ("jax", "torch")
PLANS = {"hub": "gpt2:gradual+resume+oneshot,bert:gradual,llama:gradual+oneshot",
         "apps": "ResNet50:gradual,MobileNetV3Small:gradual,EfficientNetV2B0:gradual"}
#: Models left out of a group on one backend: ResNet50 on JAX costs ~170 s of XLA compilation on 2 cores and adds
#: no layer type the other two applications lack there (it runs on the PyTorch backend).
LEFT_OUT = {("apps", "jax"): ("ResNet50",)}


def plan(group: str, backend: str) -> str:
    """The group's plan on ``backend`` (:data:`PLANS` less :data:`LEFT_OUT`)."""
    left_out = LEFT_OUT.get((group, backend), ())
    return ",".join(p for p in PLANS[group].split(",") if p.split(":")[0] not in left_out)
#: XLA's CPU compiler at its cheapest (the same flags in every run of a test, so results compare bit for bit)
JAX_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


@functools.lru_cache(maxsize=None)
def _launched(group: str) -> dict:
    """Start the group's run on every backend at once: ``{backend: (process, output path, tempdir)}``."""
    runs = {}
    for backend in BACKENDS:
        d = tempfile.TemporaryDirectory()
        out = os.path.join(d.name, "out.json")
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT),
               "OMP_NUM_THREADS": "1"}
        if backend == "jax":
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {JAX_FLAGS}".strip()
        proc = subprocess.Popen([sys.executable, str(HERE / "keras_zoo_scenarios.py"), backend, out, plan(group, backend)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        runs[backend] = (proc, out, d)
    return runs


@functools.lru_cache(maxsize=None)
def _results(group: str, backend: str) -> dict:
    proc, out, _ = _launched(group)[backend]
    log, _ = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"{group} on {backend}: exit {proc.returncode}\n{log[-6000:]}")
    with open(out) as f:
        results = json.load(f)
    assert results["backend"] == backend
    print(f"{group} on {backend}: {results['seconds']}")
    return results


@pytest.fixture(scope="module", params=BACKENDS)
def hub(request):
    _launched("hub")
    return _results("hub", request.param)




def exact_count(sparsity: float, n: int) -> int:
    """docs/design.md's count rule: nearest, an exact half rounded down, at least one kept."""
    return min(math.ceil(sparsity * n - 0.5), n - 1)


def _check_gradual(run: dict, nm: bool) -> None:
    assert run["pruned"] and run["summary_selected"] == run["pruned"]
    for path, (zeros, size, groups) in run["zeros"].items():
        assert zeros == exact_count(0.5, size) == run["mask_zeros"][path], path
        assert run["sparsity"][path] == zeros / size
        if nm:
            assert groups == [2, 2], (path, groups)       # every group of 4 along the input axis: 2 pruned
    assert run["loaded_equal"] and run["outputs_equal"] and not run["state_left"]
    mid = run["mid"]              # ModelCheckpoint's .keras at step 4 (updates at steps 0 and 2 made)
    assert mid["step"] == 2 and 0.0 < mid["sparsity"] < 0.5
    assert mid["weights_equal"] and mid["zeros"] == round(mid["sparsity"] * mid["size"])


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_hub_gradual_2of4_exact_strip_save_load_and_midrun_checkpoint(hub, name):
    run = hub[name]["gradual"]
    _check_gradual(run, nm=True)
    # every attention and MLP projection is pruned; embeddings (the tied LM head) are excluded, by name
    assert len(run["pruned"]) == {"gpt2": 12, "bert": 14, "llama": 14}[name]
    assert all("embeddings" not in p for p in run["pruned"])
    skipped = run["summary_skipped"]
    head = {p: r for p, r in skipped.items() if "token_embedding" in p}   # Llama: also its untied LM head
    assert set(head.values()) == {"excluded"} and len(head) == (2 if name == "llama" else 1)
    if name != "llama":        # GPT-2 and BERT learn their positions: a layer sparsify cannot prune
        assert any(r == "unsupported type" for p, r in skipped.items() if "position_embedding" in p)


def test_gpt2_backup_and_restore_resumes_bit_exactly(hub):
    run = hub["gpt2"]["resume"]
    assert run["interrupted_at"] == 4 and run["steps"] == [10, 10]
    assert run["last_update"] == [8, 8] and run["sparsity"] == [0.5, 0.5]
    assert run["masks_equal"]
    assert run["weights_equal"], run["max_weight_diff"]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_causal_lm_oneshot_wanda_and_sparsegpt_prune_exactly(hub, name):
    for method, runs in hub[name]["oneshot"].items():
        pruned = [p for p in runs["zeros"] if "embeddings" not in p]
        assert pruned, method
        for path, (zeros, size, groups) in runs["zeros"].items():
            if "embeddings" in path:
                assert zeros == runs["before"][path][0], (method, path)    # excluded: untouched
                continue
            assert zeros == exact_count(0.5, size), (method, path)
            if method == "sparsegpt":
                assert groups == [2, 2], (method, path)


@pytest.mark.parametrize("backend,name", [(b, n) for b in BACKENDS for n in ("ResNet50", "MobileNetV3Small",
                                           "EfficientNetV2B0") if n not in LEFT_OUT.get(("apps", b), ())])
def test_applications_gradual_exact_strip_save_load_and_midrun_checkpoint(backend, name):
    _launched("apps")
    run = _results("apps", backend)[name]["gradual"]
    _check_gradual(run, nm=False)
    # every conv, depthwise and dense kernel is found and pruned: nothing of rank 2+ is skipped but by type
    assert len(run["pruned"]) == {"ResNet50": 54, "MobileNetV3Small": 54, "EfficientNetV2B0": 92}[name]
    assert set(run["summary_skipped"].values()) <= {"unsupported type"}
