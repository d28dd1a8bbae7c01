"""The benchmark LM in Keras 3: the same NumPy initial weights and batch order as torch, pruned by our callback.

The model (:class:`KerasCharLM`, backend-neutral ``keras.ops``/``keras.layers``) computes exactly
:class:`bench.lm.model.CharLM`'s logits and starts from :func:`bench.lm.model.init_weights` (a Dense
kernel is the torch weight transposed). :func:`train_keras` runs ``model.fit`` over the torch run's
batches in order (one epoch, ``shuffle=False``) with Keras's AdamW at the torch settings and
``lr_at(optimizer.iterations)`` (:class:`TorchSchedule`: the first update gets ``lr_at(0)``, as in
torch); a ``config`` prunes with :class:`sparsify_keras.PruningCallback`.

Step alignment: torch calls ``pruner.step()`` after its ``k``-th optimizer update and applies an update
point due at ``k``; the callback applies it at the start of the batch where ``optimizer.iterations``
(updates done) is ``k``. Both update the masks between update ``k`` and ``k + 1``, at the same points
(at 1800 steps from 180 to 1260: every 45th step, every step for ``sr_ste``). Differences from torch: Keras's
Adam adds ``epsilon`` before the bias correction (in effect ``eps / sqrt(1 - 0.95^t)``: 4.5e-8 at the
first update, within 1% of 1e-8 from the 80th) and ``global_clipnorm`` scales by ``clip / norm``, not
``clip / (norm + 1e-6)``.

Example:
    >>> import re
    >>> from sparsify_keras import find_prunable_weights
    >>> cfg = LMConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2, context=8)
    >>> model = build_keras_model(cfg, seed=0)
    >>> tuple(model(np.zeros((2, 8), "int32")).shape)
    (2, 8, 11)
    >>> paths = [w.path for w in find_prunable_weights(model) if re.search(PRUNABLE_KERAS, w.path)]
    >>> len(paths), paths[0], paths[-1]
    (6, 'block_0/q/kernel', 'block_0/fc2/kernel')

The teacher arms (:data:`bench.lm.gradual.DISTILL_ARMS`, e.g. ``sr_ste_distill``) wrap the student in
:class:`sparsify_keras.DistillationModel` with the trained dense Keras model of the same seed as the teacher
(the ``dense`` arm's model): trained once per seed and cached in ``--cache`` (``keras_<sizes>_seed<n>``,
weights and info), as ``bench.bench_lm`` caches torch's; they run only when named.

Usage (one thread; records ``keras/dense`` at setting ``"0"`` and ``keras/gradual/<arm>``):
    KERAS_BACKEND=jax taskset -c 1 python -m bench.lm.keras_runs --seeds 0 1 2 --targets 90 \\
        --arms dense default sr_ste sr_ste_distill --out-json /tmp/lmk/keras.json
"""
from __future__ import annotations

import os

# one thread, set before Keras imports its backend (XLA reads these when jax starts)
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Optional  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from sparsify import exact_prune_count  # noqa: E402

from .data import Corpus, batch_offsets, load_corpus, validation_windows, windows  # noqa: E402
from . import gradual  # noqa: E402
from .gradual import DISTILL_ARMS, GRADUAL_ARMS, distill_settings, needs_teacher  # noqa: E402
from .model import LMConfig, init_weights  # noqa: E402
from .records import open_results, record_run, run_arguments, save_results  # noqa: E402
from .train import TrainSettings, lr_at  # noqa: E402

__all__ = ["PRUNABLE_KERAS", "KERAS_ARMS", "KerasCharLM", "build_keras_model", "load_weights", "TorchSchedule",
           "train_keras", "gradual_config", "bits_per_char_keras", "dense_teacher", "main"]

PRUNABLE_KERAS = r"^block_\d+/(q|k|v|o|fc1|fc2)/kernel$"
"""``op_names`` regex of the pruned weights (Keras paths): :data:`bench.lm.model.PRUNABLE`'s linears."""

KERAS_ARMS = ("dense", *(a for a in GRADUAL_ARMS if a not in ("torch.ao", "sr_ste_init_teacher")))
"""``--arms``: a dense run, and the gradual arms our callback runs (torch.ao's sparsifier is torch only)."""

BACKENDS = ("jax", "torch", "tensorflow")


