"""The Keras zoo under one Keras backend in this process: ``python keras_zoo_scenarios.py BACKEND OUT.json PLAN``.

Models people use, built from small configs with random weights (nothing downloaded): keras_hub's GPT-2
(``GPT2CausalLM``), BERT (``BertTextClassifier``) and Llama (``LlamaCausalLM``), and ``keras.applications``'
ResNet50, MobileNetV3Small and EfficientNetV2B0 (``weights=None``, 32x32 inputs, 10 classes). Per model:
gradual pruning with ``PruningCallback`` (the zeros of every pruned kernel counted), a ``.keras`` file written
by ``ModelCheckpoint`` mid-pruning (loaded back), ``strip_pruning`` + save + load; for the language models a
``BackupAndRestore`` resume against the uninterrupted run and one-shot Wanda / SparseGPT. What it finds is
written as JSON for tests/zoo/test_keras_zoo.py to check (each backend in its own process: Keras fixes the
backend at first import).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np

if __name__ == "__main__":         # the backend before Keras is first imported
    os.environ["KERAS_BACKEND"] = sys.argv[1]

VOCAB, SEQ = 64, 16
HUB = ("gpt2", "bert", "llama")
APPS = ("ResNet50", "MobileNetV3Small", "EfficientNetV2B0")


# ----- the models and their data --------------------------------------------------------------------
def _lm_data(n: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(n, SEQ + 1)).astype("int32")
    return {"token_ids": ids[:, :-1], "padding_mask": np.ones((n, SEQ), "int32")}, ids[:, 1:]


def build(name: str):
    """``(model, (x, y))`` for one zoo model, compiled, seeded (the same weights for the same name). Dropout 0:
    Keras does not save a dropout layer's random state with the weights, so a resumed run would draw other
    dropout masks than the uninterrupted one."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    if name == "gpt2":
        bb = keras_hub.models.GPT2Backbone(vocabulary_size=VOCAB, num_layers=2, num_heads=2, hidden_dim=32,
                                           intermediate_dim=64, max_sequence_length=32, dropout=0.0)
        model, data = keras_hub.models.GPT2CausalLM(backbone=bb, preprocessor=None), _lm_data()
    elif name == "llama":
        bb = keras_hub.models.LlamaBackbone(vocabulary_size=VOCAB, num_layers=2, num_query_heads=4,
                                            num_key_value_heads=2, hidden_dim=32, intermediate_dim=64, dropout=0.0)
        model, data = keras_hub.models.LlamaCausalLM(backbone=bb, preprocessor=None), _lm_data()
    elif name == "bert":
        bb = keras_hub.models.BertBackbone(vocabulary_size=VOCAB, num_layers=2, num_heads=2, hidden_dim=32,
                                           intermediate_dim=64, max_sequence_length=32, dropout=0.0)
        model = keras_hub.models.BertTextClassifier(backbone=bb, num_classes=2, preprocessor=None, dropout=0.0)
        rng = np.random.default_rng(1)
        data = ({"token_ids": rng.integers(0, VOCAB, (16, SEQ)).astype("int32"),
                 "segment_ids": np.zeros((16, SEQ), "int32"), "padding_mask": np.ones((16, SEQ), "int32")},
                rng.integers(0, 2, 16))
    else:
        model = getattr(keras.applications, name)(weights=None, input_shape=(32, 32, 3), classes=10)
        rng = np.random.default_rng(2)
        data = (rng.normal(size=(16, 32, 32, 3)).astype("float32"), rng.integers(0, 10, 16))
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=name in HUB))
    return model, data


