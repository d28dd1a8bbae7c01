"""Keras 3 pruning scenarios run under one backend per process (``python scenarios.py BACKEND OUT [NAMES]``).

A Keras backend is fixed when Keras is first imported, so the tests (:mod:`backend_runs`) run this file
once per backend in a subprocess and compare what it writes (JSON) across backends and with the core.
Every scenario starts from the same NumPy weights and data (:func:`model_and_data`) and returns plain
lists. Run by hand: ``KERAS_BACKEND=jax python tests/sparsify_keras/scenarios.py jax out.json``.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np

BACKEND = sys.argv[1] if __name__ == "__main__" else os.environ.get("KERAS_BACKEND", "tensorflow")
os.environ["KERAS_BACKEND"] = BACKEND
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

from sparsify.criteria import register_criterion  # noqa: E402
from sparsify_keras import PruningCallback, prune_oneshot, strip_pruning  # noqa: E402
from sparsify_keras.layers import find_prunable_weights  # noqa: E402

SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def _square(weight, config=None):
    """A user criterion: the square of the weight minus a column ramp (a ranking unlike magnitude's)."""
    return weight.astype(np.float64) ** 2 - 1e-3 * np.arange(weight.shape[1]).reshape(1, -1, *(1,) * (weight.ndim - 2))


def register_user_criterion() -> None:
    """Register ``scenario_square`` (the scenario process does; a test process registers it for its module only)."""
    register_criterion("scenario_square", needs=("weight",))(_square)


def model_and_data(seed: int = 0, n: int = 64):
    """A Functional model, the Dense branch defined first and a deeper Conv2D -> Flatten branch, joined by one
    Concatenate; weights from NumPy (same bits on every backend); inputs and targets."""
    rng = np.random.default_rng(seed)
    a, b = keras.Input((12,), name="a"), keras.Input((6, 6, 4), name="b")
    d = keras.layers.Dense(8, activation="relu", name="dense")(a)
    c = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(b)
    x = keras.layers.Concatenate()([d, keras.layers.Flatten()(c)])
    out = keras.layers.Dense(4, name="head")(x)
    model = keras.Model([a, b], out, name="twobranch")
    model.set_weights([(rng.integers(-8, 9, size=w.shape) / 8).astype("float32") for w in model.get_weights()])
    xa = rng.normal(size=(n, 12)).astype("float32")
    xb = rng.normal(size=(n, 6, 6, 4)).astype("float32")
    y = rng.integers(0, 4, size=n).astype("int32")
    return model, (xa, xb), y


def compile_(model, lr=0.05, opt="sgd"):
    o = keras.optimizers.SGD(lr, momentum=0.9) if opt == "sgd" else keras.optimizers.Adam(lr)
    model.compile(o, keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile="auto")
    return model


def masks_of(cb, model):
    """The callback's masks in the canonical layout, as 0/1 lists, by path."""
    by_path = {pw.path: pw for pw in find_prunable_weights(model)}
    return {p: by_path[p].to_canonical(m).astype(int).tolist() for p, m in cb.masks.items()}


def weights_of(model):
    return {pw.path: pw.to_canonical(np.asarray(pw.variable.numpy())).tolist() for pw in find_prunable_weights(model)}


def fit_history(cfg, lr=0.0, epochs=2, opt="sgd", batch=16, **fit_kw):
    """Masks at the start of every step (after the callback's update there), the final weights, figures."""
    model, x, y = model_and_data()
    compile_(model, lr, opt)
    cb = PruningCallback(cfg)
    history = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            history.append({p: m.astype(int).tolist() for p, m in cb.masks.items()})

    model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0, callbacks=[cb, Record()], **fit_kw)
    return {"history": history, "masks": masks_of(cb, model), "weights": weights_of(model),
            "sparsity": cb.sparsity, "per_step_paths": cb.per_step_paths, "last": cb.last_update_step}


GRADUAL = {"start_step": 0, "end_step": 6, "pruning_frequency": 2, "target_sparsity": 0.5}
# (name, config) cases whose masks every backend must give bit for bit (lr = 0: the weights stay fixed)
MASK_CASES = {
    "unstructured_local": {**GRADUAL},
    "unstructured_global": {**GRADUAL, "pruning_scope": "global"},
    "blocks_2x2_global": {**GRADUAL, "pattern": "2x2", "pruning_scope": "global"},
    "nm_2of4_local": {**GRADUAL, "pattern": "2:4"},
    "row_scope": {**GRADUAL, "pruning_scope": "row", "target_sparsity": 0.75},
    "erk_scope": {**GRADUAL, "pruning_scope": "erk", "target_sparsity": 0.8},
    "user_criterion": {**GRADUAL, "criterion": "scenario_square", "pruning_scope": "global"},
    "wanda_first_layers": {**GRADUAL, "criterion": "wanda", "excluded_op_names": ["head"]},
    "cos_schedule": {**GRADUAL, "sparsity_decay_type": "cos", "target_sparsity": 0.7},
}


