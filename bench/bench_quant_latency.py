"""CPU latency of dense fp32, dense int8, sparse fp32 and sparse int8 (90%) of the bench MLP in torch,
onnxruntime and TFLite (XNNPACK), and of the MNIST-1D CNN (torch, onnxruntime) and the bench LM (torch),
measured in one run.

The model is ``bench.bench_torch.TokenMLP`` (LayerNorm -> Linear 128->512 -> GELU -> Linear 512->128,
residual, twice; mean over tokens; Linear 128->10), input one sequence ``(1, 64, 128)``, one thread in
every runtime. "Sparse" is the same model magnitude-pruned to 90% (one shot, every Linear, local scope),
unstructured (``"1x1"``) and in ``"1x16"`` blocks (16 consecutive inputs of one output: the block TFLite's
sparse int8 ``FULLY_CONNECTED`` kernel takes; ``"1x4"`` is its float32 kernel's).

Per runtime:

* **torch**: fp32 ``nn.Linear``; int8 ``quantize_model_int8(mode="dynamic")`` (``torch.ao`` dynamic int8
  ``Linear``); sparse fp32 ``to_sparse_inference`` (CSR weights); sparse int8: torch has no sparse int8 CPU
  kernel, so the pruned model's dynamic int8 ``Linear`` (dense kernels over the zeros).
* **onnxruntime** (CPU provider): the file ``export_onnx`` writes (sparse initializers, densified when the
  session loads) and its int8 ``quantize_onnx_int8(mode="dynamic")`` (``MatMulInteger``): dense kernels
  whether the weights are pruned or not.
* **TFLite** (``tf.lite.Interpreter``, XNNPACK delegate as by default; again as "TFLite builtin" without
  it, TFLite's own kernels): fp32 without optimisation (dense) or
  with ``EXPERIMENTAL_SPARSITY`` (sparse); int8 is full-integer ``quantize_tflite_int8`` (which checks every
  pruned zero in the flatbuffer). Unstructured sparse weights are stored sparse and densified by a ``DENSIFY``
  op at the first run; block sparse ones (``1x4`` fp32, ``1x16`` int8) go to TFLite's sparse kernels, which
  XNNPACK does not take.

The MNIST-1D CNN (``bench.accuracy``, 25 channels: conv 5/3/3 stride 2 and a Linear to 10; a batch of
100 inputs of 40 values) and the LM (``bench.lm.model.CharLM`` d_model 128, 2 blocks, vocab 96: one
sequence of 64 tokens; the blocks' six Linear pruned, embeddings and tied head dense), random weights,
90% unstructured (``--models``): torch fp32, torch int8 (``quantize_model_int8(mode="dynamic")``: dynamic
int8 ``Linear``; convolutions become its weight-only ``Int8Conv``, dequantized to float32 in the forward
pass, as ``torch.ao`` has no dynamic int8 convolution), sparse fp32 (``to_sparse_inference``: CSR for the
Linear layers it takes; the CNN's 3-tap convolutions stay dense) and sparse int8 (the pruned model's int8
layers: no sparse int8 kernel); onnxruntime fp32 and dynamic int8 (``ConvInteger`` / ``MatMulInteger``) for
the CNN, and TFLite (XNNPACK) fp32 (``EXPERIMENTAL_SPARSITY`` for the 90% model) and int8
(``quantize_tflite_int8``, float32 input and output) of a tf-keras copy of the CNN. Not run: the LM in
onnxruntime int8 (``quantize_onnx_int8`` refuses it: onnxruntime quantizes its ``Gather`` of the embedding
to uint8), the LM in TFLite, either model in Keras 3.

Times: each case is called in interleaved rounds (every case once per round, ``--calls`` calls each),
the median per-call time over ``--rounds`` rounds; ratios are to dense fp32 of the same runtime.
Denormals are not flushed (``torch.set_flush_denormal`` is not called; onnxruntime's
``session.set_denormal_as_zero`` is left at 0; TFLite has no switch).

Usage:
    python -m bench.bench_quant_latency                 # writes the "bench_quant_latency" section of RESULTS.md
    python -m bench.bench_quant_latency --rounds 5 --no-write
    python -m bench.bench_quant_latency --models cnn lm --rounds 5 --no-write

Example:
    >>> per_call([lambda: None], rounds=2, calls=3)[0] >= 0
    True
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np
import torch  # noqa: I001 - torch before TensorFlow (sparsify.triton_conflict)

__all__ = ["PATTERNS", "MODELS", "per_call", "build_cases", "model_cases", "render", "main"]

#: The sparse variants: name -> pattern.
PATTERNS = {"90% 1x1": "1x1", "90% 1x16": "1x16", "90% 1x4": "1x4"}
SHAPE = (1, 64, 128)
#: The models of ``--models``: name -> title in the table.
MODELS = {"mlp": "Bench MLP (TokenMLP 128-512-128 x2 + head), input (1, 64, 128)",
          "cnn": "MNIST-1D CNN (25 channels), input (100, 40)",
          "lm": "LM (CharLM d128 x2, vocab 96), input (1, 64) tokens"}


def per_call(fns: list[Callable[[], Any]], rounds: int, calls: int) -> list[float]:
    """Median seconds per call of each function, timed in interleaved rounds."""
    for fn in fns:
        for _ in range(3):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[i].append((time.perf_counter() - t0) / calls)
    return [statistics.median(t) for t in times]


def _pruned(pattern: str | None) -> torch.nn.Module:
    import sparsify_torch
    from bench.bench_torch import make_model

    model = make_model().eval()
    if pattern:
        sparsify_torch.prune(model, {"target_sparsity": 0.9, "pattern": pattern, "start_step": 0, "end_step": 0,
                                     "skip_incompatible_layers": True}).remove()
    return model


def _keras_copy(model: torch.nn.Module) -> Any:
    """The tf-keras TokenMLP with ``model``'s weights (Dense kernels transposed)."""
    import tf_keras

    inp = tf_keras.Input(SHAPE[1:], batch_size=SHAPE[0])
    h = inp
    for block in model.blocks:
        norm, up, _, down = block
        z = tf_keras.layers.LayerNormalization(epsilon=norm.eps)(h)
        z = tf_keras.layers.Dense(up.out_features, activation="gelu")(z)
        h = h + tf_keras.layers.Dense(down.out_features)(z)
    out = tf_keras.layers.Dense(model.head.out_features)(tf_keras.layers.GlobalAveragePooling1D()(h))
    keras_model = tf_keras.Model(inp, out)
    norms = [lyr for lyr in keras_model.layers if isinstance(lyr, tf_keras.layers.LayerNormalization)]
    denses = [lyr for lyr in keras_model.layers if isinstance(lyr, tf_keras.layers.Dense)]
    for i, block in enumerate(model.blocks):
        norm, up, _, down = block
        norms[i].set_weights([norm.weight.detach().numpy(), norm.bias.detach().numpy()])
        denses[2 * i].set_weights([up.weight.detach().numpy().T, up.bias.detach().numpy()])
        denses[2 * i + 1].set_weights([down.weight.detach().numpy().T, down.bias.detach().numpy()])
    denses[-1].set_weights([model.head.weight.detach().numpy().T, model.head.bias.detach().numpy()])
    return keras_model


