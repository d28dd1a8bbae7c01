"""TensorBoard scalars written with TensorFlow alone (no ``tensorboard`` package needed).

Example:
    >>> import tempfile, tensorflow as tf
    >>> with tf.summary.create_file_writer(tempfile.mkdtemp()).as_default(step=0):
    ...     write_scalar("sparsity/total", 0.9)
"""
from __future__ import annotations

import tensorflow as tf

__all__ = ["write_scalar"]


def write_scalar(tag: str, value: float) -> None:
    """A scalar summary as ``tf.summary.scalar`` writes it, into the default summary writer."""
    from tensorflow.core.framework import summary_pb2

    md = summary_pb2.SummaryMetadata()
    md.plugin_data.plugin_name = "scalars"
    md.data_class = summary_pb2.DATA_CLASS_SCALAR
    tf.summary.write(tag, tf.constant(float(value), tf.float32), metadata=md)
