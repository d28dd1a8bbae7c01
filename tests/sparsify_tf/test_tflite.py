"""`sparsify_tf.tflite`: a pruned weight converted with and without TensorFlow's sparsity optimisation (the
sparse flatbuffer smaller, both computing the model's outputs), and the inputs made for an interpreter."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from sparsify_tf.tflite import convert, load_interpreter, random_inputs, run_tflite  # noqa: E402


class _Linear(tf.Module):
    def __init__(self, kernel: np.ndarray) -> None:
        super().__init__()
        self.kernel = tf.Variable(kernel)

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32)])
    def __call__(self, x):
        return tf.matmul(x, self.kernel)


def _pruned_kernel() -> np.ndarray:
    w = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
    w[np.abs(w) < np.quantile(np.abs(w), 0.9)] = 0.0            # 90% zeros
    return w


def test_sparse_flatbuffer_is_smaller_and_computes_the_same_outputs():
    w = _pruned_kernel()
    module = _Linear(w)

    def make():
        return tf.lite.TFLiteConverter.from_concrete_functions([module.__call__.get_concrete_function()], module)

    dense, sparse = convert(make, sparse=False), convert(make, sparse=True)
    assert len(sparse) < len(dense)
    x = np.random.default_rng(1).normal(size=(3, 64)).astype(np.float32)
    for flat in (dense, sparse):
        np.testing.assert_allclose(run_tflite(flat, [x])[0], x @ w, rtol=1e-5, atol=1e-5)


def test_random_inputs_follow_the_interpreters_details():
    module = _Linear(_pruned_kernel())
    flat = convert(lambda: tf.lite.TFLiteConverter.from_concrete_functions(
        [module.__call__.get_concrete_function()], module), sparse=False)
    details = load_interpreter(flat).get_input_details()
    (x,) = random_inputs(details, batch=5, seed=3)
    assert x.shape == (5, 64) and x.dtype == np.float32
    np.testing.assert_array_equal(x, random_inputs(details, batch=5, seed=3)[0])
    assert random_inputs([{"shape": [1, 2], "dtype": np.int32}], batch=4)[0].tolist() == [[0, 0]] * 4
