"""tf-keras (Keras 2) pruning: what is tf-keras-specific, behind the one Keras implementation.

:class:`PruningCallback`, :func:`strip_pruning` and :func:`prune_oneshot` are :mod:`sparsify_keras`'s (one
update loop for both Kerases, chosen per model by its class); this package holds the tf-keras driver
(:mod:`.driver`: its state layer, TensorFlow's train-step hooks, the compiled state writer and the mask
update inside the train step). Keras 3 models (any backend) work through the same names.

Needs TensorFlow and tf-keras (sparsify's ``tf`` extra); Keras 3 on JAX or PyTorch: :mod:`sparsify_keras`.

Example:
    >>> import numpy as np, tf_keras
    >>> from sparsify_tf.keras import PruningCallback, strip_pruning
    >>> x, y = np.random.default_rng(0).standard_normal((32, 8)).astype("float32"), np.arange(32) % 2
    >>> model = tf_keras.Sequential([tf_keras.layers.InputLayer((8,)), tf_keras.layers.Dense(4),
    ...                              tf_keras.layers.Dense(2)])
    >>> model.compile("adam", tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> cb = PruningCallback({"target_sparsity": 0.5, "end_step": 4, "pruning_frequency": 2})
    >>> _ = model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[cb])
    >>> model = strip_pruning(model)                   # a plain Keras model with the zeros baked in
    >>> float((model.layers[0].kernel.numpy() == 0).mean())
    0.5
"""
import importlib.util as _util
import os as _os

if _util.find_spec("tf_keras") is None:                       # pragma: no cover - the tf extra installs it
    _backend = _os.environ.get("KERAS_BACKEND", "")
    raise ImportError("sparsify_tf.keras prunes tf-keras (Keras 2) models and needs tf-keras: install sparsify's "
                      "`tf` extra" + (f" (KERAS_BACKEND={_backend!r} here)" if _backend else "")
                      + "; for Keras 3 on JAX, PyTorch or TensorFlow use sparsify_keras "
                        "(from sparsify_keras import PruningCallback, strip_pruning, prune_oneshot)")

from sparsify_keras import (PruningCallback, STATE_ATTR, KerasPrunableWeight, find_prunable_weights,  # noqa: E402
                            keras_flavor, prune_oneshot, strip_pruning, weight_kinds)

__all__ = ["PruningCallback", "strip_pruning", "prune_oneshot", "find_prunable_weights", "KerasPrunableWeight",
           "weight_kinds", "keras_flavor", "STATE_ATTR"]
