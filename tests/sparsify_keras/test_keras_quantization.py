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


DISTILL_SCRIPT = """
import json
import numpy as np, keras
from sparsify_keras import DistillationModel, PruningCallback, strip_pruning
from sparsify_keras.quantization import add_fake_quant, int8_weights, quantize_int8, remove_fake_quant

rng = np.random.default_rng(0)
x = rng.standard_normal((256, 32)).astype("float32")
y = (x[:, :4].sum(1) > 0).astype("int32")
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

def mlp(name):
    return keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu", name="fc1"),
                             keras.layers.Dense(2, name="out")], name=name)

keras.utils.set_random_seed(0)
teacher = mlp("teacher")                    # a trained dense teacher
teacher.compile("adam", LOSS)
teacher.fit(x, y, batch_size=32, epochs=3, verbose=0)
teacher_weights = [np.array(w) for w in teacher.get_weights()]

def run(mode):
    keras.utils.set_random_seed(1)
    student = mlp("student")
    student.set_weights(teacher_weights)            # prune the trained model
    if mode == "before":                   # fake-quantized first, then wrapped: the teacher copy is float
        names = add_fake_quant(student)
        model = DistillationModel(student, {"temperature": 2.0, "weight": 1.0})
    elif mode == "none":
        model = student
    elif mode == "user":
        model = DistillationModel(student, {"temperature": 2.0, "weight": 1.0, "teacher": "user"}, teacher=teacher)
    else:
        model = DistillationModel(student, {"temperature": 2.0, "weight": 1.0})
    if mode != "before":
        names = add_fake_quant(model)
    model.compile(keras.optimizers.SGD(0.05), LOSS)
    # dense_at_start: the teacher is copied at step 4 (pruning's start), in the train step
    cb = PruningCallback({"target_sparsity": 0.9, "start_step": 4, "end_step": 20, "pruning_frequency": 4})
    model.fit(x, y, batch_size=32, epochs=4, verbose=0, callbacks=[cb])
    res = {"names": names}
    if mode != "none":
        res["teacher_classes"] = sorted({type(l).__name__ for l in model.teacher.layers})
        res["term"] = float(keras.ops.convert_to_numpy(model.distillation_loss(x, model(x), step=10 ** 6)))
        tw = [keras.ops.convert_to_numpy(w) for w in model.teacher.weights]
        res["teacher_is_dense"] = all(bool(np.all(w != 0)) for w in tw[::2])
        res["teacher_unchanged"] = all(bool(np.array_equal(a, b)) for a, b in zip(tw, teacher_weights))
    plain = strip_pruning(model)
    res["removed"] = remove_fake_quant(plain)
    kernels = {l: np.array(plain.get_layer(l)._kernel.numpy()) for l in names}
    rounded = {l: keras.ops.convert_to_numpy(keras.quantizers.abs_max_quantize(kernels[l], axis=0)[0]) for l in names}
    report = quantize_int8(plain)
    ints = int8_weights(plain)
    res.update({"sparsity": {l: float((k == 0).mean()) for l, k in kernels.items()},
                "lost": sum(r.lost_zeros for r in report.values()),
                "zeros_kept": all(bool(np.array_equal(ints[f"student/{l}/kernel"][0] == 0, rounded[l] == 0))
                                  and bool(np.all(ints[f"student/{l}/kernel"][0][kernels[l] == 0] == 0)) for l in names),
                "same_int8": all(bool(np.array_equal(ints[f"student/{l}/kernel"][0], rounded[l])) for l in names),
                "kernel": kernels["fc1"].ravel()[:64].tolist()})
    return res

print(json.dumps({m: run(m) for m in ("none", "user", "dense_at_start", "before")}))
"""