def _tflite_runner(content: bytes, xnnpack: bool = True) -> tuple[Callable[[], Any], Callable[[np.ndarray], np.ndarray]]:
    import tensorflow as tf

    kind = {} if xnnpack else {
        "experimental_op_resolver_type": tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    it = tf.lite.Interpreter(model_content=content, num_threads=1, **kind)
    it.allocate_tensors()
    ind, outd = it.get_input_details()[0], it.get_output_details()[0]

    def run(x: np.ndarray) -> np.ndarray:
        if np.dtype(ind["dtype"]) == np.int8:
            s, zp = ind["quantization"]
            x = np.clip(np.rint(x / s) + zp, -128, 127).astype(np.int8)
        it.set_tensor(ind["index"], x)
        it.invoke()
        y = it.get_tensor(outd["index"])
        if np.dtype(outd["dtype"]) == np.int8:
            s, zp = outd["quantization"]
            y = (y.astype(np.float32) - zp) * s
        return y

    x0 = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    run(x0)
    return it.invoke, run


def build_cases(x: torch.Tensor) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every (runtime, model, precision) case: a callable and its output error against torch fp32."""
    import onnxruntime as ort
    import tensorflow as tf

    from sparsify_tf.quantization import quantize_tflite_int8
    from sparsify_torch.onnx_export import export_onnx
    from sparsify_torch.onnx_quantization import quantize_onnx_int8
    from sparsify_torch.quantization import quantize_model_int8
    from sparsify_torch.sparse_inference import to_sparse_inference

    torch.set_num_threads(1)
    xn = x.numpy()
    calib = [np.random.default_rng(10 + i).standard_normal(SHAPE).astype(np.float32) for i in range(16)]
    cases, notes = [], {}
    tmp = tempfile.mkdtemp()
    for name, pattern in {"dense": None, **PATTERNS}.items():
        model = _pruned(pattern)
        with torch.no_grad():
            ref = model(x).numpy()
        scale = float(np.abs(ref).max())

        def add(runtime: str, precision: str, fn: Callable[[], Any], out: np.ndarray, how: str,
                nbytes: int | None = None) -> None:
            cases.append({"family": "mlp", "runtime": runtime, "model": name, "precision": precision, "fn": fn,
                          "how": how,
                          "rel_err": float(np.abs(np.asarray(out) - ref).max()) / scale, "bytes": nbytes})

        # torch
        if pattern != "1x4":
            q = quantize_model_int8(copy.deepcopy(model), mode="dynamic")[0]
            fp = model if pattern is None else to_sparse_inference(model, x, layout="csr")
            with torch.no_grad():
                add("torch", "fp32", lambda m=fp: m(x), fp(x).numpy(), "nn.Linear" if pattern is None else "CSR")
                add("torch", "int8", lambda m=q: m(x), q(x).numpy(), "dynamic int8 Linear (dense kernel)")
        # onnxruntime
        if pattern != "1x4":
            path = os.path.join(tmp, f"{pattern or 'dense'}.onnx")
            export_onnx(model, x, path, dynamic_batch=False)
            q = quantize_onnx_int8(path)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = opts.inter_op_num_threads = 1
            for prec, content in (("fp32", open(path, "rb").read()), ("int8", q.content)):
                sess = ort.InferenceSession(content, opts, providers=["CPUExecutionProvider"])
                feed = {sess.get_inputs()[0].name: xn}
                add("onnxruntime", prec, lambda s=sess, f=feed: s.run(None, f), sess.run(None, feed)[0],
                    "MatMul" if prec == "fp32" else "MatMulInteger", len(content))
        # TFLite
        km = _keras_copy(model)
        notes.setdefault("keras_err", []).append(float(np.abs(km(xn).numpy() - ref).max()) / scale)
        conv = tf.lite.TFLiteConverter.from_keras_model(km)
        if pattern is not None:
            conv.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
        fp32 = bytes(conv.convert())
        runs = [("fp32", fp32)]
        if pattern != "1x4":
            res = quantize_tflite_int8(km, [c for c in calib], integer_io=False)
            notes.setdefault("tflite_lost_zeros", []).append(sum(r.lost_zeros for r in res.report.values()))
            notes.setdefault("tflite_sparse", {})[name] = len(res.sparse)
            runs.append(("int8", res.content))
        for runtime, xnnpack in (("TFLite", True), ("TFLite builtin", False)):
            for prec, content in runs:
                invoke, run = _tflite_runner(content, xnnpack)
                ops = _op_names(content)
                how = ("DENSIFY then dense" if "DENSIFY" in ops else
                       "sparse kernel" if pattern not in (None, "1x1") else "dense")
                add(runtime, prec, invoke, run(xn), how, len(content))
    return cases, notes


def _cnn_or_lm(family: str) -> tuple[torch.nn.Module, torch.Tensor, dict[str, Any]]:
    """The dense model (random weights, seed 0), its input and the pruning config of its 90% variant."""
    if family == "cnn":
        from bench.accuracy.problems import init_weights, problem, setting
        from bench.accuracy.torch_runs import Net

        spec, s = problem("mnist1d"), setting("90")
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((100, 40)).astype(np.float32))
        return Net(spec.layers(s), init_weights(spec, s, 0)).eval(), x, {}
    from bench.lm.model import PRUNABLE, LMConfig, build_model

    model = build_model(LMConfig(vocab_size=96, d_model=128, n_layers=2, n_heads=4, context=64), seed=0).eval()
    return model, torch.from_numpy(np.random.default_rng(0).integers(0, 96, (1, 64))), {"op_names": [PRUNABLE]}


def model_cases(family: str) -> list[dict[str, Any]]:
    """The cases of the MNIST-1D CNN (``"cnn"``) or the LM (``"lm"``): dense and 90%, torch (and onnxruntime
    for the CNN), fp32 and int8; every int8 model checked to keep every pruned zero."""
    import sparsify_torch
    from sparsify_torch.quantization import int8_weights, quantize_model_int8
    from sparsify_torch.sparse_inference import to_sparse_inference

    torch.set_num_threads(1)
    cases = []
    for name in ("dense", "90% 1x1"):
        model, x, config = _cnn_or_lm(family)
        if name != "dense":
            sparsify_torch.prune(model, {"target_sparsity": 0.9, "start_step": 0, "end_step": 0, **config}).remove()
        with torch.no_grad():
            ref = model(x).numpy()
        scale = float(np.abs(ref).max())
        zeros = {n: (p == 0).numpy() for n, p in model.named_parameters() if n.endswith("weight") and p.dim() > 1}

        def add(runtime: str, precision: str, fn: Callable[[], Any], out: Any, how: str,
                nbytes: int | None = None) -> None:
            cases.append({"family": family, "runtime": runtime, "model": name, "precision": precision, "fn": fn,
                          "how": how, "rel_err": float(np.abs(np.asarray(out) - ref).max()) / scale, "bytes": nbytes})

        q, report = quantize_model_int8(copy.deepcopy(model), mode="dynamic")
        assert all(r.lost_zeros == 0 for r in report.values())
        assert all(not np.any(np.asarray(w[0])[zeros[n]]) for n, w in int8_weights(q).items())
        fp = model if name == "dense" else to_sparse_inference(model, x, layout="csr")
        kinds = "dynamic int8 Linear" + (" + weight-only Int8Conv" if family == "cnn" else "")
        with torch.no_grad():
            add("torch", "fp32", lambda m=fp: m(x), fp(x).numpy(),
                "dense" if name == "dense" else "CSR Linear" + (" (convs dense)" if family == "cnn" else ""))
            add("torch", "int8", lambda m=q: m(x), q(x).numpy(), kinds + " (dense kernels)")
        if family == "cnn":
            _onnx_cases(model, x, add)
            _tflite_cnn_cases(model, x, name != "dense", add)
    return cases


def _keras_cnn(model: torch.nn.Module, batch: int) -> Any:
    """The tf-keras copy of the MNIST-1D CNN (NLC layout; torch's channel-major flatten kept by a Permute)."""
    import tf_keras

    L = tf_keras.layers
    inp = tf_keras.Input((40,), batch_size=batch)
    h, convs = L.Reshape((40, 1))(inp), []
    for layer in model.specs[:-1]:
        h = L.ZeroPadding1D(layer.padding)(h)
        conv = L.Conv1D(layer.cout, layer.kernel, strides=layer.stride, activation="relu")
        h = conv(h)
        convs.append((conv, getattr(model, layer.name)))
    head = L.Dense(10)
    keras_model = tf_keras.Model(inp, head(L.Flatten()(L.Permute((2, 1))(h))))
    for conv, m in convs:
        conv.set_weights([m.weight.detach().numpy().transpose(2, 1, 0), m.bias.detach().numpy()])
    last = getattr(model, model.specs[-1].name)
    head.set_weights([last.weight.detach().numpy().T, last.bias.detach().numpy()])
    return keras_model


def _tflite_cnn_cases(model: torch.nn.Module, x: torch.Tensor, sparse: bool, add: Callable[..., None]) -> None:
    import tensorflow as tf

    from sparsify_tf.quantization import quantize_tflite_int8

    xn = x.numpy()
    km = _keras_cnn(model, xn.shape[0])
    conv = tf.lite.TFLiteConverter.from_keras_model(km)
    if sparse:
        conv.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    calib = [np.random.default_rng(10 + i).standard_normal(xn.shape).astype(np.float32) for i in range(8)]
    res = quantize_tflite_int8(km, calib, integer_io=False)
    assert all(r.lost_zeros == 0 for r in res.report.values())
    for prec, content in (("fp32", bytes(conv.convert())), ("int8", res.content)):
        it = tf.lite.Interpreter(model_content=content, num_threads=1)
        it.allocate_tensors()
        ind, outd = it.get_input_details()[0], it.get_output_details()[0]
        it.set_tensor(ind["index"], xn)
        it.invoke()
        how = "DENSIFY then dense" if "DENSIFY" in _op_names(content) else "dense"
        add("TFLite", prec, it.invoke, it.get_tensor(outd["index"]), how, len(content))


def _onnx_cases(model: torch.nn.Module, x: torch.Tensor, add: Callable[..., None]) -> None:
    import onnxruntime as ort

    from sparsify_torch.onnx_export import export_onnx
    from sparsify_torch.onnx_quantization import quantize_onnx_int8

    path = os.path.join(tempfile.mkdtemp(), "model.onnx")
    export_onnx(model, x, path, dynamic_batch=False)
    q = quantize_onnx_int8(path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    for prec, content in (("fp32", open(path, "rb").read()), ("int8", q.content)):
        sess = ort.InferenceSession(content, opts, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: x.numpy()}
        add("onnxruntime", prec, lambda s=sess, f=feed: s.run(None, f), sess.run(None, feed)[0],
            "Conv, MatMul" if prec == "fp32" else "ConvInteger, MatMulInteger", len(content))


def _op_names(content: bytes) -> set[str]:
    import tensorflow as tf

    it = tf.lite.Interpreter(model_content=content)
    return {o["op_name"] for o in it._get_ops_details()}


def render(cases: list[dict[str, Any]], times: list[float], notes: dict[str, Any], command: str, seconds: float,
           rounds: int, calls: int) -> str:
    """The RESULTS.md section: one table per model of ``cases`` (its ``"family"``, ``"mlp"`` if none)."""
    fam = [c.get("family", "mlp") for c in cases]
    base = {(f, c["runtime"]): t for f, c, t in zip(fam, cases, times)
            if c["model"] == "dense" and c["precision"] == "fp32"}
    dense_int8 = {(f, c["runtime"]): t for f, c, t in zip(fam, cases, times)
                  if c["model"] == "dense" and c["precision"] == "int8"}
    lines = [f"Command: `{command}`", "",
             f"1 thread per runtime; median per-call time over {rounds} interleaved rounds of {calls} calls (every "
             "case of every model in the same rounds). Ratios: to dense fp32 and to dense int8 of the same model and "
             "runtime. Flush-denormal not set (torch `set_flush_denormal` not called, onnxruntime "
             "`session.set_denormal_as_zero` 0). rel. err: max |output - torch fp32 of the same weights| / max "
             "|output|. file: the flatbuffer / ONNX file run (ONNX: float32 with sparse initializers, int8 dense)."]
    for family in dict.fromkeys(fam):
        lines += ["", f"{MODELS[family]}:", "",
                  "| runtime | model | precision | kernel | ms | / dense fp32 | / dense int8 | rel. err | file |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|"]
        for f, c, t in zip(fam, cases, times):
            if f != family:
                continue
            key = (f, c["runtime"])
            lines.append(f"| {c['runtime']} | {c['model']} | {c['precision']} | {c['how']} | {1e3 * t:.3f} | "
                         f"{t / base[key]:.2f} | {t / dense_int8[key]:.2f} | {c['rel_err']:.3f} | "
                         f"{'-' if c['bytes'] is None else format(c['bytes'] / 1024, '.0f') + ' KiB'} |")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    tail = []
    if "mlp" in fam:
        lost = sum(notes.get("tflite_lost_zeros", []))
        tail.append(f"TFLite int8 files: every pruned zero kept (zeros lost {lost}); "
                    f"weights stored sparse per model: {notes.get('tflite_sparse')}. tf-keras copy of the weights "
                    f"agrees with torch to {max(notes.get('keras_err', [0])):.1e} (relative).")
    tail.append(f"Load average at the end (1, 5, 15 min): {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f} on "
                f"{os.cpu_count()} cores; {platform.machine()}. Whole run {seconds:.0f} s.")
    lines += ["", " ".join(tail)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    ap.add_argument("--calls", type=int, default=20, help="calls per case per round")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), help="models to time")
    ap.add_argument("--no-write", action="store_true", help="print the section without writing RESULTS.md")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        ap.error(f"--rounds and --calls must be at least 1, got {args.rounds} and {args.calls}")
    t0 = time.perf_counter()
    cases, notes = [], {}
    if "mlp" in args.models:
        x = torch.from_numpy(np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32))
        cases, notes = build_cases(x)
    for family in ("cnn", "lm"):
        if family in args.models:
            cases += model_cases(family)
    times = per_call([c["fn"] for c in cases], args.rounds, args.calls)
    command = "python -m bench.bench_quant_latency" + (" " + " ".join(argv if argv is not None else sys.argv[1:])
                                                       ).rstrip()
    from bench._results import publish

    body = render(cases, times, notes, command.replace(" --no-write", ""), time.perf_counter() - t0,
                  args.rounds, args.calls)
    publish("bench_quant_latency", body, write=not args.no_write)
    return body


if __name__ == "__main__":
    main()