@scenario
def masks_lr0():
    return {name: fit_history(cfg) for name, cfg in MASK_CASES.items()}


@scenario
def training():
    """Real training (SGD with momentum, Adam, Adagrad) to 80%: zeros held, exact counts; regrowth; monotone=False."""
    out = {}
    for name, cfg, opt in [("sgd", {}, "sgd"), ("adam_blocks", {"pattern": "4x1"}, "adam"),
                           ("adagrad", {}, "adagrad"),
                           ("rigl", {"regrowth": "rigl", "pruning_scope": "erk"}, "sgd"),
                           ("set", {"regrowth": "set"}, "sgd"), ("free", {"monotone": False}, "sgd")]:
        model, x, y = model_and_data()
        o = {"sgd": keras.optimizers.SGD(0.05, momentum=0.9), "adam": keras.optimizers.Adam(0.01),
             "adagrad": keras.optimizers.Adagrad(0.05)}[opt]
        model.compile(o, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        cb = PruningCallback({"start_step": 0, "end_step": 12, "pruning_frequency": 3, "target_sparsity": 0.8,
                              **cfg})
        history = []

        class Record(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                masks = cb.masks
                zeros_held = all(bool(np.all(pw.variable.numpy()[~masks[pw.path]] == 0))
                                 for pw in cb._state.pweights)
                history.append({"zeros_held": zeros_held, "masks": {p: m.astype(int).tolist()
                                                                    for p, m in masks.items()}})

        model.fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0, callbacks=[cb, Record()])
        out[name] = {"history": history, "sparsity": cb.sparsity, "masks": masks_of(cb, model),
                     "per_step_paths": cb.per_step_paths}
    return out


@scenario
def pruned_values():
    """One update at step 0, then 6 steps of SGD (momentum 0.9, weight decay 0.05) or AdamW: the stored values of
    pruned weights per step, with pruned_gradient "none" (they must not move) and "straight_through"."""
    out = {}
    for opt in ("sgd", "adamw"):
        for mode in ("none", "straight_through"):
            model, x, y = model_and_data()
            o = (keras.optimizers.SGD(0.05, momentum=0.9, weight_decay=0.05) if opt == "sgd"
                 else keras.optimizers.AdamW(0.01, weight_decay=0.05))
            model.compile(o, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 0, "pruned_gradient": mode})
            stored, zeros = [], []

            class Record(keras.callbacks.Callback):
                def on_train_batch_end(self, batch, logs=None):
                    masks = cb.masks
                    stored.append({pw.path: np.asarray(s.numpy()).tolist()
                                   for pw, s in zip(cb._state.pweights, cb._state.stored)})
                    zeros.append(all(bool(np.all(pw.variable.numpy()[~masks[pw.path]] == 0))
                                     for pw in cb._state.pweights))

            model.fit((x[0][:48], x[1][:48]), y[:48], batch_size=8, epochs=1, shuffle=False, verbose=0,
                      callbacks=[cb, Record()])
            out[f"{opt}/{mode}"] = {"stored": stored, "zeros_held": zeros}
    return out


