"""The seed's small graph helpers (``sparseml.tensorflow_v1.utils``) that its pruning code is used with.

:func:`get_op_input_var` finds the weight input of an op and
:func:`eval_tensor_sparsity` measures the fraction of zeros of a tensor in a
session; both keep the seed's names and arguments.

Example:
    >>> import numpy as np, tensorflow as tf
    >>> tf1 = tf.compat.v1
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf1.placeholder(tf.float32, [None, 2])
    ...     w = tf1.get_variable("w", initializer=np.array([[0.0, 2.0], [3.0, 0.0]], np.float32))
    ...     y = tf.matmul(x, w)
    ...     weight = get_op_input_var(y.op)
    >>> with tf1.Session(graph=g) as sess:
    ...     sess.run(tf1.global_variables_initializer())
    ...     eval_tensor_sparsity(weight, sess)
    0.5
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..common.graph_utils import prunable_input_of, trace_variable_name

__all__ = ["VAR_INDEX_FROM_TRAINABLE", "get_op_input_var", "eval_tensor_sparsity"]

tf1 = tf.compat.v1

#: ``var_index`` of :func:`get_op_input_var` meaning "the input that reads a trainable variable".
VAR_INDEX_FROM_TRAINABLE = "from_trainable"


def get_op_input_var(operation: tf.Operation, var_index: int | str = VAR_INDEX_FROM_TRAINABLE) -> tf.Tensor:
    """The input tensor of ``operation`` that reads a variable.

    Args:
        operation: the op (e.g. a MatMul or Conv2D).
        var_index: an input index, or :data:`VAR_INDEX_FROM_TRAINABLE`: the prunable weight input,
            else the first input reading a trainable variable.

    Raises:
        ValueError: no such input.
    """
    if not isinstance(operation, tf.Operation):
        raise TypeError(f"operation must be a tf.Operation, got {operation!r}")
    if var_index != VAR_INDEX_FROM_TRAINABLE:
        if isinstance(var_index, bool) or not isinstance(var_index, int) or not 0 <= var_index < len(operation.inputs):
            raise ValueError(f"var_index must be {VAR_INDEX_FROM_TRAINABLE!r} or an input index of "
                             f"{operation.name!r} in [0, {len(operation.inputs)}), got {var_index!r}")
        return operation.inputs[var_index]
    found = prunable_input_of(operation)
    if found is not None:
        return found.tensor
    trainable = {v.op.name for v in operation.graph.get_collection(tf1.GraphKeys.TRAINABLE_VARIABLES)}
    for t in operation.inputs:
        if trace_variable_name(t) in trainable:
            return t
    raise ValueError(f"op {operation.name!r} reads no trainable variable")


def eval_tensor_sparsity(tens: tf.Tensor | tf.Variable, sess: tf1.Session | None = None) -> float:
    """Fraction of zeros of ``tens`` evaluated in ``sess`` (default: the default session)."""
    sess = sess or tf1.get_default_session()
    if sess is None:
        raise ValueError("eval_tensor_sparsity needs sess or a default session (inside `with tf1.Session():`)")
    value = np.asarray(sess.run(tens))
    return float(1.0 - np.count_nonzero(value) / value.size) if value.size else 0.0
