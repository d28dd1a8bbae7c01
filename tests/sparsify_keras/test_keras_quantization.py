"""`sparsify_keras.quantization`: after strip_pruning, model.quantize("int8") keeps every pruned zero, on each backend
(one process per backend), and the int8 file gives back Keras' exact int8 values."""
from __future__ import annotations

import json

import pytest
from backend_runs import run_python

pytestmark = pytest.mark.slow        # each test spawns a Keras process

SCRIPT = """
import json, os, sys, tempfile
import numpy as np, keras
from sparsify_keras import PruningCallback, strip_pruning
from sparsify_keras.quantization import float_weights, int8_document, int8_weights, int8_zeros_check, quantize_int8
from sparsify.int8_format import decompress_int8, int8_tensors, load_int8_npz, save_int8_npz

rng = np.random.default_rng(0)
x = rng.standard_normal((256, 32)).astype("float32")
y = (x[:, :4].sum(1) > 0).astype("int32")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu", name="fc1"),
                          keras.layers.Dense(64, activation="relu", name="fc2"), keras.layers.Dense(2, name="out")])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
cb = PruningCallback({"target_sparsity": 0.9, "start_step": 0, "end_step": 20, "pruning_frequency": 5})
model.fit(x, y, batch_size=32, epochs=4, verbose=0, callbacks=[cb])
plain = strip_pruning(model)
before = float_weights(plain)
kernels = {p: w for p, w in before.items() if p.endswith("kernel")}
ref = np.asarray(plain.predict(x, verbose=0))
acc_fp32 = float(np.mean(ref.argmax(1) == y))
report = quantize_int8(plain)
out = np.asarray(plain.predict(x, verbose=0))
ints = int8_weights(plain)
path = os.path.join(tempfile.mkdtemp(), "m.int8.npz")
n = save_int8_npz(path, int8_document(plain))
doc = load_int8_npz(path)
exact, dense = int8_tensors(doc), decompress_int8(doc)
res = {"backend": keras.backend.backend(),
       "layers": sorted(report),
       "zeros_before": {p: r.zeros_before for p, r in report.items()},
       "pruned": {p: int((w == 0).sum()) for p, w in kernels.items()},
       "lost": sum(r.lost_zeros for r in report.values()),
       "new": sum(r.new_zeros for r in report.values()),
       "pruned_still_zero": all(bool(np.all(ints[p][0][kernels[p] == 0] == 0)) for p in kernels),
       "recheck_same": {p: r.zeros_after for p, r in int8_zeros_check(before, plain).items()} ==
                       {p: r.zeros_after for p, r in report.items()},
       "file_exact": all(np.array_equal(exact[p][0], ints[p][0]) for p in ints) and exact["sequential/fc1/kernel"][2] == 1,
       "file_zeros": all(bool(np.array_equal(dense[p] == 0, ints[p][0] == 0)) for p in ints),
       "dequant_err": max(float(np.max(np.abs(dense[p] - ints[p][0] / ints[p][1]))) for p in ints),
       "bias_exact": bool(np.array_equal(dense["sequential/fc1/bias"], before["sequential/fc1/bias"])),
       "max_out_diff": float(np.max(np.abs(out - ref)) / np.max(np.abs(ref))),
       "acc_fp32": acc_fp32, "acc_int8": float(np.mean(out.argmax(1) == y)), "file_bytes": n}
print(json.dumps(res))
"""