def gradual_config(name: str) -> dict:
    """2:4 on the language models' projections (embeddings and the tied head left dense), 50% unstructured on
    the applications; the target reached at step 4 of the 6 trained."""
    if name in HUB:
        return {"target_sparsity": 0.5, "pattern": "2:4", "excluded_op_names": ["embedding"], "start_step": 0,
                "end_step": 4, "pruning_frequency": 2}
    return {"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2}


# ----- what is measured -------------------------------------------------------------------------------
def zeros_per_weight(model, paths=None) -> dict:
    """``{path: [zeros, size, max and min zeros per group of 4 along the canonical input axis or None]}`` of
    every prunable weight (``paths``: only those)."""
    from sparsify_keras import find_prunable_weights

    out = {}
    for pw in find_prunable_weights(model):
        if paths is not None and pw.path not in paths:
            continue
        w = np.asarray(pw.variable.numpy())
        canon = pw.to_canonical(w)
        view = canon.reshape(canon.shape[0], -1) if canon.ndim > 2 else canon
        groups = None
        if view.shape[1] % 4 == 0:
            per = (view == 0).reshape(view.shape[0], -1, 4).sum(-1)
            groups = [int(per.max()), int(per.min())]
        out[pw.path] = [int((w == 0).sum()), int(w.size), groups]
    return out


def _plain_weights(model) -> list:
    """The model's own weights (the pruning state's variables, listed among a pruned model's, left out)."""
    return [np.array(v.numpy()) for v in model.weights if "sparsify" not in v.path]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))


def gradual(name: str, workdir: str) -> dict:
    """Fit with the callback and a mid-pruning ``ModelCheckpoint``; strip, save, load."""
    import keras
    from sparsify_keras import PruningCallback, strip_pruning

    model, (x, y) = build(name)
    cb = PruningCallback(gradual_config(name))
    summary = cb.summary(model)
    ckpt = os.path.join(workdir, f"{name}_mid.keras")

    class Capture(keras.callbacks.Callback):
        """The weights and masks at the end of epoch 2 (step 4 of 6, the update at step 4 not yet made:
        mid-pruning), where ModelCheckpoint wrote them (every 4 batches: once, after batch 4)."""

        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.weights = _plain_weights(self.model)
                self.step = cb.last_update_step
                self.sparsity = cb.sparsity["total"]

    capture = Capture()
    model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0,
              callbacks=[cb, keras.callbacks.ModelCheckpoint(ckpt, save_freq=4), capture])
    loaded_mid = keras.saving.load_model(ckpt)
    mid_zeros = sum(v[0] for v in zeros_per_weight(loaded_mid, set(cb.pruned_weights)).values())
    mid_size = sum(v[1] for v in zeros_per_weight(loaded_mid, set(cb.pruned_weights)).values())
    sparsity = cb.sparsity
    masks_zeros = {p: int((~m).sum()) for p, m in cb.masks.items()}
    plain = strip_pruning(model)
    path = os.path.join(workdir, f"{name}.keras")
    plain.save(path)
    loaded = keras.saving.load_model(path)
    x1 = {k: v[:2] for k, v in x.items()} if isinstance(x, dict) else x[:2]
    out_a = np.asarray(plain.predict(x1, verbose=0))
    out_b = np.asarray(loaded.predict(x1, verbose=0))
    return {
        "pruned": cb.pruned_weights, "sparsity": sparsity, "mask_zeros": masks_zeros,
        "zeros": zeros_per_weight(plain, set(cb.pruned_weights)),
        "summary_selected": [r.name for r in summary.selected],
        "summary_skipped": {r.name: r.reason for r in summary.skipped},
        "summary_text": str(summary).splitlines()[0],
        "mid": {"step": capture.step, "sparsity": capture.sparsity,
                "weights_equal": _same(capture.weights, _plain_weights(loaded_mid)),
                "weights_count": [len(capture.weights), len(_plain_weights(loaded_mid))],
                "zeros": mid_zeros, "size": mid_size},
        "loaded_equal": _same(plain.get_weights(), loaded.get_weights()),
        "outputs_equal": bool(np.array_equal(out_a, out_b)),
        "state_left": any("sparsify" in v.path for v in plain.weights),
    }


