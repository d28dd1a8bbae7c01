"""Keras 3 pruning on JAX, PyTorch and TensorFlow: the same masks as the core, bit for bit, on every backend.

Each backend runs :mod:`scenarios` once in its own process (:mod:`backend_runs`); the expected masks are
computed here from the core alone (:class:`sparsify.PruningProtocol`, fed the scenario's NumPy weights and,
for Wanda, the input statistics of the batches since the last update, as the callback's contract says).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from backend_runs import BACKENDS, run_python, scenarios

from sparsify import PruningConfig, PruningProtocol
from sparsify.activation_stats import ActivationWindow, sum_of_squares

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

ALL = ("masks_lr0,training,pruned_values,sr_ste,resume,strip_and_save,traces,tensorboard,oneshot,step_scores,"
       "bad_input")


@pytest.fixture(scope="module", params=BACKENDS)
def results(request):
    return scenarios(request.param, ALL)


@pytest.fixture(scope="module", autouse=True)
def user_criterion():
    """The scenarios' user criterion, registered here for the core's expected masks and forgotten after."""
    import scenarios as sc
    from sparsify.criteria import unregister_criterion

    sc.register_user_criterion()
    yield
    unregister_criterion("scenario_square")


def _reference_inputs():
    """The scenario's model weights (canonical) and inputs, rebuilt here from the same NumPy draws."""
    import scenarios as sc
    from sparsify_keras.layers import find_prunable_weights

    model, x, y = sc.model_and_data()
    pws = find_prunable_weights(model)
    return sc, {pw.path: pw.to_canonical(np.asarray(pw.variable.numpy())) for pw in pws}, x


def _core_history(cfg: dict, steps: int, batch: int = 16) -> list[dict[str, np.ndarray]]:
    """The masks the callback must hold at the start of each step: the core advanced at every due step once
    a step has run (activation criteria wait for data), weights fixed (learning rate 0)."""
    sc, weights, (xa, xb) = _reference_inputs()
    config = PruningConfig.coerce(cfg)
    shapes = {k: v.shape for k, v in weights.items()}
    protocol = PruningProtocol(config, shapes)
    chosen = list(protocol.names)
    wanda = config.criterion == "wanda"
    window = ActivationWindow({n: shapes[n] for n in chosen}, criterion="wanda")
    inputs = {"dense/kernel": xa, "conv/kernel": xb}
    history = []
    for step in range(steps):
        if not (wanda and window.waiting()) and protocol.due(step):
            update = protocol.advance(step, {n: weights[n] for n in chosen},
                                      activations=window.read() if wanda else None)
            if update is not None:
                window.reset()
        history.append({n: protocol.masks[n].copy() for n in chosen})
        lo, hi = (step * batch) % len(xa), (step * batch) % len(xa) + batch
        for n in chosen:
            if wanda:
                window.add(n, sum_of_squares(inputs[n][lo:hi]))
    return history


CASES = ["unstructured_local", "unstructured_global", "blocks_2x2_global", "nm_2of4_local", "row_scope",
         "erk_scope", "user_criterion", "wanda_first_layers", "cos_schedule"]


@pytest.mark.parametrize("case", CASES)
def test_masks_at_every_step_are_the_core_s_on_every_backend(results, case):
    import scenarios as sc
    from sparsify_keras.layers import find_prunable_weights

    run = results["masks_lr0"][case]
    expected = _core_history(sc.MASK_CASES[case], len(run["history"]))
    model, _, _ = sc.model_and_data()
    to_canonical = {pw.path: pw.to_canonical for pw in find_prunable_weights(model)}
    assert len(run["history"]) == 8
    for step, (got, want) in enumerate(zip(run["history"], expected)):
        assert sorted(got) == sorted(want), step
        for path, mask in got.items():
            np.testing.assert_array_equal(to_canonical[path](np.asarray(mask, bool)), want[path],
                                          err_msg=f"{results['backend']} {case} step {step} {path}")


def test_every_backend_gives_the_same_masks_and_weights():
    runs = [scenarios(b, ALL) for b in BACKENDS]
    for case in CASES:
        for other in runs[1:]:
            assert other["masks_lr0"][case]["history"] == runs[0]["masks_lr0"][case]["history"], case
    for name in ("magnitude_global", "wanda_row"):
        for other in runs[1:]:
            assert other["oneshot"][name] == runs[0]["oneshot"][name], name


