"""Drop-in homes for users of other pruning libraries.

* :mod:`sparsify_tf.compat.tfmot`: ``import sparsify_tf.compat.tfmot as tfmot`` gives
  ``tfmot.sparsity.keras`` (tfmot's Keras pruning API, its arithmetic) on Keras 3 and tf-keras.

Example:
    >>> import sparsify_tf.compat.tfmot as tfmot
    >>> tfmot.sparsity.keras.ConstantSparsity(0.5, begin_step=0).target_sparsity
    0.5
"""
__all__: list[str] = []
