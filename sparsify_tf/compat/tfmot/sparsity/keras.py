"""``tfmot.sparsity.keras``: magnitude pruning of Keras models, tfmot's names and numbers.

Change ``import tensorflow_model_optimization as tfmot`` into
``import sparsify_tf.compat.tfmot as tfmot`` and tfmot's code runs on Keras 3
(``keras``/``tf.keras``) and tf-keras. On tf-keras, with the same initial
weights and data, training gives the kernels tfmot gives: the schedule and
mask arithmetic follow tfmot's (see :mod:`sparsify_tf.compat.tfmot_arithmetic`,
the one place that does; ``sparsify.PruningConfig`` counts differently).

Example:
    >>> import numpy as np, keras
    >>> import sparsify_tf.compat.tfmot as tfmot
    >>> model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="fc")])
    >>> pruned = tfmot.sparsity.keras.prune_low_magnitude(
    ...     model, pruning_schedule=tfmot.sparsity.keras.ConstantSparsity(0.75, begin_step=0, frequency=1))
    >>> pruned.compile("sgd", "mse")
    >>> _ = pruned.fit(np.ones((4, 8)), np.ones((4, 4)), verbose=0,
    ...                callbacks=[tfmot.sparsity.keras.UpdatePruningStep()])
    >>> kernel = tfmot.sparsity.keras.strip_pruning(pruned).get_layer("fc").kernel.numpy()
    >>> int((kernel == 0).sum())
    24
"""
from ...tfmot_api import prune_low_magnitude, prune_scope, strip_pruning
from ...tfmot_arithmetic import ConstantSparsity, PolynomialDecay, PruningSchedule
from ...tfmot_callbacks import PruningSummaries, UpdatePruningStep
from ...tfmot_registry import PrunableLayer

__all__ = ["prune_low_magnitude", "strip_pruning", "prune_scope", "ConstantSparsity", "PolynomialDecay",
           "PruningSchedule", "UpdatePruningStep", "PruningSummaries", "PrunableLayer"]
