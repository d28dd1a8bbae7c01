"""`sparsify export --int8` (issue 60 item 3): a pruned model's weights as symmetric per-channel int8 in an .npz
(bitmask + int8 values + float32 scales), at most 0.06x of the dense float32 .npz at 90%, read back exactly with
`sparsify.int8_format.load_int8_npz`; every pruned zero kept; bad combinations refused before anything is written."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import OrderedDict

import numpy as np
import pytest

from sparsify import PruningEngine
from sparsify.cli import main
from sparsify.cli.export import default_output, derived_names, export_model
from sparsify.int8_format import decompress_int8, int8_tensors, load_int8_npz


def _one_line_error(capsys, *args: str) -> str:
    rc = main(list(args))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "internal error" not in err[0], err
    return err[0]


def _int8_by_hand(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel int8, written out: scale = max |w| of the channel / 127, q = round(w / scale)."""
    other = tuple(i for i in range(w.ndim) if i != axis % w.ndim)
    amax = np.abs(w.astype(np.float64)).max(axis=other, keepdims=True)
    scale = np.where(amax > 0, amax / 127, 1.0).astype(np.float32)
    return np.rint(w / scale.astype(np.float64)).astype(np.int8), scale.reshape(-1)


@pytest.fixture
def pruned_torch_mlp(tmp_path):
    """A demo-like MLP (256 -> 512 -> 10), every Linear weight pruned to 90% by magnitude, saved as the demo saves
    its model: ``torch.save(model.state_dict(), "model.pt")``."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(OrderedDict(fc1=torch.nn.Linear(256, 512), act=torch.nn.ReLU(),
                                            out=torch.nn.Linear(512, 10)))
    weights = {n: p.detach().numpy() for n, p in model.named_parameters() if n.endswith("weight")}
    masks = PruningEngine({"target_sparsity": 0.9, "start_step": 0, "end_step": 0}).compute_masks(weights, 0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in masks:
                p.mul_(torch.from_numpy(masks[n]))
    torch.save(model.state_dict(), tmp_path / "model.pt")
    return model, tmp_path / "model.pt"


def test_int8_export_of_a_pruned_torch_mlp(pruned_torch_mlp, tmp_path, capsys):
    import torch

    model, src = pruned_torch_mlp
    state = {n: t.numpy() for n, t in model.state_dict().items()}
    assert main(["export", str(src), "--int8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    out = tmp_path / "model.int8.npz"
    assert d["out"] == str(out) == default_output(src, "npz", int8=True) and d["target"] == "npz" and d["int8"]
    assert d["sparse_bytes"] == out.stat().st_size
    assert d["encodings"] == {"bitmask_int8": 2, "dense": 2}          # the two weights; the biases exact
    np.savez(tmp_path / "dense.npz", **state)                          # the dense float32 .npz, written here
    assert out.stat().st_size <= 0.06 * (tmp_path / "dense.npz").stat().st_size
    assert out.stat().st_size <= 0.06 * d["dense_bytes"]

    doc = load_int8_npz(out)
    exact = int8_tensors(doc)
    assert sorted(exact) == ["fc1.weight", "out.weight"]
    for name, (q, scales, axis) in exact.items():
        w = state[name]
        want_q, want_scales = _int8_by_hand(w, 0)                    # torch layout: one scale per output row
        assert axis == 0 and scales.shape == (w.shape[0],) and np.array_equal(scales, want_scales)
        assert q.dtype == np.int8 and np.array_equal(q, want_q)
        assert np.all(q[w == 0] == 0)                                # every pruned zero kept
        zeros = d["int8_zeros"][name]
        assert zeros["zeros_before"] == int((w == 0).sum()) and zeros["lost_zeros"] == 0
        assert zeros["zeros_after"] == int((q == 0).sum()) == zeros["zeros_before"] + zeros["new_zeros"]
    assert d["int8_zeros"]["fc1.weight"]["zeros_before"] == 117965 and d["int8_zeros"]["out.weight"]["size"] == 5120
    dense = decompress_int8(doc)
    assert np.array_equal(dense["fc1.bias"], state["fc1.bias"]) and np.array_equal(dense["out.bias"], state["out.bias"])
    kept = sum(z["zeros_before"] for z in d["int8_zeros"].values())
    rounded = sum(z["new_zeros"] for z in d["int8_zeros"].values())
    assert d["check"].endswith(f"no zero became non-zero ({kept} zeros kept); {rounded} small weights rounded to 0")

    fresh = torch.nn.Sequential(OrderedDict(fc1=torch.nn.Linear(256, 512), act=torch.nn.ReLU(),
                                            out=torch.nn.Linear(512, 10)))
    fresh.load_state_dict({n: torch.from_numpy(a) for n, a in dense.items()})    # dequantized, into the float model
    x = torch.randn(16, 256)
    with torch.no_grad():
        assert torch.allclose(fresh(x), model(x), atol=0.05)
        assert fresh[0].weight.count_nonzero() == model[0].weight.count_nonzero() - d["int8_zeros"]["fc1.weight"][
            "new_zeros"]

    assert main(["export", str(src), "--int8", "--overwrite"]) == 0       # the table
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"sparsify export: {src} (torch) -> {out} (int8 weights .npz: bitmask + int8 values + "
                        "float32 scales)")
    assert lines[3].split()[0] == "int8" and lines[4].split()[0] == "dense/int8" and lines[5].split()[0] == "int8/dense"
    assert float(lines[5].split()[1].rstrip("x")) <= 0.06
    assert lines[6] == "tensors: 2 bitmask_int8, 2 dense"


def test_int8_values_and_check_line_on_a_small_weight(tmp_path, capsys):
    """Literal values: a 8x16 weight of an .npz (canonical layout: one scale per row) with one weight too small to
    survive rounding; the 16 biases stay exact."""
    w = np.zeros((8, 16), np.float32)
    w[:, 0] = [1.0, -2.0, 0.5, 4.0, 1.0, 1.0, 1.0, 1.0]
    w[0, 1] = 0.003                       # 0.003 / (1 / 127) = 0.38: rounds to 0
    w[3, 2] = -1.0                        # -1 / (4 / 127) = -31.75 -> -32
    np.savez(tmp_path / "w.npz", w=w, b=np.arange(16, dtype=np.float32))
    res = export_model(tmp_path / "w.npz", int8=True)
    assert res.out == str(tmp_path / "w.int8.npz") and res.encodings == {"bitmask_int8": 1, "dense": 1}
    assert res.check == ("sparsify.int8_format.load_int8_npz gives back every int8 value and scale of 1 quantized "
                         "tensors (torch layout: one scale per output channel) and the 1 others exactly (NumPy only); "
                         "no zero became non-zero (118 zeros kept); 1 small weights rounded to 0")
    assert res.int8_zeros == {"w": {"size": 128, "zeros_before": 118, "zeros_after": 119, "new_zeros": 1,
                                    "lost_zeros": 0}}
    doc = load_int8_npz(res.out)
    q, scales, axis = int8_tensors(doc)["w"]
    assert q[:, 0].tolist() == [127, -127, 127, 127, 127, 127, 127, 127] and q[0, 1] == 0 and q[3, 2] == -32
    assert int(np.count_nonzero(q)) == 9 and axis == 0
    assert np.allclose(scales, np.float32([1, 2, 0.5, 4, 1, 1, 1, 1]) / 127)
    assert np.array_equal(decompress_int8(doc)["b"], np.arange(16, dtype=np.float32))


def test_int8_export_of_a_keras_archive_one_scale_per_unit(tmp_path, capsys):
    """A `.keras` file (read without Keras): kernels (in, out) get one scale per output unit (the last axis); the
    optimizer's variables are left out."""
    from keras_archives import mlp_weights, write_keras_archive

    weights = mlp_weights()
    src = write_keras_archive(tmp_path / "m.keras", weights)
    assert main(["export", str(src), "--int8", "--json"]) == 0               # no --to: npz (not TFLite)
    d = json.loads(capsys.readouterr().out)
    assert d["out"] == str(tmp_path / "m.int8.npz") and d["source_format"] == "keras"
    assert d["notes"][0].startswith("left out 14 optimizer tensors")
    doc = load_int8_npz(d["out"])
    exact = int8_tensors(doc)
    assert list(exact) == ["fc1/kernel", "fc2/kernel", "out/kernel"]
    for name, (q, scales, axis) in exact.items():
        want_q, want_scales = _int8_by_hand(weights[name], -1)
        assert axis == 1 and scales.shape == (weights[name].shape[1],)
        assert np.array_equal(q, want_q) and np.array_equal(scales, want_scales)
        assert np.all(q[weights[name] == 0] == 0)
    assert all(np.array_equal(decompress_int8(doc)[f"{n}/bias"], weights[f"{n}/bias"]) for n in ("fc1", "fc2", "out"))