STEP_SCORE_CASES = {"snip_local": {"criterion": "snip"},
                    "snip_momentum_global": {"criterion": "snip_momentum", "pruning_scope": "global",
                                             "criterion_momentum": 0.5}}


@pytest.mark.parametrize("name", sorted(STEP_SCORE_CASES))
def test_per_step_criteria_score_each_step_s_gradient_and_give_the_core_s_masks(results, name):
    """snip / snip_momentum: the scores the train step keeps are the criterion of the dense weight and the
    masked gradient of the step (as torch's pruner scores them), and the masks are the core's from them."""
    import scenarios as sc
    from sparsify_keras.layers import find_prunable_weights

    run = results["step_scores"][name]
    config = PruningConfig.coerce({**sc.GRADUAL, **STEP_SCORE_CASES[name]})
    model, _, _ = sc.model_and_data()
    pws = {pw.path: pw for pw in find_prunable_weights(model)}
    w0 = {p: np.asarray(pw.variable.numpy()) for p, pw in pws.items()}
    protocol = PruningProtocol(config, {p: pw.canonical_shape for p, pw in pws.items()})
    steps = len(run["masks"])
    assert steps == 8 and run["last"] == 6 and run["sparsity"]["total"] == 0.5
    previous = None
    for t in range(steps):
        scores = {p: np.asarray(v, np.float32) for p, v in run["scores"][t].items()}
        if t > 0:       # the scores of step t - 1: its masked gradient, the dense (here fixed) weight
            fresh = {p: np.abs(w0[p] * (np.asarray(run["grads"][t - 1][p], np.float32)
                                        * np.asarray(run["masks"][t - 1][p], np.float32))) for p in pws}
            if config.criterion == "snip_momentum":
                m = config.criterion_momentum
                fresh = {p: f * np.float32(1 - m) + (0 if previous is None else previous[p] * np.float32(m))
                         for p, f in fresh.items()}
            for p in pws:
                np.testing.assert_allclose(scores[p], fresh[p], rtol=1e-4, atol=1e-6, err_msg=f"{name} step {t} {p}")
            previous = scores
            if protocol.due(t):
                protocol.advance(t, {p: pws[p].to_canonical(w0[p]) for p in pws},
                                 scores={p: pws[p].to_canonical(scores[p]) for p in pws})
        for p in pws:       # step 0 waits for the first step's gradients
            np.testing.assert_array_equal(pws[p].to_canonical(np.asarray(run["masks"][t][p], bool)),
                                          protocol.masks[p], err_msg=f"{results['backend']} {name} step {t} {p}")


def _exact(s: float, n: int) -> int:
    return min(int(np.ceil(s * n - 0.5)), n - 1)


@pytest.mark.parametrize("name", ["sgd", "adam_blocks", "adagrad", "rigl", "set", "free"])
def test_training_holds_zeros_and_exact_counts(results, name):
    run = results["training"][name]
    assert all(h["zeros_held"] for h in run["history"]), f"{results['backend']}: a pruned weight moved"
    final = {p: np.asarray(m) for p, m in run["masks"].items()}
    if name != "adam_blocks" and name != "rigl":          # local scope: every layer exactly at the target
        for path, mask in final.items():
            assert int((mask == 0).sum()) == _exact(0.8, mask.size), path
    assert run["sparsity"]["total"] == pytest.approx(0.8, abs=0.005)
    masks = [{p: np.asarray(m, bool) for p, m in h["masks"].items()} for h in run["history"]]
    subsets = all(np.all(b[p] <= a[p]) for a, b in zip(masks, masks[1:]) for p in a)
    if name in ("sgd", "adam_blocks", "adagrad"):
        assert subsets                        # monotone: pruned stays pruned
    if name in ("rigl", "set"):
        assert not subsets                    # regrowth grew weights back
    assert run["per_step_paths"] == ([] if name != "adagrad" else sorted(final, key=list(final).index))


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_pruned_values_stay_put_unless_straight_through(results, opt):
    """docs/design.md rule 8: with pruned_gradient="none" a pruned weight's stored value does not change under
    momentum and weight decay; with "straight_through" the optimizer steps it (the kernel stays zero there)."""
    frozen, stepped = results["pruned_values"][f"{opt}/none"], results["pruned_values"][f"{opt}/straight_through"]
    assert len(frozen["stored"]) == 6 and all(frozen["zeros_held"]) and all(stepped["zeros_held"])
    assert all(s == frozen["stored"][0] for s in frozen["stored"])           # bit for bit, every step
    first, last = stepped["stored"][0], stepped["stored"][-1]
    assert any(not np.array_equal(first[p], last[p]) for p in first)


