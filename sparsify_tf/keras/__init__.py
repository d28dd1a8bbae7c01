"""tf-keras (Keras 2) pruning: what is tf-keras-specific, behind the one Keras implementation.

:class:`PruningCallback`, :func:`strip_pruning` and :func:`prune_oneshot` are :mod:`sparsify_keras`'s (one
update loop for both Kerases, chosen per model by its class); this package holds the tf-keras driver
(:mod:`.driver`: its state layer, TensorFlow's train-step hooks, the compiled state writer and the mask
update inside the train step). Keras 3 models (any backend) work through the same names.

Needs TensorFlow and tf-keras (``pip install "sparsify-train[tf]"``); Keras 3 on JAX or PyTorch: :mod:`sparsify_keras`.

Example (a tf-keras model scored by ``snip`` from every step's gradients, then stripped):
    >>> import numpy as np, tf_keras
    >>> from sparsify_tf.keras import PruningCallback, strip_pruning
    >>> net = tf_keras.Sequential([tf_keras.layers.InputLayer((6,)), tf_keras.layers.Dense(4, name="hidden")])
    >>> net.compile("sgd", "mse")
    >>> pruning = PruningCallback({"criterion": "snip", "target_sparsity": 0.75, "start_step": 1, "end_step": 1})
    >>> _ = net.fit(np.eye(6)[:4], np.ones((4, 4)), batch_size=2, epochs=2, verbose=0, callbacks=[pruning])
    >>> pruning.sparsity["hidden/kernel"], int((strip_pruning(net).get_layer("hidden").kernel.numpy() != 0).sum())
    (0.75, 6)
"""
import importlib.util as _util
import os as _os

if _util.find_spec("tf_keras") is None:                       # pragma: no cover - the tf extra installs it
    _backend = _os.environ.get("KERAS_BACKEND", "")
    from sparsify.extras import install_command

    raise ImportError("sparsify_tf.keras prunes tf-keras (Keras 2) models and needs tf-keras: "
                      + install_command("tf") + (f" (KERAS_BACKEND={_backend!r} here)" if _backend else "")
                      + "; for Keras 3 on JAX, PyTorch or TensorFlow use sparsify_keras "
                        "(from sparsify_keras import PruningCallback, strip_pruning, prune_oneshot)")

from sparsify_keras import (PruningCallback, STATE_ATTR, KerasPrunableWeight, find_prunable_weights,  # noqa: E402
                            keras_flavor, prune_oneshot, strip_pruning, weight_kinds)

from .distillation import DistillationModel  # noqa: E402

__all__ = ["PruningCallback", "DistillationModel", "strip_pruning", "prune_oneshot", "find_prunable_weights", "KerasPrunableWeight",
           "weight_kinds", "keras_flavor", "STATE_ATTR"]