def kernel_gradients(model, x, y):
    """The gradients of the batch loss for the model's kernels, computed here with the backend's own autodiff
    (the reference the train step's per-step criterion scores are checked against)."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    kernels = [pw.variable for pw in find_prunable_weights(model)]
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return [np.asarray(g) for g in tape.gradient(loss, [k.value for k in kernels])]
    if BACKEND == "torch":
        for k in kernels:
            k.value.grad = None
        loss_fn(y, model(x, training=True)).backward()
        out = [k.value.grad.detach().cpu().numpy().copy() for k in kernels]
        for k in kernels:
            k.value.grad = None
        return out
    import jax

    trainable = [v.value for v in model.trainable_variables]
    where = [next(i for i, v in enumerate(model.trainable_variables) if v is k) for k in kernels]

    def loss_of(tv):
        out, _ = model.stateless_call(tv, [v.value for v in model.non_trainable_variables], x, training=True)
        return loss_fn(y, out)

    grads = jax.grad(loss_of)(trainable)
    return [np.asarray(grads[i]) for i in where]


@scenario
def step_scores():
    """snip and snip_momentum at learning rate 0: at the start of every step, the masks and the per-step scores the
    train step kept, and the reference gradient of the batch that step saw (the backend's own autodiff)."""
    out = {}
    for name, cfg in [("snip_local", {**GRADUAL, "criterion": "snip"}),
                      ("snip_momentum_global", {**GRADUAL, "criterion": "snip_momentum", "pruning_scope": "global",
                                                "criterion_momentum": 0.5})]:
        model, x, y = model_and_data()
        compile_(model, lr=0.0)
        cb = PruningCallback(cfg)
        record = {"masks": [], "scores": [], "grads": []}

        class Record(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                masks = cb.masks
                pws = cb._state.pweights
                record["masks"].append({p: m.astype(int).tolist() for p, m in masks.items()})
                record["scores"].append({pw.path: np.asarray(keras.ops.convert_to_numpy(sc.value)).tolist()
                                         for pw, sc in zip(pws, cb._state.scores)})
                lo = (batch * 16) % len(y)
                grads = kernel_gradients(model, (x[0][lo:lo + 16], x[1][lo:lo + 16]), y[lo:lo + 16])
                record["grads"].append({pw.path: g.tolist() for pw, g in zip(find_prunable_weights(model), grads)})

        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[cb, Record()])
        out[name] = {**record, "sparsity": cb.sparsity, "last": cb.last_update_step}
    return out


def _error_of(fn):
    try:
        fn()
    except (TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return None


@scenario
def bad_input():
    """A model not built, a selection that matches no prunable weight, mixed-precision policies: the errors (with
    nothing attached) or the masks."""
    from sparsify import PruningProtocol
    from sparsify_keras import STATE_ATTR

    out = {}

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.fc = keras.layers.Dense(4)

        def call(self, x):
            return self.fc(x)

    net = Net()
    net.compile("sgd", "mse")
    cb = PruningCallback({"target_sparsity": 0.5, "end_step": 0})
    out["unbuilt"] = {"attach_error": _error_of(lambda: cb.attach(net)), "attached": STATE_ATTR in net.__dict__,
                      "step_wrapped": "train_step" in net.__dict__}
    # JAX and torch build the model in fit before callbacks start (the masks follow); TensorFlow does not (an error)
    out["unbuilt"]["fit_error"] = _error_of(lambda: net.fit(np.ones((8, 3), "float32"), np.ones((8, 4), "float32"),
                                                            verbose=0, callbacks=[cb]))
    out["unbuilt"]["attached_after_fit"] = STATE_ATTR in net.__dict__
    out["unbuilt"]["sparsity_after_fit"] = cb.sparsity.get("total")
    model, x, y = model_and_data()
    compile_(model)
    bn = keras.Sequential([keras.Input((12,)), keras.layers.BatchNormalization(name="bn"), keras.layers.Dense(4, name="fc")])
    bn.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    out["no_match"] = {"error": _error_of(lambda: bn.fit(x[0], y, verbose=0, callbacks=[
        PruningCallback({"op_names": ["^bn"]})])), "attached": STATE_ATTR in bn.__dict__}
    for policy in ("mixed_float16", "mixed_bfloat16"):
        keras.mixed_precision.set_global_policy(policy)
        try:
            cfg = {**GRADUAL, "pruning_scope": "global"}
            model, x, y = model_and_data()
            shapes = {pw.path: pw.canonical_shape for pw in find_prunable_weights(model)}
            weights = {pw.path: pw.to_canonical(np.asarray(pw.variable.numpy())) for pw in find_prunable_weights(model)}
            protocol = PruningProtocol(cfg, shapes)
            protocol.advance(6, weights)
            compile_(model, lr=0.0)
            cb = PruningCallback(cfg)
            model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[cb])
            same = all(np.array_equal(pw.to_canonical(cb.masks[pw.path]), protocol.masks[pw.path])
                       for pw in cb._state.pweights)
            model, x, y = model_and_data()
            model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            cb = PruningCallback({**cfg, "target_sparsity": 0.75})
            model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[cb])
            masks = cb.masks
            held = all(bool(np.all(np.asarray(pw.variable.numpy())[~masks[pw.path]] == 0)) for pw in cb._state.pweights)
            out[policy] = {"masks_equal_core": same, "zeros_held": held, "sparsity": cb.sparsity["total"],
                           "optimizer": type(model.optimizer).__name__}
        finally:
            keras.mixed_precision.set_global_policy("float32")
    return out