def check_sr_ste(run: dict) -> None:
    """SR-STE: one plain SGD step moves every weight by lr * (g + decay * w * (1 - mask)), g the gradient of the
    masked weight (NumPy's for the Dense-only model; for the two-branch model, the run without the decay's)."""
    d = run["dense_only"]
    x, y = np.array(d["x"], np.float64), np.array(d["y"], np.float64)
    k0, m = np.array(d["before"]["lin/kernel"]), np.array(d["masks"]["lin/kernel"], np.float64)
    assert m.mean() == 0.5 and (m.reshape(3, 4, 4).sum(axis=1) == 2).all()      # 2:4 along the inputs
    g = 2.0 / y.size * x.T @ (x @ (k0 * m) - y)                                   # d mean((x (k0 m) - y)^2)
    np.testing.assert_allclose(d["after"]["lin/kernel"], k0 - d["lr"] * (g + d["decay"] * k0 * (1 - m)),
                               rtol=1e-5, atol=1e-6)
    plain, sr = run["twobranch_0"], run["twobranch"]
    assert plain["masks"] == sr["masks"] and plain["decay"] == 0
    for path, before in sr["before"].items():
        w, m = np.array(before), np.array(sr["masks"][path], np.float64)
        step_plain = np.array(plain["after"][path]) - w
        step_sr = np.array(sr["after"][path]) - w
        assert (m == 0).any() and (step_sr != step_plain)[(m == 0) & (w != 0)].all()
        np.testing.assert_allclose(step_sr - step_plain, -sr["lr"] * sr["decay"] * w * (1 - m), rtol=1e-4, atol=1e-6)


def test_sr_ste_decays_pruned_weights_through_the_gradient(results):
    check_sr_ste(results["sr_ste"])


