"""tfmot's pruning API under tfmot's names: ``import sparsify_tf.compat.tfmot as tfmot``.

Only ``tfmot.sparsity.keras`` (magnitude pruning of Keras models) is provided.

Example:
    >>> import sparsify_tf.compat.tfmot as tfmot
    >>> sorted(n for n in tfmot.sparsity.keras.__all__ if n[0].isupper())[:3]
    ['ConstantSparsity', 'PolynomialDecay', 'PrunableLayer']
"""
from . import sparsity

__all__ = ["sparsity"]