class Block(keras.layers.Layer):
    """One pre-LayerNorm transformer block (:class:`bench.lm.model.Block`)."""

    def __init__(self, d: int, heads: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.d, self.heads = d, heads
        self.ln1 = keras.layers.LayerNormalization(epsilon=1e-5, name="ln1")
        self.ln2 = keras.layers.LayerNormalization(epsilon=1e-5, name="ln2")
        self.q, self.k, self.v, self.o = (keras.layers.Dense(d, name=n) for n in ("q", "k", "v", "o"))
        self.fc1 = keras.layers.Dense(4 * d, name="fc1")
        self.fc2 = keras.layers.Dense(d, name="fc2")

    def call(self, x: Any) -> Any:
        t, dh = x.shape[1], self.d // self.heads

        def heads(z: Any) -> Any:                        # (b, t, d) -> (b, heads, t, dh)
            return ops.transpose(ops.reshape(z, (-1, t, self.heads, dh)), (0, 2, 1, 3))

        h = self.ln1(x)
        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) / math.sqrt(dh)
        causal = ops.tril(ops.ones((t, t), dtype="bool"))
        scores = ops.where(causal, scores, float("-inf"))
        a = ops.matmul(ops.softmax(scores, axis=-1), v)
        x = x + self.o(ops.reshape(ops.transpose(a, (0, 2, 1, 3)), (-1, t, self.d)))
        return x + self.fc2(keras.activations.gelu(self.fc1(self.ln2(x)), approximate=True))


