"""Keras distillation scenarios under one backend per process (``python distill_scenarios.py BACKEND OUT [NAMES]``).

``BACKEND`` is a Keras 3 backend (jax, torch, tensorflow) or ``tf_keras`` (Keras 2: the same scenarios
through :mod:`sparsify_tf.keras`). Each scenario returns plain lists and numbers (JSON) that
:mod:`test_keras_distillation` compares with :mod:`sparsify.distillation`'s NumPy references.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings

import numpy as np

BACKEND = sys.argv[1] if __name__ == "__main__" else os.environ.get("KERAS_BACKEND", "tensorflow")
os.environ["KERAS_BACKEND"] = "tensorflow" if BACKEND == "tf_keras" else BACKEND
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if BACKEND == "tf_keras":
    import tf_keras as keras  # noqa: E402
    from sparsify_tf.keras import DistillationModel, PruningCallback, strip_pruning  # noqa: E402
else:
    import keras  # noqa: E402
    from sparsify_keras import DistillationModel, PruningCallback, strip_pruning  # noqa: E402
from sparsify_keras.layers import find_prunable_weights  # noqa: E402

SCENARIOS = {}
X = np.random.default_rng(0).normal(size=(8, 6)).astype("float32")
Y = np.arange(8) % 3


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def mlp(seed: int, name: str = "mlp"):
    """Input 6 -> Dense "h" (5, tanh) -> Dense "out" (3 logits), weights drawn from ``seed``."""
    inp = keras.Input((6,))
    h = keras.layers.Dense(5, activation="tanh", name="h")(inp)
    model = keras.Model(inp, keras.layers.Dense(3, name="out")(h), name=name)
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.get_weights()])
    return model


def _np(x):
    if BACKEND != "tf_keras":
        x = keras.ops.convert_to_numpy(x)
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=np.float64)


def _hidden(model):
    return keras.Model(model.inputs[0], model.get_layer("h").output)(X)


@scenario
def zero_when_equal():
    """The term when the teacher is the dense student itself (dense_at_start), logits and features."""
    student = mlp(1)
    model = DistillationModel(student, {"temperature": 2.0, "features": ["h"], "weight": 1.0})
    return {"term": float(_np(model.distillation_loss(X, model(X), step=0)))}


@scenario
def reference():
    """The term of a user teacher at steps of a linear ramp, and the inputs of the NumPy reference."""
    student, teacher = mlp(1), mlp(2, "teacher")
    cfg = {"temperature": 2.0, "weight": 0.8, "weight_schedule": "linear", "init_weight": 0.2, "start_step": 2,
           "end_step": 6, "features": ["h"], "feature_weight": 0.5, "logit_weight": 1.5, "teacher": "user"}
    model = DistillationModel(student, cfg, teacher=teacher)
    terms = [float(_np(model.distillation_loss(X, model(X), step=s))) for s in range(8)]
    return {"config": cfg, "terms": terms, "student": _np(student(X)).tolist(), "teacher": _np(teacher(X)).tolist(),
            "student_h": _np(_hidden(student)).tolist(), "teacher_h": _np(_hidden(teacher)).tolist()}


class _StepLosses(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.means = []

    def on_train_batch_end(self, batch, logs=None):
        # tf-keras logs the compiled (task) loss as "loss" and the term as "distillation_loss"
        self.means.append(float(logs["loss"]) + float(logs.get("distillation_loss", 0.0)))


@scenario
def schedule_in_fit():
    """Losses of the steps of a fit at learning rate 0 (the same batch every step) with a linear ramp."""
    student, teacher = mlp(1), mlp(2, "teacher")
    cfg = {"temperature": 1.0, "weight": 1.0, "weight_schedule": "linear", "start_step": 2, "end_step": 6,
           "teacher": "user"}
    model = DistillationModel(student, cfg, teacher=teacher)
    model.compile(keras.optimizers.SGD(0.0), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rec = _StepLosses()
    model.fit(np.tile(X, (8, 1)), np.tile(Y, 8), batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[rec])
    means = rec.means
    losses = [means[0]] + [means[k] * (k + 1) - means[k - 1] * k for k in range(1, len(means))]
    evaluated = float(model.evaluate(X, Y, batch_size=8, verbose=0, return_dict=True)["loss"])
    return {"losses": losses, "student": _np(student(X)).tolist(), "teacher": _np(teacher(X)).tolist(),
            "labels": Y.tolist(), "evaluate": evaluated}


def _prune_run(distill: bool, features: list):
    student = mlp(1)
    model = DistillationModel(student, {"temperature": 2.0, "features": features, "weight": 1.0}) if distill \
        else student
    teacher_before = [w.copy() for w in model.teacher.get_weights()] if distill else []
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    out = {"paths": [w.path for w in find_prunable_weights(model)]}
    rec = _StepLosses()
    model.fit(X, Y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[cb, rec])
    out["masks_step0"] = {k: v.astype(int).tolist() for k, v in cb.masks.items()}
    model.fit(X, Y, batch_size=4, epochs=3, shuffle=False, verbose=0, callbacks=[cb])
    if distill:
        out["teacher_trainable"] = len(model.teacher.trainable_weights)
        out["trainable"] = [len(model.trainable_weights), len(student.trainable_weights)]
        out["teacher_unchanged"] = all(np.array_equal(a, b) for a, b in zip(teacher_before, model.teacher.get_weights()))
        out["teacher_pruned_zeros"] = int(sum((w == 0).sum() for w in model.teacher.get_weights()))
    plain = strip_pruning(model)
    out["stripped_is_student"] = plain is student
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "student.keras" if BACKEND != "tf_keras" else "student.h5")
        plain.save(path)
        loaded = keras.models.load_model(path)
        out["saved_weights"] = [list(w.shape) for w in loaded.get_weights()]
        out["saved_equal"] = all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), student.get_weights()))
        out["saved_h_zeros"] = float((loaded.get_layer("h").get_weights()[0] == 0).mean())
    return out


@scenario
def prune_fit():
    """Pruning a distilled student (features and not) vs the same student without distillation."""
    return {"plain": _prune_run(False, []), "distill": _prune_run(True, []), "features": _prune_run(True, ["h"])}


@scenario
def teacher_at_start():
    """dense_at_start with pruning from step 5, the wrapper and callback set up at step 0: the teacher after a
    first fit of 5 steps is the student then (before the mask update at step 5), and the term is 0 before."""
    student = mlp(1)
    initial = [w.copy() for w in student.get_weights()]
    model = DistillationModel(student, {"temperature": 2.0, "weight": 1.0})
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    cb = PruningCallback({"target_sparsity": 0.5, "start_step": 5, "end_step": 7, "pruning_frequency": 1})
    with warnings.catch_warnings():         # this first fit ends before end_step, as meant
        warnings.simplefilter("ignore")
        model.fit(np.tile(X, (5, 1)), np.tile(Y, 5), batch_size=8, epochs=1, shuffle=False, verbose=0,
                  callbacks=[cb])
    at_five = [w.copy() for w in student.get_weights()[:4]]        # kernels and biases (then the pruning state)
    teacher_five = [w.copy() for w in model.teacher.get_weights()]
    model.fit(np.tile(X, (3, 1)), np.tile(Y, 3), batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
    logits = model(X)
    return {
        "teacher_step": int(_np(model.teacher_step)),
        "iterations": int(_np(model.optimizer.iterations)),
        "teacher_is_student_at_5": all(np.array_equal(a, b) for a, b in zip(teacher_five, at_five)),
        "teacher_kept_after": all(np.array_equal(a, b) for a, b in zip(model.teacher.get_weights(), at_five)),
        "teacher_moved_from_init": not all(np.array_equal(a, b) for a, b in zip(teacher_five, initial)),
        "h_zeros": float((student.get_layer("h").get_weights()[0] == 0).mean()),
        "terms": [float(_np(model.distillation_loss(X, logits, step=s))) for s in (0, 4, 5, 8)],
    }


@scenario
def default_weight_fades():
    """The default weight of the dense_at_start teacher (no weight given), wrapper and callback set up at step 0,
    pruning from step 4 to 12: the term at steps 0, 3, 4, 6, 8, 10 after a fit of 12 steps, with the logits of
    student and teacher; the same with an explicit weight=1.0."""
    out = {}
    for name, cfg in (("default", {"temperature": 2.0}), ("explicit", {"temperature": 2.0, "weight": 1.0})):
        student = mlp(1)
        model = DistillationModel(student, cfg)
        model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        cb = PruningCallback({"target_sparsity": 0.5, "start_step": 4, "end_step": 12, "pruning_frequency": 2})
        model.fit(np.tile(X, (12, 1)), np.tile(Y, 12), batch_size=8, epochs=1, shuffle=False, verbose=0,
                  callbacks=[cb])
        logits = model(X)
        c = model.config
        out[name] = {"terms": [float(_np(model.distillation_loss(X, logits, step=s))) for s in (0, 3, 4, 6, 8, 10)],
                     "student": _np(logits).tolist(), "teacher": _np(model.teacher(X)).tolist(),
                     "config": [c.weight_schedule, c.init_weight, c.weight, c.start_step, c.end_step],
                     "teacher_step": int(_np(model.teacher_step))}
    return out


def _error(fn):
    try:
        fn()
    except (TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


class _Sub(keras.Model):
    def __init__(self):
        super().__init__()
        self.h = keras.layers.Dense(5, name="h")
        self.out = keras.layers.Dense(3, name="out")

    def call(self, x):
        return self.out(self.h(x))


@scenario
def bad_input():
    """The errors of bad students, teachers and features."""
    student = mlp(1)
    wide = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
    sub = _Sub()
    sub(X)
    return {
        "teacher_not_model": _error(lambda: DistillationModel(student, {"teacher": "user"}, teacher="dense")),
        "teacher_shape": _error(lambda: DistillationModel(student, {"teacher": "user"}, teacher=wide)),
        "unknown_feature": _error(lambda: DistillationModel(student, {"features": ["nope"]})),
        "subclassed_features": _error(lambda: DistillationModel(sub, {"features": ["h"]})),
        "teacher_without_user": _error(lambda: DistillationModel(student, {}, teacher=mlp(2))),
        "user_without_teacher": _error(lambda: DistillationModel(student, {"teacher": "user"})),
        "student_not_model": _error(lambda: DistillationModel("model", {})),
        "bad_config": _error(lambda: DistillationModel(student, {"temperature": 0})),
        "fade_without_window": _error(lambda: DistillationModel(mlp(1), {}).distillation_loss(X, student(X), step=0)),
        "fade_teach_from_without_end": _error(lambda: DistillationModel(mlp(1), {}).teach_from(3)),
    }


@scenario
def distributed():
    """JAX: per-step losses of a distilled fit on one device and data parallel over 4 (SGD, lr 0.1)."""
    import jax

    runs = {}
    for name, devices in (("single", None), ("data_parallel_4", jax.devices()[:4])):
        keras.distribution.set_distribution(None if devices is None else
                                             keras.distribution.DataParallel(devices=devices))
        try:
            student = mlp(1)
            model = DistillationModel(student, {"temperature": 2.0, "weight": 0.5, "weight_schedule": "linear",
                                                "start_step": 0, "end_step": 4})
            model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            rec = _StepLosses()
            model.fit(np.tile(X, (6, 1)), np.tile(Y, 6), batch_size=8, epochs=1, shuffle=False, verbose=0,
                      callbacks=[rec, PruningCallback({"target_sparsity": 0.5, "end_step": 2})])
            runs[name] = {"means": rec.means, "kernel": _np(student.get_layer("h").kernel).tolist()}
        finally:
            keras.distribution.set_distribution(None)
    return {"devices": len(jax.devices()), "runs": runs}


if __name__ == "__main__":
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else [n for n in SCENARIOS if n != "distributed"]
    results = {"backend": BACKEND, **{n: SCENARIOS[n]() for n in names}}
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)
