"""Keras 3 pruning on every backend (JAX, PyTorch, TensorFlow): prune during ``model.fit`` with one callback.

Importable without TensorFlow: a JAX or PyTorch user installs ``sparsify-train[jax]`` or
``sparsify-train[keras-torch]``. The same names prune tf-keras (Keras 2) models: the model's class picks its driver
(:mod:`sparsify_keras.driver`; tf-keras's lives in :mod:`sparsify_tf.keras` and needs the ``tf`` extra).

Example:
    >>> import numpy as np, keras
    >>> from sparsify_keras import PruningCallback, strip_pruning
    >>> x, y = np.random.default_rng(0).standard_normal((32, 8)).astype("float32"), np.arange(32) % 2
    >>> model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    >>> model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> cb = PruningCallback({"target_sparsity": 0.5, "end_step": 4, "pruning_frequency": 2})
    >>> _ = model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[cb])
    >>> model = strip_pruning(model)                   # a plain Keras model with the zeros baked in
    >>> float((model.layers[0].kernel.numpy() == 0).mean())
    0.5
"""
from sparsify.extras import missing_framework

try:                                # without Keras, or the backend KERAS_BACKEND names: the extras to install
    import keras as _keras
except ImportError as _e:
    raise missing_framework("sparsify_keras", "keras", "jax", _e, ' (Keras 3 on JAX), "sparsify-train[keras-torch]" '
                            '(on PyTorch) or "sparsify-train[tf]" (on TensorFlow); set KERAS_BACKEND (jax, torch, '
                            'tensorflow) to the installed backend before Keras is first imported') from None

from .callback import PruningCallback
from .channels import ChannelPlan, channel_plan, remove_channels
from .compat import keras_flavor
from .distillation import DistillationModel
from .layers import KerasPrunableWeight, find_prunable_weights, weight_kinds
from .oneshot import prune_oneshot
from .state import STATE_ATTR
from .strip import strip_pruning
from .summary import selection_summary
from .train_step import GRAD_MASKING_OPTIMIZERS, grad_masking_supported

__all__ = ["PruningCallback", "DistillationModel", "strip_pruning", "prune_oneshot", "find_prunable_weights",
           "KerasPrunableWeight", "weight_kinds", "keras_flavor", "STATE_ATTR", "GRAD_MASKING_OPTIMIZERS",
           "grad_masking_supported", "remove_channels", "channel_plan", "ChannelPlan", "selection_summary"]