def resume(name: str, workdir: str) -> dict:
    """``BackupAndRestore``: a fit interrupted after epoch 2 and resumed in a new model and callback against the
    uninterrupted fit (weights, masks, last update step)."""
    import keras
    from sparsify_keras import PruningCallback

    cfg = {**gradual_config(name), "end_step": 8}
    _, (x, y) = build(name)

    class Interrupted(Exception):
        pass

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise Interrupted("after epoch 2")

    def fit(model, callbacks):
        model.fit(x, y, batch_size=8, epochs=5, shuffle=False, verbose=0, callbacks=callbacks)

    ref, ref_cb = build(name)[0], PruningCallback(cfg)
    fit(ref, [ref_cb])
    backup = os.path.join(workdir, f"{name}_backup")
    first, first_cb = build(name)[0], PruningCallback(cfg)
    try:
        fit(first, [keras.callbacks.BackupAndRestore(backup), first_cb, Interrupt()])
    except Interrupted:
        pass
    interrupted_at = int(np.asarray(first.optimizer.iterations))
    resumed, resumed_cb = build(name)[0], PruningCallback(cfg)
    fit(resumed, [keras.callbacks.BackupAndRestore(backup), resumed_cb])
    ref_w, res_w = ref.get_weights(), resumed.get_weights()
    return {
        "interrupted_at": interrupted_at, "steps": [int(np.asarray(ref.optimizer.iterations)),
                                                    int(np.asarray(resumed.optimizer.iterations))],
        "last_update": [ref_cb.last_update_step, resumed_cb.last_update_step],
        "masks_equal": _same(list(ref_cb.masks.values()), list(resumed_cb.masks.values())),
        "weights_equal": _same(ref_w, res_w),
        "max_weight_diff": max(float(np.max(np.abs(a - b))) if a.size else 0.0 for a, b in zip(ref_w, res_w)),
        "sparsity": [ref_cb.sparsity["total"], resumed_cb.sparsity["total"]],
    }


def oneshot(name: str) -> dict:
    """One-shot Wanda (50%) and SparseGPT (2:4) on a causal LM: the zeros of every pruned kernel."""
    from sparsify_keras import prune_oneshot

    rng = np.random.default_rng(3)
    data = [{"token_ids": rng.integers(0, VOCAB, (4, SEQ)).astype("int32"),
             "padding_mask": np.ones((4, SEQ), "int32")} for _ in range(2)]
    out = {}
    for method, cfg in (("criterion", {"target_sparsity": 0.5, "criterion": "wanda",
                                       "excluded_op_names": ["embedding"]}),
                        ("sparsegpt", {"target_sparsity": 0.5, "pattern": "2:4", "excluded_op_names": ["embedding"]})):
        model = build(name)[0]
        before = {k: v for k, v in zeros_per_weight(model).items()}
        prune_oneshot(model, cfg, data, method=method)
        out[method] = {"zeros": zeros_per_weight(model), "before": before}
    return out


SCENARIOS = {"gradual": gradual, "resume": resume, "oneshot": oneshot}


def main(backend: str, out_path: str, plan: str) -> None:
    """``plan``: ``model:scenario+scenario,...`` (e.g. ``gpt2:gradual+resume,ResNet50:gradual``)."""
    import keras

    assert keras.backend.backend() == backend, (keras.backend.backend(), backend)
    results: dict = {"backend": backend, "seconds": {}}
    with tempfile.TemporaryDirectory() as workdir:
        for item in plan.split(","):
            name, _, scenarios = item.partition(":")
            for scenario in scenarios.split("+"):
                start = time.perf_counter()
                fn = SCENARIOS[scenario]
                results.setdefault(name, {})[scenario] = fn(name) if scenario == "oneshot" else fn(name, workdir)
                results["seconds"][f"{name}:{scenario}"] = round(time.perf_counter() - start, 2)
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