class KerasCharLM(keras.Model):
    """:class:`bench.lm.model.CharLM` in Keras 3; layers ``wte``, ``wpe``, ``block_<i>``, ``ln_f``."""

    def __init__(self, cfg: LMConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.wte = keras.layers.Embedding(cfg.vocab_size, cfg.d_model, name="wte")
        self.wpe = keras.layers.Embedding(cfg.context, cfg.d_model, name="wpe")
        self.blocks = [Block(cfg.d_model, cfg.n_heads, name=f"block_{i}") for i in range(cfg.n_layers)]
        self.ln_f = keras.layers.LayerNormalization(epsilon=1e-5, name="ln_f")

    def call(self, idx: Any) -> Any:
        x = self.wte(idx) + self.wpe(ops.arange(idx.shape[1]))[None]
        for block in self.blocks:
            x = block(x)
        return ops.matmul(self.ln_f(x), ops.transpose(self.wte.embeddings))


def load_weights(model: KerasCharLM, weights: dict[str, np.ndarray]) -> None:
    """Assign :func:`bench.lm.model.init_weights`-style torch weights (names, layout) to a built model.

    Raises:
        ValueError: the model's weights and ``weights`` differ in number (every weight must be assigned).
    """
    if len(model.weights) != len(weights):
        raise ValueError(f"weights: {len(weights)} torch tensors for the model's {len(model.weights)} weights")
    model.wte.embeddings.assign(weights["wte.weight"])
    model.wpe.embeddings.assign(weights["wpe.weight"])
    model.ln_f.gamma.assign(weights["ln_f.weight"])
    model.ln_f.beta.assign(weights["ln_f.bias"])
    for i, block in enumerate(model.blocks):
        for name in ("ln1", "ln2"):
            layer = getattr(block, name)
            layer.gamma.assign(weights[f"blocks.{i}.{name}.weight"])
            layer.beta.assign(weights[f"blocks.{i}.{name}.bias"])
        for name in ("q", "k", "v", "o", "fc1", "fc2"):
            layer = getattr(block, name)
            layer.kernel.assign(weights[f"blocks.{i}.{name}.weight"].T)
            layer.bias.assign(weights[f"blocks.{i}.{name}.bias"])


def build_keras_model(cfg: LMConfig, seed: int) -> KerasCharLM:
    """A built :class:`KerasCharLM` holding :func:`bench.lm.model.init_weights` of ``seed``."""
    model = KerasCharLM(cfg, name="char_lm")
    model(np.zeros((1, cfg.context), "int32"))
    load_weights(model, init_weights(cfg, seed))
    return model


class TorchSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """:func:`bench.lm.train.lr_at` as a Keras schedule: a table of its values indexed by the optimizer step.

    Keras calls it with ``optimizer.iterations`` (updates done so far), torch's step index: the first
    update gets ``lr_at(0)``; steps past the end keep the last value.
    """

    def __init__(self, steps: int, settings: TrainSettings = TrainSettings()) -> None:
        self.steps, self.settings = steps, settings
        self.table = np.array([lr_at(s, steps, settings) for s in range(steps)], dtype="float32")

    def __call__(self, step: Any) -> Any:
        idx = ops.clip(ops.cast(step, "int32"), 0, self.steps - 1)
        return ops.take(ops.convert_to_tensor(self.table), idx)

    def get_config(self) -> dict:
        return {"steps": self.steps, **vars(self.settings)}

    @classmethod
    def from_config(cls, config: dict) -> "TorchSchedule":
        config = dict(config)
        return cls(config.pop("steps"), TrainSettings(**config))


class _Losses(keras.callbacks.Callback):
    """Per-step training losses, from Keras's running epoch mean."""

    def __init__(self) -> None:
        super().__init__()
        self.means: list[float] = []

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.means.append(float(logs["loss"]))

    def tail(self, n: int = 50) -> float:
        """Mean loss (nats) of the last ``n`` steps."""
        k = len(self.means)
        j = max(0, k - n)
        before = self.means[j - 1] * j if j else 0.0
        return (self.means[-1] * k - before) / (k - j)


def gradual_config(arm: str, setting: str, steps: int) -> dict[str, Any]:
    """The callback config of a gradual arm: :func:`bench.gradual.gradual_config` with the Keras paths."""
    return gradual.gradual_config(arm, setting, steps, PRUNABLE_KERAS)


def train_keras(cfg: LMConfig, corpus: Corpus, seed: int, steps: int, batch_size: int = 32,
                config: Optional[dict[str, Any]] = None, settings: TrainSettings = TrainSettings(),
                distillation: Optional[dict[str, Any]] = None, teacher: Optional[KerasCharLM] = None
                ) -> tuple[KerasCharLM, dict]:
    """Train from the seed's initial weights on the seed's batches (:func:`bench.lm.train.train_dense`'s run).

    ``config`` (e.g. :func:`gradual_config`) prunes with :class:`sparsify_keras.PruningCallback`; the
    returned model is then stripped (pruned weights exactly zero) and its pruned kernels checked: each
    holds exactly ``exact_prune_count`` zeros of the target (2:4: two zeros in every four).

    ``distillation`` (a :class:`sparsify.DistillationConfig` dict) with ``teacher`` (the trained dense model)
    trains :class:`sparsify_keras.DistillationModel` around the model (``final_loss``: task + term).

    Returns the model and ``{"steps", "seconds", "final_loss"}`` (mean training loss in nats over the
    last 50 steps), plus ``"sparsity"`` (``{path: fraction of zeros}`` of the pruned kernels and their
    ``"total"``) when pruned.

    Raises:
        RuntimeError: a pruned kernel does not end at its target.
    """
    keras.utils.set_random_seed(seed)
    model = build_keras_model(cfg, seed)
    offsets = batch_offsets(corpus, seed, steps, batch_size, cfg.context).reshape(-1)
    x, y = (a.astype("int32") for a in windows(corpus.train, offsets, cfg.context))
    opt = keras.optimizers.AdamW(learning_rate=TorchSchedule(steps, settings), weight_decay=settings.weight_decay,
                                 beta_1=0.9, beta_2=0.95, epsilon=1e-8, global_clipnorm=settings.clip)
    fitted = model
    if distillation is not None:
        from sparsify_keras import DistillationModel

        fitted = DistillationModel(model, distillation, teacher=teacher)
    fitted.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = _Losses()
    callbacks: list[Any] = [losses]
    if config is not None:
        from sparsify_keras import PruningCallback

        callbacks.insert(0, PruningCallback(config))
    start = time.perf_counter()
    fitted.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    seconds = time.perf_counter() - start
    info: dict[str, Any] = {"steps": int(ops.convert_to_numpy(opt.iterations)), "seconds": seconds,
                            "final_loss": losses.tail()}
    if config is not None:
        from sparsify_keras import strip_pruning

        pruned = callbacks[0].pruned_weights
        model = strip_pruning(fitted)          # a DistillationModel gives its student back
        info["sparsity"] = _check_sparsity(model, pruned, config)
    return model, info


def _check_sparsity(model: KerasCharLM, paths: list[str], config: dict[str, Any]) -> dict[str, float]:
    from sparsify_keras import find_prunable_weights

    kernels = {w.path: ops.convert_to_numpy(w.variable) for w in find_prunable_weights(model)}
    out: dict[str, float] = {}
    total = np.zeros(2, dtype=np.int64)
    for path in paths:
        w = kernels[path]
        zeros = int((w == 0).sum())
        if config.get("pattern") == "2:4":
            ok = bool(((w.T.reshape(-1, 4) == 0).sum(1) == 2).all())
        else:
            ok = zeros == exact_prune_count(config["target_sparsity"], w.size)
        if not ok:
            raise RuntimeError(f"{path}: {zeros} zeros of {w.size} after pruning to {config['target_sparsity']}"
                               f" ({config.get('pattern', '1x1')})")
        out[path] = zeros / w.size
        total += (zeros, w.size)
    out["total"] = float(total[0] / total[1])
    return out


def bits_per_char_keras(model: Any, inputs: np.ndarray, targets: np.ndarray, batch_size: int = 64) -> float:
    """Mean cross-entropy in bits of ``model(input_ids) -> (b, t, vocab)`` (:func:`bench.lm.model.bits_per_char`)."""
    total, count = 0.0, 0
    for i in range(0, len(inputs), batch_size):
        x, y = inputs[i:i + batch_size].astype("int32"), targets[i:i + batch_size].astype("int32")
        ce = keras.losses.sparse_categorical_crossentropy(y, model(x, training=False), from_logits=True)
        total += float(ops.convert_to_numpy(ops.sum(ce)))
        count += y.size
    return total / count / math.log(2)


def dense_teacher(cfg: LMConfig, corpus: Corpus, seed: int, steps: int, batch_size: int, cache: str
                  ) -> tuple[KerasCharLM, dict]:
    """The trained dense Keras model of ``seed`` (the ``dense`` arm's run) and its info, from ``cache`` when a
    run of these sizes was saved there, else trained and saved (one dense training per seed)."""
    key = f"keras_d{cfg.d_model}_l{cfg.n_layers}_c{cfg.context}_s{steps}_b{batch_size}_seed{seed}"
    weights, meta = Path(cache) / f"{key}.weights.h5", Path(cache) / f"{key}.json"
    if weights.exists() and meta.exists():
        model = build_keras_model(cfg, seed)
        model.load_weights(str(weights))
        return model, json.loads(meta.read_text())
    model, info = train_keras(cfg, corpus, seed, steps, batch_size)
    weights.parent.mkdir(parents=True, exist_ok=True)
    model.save_weights(str(weights))
    meta.write_text(json.dumps(info))
    return model, info


def _run_arm(cfg: LMConfig, corpus: Corpus, seed: int, arm: str, setting: str, args: Any
             ) -> tuple[KerasCharLM, dict, Optional[dict]]:
    """One run: the dense model (cached), or a gradual arm (a teacher arm with the seed's dense teacher)."""
    if arm == "dense":
        model, info = dense_teacher(cfg, corpus, seed, args.steps, args.batch_size, args.cache)
        return model, info, None
    config = gradual_config(arm, setting, args.steps)
    teacher = None
    if needs_teacher(arm):
        teacher = dense_teacher(cfg, corpus, seed, args.steps, args.batch_size, args.cache)[0]
    model, info = train_keras(cfg, corpus, seed, args.steps, args.batch_size, config,
                              distillation=distill_settings(arm, args.steps) if arm in DISTILL_ARMS else None,
                              teacher=teacher)
    return model, info, config


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the asked arms per seed, appending each record to ``--out-json`` as it ends; return the results.

    Raises:
        SystemExit: Keras is not Keras 3 on a training backend, or ``--out-json`` holds another configuration.
    """
    args = run_arguments(argv, __doc__.splitlines()[0], KERAS_ARMS, [a for a in KERAS_ARMS if a not in DISTILL_ARMS])
    backend = keras.backend.backend()
    if int(keras.__version__.split(".")[0]) < 3 or backend not in BACKENDS:
        raise SystemExit(f"bench.lm.keras_runs needs Keras 3 on one of {', '.join(BACKENDS)} (set KERAS_BACKEND); "
                         f"got Keras {keras.__version__} with backend {backend!r}")
    if backend == "torch":
        import torch

        torch.set_num_threads(1)
    corpus = load_corpus()
    cfg = LMConfig(vocab_size=corpus.vocab_size, d_model=args.d_model, n_layers=args.layers, context=args.context)
    train = {"steps": args.steps, "batch_size": args.batch_size}
    data = open_results(args.out_json, cfg, train, corpus, "bench.lm.keras_runs", argv)
    data.update(keras=keras.__version__, keras_backend=backend)
    val = validation_windows(corpus, cfg.context, args.val_limit)
    for seed in args.seeds:
        for arm in args.arms:
            for setting in (["0"] if arm == "dense" else args.targets):
                model, info, config = _run_arm(cfg, corpus, seed, arm, setting, args)
                extra = {"sparsity": info["sparsity"]["total"]} if config else {}
                name = "keras/dense" if arm == "dense" else f"keras/gradual/{arm}"
                record_run(data, seed, name, setting, bits_per_char_keras(model, *val),
                        {"seconds": info["seconds"], **extra})
                save_results(args.out_json, data)
                keras.backend.clear_session()
    return data


if __name__ == "__main__":
    main()
