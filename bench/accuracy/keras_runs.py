"""One Keras accuracy run: tf-keras (Keras 2: dense, ``sparsify_tf.keras.PruningCallback`` or tfmot) or
Keras 3 (dense or ``sparsify_keras.PruningCallback``, on the backend the process imported keras with).

The Keras model computes the torch model's function: explicit ``ZeroPadding`` then ``valid`` convs (torch's
symmetric padding), and a ``Permute`` to channels-first before ``Flatten`` so the Dense kernel is the torch
Linear weight transposed; one builder, :func:`build_model`, takes either keras module. Training is
``model.fit`` with ``shuffle=False`` over the seed's batches in order: tf-keras over a ``tf.data`` pipeline
gathering them, with the callback (sparsify) or ``UpdatePruningStep`` (tfmot); Keras 3 over the NumPy arrays
of the gathered batches (``batch_size`` the problem's batch), which every backend reads. Framework
``keras_jax`` of ``bench/bench_accuracy.py`` is :func:`run_keras3` in a process started with
``KERAS_BACKEND=jax`` (a Keras backend is fixed when keras is first imported).

tfmot gets ``PolynomialDecay(0, target, begin_step=start + 1, end_step=end + 1, power=3, frequency=f)``
(tfmot adds one to its step before it updates). Its ``sparsity_m_by_n=(2, 4)`` sets the 2:4 masks once, at
its first step (the schedule is ignored) and only on rank-2/4 weights; its blocks need rank-2 weights: a
setting tfmot cannot express on a selected layer is recorded as ``unsupported`` with tfmot's reason.

Example:
    >>> from bench.accuracy.problems import problem, setting, sparsify_config
    >>> spec, s = problem("digits").scaled(20), setting("90")
    >>> r = run_keras(spec, s, "default", sparsify_config(spec, s, {}), seed=0)
    >>> r["status"], r["sparsity"] > 0.89
    ('ok', True)

Keras 3 (``run_keras3``, the same record) needs its own process: ``KERAS_BACKEND=jax python -c ...``; see
``tests/bench/test_bench_accuracy.py``.
"""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from .problems import (PEER_ARMS, Layer, Problem, Setting, batch_order, init_weights, load_data, selected_layers,
                       summarize)

__all__ = ["build_model", "run_keras", "run_keras3", "tfmot_limitation", "single_thread"]


def build_model(layers: list[Layer], weights: dict[str, np.ndarray], input_shape: tuple[int, ...], K: Any = None):
    """Keras Sequential equal to :class:`bench.accuracy.torch_runs.Net`, loaded with ``weights``.

    ``K`` is the keras module to build with: ``tf_keras`` (the default) or Keras 3's ``keras``.
    """
    if K is None:
        import tf_keras as K

    model = K.Sequential([K.layers.InputLayer(input_shape + (1,))])
    conv_rank = len(input_shape)
    for layer in layers:
        w, b = weights[f"{layer.name}.weight"], weights[f"{layer.name}.bias"]
        if layer.kind == "linear":
            model.add(K.layers.Permute((conv_rank + 1,) + tuple(range(1, conv_rank + 1))))  # channels first
            model.add(K.layers.Flatten())
            dense = K.layers.Dense(layer.cout, name=layer.name)
            model.add(dense)
            dense.set_weights([w.T, b])
            continue
        pad = K.layers.ZeroPadding1D if layer.kind == "conv1d" else K.layers.ZeroPadding2D
        conv = K.layers.Conv1D if layer.kind == "conv1d" else K.layers.Conv2D
        if layer.padding:
            model.add(pad(layer.padding))
        c = conv(layer.cout, layer.kernel, strides=layer.stride, activation="relu", name=layer.name)
        model.add(c)
        c.set_weights([np.moveaxis(w, (0, 1), (-1, -2)), b])     # (out, in, *k) -> (*k, in, out)
    return model


def tfmot_limitation(spec: Problem, s: Setting) -> str:
    """Why tfmot cannot run a setting on this model ('' when it can)."""
    ranks = {layer.name: len(layer.shape) for layer in spec.layers(s) if layer.name in selected_layers(spec, s)}
    if s.pattern == "2:4" and any(r not in (2, 4) for r in ranks.values()):
        return "tfmot sparsity_m_by_n supports rank-2/4 weights only (this model has Conv1D kernels)"
    if s.pattern == "4x1" and any(r != 2 for r in ranks.values()):
        return "tfmot block_size needs 2-D weights ('Block Sparsity can only be used for layers which have " \
               "2-dimensional weights'); the model's selected layers include convolutions"
    return ""


