"""TFLite conversion with TensorFlow's sparsity optimisation, and running a flatbuffer: what ``sparsify export
--to tflite``, :func:`sparsify_tf.export_tflite_xnnpack` and the deployment benchmarks share.

:func:`convert` converts once, dense (no optimisation) or sparse (``tf.lite.Optimize.EXPERIMENTAL_SPARSITY``:
sparse constant tensors stored in TFLite's sparse format); :func:`run_tflite` runs a flatbuffer on inputs
with LiteRT's interpreter (``ai_edge_litert``) when it is installed, TensorFlow's ``tf.lite.Interpreter``
otherwise (:func:`load_interpreter`); :func:`random_inputs` makes inputs for an interpreter's input details.
The converter's prints, native logs and deprecation warnings are silenced (:func:`quiet`).

Example:
    >>> import numpy as np, tensorflow as tf
    >>> fn = tf.function(lambda x: 2.0 * x, input_signature=[tf.TensorSpec([1, 3], tf.float32)])
    >>> flat = convert(lambda: tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()]))
    >>> run_tflite(flat, [np.ones((1, 3), np.float32)])[0].tolist()
    [[2.0, 2.0, 2.0]]
"""
from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any, Callable, Iterator

import numpy as np
import tensorflow as tf

from sparsify.native_stderr import native_stderr_silenced

__all__ = ["quiet", "convert", "load_interpreter", "random_inputs", "run_tflite"]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No prints (Keras' "Saved artifact at ..."), no native converter logs, no deprecation warnings."""
    with contextlib.redirect_stdout(io.StringIO()), native_stderr_silenced(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def convert(make_converter: Callable[[], Any], sparse: bool = True) -> bytes:
    """One TFLite conversion of the converter ``make_converter()`` returns, with the sparsity optimisation
    (``sparse=True``) or without (the dense baseline)."""
    converter = make_converter()
    if sparse:
        converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    with quiet():
        return bytes(converter.convert())


def load_interpreter(content: bytes) -> Any:
    """A TFLite interpreter for ``content`` (LiteRT's if installed, else TensorFlow's)."""
    try:
        from ai_edge_litert.interpreter import Interpreter  # type: ignore[import-not-found]
    except ImportError:
        with warnings.catch_warnings(), native_stderr_silenced():   # TensorFlow points to LiteRT; it still ships this
            warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated.*")
            return tf.lite.Interpreter(model_content=content)
    with native_stderr_silenced():
        return Interpreter(model_content=content)


def random_inputs(details: list[dict[str, Any]], batch: int, seed: int = 0) -> list[np.ndarray]:
    """Inputs for an interpreter's input ``details``: standard normal floats (zeros for other dtypes), the first
    dimension ``batch`` where it is free or 1, other free dimensions 1.

    Example:
        >>> [x.shape for x in random_inputs([{"shape": [1, 4], "dtype": np.float32}], batch=3)]
        [(3, 4)]
    """
    rng = np.random.default_rng(seed)
    out = []
    for d in details:
        shape = [int(s) for s in (d.get("shape_signature") if d.get("shape_signature") is not None else d["shape"])]
        shape = [batch if i == 0 and s in (-1, 1) else (1 if s < 0 else s) for i, s in enumerate(shape)]
        dtype = np.dtype(d["dtype"])
        out.append(rng.normal(size=shape).astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype))
    return out


def run_tflite(content: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run a flatbuffer on ``inputs`` (in the order of its input details); its outputs in order."""
    it = load_interpreter(content)
    ins = it.get_input_details()
    for d, x in zip(ins, inputs):
        it.resize_tensor_input(d["index"], list(x.shape))
    with native_stderr_silenced():          # "Created TensorFlow Lite XNNPACK delegate for CPU."
        it.allocate_tensors()
        for d, x in zip(ins, inputs):
            it.set_tensor(d["index"], x)
        it.invoke()
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]
