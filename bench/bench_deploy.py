"""Deploy benchmark: dense vs pruned latency and file size where users deploy, on this CPU.

Models pruned one-shot by magnitude with sparsify at 50/70/90/95%:

* a MobileNet-style CNN (3x3 stride-2 stem on a 129x129x3 image, 8 depthwise 3x3 + pointwise 1x1 pairs,
  32-512 channels, global average pool): only its 1x1 convolutions are pruned (the ``"xnnpack"`` preset:
  blocks of 4 output channels for TFLite; 1x1 or square blocks for torch), as Keras (TFLite) and torch;
* the bench MLP (``bench.bench_torch.TokenMLP``: 2 feed-forward blocks 128-512-128 over 16 tokens + head);
* the LM's Linear layers (``bench.lm.model.CharLM``, d_model 256, 2 blocks, 64 tokens of context).

Runtimes: **PyTorch** (``sparsify_torch.to_sparse_inference``: CSR, and BSR with square blocks pruned with
the matching block pattern), **ONNX** (``sparsify_torch.onnx_export``: sparse initializers, run in
onnxruntime), **TFLite** (``sparsify_tf.xnnpack``: ``EXPERIMENTAL_SPARSITY``, the XNNPACK delegate);
and **structured**: channels removed (``sparsify_torch.channels``, 50/70% of each group), in torch and onnxruntime,
and in Keras 3 (``sparsify_keras.remove_channels``, 50/75%: ``bench.deploy_keras``, its own section).
Latency: median of ``--runs`` calls, every variant of one model and batch called round robin in the same
loop (so a busy machine slows them alike), one thread per runtime. Sizes: bytes on disk.

Run: ``python -m bench.bench_deploy [--quick] [--no-write] [--keras-only]``; writes the ``bench_deploy`` and
``bench_deploy_keras`` sections of bench/RESULTS.md (``--keras-only``: the second only, about a minute).
"""
from __future__ import annotations

import argparse
import copy
import io
import os
import statistics
import tempfile
import time
import warnings
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import sparsify_torch  # noqa: E402
from bench._results import publish  # noqa: E402
from sparsify.runtime_presets import runtime_config  # noqa: E402
from sparsify_torch.export import compressed_document  # noqa: E402

SPARSITIES = (0.5, 0.7, 0.9, 0.95)
CHANNELS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1))
IMAGE = 129          # odd: TensorFlow's 'same' padding of a stride-2 3x3 conv is then 1 on each side (XNNPACK's rule)


# ----- models ---------------------------------------------------------------------------------------------------
class TorchMobileNet(nn.Module):
    """The CNN in torch (NCHW): stem 3x3/2, then depthwise 3x3 + pointwise 1x1 pairs, ReLU, global mean."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU()]
        c = 32
        for out, stride in CHANNELS:
            layers += [nn.Conv2d(c, c, 3, stride, 1, groups=c), nn.ReLU(), nn.Conv2d(c, out, 1), nn.ReLU()]
            c = out
        self.features = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x).mean((2, 3))


def keras_mobilenet() -> Any:
    import keras
    L = keras.layers
    keras.utils.set_random_seed(0)
    x = inp = keras.Input((IMAGE, IMAGE, 3))
    x = L.Conv2D(32, 3, strides=2, padding="same", activation="relu")(x)
    for out, stride in CHANNELS:
        x = L.DepthwiseConv2D(3, strides=stride, padding="same", activation="relu")(x)
        x = L.Conv2D(out, 1, activation="relu")(x)
    return keras.Model(inp, L.GlobalAveragePooling2D()(x))


def torch_models() -> dict[str, tuple[nn.Module, Callable[[int], torch.Tensor], dict[str, tuple[int, ...]]]]:
    """name -> (model, batch -> input, shapes of the weights to prune)."""
    from bench.bench_torch import make_model
    from bench.lm.model import PRUNABLE, LMConfig, build_model
    import re
    torch.manual_seed(0)
    cnn = TorchMobileNet().eval()
    mlp = make_model(0).eval()
    lm = build_model(LMConfig(vocab_size=96, d_model=256, n_layers=2, n_heads=4, context=64), seed=0).eval()
    g = torch.Generator().manual_seed(0)

    def linears(m: nn.Module, pattern: str = ".*") -> dict[str, tuple[int, ...]]:
        return {f"{n}.weight": tuple(x.weight.shape) for n, x in m.named_modules()
                if type(x) in (nn.Linear, nn.Conv2d) and re.search(pattern, f"{n}.weight")}

    return {
        "MobileNet-style CNN (129x129)": (cnn, lambda b: torch.randn(b, 3, IMAGE, IMAGE, generator=g),
                                          {n: s for n, s in linears(cnn).items() if s[2:] == (1, 1)}),
        "bench MLP (TokenMLP, 16 tokens)": (mlp, lambda b: torch.randn(b, 16, 128, generator=g), linears(mlp)),
        "LM (CharLM d256, 64 tokens)": (lm, lambda b: torch.randint(0, 96, (b, 64), generator=g),
                                        linears(lm, PRUNABLE)),
    }


# ----- timing ---------------------------------------------------------------------------------------------------
def round_robin(fns: dict[str, Callable[[], Any]], runs: int, warmup: int = 2) -> dict[str, float]:
    """Median milliseconds of each function, all called in turn ``runs`` times (after ``warmup`` rounds)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(warmup + runs):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            if r >= warmup:
                times[k].append(time.perf_counter() - t)
    return {k: 1000 * statistics.median(v) for k, v in times.items()}