@scenario
def switch_backend():
    """keras.config.set_backend after sparsify_keras was imported (run alone: it changes the process's Keras)."""
    old, _, _ = model_and_data()
    import importlib.util

    other = next((b for b in ("torch", "jax", "tensorflow") if b != BACKEND and importlib.util.find_spec(b)), None)
    if other is None:           # an environment with one backend only (pip install "sparsify-train[jax]")
        return {"skip": f"no Keras backend but {BACKEND!r} is installed: nothing to switch to"}
    keras.config.set_backend(other)
    import keras as switched

    new = switched.Sequential([switched.Input((12,)), switched.layers.Dense(4, name="fc")])
    new.compile("sgd", "mse")
    data = (np.ones((8, 12), "float32"), np.ones((8, 4), "float32"))
    return {"old_model": _error_of(lambda: PruningCallback({"end_step": 0}).attach(old)),
            "new_model": _error_of(lambda: new.fit(*data, verbose=0, callbacks=[PruningCallback({"end_step": 0})])),
            "new_model_weights_untouched": bool(np.all(np.asarray(new.get_weights()[0]) != 0)), "to": other}


@scenario
def sr_ste():
    """SR-STE (pruned_gradient="straight_through", pruned_decay): one step of plain SGD after a 2:4 update at step
    0, on a Dense-only model (its gradient is checked in NumPy) and on the two-branch model (with and without the
    decay); per weight (Keras layout) the mask, the dense weight before and after the step (kernel + stored)."""
    out = {}
    rng = np.random.default_rng(3)
    x = rng.normal(size=(16, 12)).astype("float32")
    y = rng.normal(size=(16, 4)).astype("float32")
    k = (rng.integers(-8, 9, size=(12, 4)) / 8).astype("float32")
    for name, decay in (("dense_only", 0.5), ("twobranch_0", 0.0), ("twobranch", 0.5)):
        if name == "dense_only":
            inp = keras.Input((12,))
            model = keras.Model(inp, keras.layers.Dense(4, use_bias=False, name="lin")(inp))
            model.set_weights([k])
            model.compile(keras.optimizers.SGD(0.1), keras.losses.MeanSquaredError())
            data = (x, y)
        else:
            model, xs, labels = model_and_data()
            model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            data = (tuple(a[:16] for a in xs), labels[:16])
        cb = PruningCallback({"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 0,
                              "pruned_gradient": "straight_through", "pruned_decay": decay, "monotone": False,
                              "skip_incompatible_layers": True})
        # the update at step 0 keeps every value (dense under the mask): the dense weights before the step
        seen = {"before": {pw.path: np.asarray(pw.variable.numpy()).tolist() for pw in find_prunable_weights(model)}}

        class Record(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                seen["masks"] = {p: m.astype(int).tolist() for p, m in cb.masks.items()}   # (syncs JAX's state)
                seen["after"] = {pw.path: (np.asarray(pw.variable.numpy()) + np.asarray(st.numpy())).tolist()
                                 for pw, st in zip(cb._state.pweights, cb._state.stored)}

        model.fit(*data, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[cb, Record()])
        out[name] = {**seen, "lr": 0.1, "decay": decay, "x": x.tolist(), "y": y.tolist()}
    return out


@scenario
def resume():
    """An interrupted fit (checkpoint after 2 of 4 epochs, a fresh model, attach, load_weights) against an
    uninterrupted one: same masks and weights."""
    cfg = {"start_step": 0, "end_step": 12, "pruning_frequency": 3, "target_sparsity": 0.8, "criterion": "wanda"}
    model, x, y = model_and_data()
    init = model.get_weights()
    compile_(model)
    ref = PruningCallback(cfg)
    model.fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0, callbacks=[ref])
    path = os.path.join(tempfile.mkdtemp(), "ckpt.weights.h5")
    first, _, _ = model_and_data()
    first.set_weights(init)
    compile_(first)
    first.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0,
              callbacks=[PruningCallback(cfg), keras.callbacks.ModelCheckpoint(path, save_weights_only=True)])
    resumed, _, _ = model_and_data(seed=5)
    compile_(resumed)
    resumed.optimizer.build(resumed.trainable_variables)
    cb = PruningCallback(cfg)
    cb.attach(resumed)
    resumed.load_weights(path)
    restored_step = cb.last_update_step
    resumed.fit(x, y, batch_size=16, epochs=4, initial_epoch=2, shuffle=False, verbose=0, callbacks=[cb])
    return {"restored_step": restored_step, "ref_masks": masks_of(ref, model), "masks": masks_of(cb, resumed),
            "ref_weights": [w.tolist() for w in model.get_weights()],
            "weights": [w.tolist() for w in resumed.get_weights()]}


