"""CPU latency of dense fp32, dense int8, sparse fp32 and sparse int8 (90%) of the bench MLP in torch,
onnxruntime and TFLite (XNNPACK), measured in one run.

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

Times: each case is called in interleaved rounds (every case once per round, ``--calls`` calls each),
the median per-call time over ``--rounds`` rounds; ratios are to dense fp32 of the same runtime.
Denormals are not flushed (``torch.set_flush_denormal`` is not called; onnxruntime's
``session.set_denormal_as_zero`` is left at 0; TFLite has no switch).

Usage:
    python -m bench.bench_quant_latency                 # writes the "bench_quant_latency" section of RESULTS.md
    python -m bench.bench_quant_latency --rounds 5 --no-write

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

__all__ = ["PATTERNS", "per_call", "build_cases", "render", "main"]

#: The sparse variants: name -> pattern.
PATTERNS = {"90% 1x1": "1x1", "90% 1x16": "1x16", "90% 1x4": "1x4"}
SHAPE = (1, 64, 128)


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
            cases.append({"runtime": runtime, "model": name, "precision": precision, "fn": fn, "how": how,
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


def _op_names(content: bytes) -> set[str]:
    import tensorflow as tf

    it = tf.lite.Interpreter(model_content=content)
    return {o["op_name"] for o in it._get_ops_details()}


def render(cases: list[dict[str, Any]], times: list[float], notes: dict[str, Any], command: str, seconds: float,
           rounds: int, calls: int) -> str:
    """The RESULTS.md section."""
    base = {c["runtime"]: t for c, t in zip(cases, times) if c["model"] == "dense" and c["precision"] == "fp32"}
    dense_int8 = {c["runtime"]: t for c, t in zip(cases, times) if c["model"] == "dense" and c["precision"] == "int8"}
    lines = [f"Command: `{command}`", "",
             f"Bench MLP (TokenMLP 128-512-128 x2 + head), input (1, 64, 128), 1 thread per runtime; median "
             f"per-call time over {rounds} interleaved rounds of {calls} calls. Ratios: to dense fp32 and to "
             "dense int8 of the same runtime. Flush-denormal not set (torch `set_flush_denormal` not called, "
             "onnxruntime `session.set_denormal_as_zero` 0). rel. err: max |output - torch fp32 of the same "
             "weights| / max |output|. file: the flatbuffer / ONNX file run (ONNX: float32 with sparse "
             "initializers, int8 dense).", "",
             "| runtime | model | precision | kernel | ms | / dense fp32 | / dense int8 | rel. err | file |",
             "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for c, t in zip(cases, times):
        lines.append(f"| {c['runtime']} | {c['model']} | {c['precision']} | {c['how']} | {1e3 * t:.3f} | "
                     f"{t / base[c['runtime']]:.2f} | {t / dense_int8[c['runtime']]:.2f} | {c['rel_err']:.3f} | "
                     f"{'-' if c['bytes'] is None else format(c['bytes'] / 1024, '.0f') + ' KiB'} |")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    lines += ["", f"TFLite int8 files: every pruned zero kept (zeros lost {sum(notes.get('tflite_lost_zeros', []))}); "
              f"weights stored sparse per model: {notes.get('tflite_sparse')}. tf-keras copy of the weights "
              f"agrees with torch to {max(notes.get('keras_err', [0])):.1e} (relative). Load average at the end "
              f"(1, 5, 15 min): {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f} on {os.cpu_count()} cores; "
              f"{platform.machine()}. Whole run {seconds:.0f} s."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    ap.add_argument("--calls", type=int, default=20, help="calls per case per round")
    ap.add_argument("--no-write", action="store_true", help="print the section without writing RESULTS.md")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        ap.error(f"--rounds and --calls must be at least 1, got {args.rounds} and {args.calls}")
    t0 = time.perf_counter()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32))
    cases, notes = build_cases(x)
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
