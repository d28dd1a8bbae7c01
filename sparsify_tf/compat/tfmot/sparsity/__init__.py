"""``tfmot.sparsity``: only its ``keras`` part.

Example:
    >>> from sparsify_tf.compat.tfmot import sparsity
    >>> sparsity.keras.prune_low_magnitude.__name__
    'prune_low_magnitude'
"""
from . import keras

__all__ = ["keras"]