def test_int8_with_optimizer_stores_the_slots_exactly(tmp_path, capsys):
    """--with-optimizer writes a checkpoint's slots too, exactly: only the model's weights are quantized."""
    rng = np.random.default_rng(1)
    kernel = np.where(rng.random((64, 32)) < 0.9, 0, rng.normal(size=(64, 32))).astype(np.float32)
    slot = rng.normal(size=(64, 32)).astype(np.float32)
    np.savez(tmp_path / "ckpt.npz", **{"dense/kernel": kernel, "dense/kernel/Adam": slot})
    assert main(["export", str(tmp_path / "ckpt.npz"), "--int8", "--with-optimizer", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["encodings"] == {"bitmask_int8": 1, "dense": 1} and "left out" not in " ".join(d["notes"])
    doc = load_int8_npz(tmp_path / "ckpt.int8.npz")
    assert list(int8_tensors(doc)) == ["dense/kernel"]
    assert np.array_equal(decompress_int8(doc)["dense/kernel/Adam"], slot)
    assert np.array_equal(int8_tensors(doc)["dense/kernel"][0], _int8_by_hand(kernel, 0)[0])   # npz: canonical


def test_int8_bad_combinations_write_nothing(tmp_path, capsys):
    w = np.where(np.arange(64 * 64).reshape(64, 64) % 10 == 0, 1.0, 0.0).astype(np.float32)
    np.savez(tmp_path / "w.npz", w=w)
    with pytest.raises(TypeError, match=r"^int8 must be a bool, got 'yes'$"):
        export_model(tmp_path / "w.npz", int8="yes")
    for to in ("torch", "tflite"):
        assert _one_line_error(capsys, "export", str(tmp_path / "w.npz"), "--int8", "--to", to) == (
            "sparsify export: error: int8 (--int8) applies to --to npz")
    assert _one_line_error(capsys, "export", str(tmp_path / "w.npz"), "--int8", "--encoding", "csr") == (
        "sparsify export: error: encoding 'csr' (--encoding) does not apply to int8 (--int8): it stores a bitmask + "
        "int8 values")
    assert _one_line_error(capsys, "export", str(tmp_path / "w.npz"), "--int8", "--semi-structured") == (
        "sparsify export: error: semi_structured (--semi-structured) applies to --to torch, not to int8 (--int8)")
    np.savez(tmp_path / "small.npz", w=np.ones((4, 4), np.float32), steps=np.int64(3))
    assert _one_line_error(capsys, "export", str(tmp_path / "small.npz"), "--int8") == (
        f"sparsify export: error: {str(tmp_path / 'small.npz')!r} (npz) holds no floating-point weight of 2 or more "
        "axes and 64 or more elements to quantize; export it without --int8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.npz", "w.npz"]
    assert main(["export", str(tmp_path / "w.npz"), "--to", "npz", "--int8"]) == 0
    capsys.readouterr()
    assert "already exists; pass --overwrite" in _one_line_error(capsys, "export", str(tmp_path / "w.npz"), "--int8")


def test_an_int8_export_beside_a_run_belongs_to_it(tmp_path):
    """Written beside a run's model, the int8 file is recorded in the run's manifest and goes with the next run;
    one the manifest does not list is stale (its default name is an export's)."""
    from keras_archives import mlp_weights, write_keras_archive

    from sparsify.cli.atomic import write_bytes
    from sparsify.cli.run_directory import RunDirectory, verify_run

    def commit(seed):
        with RunDirectory(tmp_path / "run", planned=["model.keras"]) as run:
            write_bytes(run.stage / "model.keras", write_keras_archive(tmp_path / "m.keras", mlp_weights(seed))
                        .read_bytes())
            run.commit({"command": "test"})

    commit(0)
    res = export_model(tmp_path / "run" / "model.keras", int8=True)
    assert res.out == str(tmp_path / "run" / "model.int8.npz") and list(verify_run(tmp_path / "run")["derived"]) == [
        "model.int8.npz"]
    commit(1)                                                             # the next run: no stale int8 file left
    assert not (tmp_path / "run" / "model.int8.npz").exists()
    (tmp_path / "run" / "model.int8.npz").write_bytes(b"an int8 export of an earlier run, never recorded")
    assert derived_names("model.keras")[-1] == "model.int8.npz"
    with pytest.raises(ValueError, match=r"model\.int8\.npz \(an export of model\.keras\) is not from this run"):
        verify_run(tmp_path / "run")


def test_a_failed_int8_check_leaves_the_previous_artifact(tmp_path, capsys, monkeypatch):
    import sparsify.int8_format as int8_format

    w = np.where(np.arange(64 * 64).reshape(64, 64) % 10 == 0, 1.0, 0.0).astype(np.float32)
    np.savez(tmp_path / "w.npz", w=w)
    out = tmp_path / "w.int8.npz"
    out.write_bytes(b"previous artifact")
    real = int8_format.load_int8_npz

    def corrupted(path):
        doc = real(path)
        doc["tensors"]["w"]["values"][0] -= 1                   # 127 -> 126
        return doc

    monkeypatch.setattr(int8_format, "load_int8_npz", corrupted)
    err = _one_line_error(capsys, "export", str(tmp_path / "w.npz"), "--int8", "--overwrite")
    assert err == f"sparsify export: error: {str(out)!r}: the int8 file does not give back ['w']; nothing was written"
    assert out.read_bytes() == b"previous artifact"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.int8.npz", "w.npz"]      # no temporary file left
    monkeypatch.setattr(int8_format, "load_int8_npz", real)
    assert main(["export", str(tmp_path / "w.npz"), "--int8", "--overwrite"]) == 0
    assert np.array_equal(int8_tensors(real(out))["w"][0], (w * 127).astype(np.int8))


_KERAS_JAX = textwrap.dedent("""
    import os, json, sys
    os.environ["KERAS_BACKEND"] = "jax"
    import numpy as np, keras
    from sparsify.cli import main
    from sparsify.int8_format import decompress_int8, int8_tensors, load_int8_npz

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu", name="fc1"),
                              keras.layers.Dense(10, name="out")])
    model.compile("adam", "sparse_categorical_crossentropy")
    x = np.random.default_rng(0).normal(size=(64, 256)).astype(np.float32)
    model.fit(x, np.arange(64) % 10, epochs=1, verbose=0)          # the saved file holds Adam's variables too
    for layer in model.layers:
        k, b = layer.get_weights()
        keep = np.abs(k) >= np.quantile(np.abs(k), 0.9)             # 90% zeros by magnitude
        layer.set_weights([np.where(keep, k, 0).astype(np.float32), b])
    model.save("m.keras")
    assert main(["export", "m.keras", "--int8", "--json"]) == 0
    doc = load_int8_npz("m.int8.npz")
    exact = int8_tensors(doc)
    zeros_kept = all(np.all(exact[f"{l.name}/kernel"][0][l.get_weights()[0] == 0] == 0) for l in model.layers)
    axes = [exact[f"{l.name}/kernel"][2] for l in model.layers]
    dense = decompress_int8(doc)
    fresh = keras.saving.load_model("m.keras")
    for l in fresh.layers:
        l.set_weights([dense[f"{l.name}/kernel"], dense[f"{l.name}/bias"]])
    gap = float(np.abs(np.asarray(fresh(x)) - np.asarray(model(x))).max())
    dense_npz = sum(w.nbytes for w in model.get_weights())
    print("RESULT", json.dumps({"backend": keras.backend.backend(), "zeros_kept": bool(zeros_kept), "axes": axes,
                                "ratio": os.path.getsize("m.int8.npz") / dense_npz, "gap": gap,
                                "names": sorted(dense)}))
""")


@pytest.mark.slow
def test_int8_export_of_a_keras_3_model_saved_on_jax(tmp_path, capsys):
    """A real `.keras` file (Keras 3 on JAX, in its own process: the backend is fixed at first import): the int8
    file keeps every pruned zero, one scale per unit, at most 0.06x of the float32 weights, and the dequantized
    weights loaded into the model give its outputs back within int8's rounding."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, "-c", _KERAS_JAX], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(next(line for line in res.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert got["backend"] == "jax" and got["zeros_kept"] and got["axes"] == [1, 1]
    assert got["names"] == ["fc1/bias", "fc1/kernel", "out/bias", "out/kernel"]    # the optimizer left out
    assert got["ratio"] <= 0.06 and got["gap"] < 0.05