def _tfmot_wrap(model, spec: Problem, s: Setting):
    import tensorflow_model_optimization as tfmot
    import tf_keras as K

    sched = tfmot.sparsity.keras.PolynomialDecay(0.0, s.target, begin_step=spec.start + 1, end_step=spec.end + 1,
                                                 power=3, frequency=spec.frequency)
    extra: dict[str, Any] = {}
    if s.pattern == "2:4":
        extra["sparsity_m_by_n"] = (2, 4)
    elif s.pattern == "4x1":
        extra["block_size"] = (1, 4)        # Dense kernel (in, out): 4 output channels together
    chosen = set(selected_layers(spec, s))

    def wrap(layer):
        if layer.name in chosen:
            return tfmot.sparsity.keras.prune_low_magnitude(layer, pruning_schedule=sched, **extra)
        return layer.__class__.from_config(layer.get_config())

    wrapped = K.models.clone_model(model, clone_function=wrap)
    for layer in spec.layers(s):
        if layer.name in chosen:
            target = wrapped.get_layer(f"prune_low_magnitude_{layer.name}").layer
        else:
            target = wrapped.get_layer(layer.name)
        target.set_weights(model.get_layer(layer.name).get_weights())
    return wrapped, [tfmot.sparsity.keras.UpdatePruningStep()]


def single_thread() -> bool:
    """One TF thread (intra and inter op) if TF is not initialized yet; True if TF runs single-threaded."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:        # TF already initialized in this process: keep its threads
        pass
    return (tf.config.threading.get_intra_op_parallelism_threads(),
            tf.config.threading.get_inter_op_parallelism_threads()) == (1, 1)


def run_keras(spec: Problem, s: Setting, arm: str, config: dict[str, Any] | None, seed: int) -> dict[str, Any]:
    """Train one run with ``model.fit``; the same record as :func:`bench.accuracy.torch_runs.run_torch`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tf_keras as K

    single_thread()
    if arm == "tfmot" and tfmot_limitation(spec, s):
        return {"status": "unsupported", "reason": tfmot_limitation(spec, s)}
    x, y, xt, yt = load_data(spec.name)
    order = batch_order(spec, len(x), seed)
    K.utils.set_random_seed(seed)
    model = build_model(spec.layers(s), init_weights(spec, s, seed), x.shape[1:])
    callbacks: list = []
    if arm == "tfmot":
        model, callbacks = _tfmot_wrap(model, spec, s)
    elif arm != "dense":
        from sparsify_tf.keras import PruningCallback

        callbacks = [PruningCallback(config)]
    model.compile(K.optimizers.Adam(spec.lr), K.losses.SparseCategoricalCrossentropy(from_logits=True))
    xs, ys = tf.constant(x[..., None]), tf.constant(y)
    data = tf.data.Dataset.from_tensor_slices(order).map(lambda i: (tf.gather(xs, i), tf.gather(ys, i)))
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(data.prefetch(2), epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    if arm == "tfmot":
        import tensorflow_model_optimization as tfmot

        model = tfmot.sparsity.keras.strip_pruning(model)
    elif arm != "dense":
        from sparsify_tf.keras import strip_pruning

        model = strip_pruning(model) or model
    return {**_record(model, spec, s, xt, yt, seconds, cpu), "single_thread": single_thread()}


def _record(model: Any, spec: Problem, s: Setting, xt: np.ndarray, yt: np.ndarray, seconds: float,
            cpu: float) -> dict[str, Any]:
    """Test accuracy and the final kernels (canonical torch layout) of a trained Keras model, summarized."""
    logits = np.asarray(model.predict(xt[..., None], batch_size=1000, verbose=0))
    acc = float((logits.argmax(1) == yt).mean())
    weights = {}
    for layer in spec.layers(s):
        kernel = np.asarray(model.get_layer(layer.name).get_weights()[0])
        weights[layer.name] = kernel.T if layer.kind == "linear" else np.moveaxis(kernel, (-1, -2), (0, 1))
    return summarize(weights, spec, s, acc, seconds, cpu)


def run_keras3(spec: Problem, s: Setting, arm: str, config: dict[str, Any] | None, seed: int) -> dict[str, Any]:
    """Train one run with Keras 3's ``model.fit`` on this process's backend; the record of :func:`run_keras`.

    ``dense`` or a sparsify arm (``sparsify_keras.PruningCallback(config)``, stripped before testing); the
    peer arms (tfmot, torch.ao) are not Keras 3 and are recorded as ``unsupported``.
    """
    import keras

    if arm in PEER_ARMS:
        return {"status": "unsupported", "reason": f"{arm} does not run on Keras 3 (its framework: "
                                                   f"{PEER_ARMS[arm]})"}
    x, y, xt, yt = load_data(spec.name)
    order = batch_order(spec, len(x), seed).reshape(-1)
    keras.utils.set_random_seed(seed)
    model = build_model(spec.layers(s), init_weights(spec, s, seed), x.shape[1:], keras)
    callbacks: list = []
    if arm != "dense":
        from sparsify_keras import PruningCallback

        callbacks = [PruningCallback(config)]
    model.compile(keras.optimizers.Adam(spec.lr), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    xs, ys = x[order][..., None], y[order]          # the batches in order: step i is rows [i*batch, (i+1)*batch)
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(xs, ys, batch_size=spec.batch, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    if arm != "dense":
        from sparsify_keras import strip_pruning

        model = strip_pruning(model)
    return {**_record(model, spec, s, xt, yt, seconds, cpu), "backend": keras.backend.backend()}