def _pruned_torch(model: nn.Module, shapes: dict, runtime: str, sparsity: float, block: int) -> nn.Module:
    m = copy.deepcopy(model)
    extra = {"pattern": f"{block}x{block}"} if runtime == "torch-bsr" else {}
    cfg = runtime_config(runtime, shapes, target_sparsity=sparsity, start_step=0, end_step=0,
                         skip_incompatible_layers=True, **extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # "pattern does not fit ... left dense": the rows say so
        sparsify_torch.prune(m, cfg).remove()
    return m


def _cell(ms: float, dense: float) -> str:
    return f"{ms:.2f} ({dense / ms:.2f}x)"


def torch_table(models: dict, sparsities: tuple[float, ...], batches: tuple[int, ...], runs: int,
                block: int) -> tuple[str, dict]:
    """PyTorch CSR/BSR latency per model, batch, sparsity; and the pruned models (for the ONNX table)."""
    rows, pruned_models = [], {}
    for name, (model, make_x, shapes) in models.items():
        variants = {"dense": model}
        for s in sparsities:
            csr_model = _pruned_torch(model, shapes, "torch-csr", s, block)
            pruned_models[(name, s)] = csr_model
            x = make_x(1)
            variants[f"csr {s}"] = sparsify_torch.to_sparse_inference(
                csr_model, x, "csr", modules=[n[:-len(".weight")] for n in shapes])
            bsr_model = _pruned_torch(model, shapes, "torch-bsr", s, block)
            fits = [n[:-len(".weight")] for n in shapes if shapes[n][0] % block == 0 and shapes[n][1] % block == 0]
            variants[f"bsr {s}"] = sparsify_torch.to_sparse_inference(bsr_model, x, "bsr", block, modules=fits)
        for b in batches:
            x = make_x(b)
            with torch.no_grad():
                ms = round_robin({k: (lambda m=m: m(x)) for k, m in variants.items()}, runs)
            for layout in ("csr", "bsr"):
                cells = [_cell(ms[f"{layout} {s}"], ms["dense"]) for s in sparsities]
                label = "CSR, unstructured" if layout == "csr" else f"BSR {block}x{block}, blocks {block}x{block}"
                rows.append(f"| {name} | {label} | {b} | {ms['dense']:.2f} | " + " | ".join(cells) + " |")
    head = ("| model | torch layout, pattern | batch | dense ms | " + " | ".join(f"{int(s * 100)}%" for s in sparsities)
            + " |\n|---|---|---:|---:|" + "---:|" * len(sparsities))
    return head + "\n" + "\n".join(rows), pruned_models


def onnx_table(models: dict, pruned: dict, sparsities: tuple[float, ...], batches: tuple[int, ...],
               runs: int, work: str) -> tuple[str, list[str]]:
    """onnxruntime latency of the dense file and of both sparse encodings, and their sizes."""
    import onnxruntime as ort
    from sparsify_torch.onnx_export import ENCODINGS, export_onnx
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    rows, sizes = [], []
    for name, (model, make_x, _) in models.items():
        x1 = make_x(1)
        dense = export_onnx(model, x1, os.path.join(work, "dense.onnx"), min_sparsity=0.999)
        files = {"dense": dense["path"]}
        for enc in ENCODINGS:
            size_cells = []
            for s in sparsities:
                path = os.path.join(work, f"{enc}{s}.onnx")
                res = export_onnx(pruned[(name, s)], x1, path, encoding=enc)
                files[f"{enc} {s}"] = path
                size_cells.append(f"{res['bytes'] / 1024:.0f} KiB ({res['bytes'] / dense['bytes']:.2f}x)")
            sizes.append(f"| {name} | ONNX, {enc} | {dense['bytes'] / 1024:.0f} KiB | " + " | ".join(size_cells) + " |")
        sessions = {k: ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"]) for k, p in files.items()}
        for b in batches:
            feed = {"input_0": make_x(b).numpy()}
            ms = round_robin({k: (lambda s=s: s.run(None, feed)) for k, s in sessions.items()}, runs)
            for enc in ENCODINGS:
                rows.append(f"| {name} | {enc} | {b} | {ms['dense']:.2f} | "
                            + " | ".join(_cell(ms[f"{enc} {s}"], ms["dense"]) for s in sparsities) + " |")
    head = ("| model | encoding | batch | dense ms | " + " | ".join(f"{int(s * 100)}%" for s in sparsities)
            + " |\n|---|---|---:|---:|" + "---:|" * len(sparsities))
    return head + "\n" + "\n".join(rows), sizes


def torch_sizes(models: dict, pruned: dict, sparsities: tuple[float, ...]) -> list[str]:
    """Bytes of ``torch.save(state_dict)`` dense and of the compressed (bitmask) state_dict of each pruned model."""
    rows = []
    for name, (model, _, _) in models.items():
        def nbytes(obj: Any) -> int:
            buf = io.BytesIO()
            torch.save(obj, buf)
            return len(buf.getvalue())
        dense = nbytes(model.state_dict())
        cells = []
        for s in sparsities:
            n = nbytes(compressed_document(pruned[(name, s)], "bitmask"))
            cells.append(f"{n / 1024:.0f} KiB ({n / dense:.2f}x)")
        rows.append(f"| {name} | torch state_dict, bitmask | {dense / 1024:.0f} KiB | " + " | ".join(cells) + " |")
    return rows


def structured_table(models: dict, ratios: tuple[float, ...], batches: tuple[int, ...], runs: int,
                     work: str) -> str:
    """Channel removal (``sparsify_torch.channels``): a physically smaller model, in torch and onnxruntime."""
    import onnxruntime as ort
    from sparsify_torch.channels import calibrate_and_prune_model_equal
    from sparsify_torch.channels.metrics import count_params
    from sparsify_torch.onnx_export import export_onnx
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    rows = []
    for name, (model, make_x, _) in models.items():
        variants, failed = {"dense": model}, ""
        for r in ratios:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    variants[f"{r}"] = calibrate_and_prune_model_equal(
                        copy.deepcopy(model), [make_x(2)], lambda out, _: out.float().logsumexp(-1).mean(),
                        pruning_ratio=r).eval()
            except Exception as e:  # noqa: BLE001 - the table says which model channel removal cannot take
                failed = f"{type(e).__name__}: {' '.join(str(e).split())[:80]}".replace("|", "/")
                break
        if failed:
            rows.append(f"| {name} | - | - | channel removal fails: {failed} |" + " - |" * len(ratios))
            continue
        size = {}
        for k, m in variants.items():
            buf = io.BytesIO()
            torch.save(m.state_dict(), buf)
            size[k] = len(buf.getvalue())
        sessions = {k: ort.InferenceSession(export_onnx(m, make_x(1), os.path.join(work, f"s{k}.onnx"),
                                                        min_sparsity=0.999)["path"], opts,
                                            providers=["CPUExecutionProvider"]) for k, m in variants.items()}
        for b in batches:
            x = make_x(b)
            with torch.no_grad():
                ms = round_robin({k: (lambda m=m: m(x)) for k, m in variants.items()}, runs)
            feed = {"input_0": x.numpy()}
            ox = round_robin({k: (lambda s=s: s.run(None, feed)) for k, s in sessions.items()}, runs)
            for rt, t in (("torch", ms), ("onnxruntime", ox)):
                rows.append(f"| {name} | {rt} | {b} | {t['dense']:.2f} | "
                            + " | ".join(_cell(t[f"{r}"], t["dense"]) for r in ratios) + " |")
        dense_cell = f"{count_params(model) / 1e3:.0f} k, {size['dense'] / 1024:.0f} KiB"
        rows.append(f"| {name} | params, torch file | - | {dense_cell} | "
                    + " | ".join(f"{count_params(variants[f'{r}']) / 1e3:.0f} k, {size[f'{r}'] / size['dense']:.2f}x"
                                 for r in ratios) + " |")
    head = ("| model | runtime | batch | dense ms | "
            + " | ".join(f"{int(r * 100)}% of channels removed" for r in ratios)
            + " |\n|---|---|---:|---:|" + "---:|" * len(ratios))
    return head + "\n" + "\n".join(rows)


def tflite_table(sparsities: tuple[float, ...], batches: tuple[int, ...], runs: int) -> tuple[str, list[str], str]:
    """TFLite (XNNPACK delegate) latency of the dense and the sparse flatbuffers of the Keras CNN, and sizes."""
    import keras
    import tensorflow as tf
    from sparsify_tf.tflite import convert
    from sparsify_tf.xnnpack import xnnpack_report, xnnpack_sparse_on_this_cpu
    from sparsify_keras import find_prunable_weights, prune_oneshot
    base = keras_mobilenet()
    flat = {"dense": convert(lambda: tf.lite.TFLiteConverter.from_keras_model(base), sparse=False)}
    ready = []
    for s in sparsities:
        m = keras.models.clone_model(base)
        m.set_weights(base.get_weights())
        shapes = {w.path: w.canonical_shape for w in find_prunable_weights(m)}
        cfg = runtime_config("xnnpack", shapes, target_sparsity=max(s, 0.7)).replace(target_sparsity=s)
        prune_oneshot(m, cfg)
        ready.append(f"{int(s * 100)}%: {'ready' if xnnpack_report(m)['ready'] else 'not ready'}")
        flat[f"sparse {s}"] = convert(lambda m=m: tf.lite.TFLiteConverter.from_keras_model(m), sparse=True)
    rows = []
    for b in batches:
        its = {}
        x = np.random.default_rng(0).normal(size=(b, IMAGE, IMAGE, 3)).astype(np.float32)
        for k, content in flat.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # "tf.lite.Interpreter is deprecated": still TF's, and used here
                it = tf.lite.Interpreter(model_content=content, num_threads=1)
            idx = it.get_input_details()[0]["index"]
            it.resize_tensor_input(idx, list(x.shape))
            it.allocate_tensors()
            it.set_tensor(idx, x)
            its[k] = it
        ms = round_robin({k: it.invoke for k, it in its.items()}, runs)
        rows.append(f"| MobileNet-style CNN (129x129), 1x1 convs in 4x1 blocks | {b} | {ms['dense']:.2f} | "
                    + " | ".join(_cell(ms[f"sparse {s}"], ms["dense"]) for s in sparsities) + " |")
    d = len(flat["dense"])
    sizes = [f"| MobileNet-style CNN (129x129), 1x1 convs in 4x1 blocks | TFLite, EXPERIMENTAL_SPARSITY | "
             f"{d / 1024:.0f} KiB | " + " | ".join(f"{len(flat[f'sparse {s}']) / 1024:.0f} KiB "
                                                  f"({len(flat[f'sparse {s}']) / d:.2f}x)" for s in sparsities) + " |"]
    head = ("| model | batch | dense ms | " + " | ".join(f"{int(s * 100)}%" for s in sparsities)
            + " |\n|---|---:|---:|" + "---:|" * len(sparsities))
    note = (f"xnnpack_report: {', '.join(ready)}. This CPU: {xnnpack_sparse_on_this_cpu()[1]}.")
    return head + "\n" + "\n".join(rows), sizes, note


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer runs, 90%% only (a smoke run, about a minute)")
    parser.add_argument("--runs", type=int, default=None, help="calls per variant (default 30, --quick 5)")
    parser.add_argument("--block", type=int, default=16, help="BSR block size (square; default 16)")
    parser.add_argument("--no-write", action="store_true", help="print the tables without updating RESULTS.md")
    parser.add_argument("--keras-only", action="store_true", help="only the Keras 3 structured section")
    args = parser.parse_args(argv)
    runs = args.runs or (5 if args.quick else 30)
    from bench import deploy_keras
    if args.keras_only:
        deploy_keras.run(keras_mobilenet, round_robin, runs, write=not args.no_write)
        return
    sparsities = (0.9,) if args.quick else SPARSITIES
    torch.set_num_threads(1)
    flush_denormal = torch.set_flush_denormal(True)     # here, not at import: it is process-wide CPU state
    start = time.perf_counter()
    models = torch_models()
    t_torch, pruned = torch_table(models, sparsities, (1, 8), runs, args.block)
    with tempfile.TemporaryDirectory() as work:
        t_onnx, onnx_sizes = onnx_table(models, pruned, sparsities, (1, 8), runs, work)
        t_struct = structured_table(models, (0.5,) if args.quick else (0.5, 0.7), (1, 8), runs, work)
    t_tflite, tflite_sizes, tflite_note = tflite_table(sparsities, (1, 8), runs)
    sizes = torch_sizes(models, pruned, sparsities) + onnx_sizes + tflite_sizes
    size_head = ("| model | format | dense | " + " | ".join(f"{int(s * 100)}%" for s in sparsities)
                 + " |\n|---|---|---:|" + "---:|" * len(sparsities))
    import onnxruntime
    import tensorflow as tf
    body = "\n\n".join([
        "### PyTorch on CPU (`sparsify_torch.to_sparse_inference`)\n\nMedian ms per forward pass; in brackets "
        "dense / sparse (above 1: faster than dense).\n\n" + t_torch,
        f"### ONNX (`sparsify_torch.onnx_export`, onnxruntime {onnxruntime.__version__}, CPUExecutionProvider)\n\n"
        "`sparse_initializer`: ONNX's SparseTensorProto (int64 positions), densified when the session loads; "
        "`bitmask`: packed bits + values, decoded by standard ops that onnxruntime folds at load. Either way the "
        "file shrinks and the latency is dense's.\n\n"
        + t_onnx,
        f"### TFLite (TensorFlow {tf.__version__}, XNNPACK delegate)\n\n{tflite_note}\n\n" + t_tflite,
        "### Structured: channels removed (`sparsify_torch.channels.calibrate_and_prune_model_equal`)\n\n"
        "A physically smaller dense model (the same fraction of channels removed from every prunable group, one "
        "calibration batch of 2), run by torch and by onnxruntime (exported dense). Median ms; in brackets dense "
        "/ pruned.\n\n" + t_struct,
        "### File size on disk (in brackets: sparse / dense)\n\n" + size_head + "\n" + "\n".join(sizes),
        f"One thread in every runtime (torch.set_num_threads(1), onnxruntime intra/inter-op 1, TFLite 1); "
        f"torch.set_flush_denormal(True) used: {flush_denormal}. Median of {runs} calls per variant, all variants "
        "of a model and batch round robin in one loop. Weights random (one-shot magnitude pruning): latency does not "
        f"depend on their values. BSR blocks {args.block}x{args.block} (layers the block does not divide stay "
        f"dense). Whole run {time.perf_counter() - start:.0f} s.\n\nCommand: `python -m bench.bench_deploy"
        f"{' --quick' if args.quick else ''}`"])
    publish("bench_deploy", body, write=not args.no_write)
    deploy_keras.run(keras_mobilenet, round_robin, runs, write=not args.no_write)


if __name__ == "__main__":
    main()