@scenario
def strip_and_save():
    """strip_pruning gives a plain model: saved as .keras (loaded by the test in a process without sparsify)."""
    model, x, y = model_and_data()
    compile_(model)
    cb = PruningCallback({"start_step": 0, "end_step": 4, "pruning_frequency": 2, "target_sparsity": 0.75})
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
    n_weights = len(model.weights)
    plain = strip_pruning(model)
    path = os.path.join(tempfile.mkdtemp(), "pruned.keras")
    plain.save(path)
    return {"path": path, "weights_while_pruned": n_weights, "weights_stripped": len(plain.weights),
            "prediction": np.asarray(plain.predict(x, verbose=0)).tolist(),
            "zero_fraction": {pw.path: float(np.mean(pw.variable.numpy() == 0)) for pw in find_prunable_weights(plain)}}


@scenario
def traces():
    """How often the train step is traced over a run with 5 mask updates (JAX: compilations; TF: retraces)."""
    model, x, y = model_and_data()
    compile_(model)
    cb = PruningCallback({"start_step": 0, "end_step": 8, "pruning_frequency": 2, "target_sparsity": 0.5})
    cb.attach(model)
    wrapped = model.__dict__["train_step"]
    count = {"n": 0}

    def counting(*args):
        count["n"] += 1
        return wrapped(*args)

    object.__setattr__(model, "train_step", counting)
    model.train_function = None
    model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0, callbacks=[cb])
    return {"traces": count["n"], "updates": 5, "last": cb.last_update_step}


@scenario
def tensorboard():
    d = tempfile.mkdtemp()
    model, x, y = model_and_data()
    compile_(model)
    cb = PruningCallback({"start_step": 0, "end_step": 4, "pruning_frequency": 2, "target_sparsity": 0.5}, log_dir=d)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(d)
    acc.Reload()
    return {tag: [(e.step, round(float(e.value), 6)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@scenario
def oneshot():
    out = {}
    for name, cfg in [("magnitude_global", {"target_sparsity": 0.6, "pruning_scope": "global"}),
                      ("wanda_row", {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row"})]:
        model, x, _ = model_and_data()
        prune_oneshot(model, cfg, [(x, None)])      # batches of (inputs, targets)
        out[name] = weights_of(model)
    return out


def _distributed_run(distribution, cfg):
    """Masks at every step of a fit under ``distribution`` (None: one device), learning rate 0."""
    keras.distribution.set_distribution(distribution)
    try:
        out = fit_history(cfg, lr=0.0, epochs=2, batch=16)
        model, _, _ = model_and_data()
        spec = getattr(model.get_layer("dense").kernel.value.sharding, "spec", None)
        spec = None if spec is None else list(spec)
    finally:
        keras.distribution.set_distribution(None)
    return {"history": out["history"], "dense_kernel_spec": spec}


@scenario
def distributed():
    """JAX only, with 4 virtual CPU devices: DataParallel on 2 and 4 devices, and a ModelParallel layout that
    shards the Dense kernel's output axis, give the single-device masks at every step."""
    import jax

    devices = jax.devices()
    out = {"devices": len(devices)}
    for name, cfg in [("magnitude_global", MASK_CASES["unstructured_global"]),
                      ("wanda", MASK_CASES["wanda_first_layers"]), ("nm", MASK_CASES["nm_2of4_local"])]:
        runs = {"single": _distributed_run(None, cfg)}
        for n in (2, 4):
            runs[f"data_parallel_{n}"] = _distributed_run(keras.distribution.DataParallel(devices=devices[:n]), cfg)
        mesh = keras.distribution.DeviceMesh((2, 2), ["batch", "model"], devices=devices[:4])
        layout = keras.distribution.LayoutMap(mesh)
        layout[".*dense/kernel"] = (None, "model")
        runs["model_parallel"] = _distributed_run(keras.distribution.ModelParallel(layout_map=layout,
                                                                                   batch_dim_name="batch"), cfg)
        out[name] = runs
    return out


if __name__ == "__main__":
    register_user_criterion()
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else list(SCENARIOS)
    results = {"backend": keras.backend.backend()}
    for name in names:
        results[name] = SCENARIOS[name]()
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)