@pytest.mark.parametrize("backend", ["jax", "torch", "tensorflow"])
def test_quantize_int8_keeps_every_pruned_zero(backend):
    got = json.loads(run_python(["-c", SCRIPT], backend).stdout.strip().splitlines()[-1])
    kernels = ["sequential/fc1/kernel", "sequential/fc2/kernel", "sequential/out/kernel"]
    assert got["backend"] == backend and got["layers"] == kernels
    assert got["lost"] == 0 and got["pruned_still_zero"] and got["recheck_same"]
    assert got["zeros_before"] == got["pruned"]
    assert got["pruned"]["sequential/fc2/kernel"] == round(0.9 * 64 * 64)     # 90% of each layer (local scope)
    assert got["file_exact"] and got["file_zeros"] and got["bias_exact"]
    assert got["dequant_err"] < 1e-6                    # 1 / keras_scale stored as float32
    assert got["max_out_diff"] < 0.05 and abs(got["acc_int8"] - got["acc_fp32"]) <= 0.02


QAT_SCRIPT = """
import json
import numpy as np, keras
from sparsify_keras import PruningCallback, strip_pruning
from sparsify_keras.quantization import add_fake_quant, int8_weights, quantize_int8, remove_fake_quant

rng = np.random.default_rng(0)
x = rng.standard_normal((256, 32)).astype("float32")
y = (x[:, :4].sum(1) > 0).astype("int32")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu", name="fc1"),
                          keras.layers.Dense(2, name="out")])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
cb = PruningCallback({"target_sparsity": 0.9, "start_step": 0, "end_step": 16, "pruning_frequency": 8})
model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[cb])
names = add_fake_quant(model)
before = model.get_layer("fc1")._kernel.numpy().copy()
model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[cb])
read = {l: keras.ops.convert_to_numpy(model.get_layer(l).kernel) for l in names}
qat_out = np.asarray(model.predict(x, verbose=0))
plain = strip_pruning(model)
removed = remove_fake_quant(plain)
kernels = {l: plain.get_layer(l)._kernel.numpy().copy() for l in names}
qat_q = {}
for l in names:       # what the fake quantization rounded each kernel to, as int8 values and scales
    q, s = keras.quantizers.abs_max_quantize(kernels[l], axis=0)
    qat_q[l] = (keras.ops.convert_to_numpy(q), keras.ops.convert_to_numpy(s).reshape(-1))
report = quantize_int8(plain)
ints = int8_weights(plain)
out = np.asarray(plain.predict(x, verbose=0))
print(json.dumps({
    "backend": keras.backend.backend(), "names": names, "removed": removed,
    "classes": sorted({type(plain.get_layer(l)).__name__ for l in names}),
    "trained": not np.array_equal(before, kernels["fc1"]),
    "sparsity": float((kernels["fc1"] == 0).mean()),
    "read_is_rounded": all(bool(np.allclose(read[l], qat_q[l][0] / qat_q[l][1], rtol=0, atol=1e-6)) for l in names),
    "same_int8": all(bool(np.array_equal(ints[f"sequential/{l}/kernel"][0], qat_q[l][0])) and
                     bool(np.array_equal(ints[f"sequential/{l}/kernel"][1], qat_q[l][1])) for l in names),
    "lost": sum(r.lost_zeros for r in report.values()),
    "pruned_zero": all(bool(np.all(ints[f"sequential/{l}/kernel"][0][kernels[l] == 0] == 0)) for l in names),
    "max_out_diff": float(np.max(np.abs(out - qat_out)) / np.max(np.abs(qat_out)))}))
"""


@pytest.mark.parametrize("backend", ["jax", "torch", "tensorflow"])
def test_qat_keeps_the_masks_and_exports_the_values_it_trained_with(backend):
    got = json.loads(run_python(["-c", QAT_SCRIPT], backend).stdout.strip().splitlines()[-1])
    assert got["backend"] == backend and got["names"] == got["removed"] == ["fc1", "out"]
    assert got["classes"] == ["Dense"] and got["trained"] and got["sparsity"] == round(0.9 * 32 * 64) / (32 * 64)
    assert got["read_is_rounded"] and got["same_int8"]          # int8 model = the rounded kernels QAT trained
    assert got["lost"] == 0 and got["pruned_zero"]
    assert got["max_out_diff"] < 0.05           # Keras' int8 Dense also quantizes its inputs; QAT does not