def test_qat_composes_with_distillation_on_jax():
    got = json.loads(run_python(["-c", DISTILL_SCRIPT], "jax").stdout.strip().splitlines()[-1])
    for mode in ("user", "dense_at_start", "before"):
        r = got[mode]
        assert r["names"] == r["removed"] == ["fc1", "out"]            # the student's layers only
        assert r["teacher_classes"] == ["Dense"]                        # the teacher is not fake-quantized
        assert r["teacher_is_dense"] and r["term"] > 1e-4               # the term is really there
        assert r["kernel"] != got["none"]["kernel"]                     # and changed the training
        assert r["lost"] == 0 and r["zeros_kept"] and r["same_int8"]
        assert r["sparsity"] == {"fc1": round(0.9 * 32 * 64) / (32 * 64), "out": round(0.9 * 64 * 2) / (64 * 2)}
    assert got["user"]["teacher_unchanged"]                               # frozen in place
    assert not got["dense_at_start"]["teacher_unchanged"]                 # the student at step 4, not the start
    assert got["before"]["kernel"] == got["dense_at_start"]["kernel"]     # the order of wrapping does not matter
    assert got["none"]["lost"] == 0 and got["none"]["same_int8"]


BEYOND_DENSE_SCRIPT = """
import json
import numpy as np, keras
from sparsify_keras import PruningCallback, strip_pruning
from sparsify_keras.quantization import add_fake_quant, int8_weights, quantize_int8, remove_fake_quant

rng = np.random.default_rng(0)
tok = rng.integers(0, 50, (128, 8)).astype("int32")
y = (tok[:, 0] % 2).astype("int32")
keras.utils.set_random_seed(0)
inp = keras.Input((8,), dtype="int32")
h = keras.layers.Embedding(50, 16, name="emb")(inp)
h = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, name="mha")(h, h)     # four EinsumDense layers
h = keras.layers.GlobalAveragePooling1D()(h)
model = keras.Model(inp, keras.layers.Dense(2, name="out")(h), name="m")
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
cb = PruningCallback({"target_sparsity": 0.75, "start_step": 0, "end_step": 8, "pruning_frequency": 4})
model.fit(tok, y, batch_size=32, epochs=1, verbose=0, callbacks=[cb])
names = add_fake_quant(model)
classes = sorted({type(l).__name__ for l in model._flatten_layers() if l.name in names})
model.fit(tok, y, batch_size=32, epochs=2, verbose=0, callbacks=[cb])
qat_out = np.asarray(model.predict(tok, verbose=0))
plain = strip_pruning(model)
removed = remove_fake_quant(plain)
layers = {l.name: l for l in plain._flatten_layers()}
weights = {n: np.array(keras.ops.convert_to_numpy(layers[n]._embeddings if n == "emb" else layers[n]._kernel))
           for n in names}
axes = {n: -1 if n == "emb" else 0 if n == "out" else tuple(layers[n]._kernel_reduced_axes) for n in names}
rounded = {n: keras.ops.convert_to_numpy(keras.quantizers.abs_max_quantize(weights[n], axis=axes[n])[0]) for n in names}
paths = {n: [l.path for l in plain.variables if l.path.endswith(("/" + n + "/kernel", "/" + n + "/embeddings"))
             or l.path in (n + "/kernel", n + "/embeddings")][0] for n in names}
report = quantize_int8(plain)
ints = int8_weights(plain)
out = np.asarray(plain.predict(tok, verbose=0))
# a tied ReversibleEmbedding (GPT-2's token embedding and LM head): the lookup and the logits use one int8 table
t_in = keras.Input((8,), dtype="int32")
tok = keras.layers.ReversibleEmbedding(50, 16, name="tok")
lm = keras.Model(t_in, tok(keras.layers.Dense(16, activation="tanh", name="mix")(tok(t_in)), reverse=True), name="lm")
lm.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
nxt = np.roll(tok_ids := rng.integers(0, 50, (128, 8)).astype("int32"), -1, axis=1)
cb2 = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2})
lm.fit(tok_ids, nxt, batch_size=32, epochs=1, verbose=0, callbacks=[cb2])
lm_names = add_fake_quant(lm)
lm.fit(tok_ids, nxt, batch_size=32, epochs=1, verbose=0, callbacks=[cb2])
lm_out = np.asarray(lm.predict(tok_ids, verbose=0))
lm_plain = strip_pruning(lm)
remove_fake_quant(lm_plain)
table = np.array(keras.ops.convert_to_numpy(lm_plain.get_layer("tok")._embeddings))
lm_rounded = keras.ops.convert_to_numpy(keras.quantizers.abs_max_quantize(table, axis=-1)[0])
lm_report = quantize_int8(lm_plain)
lm_q = int8_weights(lm_plain)["tok/embeddings"][0]
lm_diff = float(np.max(np.abs(np.asarray(lm_plain.predict(tok_ids, verbose=0)) - lm_out)) / np.max(np.abs(lm_out)))
errors = []
rev = keras.Sequential([keras.Input((4,), dtype="int32"),
                        keras.layers.ReversibleEmbedding(10, 4, tie_weights=False, name="rev"),
                        keras.layers.Dense(2, name="fc")])
conv = keras.Sequential([keras.Input((8, 1)), keras.layers.Conv1D(2, 3, name="conv"), keras.layers.Dense(2, name="fc")])
for call in (lambda: add_fake_quant(rev), lambda: add_fake_quant(conv, layers=["conv"]),
             lambda: add_fake_quant(conv, layers=["nope"])):
    try:
        call()
        errors.append(None)
    except ValueError as e:
        errors.append(str(e))
print(json.dumps({
    "backend": keras.backend.backend(), "names": names, "removed": removed, "classes": classes,
    "sparsity": {n: float((w == 0).mean()) for n, w in weights.items()},
    "quantized": sorted(report), "paths": sorted(paths.values()),
    "lost": sum(r.lost_zeros for r in report.values()),
    "pruned_zero": all(bool(np.all(ints[paths[n]][0][weights[n] == 0] == 0)) for n in names),
    "same_int8": {n: bool(np.array_equal(ints[paths[n]][0], rounded[n])) for n in names},
    "rev_only_dense": add_fake_quant(rev, layers=["fc"]),
    "lm": {"names": lm_names, "sparsity": float((table == 0).mean()), "same_int8": bool(np.array_equal(lm_q, lm_rounded)),
           "lost": sum(r.lost_zeros for r in lm_report.values()), "kept": bool(np.all(lm_q[table == 0] == 0)),
           "diff": lm_diff},
    "errors": errors, "max_out_diff": float(np.max(np.abs(out - qat_out)) / np.max(np.abs(qat_out)))}))
"""


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_qat_on_einsum_dense_and_embedding_keeps_the_masks(backend):
    got = json.loads(run_python(["-c", BEYOND_DENSE_SCRIPT], backend).stdout.strip().splitlines()[-1])
    mha = ["attention_output", "value", "key", "query"]
    assert got["backend"] == backend and sorted(got["names"]) == sorted(["emb", *mha, "out"])
    assert got["removed"] == got["names"]
    assert got["classes"] == ["FakeQuantDense", "FakeQuantEinsumDense", "FakeQuantEmbedding"]
    assert got["quantized"] == got["paths"]                                  # every QAT layer is int8 now
    assert got["sparsity"] == {n: 0.75 for n in got["names"]}
    assert got["lost"] == 0 and got["pruned_zero"]
    assert got["same_int8"] == {n: True for n in got["names"]}          # exactly what QAT rounded the weights to
    assert got["max_out_diff"] < 0.05
    assert got["rev_only_dense"] == ["fc"]
    rev, conv, nope = got["errors"]
    assert got["lm"]["names"] == ["tok", "mix"] and got["lm"]["sparsity"] == 0.5
    assert got["lm"]["same_int8"] and got["lm"]["lost"] == 0 and got["lm"]["kept"] and got["lm"]["diff"] < 0.05
    assert "also quantizes layers ['rev (ReversibleEmbedding)']" in rev and "pass layers=" in rev
    assert "layers ['conv (Conv1D)'] cannot be fake-quantized" in conv
    assert "layers: ['nope'] (unknown or named twice)" in nope
