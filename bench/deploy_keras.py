"""The Keras 3 structured part of the deploy benchmark: channels removed by ``sparsify_keras.remove_channels``.

The bench's MobileNet-style CNN in Keras (``bench.bench_deploy.keras_mobilenet``), dense and with 50% and
75% of the channels of every prunable group removed (L1 criterion; the last 1x1 convolution feeds the output
and stays whole): latency of Keras ``model(x, training=False)`` on the installed default backend and, with
TensorFlow, of each model's TFLite flatbuffer (XNNPACK delegate, one thread); sizes of the ``.keras`` and
``.tflite`` files on disk. Written by ``python -m bench.bench_deploy --keras-only`` (or the full run) into the
``bench_deploy_keras`` section of bench/RESULTS.md.
"""
from __future__ import annotations

import os
import time
import warnings
from typing import Any, Callable

import numpy as np

RATIOS = (0.5, 0.75)


def _one_thread() -> str:
    """Ask TensorFlow for one intra-op and one inter-op thread (possible only before it first runs)."""
    try:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        return "TensorFlow intra/inter-op threads 1"
    except ImportError:
        return "no TensorFlow"
    except RuntimeError:
        return "TensorFlow already initialised: its default thread count"


def _tflite(model: Any, batch: int, x: np.ndarray) -> tuple[bytes, Any]:
    import tensorflow as tf
    from sparsify_tf.tflite import convert
    content = convert(lambda: tf.lite.TFLiteConverter.from_keras_model(model), sparse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # "tf.lite.Interpreter is deprecated": still TF's, and used here
        it = tf.lite.Interpreter(model_content=content, num_threads=1)
    idx = it.get_input_details()[0]["index"]
    it.resize_tensor_input(idx, [batch, *x.shape[1:]])
    it.allocate_tensors()
    it.set_tensor(idx, x[:batch])
    return content, it


def _cell(ms: float, dense: float) -> str:
    return f"{ms:.2f} ({dense / ms:.2f}x)"


def keras_structured_section(build: Callable[[], Any], round_robin: Callable, batches: tuple[int, ...], runs: int,
                             work: str, ratios: tuple[float, ...] = RATIOS) -> str:
    """The section's body: latency rows per runtime and batch, then params and file sizes."""
    threads = _one_thread()
    import keras
    from sparsify_keras import channel_plan, remove_channels
    base = build()
    variants = {"dense": base}
    for r in ratios:
        variants[str(r)] = remove_channels(base, r)
    widths = channel_plan(base, ratios[0]).graph.producers
    sizes = {}
    for k, m in variants.items():
        path = os.path.join(work, f"k{k}.keras")
        m.save(path)
        sizes[k] = os.path.getsize(path)
    x = np.random.default_rng(0).normal(size=(max(batches), *base.input_shape[1:])).astype(np.float32)
    rows, tflite_sizes, has_tf = [], {}, keras.backend.backend() == "tensorflow" or _has_tf()
    for b in batches:
        xb = keras.ops.convert_to_tensor(x[:b])
        ms = round_robin({k: (lambda m=m: keras.ops.convert_to_numpy(m(xb, training=False)))
                          for k, m in variants.items()}, runs)
        rows.append(f"| Keras {keras.__version__} ({keras.backend.backend()}), `model(x, training=False)` | {b} | "
                    f"{ms['dense']:.2f} | " + " | ".join(_cell(ms[str(r)], ms["dense"]) for r in ratios) + " |")
        if has_tf:
            its = {}
            for k, m in variants.items():
                content, its[k] = _tflite(m, b, x)
                tflite_sizes[k] = len(content)
            ms = round_robin({k: it.invoke for k, it in its.items()}, runs)
            rows.append(f"| TFLite (XNNPACK, 1 thread) | {b} | {ms['dense']:.2f} | "
                        + " | ".join(_cell(ms[str(r)], ms["dense"]) for r in ratios) + " |")
    rows.append("| params | - | " + " | ".join(f"{variants[k].count_params() / 1e3:.0f} k" for k in variants) + " |")
    for name, got in ((".keras file", sizes), (".tflite file", tflite_sizes)):
        if got:
            rows.append(f"| {name} | - | {got['dense'] / 1024:.0f} KiB | " + " | ".join(
                f"{got[str(r)] / 1024:.0f} KiB ({got[str(r)] / got['dense']:.2f}x)" for r in ratios) + " |")
    kept = {str(r): [variants[str(r)].get_layer(n).filters for n in widths] for r in ratios}
    head = ("| runtime | batch | dense ms | " + " | ".join(f"{int(r * 100)}% of channels removed" for r in ratios)
            + " |\n|---|---:|---:|" + "---:|" * len(ratios))
    note = (f"`sparsify_keras.remove_channels(model, ratio)` (L1 of each output channel's kernel; every output "
            f"equals the dense model's with the removed channels zeroed, checked at removal). Filters of the "
            f"stem and the 8 1x1 convolutions: dense {[base.get_layer(n).filters for n in widths]}, "
            + ", ".join(f"{int(float(r) * 100)}%: {v}" for r, v in kept.items())
            + f" (the last feeds the output). Median ms of {runs} calls, the variants of one batch round robin; "
            f"in brackets dense / pruned. {threads}; TFLite with 1 thread.")
    return note + "\n\n" + head + "\n" + "\n".join(rows)


def _has_tf() -> bool:
    try:
        import tensorflow  # noqa: F401
        return True
    except ImportError:
        return False


def run(build: Callable[[], Any], round_robin: Callable, runs: int, write: bool) -> None:
    """Measure and publish the ``bench_deploy_keras`` section."""
    import tempfile
    from bench._results import publish
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        body = keras_structured_section(build, round_robin, (1, 8), runs, work)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    body += (f"\n\nLoad average at the end (1, 5, 15 min): {load} on {os.cpu_count()} cores: above the core count, "
             f"ratios within 10-25% of 1.0 are noise. Whole run {time.perf_counter() - start:.0f} s. Command: "
             "`python -m bench.bench_deploy --keras-only`")
    publish("bench_deploy_keras", "### Keras 3 structured: channels removed (`sparsify_keras.remove_channels`)\n\n"
            + body, write=write)