def test_resume_from_a_checkpoint_equals_the_uninterrupted_run(results):
    run = results["resume"]
    assert run["restored_step"] == 6                      # the update at the checkpoint's step 8 is still to come
    assert run["masks"] == run["ref_masks"]
    for a, b in zip(run["weights"], run["ref_weights"]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_stripped_model_saves_as_keras_and_loads_without_sparsify(results, tmp_path):
    run = results["strip_and_save"]
    assert run["weights_while_pruned"] > run["weights_stripped"] == 6
    assert run["zero_fraction"] == {"dense/kernel": 0.75, "conv/kernel": 0.75, "head/kernel": 0.75}
    _, _, (xa, xb) = _reference_inputs()
    np.save(tmp_path / "xa.npy", xa)
    np.save(tmp_path / "xb.npy", xb)
    check = ("import sys, json, numpy as np, keras\n"
             f"m = keras.models.load_model({run['path']!r})\n"
             "x = (np.load(sys.argv[1]), np.load(sys.argv[2]))\n"
             "loaded = sorted({k.split('.')[0] for k in sys.modules if k.split('.')[0].startswith('sparsify')})\n"
             "print(json.dumps({'loaded': loaded, 'pred': np.asarray(m.predict(x, verbose=0)).tolist()}))")
    out = run_python(["-c", check, str(tmp_path / "xa.npy"), str(tmp_path / "xb.npy")], results["backend"],
                     extra_env={"PYTHONPATH": ""})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["loaded"] == []
    np.testing.assert_allclose(np.asarray(got["pred"]), np.asarray(run["prediction"]), rtol=1e-5, atol=1e-6)


def test_mask_updates_compile_the_step_once(results):
    run = results["traces"]
    assert run["last"] == 8 and run["updates"] == 5
    if results["backend"] == "jax":
        assert run["traces"] == 1               # one compilation for 5 mask updates
    elif results["backend"] == "tensorflow":
        assert run["traces"] <= 2               # no retrace per update
    else:
        assert run["traces"] == 12              # torch runs the step eagerly: once per batch


def test_tensorboard_scalars_at_every_update(results):
    scalars = results["tensorboard"]
    assert [s for s, _ in scalars["sparsity/total"]] == [0, 2, 4]
    assert scalars["sparsity/dense/kernel"][-1] == [4, 0.5] or tuple(scalars["sparsity/dense/kernel"][-1]) == (4, 0.5)


def test_oneshot_masks_are_the_core_s(results):
    import scenarios as sc

    _, weights, (xa, xb) = _reference_inputs()
    got = results["oneshot"]["magnitude_global"]
    proto = PruningProtocol(PruningConfig.coerce({"target_sparsity": 0.6, "pruning_scope": "global"}).oneshot(),
                            {k: v.shape for k, v in weights.items()})
    update = proto.advance(0, weights)
    for path, w in got.items():
        np.testing.assert_array_equal(np.asarray(w) != 0, update.masks[path] & (weights[path] != 0), err_msg=path)
    del sc, xa, xb


def test_bad_input_is_a_clear_error_with_nothing_attached_or_correct_masks(results):
    bad = results["bad_input"]
    assert bad["unbuilt"]["attach_error"].startswith("ValueError: model") and "is not built" in bad["unbuilt"]["attach_error"]
    assert not bad["unbuilt"]["attached"] and not bad["unbuilt"]["step_wrapped"]
    if bad["unbuilt"]["fit_error"] is None:          # fit built the model before the callback attached
        assert bad["unbuilt"]["sparsity_after_fit"] == 0.5 and bad["unbuilt"]["attached_after_fit"]
    else:                                              # or refused it, with nothing attached
        assert "is not built" in bad["unbuilt"]["fit_error"] and not bad["unbuilt"]["attached_after_fit"]
    assert bad["no_match"] == {"error": "ValueError: op_names=['^bn'] excluded_op_names=[] match no prunable weight; "
                                        "prunable weights are: [fc/kernel]", "attached": False}
    for policy, optimizer in (("mixed_float16", "LossScaleOptimizer"), ("mixed_bfloat16", "Adam")):
        assert bad[policy] == {"masks_equal_core": True, "zeros_held": True, "sparsity": 0.75, "optimizer": optimizer}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backend_switched_after_import_is_a_clear_error(backend):
    got = scenarios(backend, "switch_backend")["switch_backend"]
    if "skip" in got:
        pytest.skip(got["skip"])
    assert got["old_model"].startswith("TypeError: model 'twobranch' was made before the Keras backend was switched "
                                       f"to {got['to']!r}")
    assert got["new_model"].startswith(f"TypeError: the Keras backend was switched to {got['to']!r} "
                                       "(keras.config.set_backend) after sparsify_keras was imported")
    assert got["new_model_weights_untouched"]


_WRITE_CODE = r"""
import json
import keras, numpy as np
from sparsify_keras.adapter import write_updates
from sparsify_keras.backend import keep_where, selector

x = np.array([-1.5, -0.0, 2.0, np.nan, np.inf, -np.inf, 0.0, -7.0], np.float32)
mask = np.array([False, True, True, False, True, False, True, True])
out = {}
for dtype in ("float16", "bfloat16", "float32", "float64"):
    if dtype == "float64" and keras.backend.backend() == "jax":
        continue                                        # JAX without x64 has no float64
    t = keras.ops.cast(keras.ops.convert_to_tensor(x), dtype)
    y = keras.ops.convert_to_numpy(keras.ops.cast(keep_where(selector(mask, t), t), "float32"))
    out[dtype] = [repr(float(v)) for v in y]
# one weight of each kind of update: pruned, kept, brought back, grown (kept, its value not kept)
w, s, m = keras.Variable([1.0, -2.0, 0.0, 0.0]), keras.Variable([0.0, 0.0, -3.0, 4.0]), keras.Variable([1.0, 1.0, 0.0, 0.0])
slot = keras.Variable([0.5, -0.5, 0.25, 0.25])
write_updates([(w, m, np.array([False, True, True, True]), np.array([False, True, True, False]), s, [slot])])
out["write"] = [[repr(float(v)) for v in keras.ops.convert_to_numpy(var.value)] for var in (w, s, m, slot)]
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_writer_writes_the_same_bits_on_every_backend(backend):
    got = json.loads(run_python(["-c", _WRITE_CODE], backend).stdout.strip().splitlines()[-1])
    # where(mask, x, +0.0): -0.0 and NaN/inf kept where the mask holds, +0.0 elsewhere
    expected = ["0.0", "-0.0", "2.0", "0.0", "inf", "0.0", "0.0", "-7.0"]
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        if dtype in got:
            assert got[dtype] == expected, dtype
    assert got["write"] == [["0.0", "-2.0", "-3.0", "0.0"],      # kernel: dense where values are kept
                            ["1.0", "0.0", "0.0", "0.0"],        # stored: what the new mask prunes
                            ["0.0", "1.0", "1.0", "1.0"],        # mask
                            ["0.0", "-0.5", "0.0", "0.0"]]       # slots: only where kept throughout
