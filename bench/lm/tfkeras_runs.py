"""The benchmark LM in tf-keras (Keras 2): tfmot's ``prune_low_magnitude`` (the Keras peer) and our tf-keras callback.

The model (:class:`TfKerasCharLM`, TensorFlow ops) computes :class:`bench.lm.model.CharLM`'s logits and
starts from :func:`bench.lm.model.init_weights`; :func:`train_tfkeras` runs ``model.fit`` over the torch
run's batches in order with tf-keras's AdamW at the torch settings, as :mod:`bench.lm.keras_runs` does in
Keras 3. Arms: ``dense``; ``tfmot`` (each pruned Dense wrapped in ``prune_low_magnitude`` with
``PolynomialDecay(0, target, begin_step=start + 1, end_step=end + 1, power=3, frequency=f)``: tfmot adds
one to its step before it updates, so its masks change between the same updates as ours; at ``2:4`` its
``sparsity_m_by_n=(2, 4)``); and our gradual arms through :class:`sparsify_tf.keras.PruningCallback`.

tfmot is not a dependency: it is found on ``TFMOT_PATH`` or installed with ``pip install --target`` into a
temporary folder (:func:`bench.bench_keras.ensure_tfmot`). Needs ``TF_USE_LEGACY_KERAS=1`` (set here before
TensorFlow is imported) and one thread (set here).

Example:
    >>> cfg = LMConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2, context=8)
    >>> model = build_tfkeras_model(cfg, seed=0, wrap=None)
    >>> tuple(model(np.zeros((2, 8), "int32")).shape)
    (2, 8, 11)

Usage (records ``tfkeras/dense`` at setting ``"0"`` and ``tfkeras/gradual/<arm>``):
    TFMOT_PATH=/tmp/tfmot python -m bench.lm.tfkeras_runs --seeds 0 1 2 --targets 90 80 \\
        --arms dense tfmot default --out-json /tmp/lmt/tfkeras.json
"""
from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import math  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable, Optional  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from .data import Corpus, batch_offsets, load_corpus, validation_windows, windows  # noqa: E402
from .gradual import GRADUAL_ARMS, gradual_config, setting_target, window  # noqa: E402
from .model import LMConfig, init_weights  # noqa: E402
from .records import open_results, record_run, run_arguments, save_results  # noqa: E402
from .train import TrainSettings, lr_at  # noqa: E402

__all__ = ["PRUNED", "PRUNABLE_TFKERAS", "TFKERAS_ARMS", "TfKerasCharLM", "build_tfkeras_model", "train_tfkeras",
           "pruned_kernels", "bits_per_char_tfkeras", "main"]

PRUNED = ("q", "k", "v", "o", "fc1", "fc2")
"""The pruned Dense layers of each block (:data:`bench.lm.model.PRUNABLE`'s linears)."""

PRUNABLE_TFKERAS = r"block_\d+/(q|k|v|o|fc1|fc2)/kernel"
"""``op_names`` regex of the pruned kernels (tf-keras weight names)."""

TFKERAS_ARMS = ("dense", "tfmot", *(a for a, c in GRADUAL_ARMS.items()
                                    if a != "torch.ao" and c.get("pruned_gradient", "none") == "none"))
"""``--arms``: a dense run, tfmot, and our gradual arms that tf-keras can run (straight-through gradients,
``sr_ste``, need Keras 3 or torch: our tf-keras callback refuses them)."""

Wrap = Optional[Callable[[Any], Any]]


class Block(tf_keras.Model):
    """One pre-LayerNorm transformer block (:class:`bench.lm.model.Block`); a ``Model`` so that tfmot's
    ``UpdatePruningStep`` finds the wrapped layers inside it."""

    def __init__(self, d: int, heads: int, wrap: Wrap = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.d, self.heads = d, heads
        wrap = wrap or (lambda layer: layer)
        self.ln1 = tf_keras.layers.LayerNormalization(epsilon=1e-5, name="ln1")
        self.ln2 = tf_keras.layers.LayerNormalization(epsilon=1e-5, name="ln2")
        self.q, self.k, self.v, self.o = (wrap(tf_keras.layers.Dense(d, name=n)) for n in ("q", "k", "v", "o"))
        self.fc1 = wrap(tf_keras.layers.Dense(4 * d, name="fc1"))
        self.fc2 = wrap(tf_keras.layers.Dense(d, name="fc2"))

    def call(self, x: Any) -> Any:
        t, dh = x.shape[1], self.d // self.heads

        def heads(z: Any) -> Any:                        # (b, t, d) -> (b, heads, t, dh)
            return tf.transpose(tf.reshape(z, (-1, t, self.heads, dh)), (0, 2, 1, 3))

        h = self.ln1(x)
        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(dh)
        causal = tf.linalg.band_part(tf.ones((t, t), dtype=tf.bool), -1, 0)
        scores = tf.where(causal, scores, float("-inf"))
        a = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
        x = x + self.o(tf.reshape(tf.transpose(a, (0, 2, 1, 3)), (-1, t, self.d)))
        return x + self.fc2(tf.nn.gelu(self.fc1(self.ln2(x)), approximate=True))


class TfKerasCharLM(tf_keras.Model):
    """:class:`bench.lm.model.CharLM` in tf-keras; layers ``wte``, ``wpe``, ``block_<i>``, ``ln_f``."""

    def __init__(self, cfg: LMConfig, wrap: Wrap = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.wte = tf_keras.layers.Embedding(cfg.vocab_size, cfg.d_model, name="wte")
        self.wpe = tf_keras.layers.Embedding(cfg.context, cfg.d_model, name="wpe")
        self.blocks = [Block(cfg.d_model, cfg.n_heads, wrap, name=f"block_{i}") for i in range(cfg.n_layers)]
        self.ln_f = tf_keras.layers.LayerNormalization(epsilon=1e-5, name="ln_f")

    def call(self, idx: Any) -> Any:
        x = self.wte(idx) + self.wpe(tf.range(idx.shape[1]))[None]
        for block in self.blocks:
            x = block(x)
        return tf.matmul(self.ln_f(x), self.wte.embeddings, transpose_b=True)


def _inner(layer: Any) -> Any:
    """The Dense layer itself (tfmot's wrapper holds it as ``.layer``)."""
    return getattr(layer, "layer", layer)


def build_tfkeras_model(cfg: LMConfig, seed: int, wrap: Wrap = None) -> TfKerasCharLM:
    """A built :class:`TfKerasCharLM` holding :func:`bench.lm.model.init_weights` of ``seed``; ``wrap`` wraps
    each pruned Dense (tfmot's ``prune_low_magnitude``)."""
    model = TfKerasCharLM(cfg, wrap, name="char_lm")
    model(np.zeros((1, cfg.context), "int32"))
    w = init_weights(cfg, seed)
    model.wte.embeddings.assign(w["wte.weight"])
    model.wpe.embeddings.assign(w["wpe.weight"])
    model.ln_f.gamma.assign(w["ln_f.weight"])
    model.ln_f.beta.assign(w["ln_f.bias"])
    for i, block in enumerate(model.blocks):
        for name in ("ln1", "ln2"):
            getattr(block, name).gamma.assign(w[f"blocks.{i}.{name}.weight"])
            getattr(block, name).beta.assign(w[f"blocks.{i}.{name}.bias"])
        for name in PRUNED:
            layer = _inner(getattr(block, name))
            layer.kernel.assign(w[f"blocks.{i}.{name}.weight"].T)
            layer.bias.assign(w[f"blocks.{i}.{name}.bias"])
    return model


class TorchSchedule(tf_keras.optimizers.schedules.LearningRateSchedule):
    """:func:`bench.lm.train.lr_at` indexed by ``optimizer.iterations`` (the first update gets ``lr_at(0)``)."""

    def __init__(self, steps: int, settings: TrainSettings = TrainSettings()) -> None:
        self.steps, self.settings = steps, settings
        self.table = tf.constant([lr_at(s, steps, settings) for s in range(steps)], dtype=tf.float32)

    def __call__(self, step: Any) -> Any:
        return tf.gather(self.table, tf.clip_by_value(tf.cast(step, tf.int32), 0, self.steps - 1))

    def get_config(self) -> dict:
        return {"steps": self.steps, **vars(self.settings)}


def _tfmot_wrap(setting: str, steps: int) -> Callable[[Any], Any]:
    import tensorflow_model_optimization as tfmot

    target, pattern = setting_target(setting)
    start, end, freq = window(steps)
    sched = tfmot.sparsity.keras.PolynomialDecay(0.0, target, begin_step=start + 1, end_step=end + 1,
                                                 power=3, frequency=freq)
    extra = {"sparsity_m_by_n": (2, 4)} if pattern == "2:4" else {}
    return lambda layer: tfmot.sparsity.keras.prune_low_magnitude(layer, pruning_schedule=sched, **extra)


def pruned_kernels(model: TfKerasCharLM) -> dict[str, np.ndarray]:
    """``{"block_<i>/<name>": kernel}`` of the pruned Dense layers."""
    return {f"{block.name}/{name}": _inner(getattr(block, name)).kernel.numpy()
            for block in model.blocks for name in PRUNED}


def train_tfkeras(cfg: LMConfig, corpus: Corpus, seed: int, steps: int, arm: str, setting: str = "0",
                  batch_size: int = 32, settings: TrainSettings = TrainSettings()) -> tuple[TfKerasCharLM, dict]:
    """Train arm ``arm`` from the seed's initial weights on the seed's batches.

    Returns the model (pruned weights zero) and ``{"steps", "seconds", "final_loss", "sparsity"}``
    (``sparsity``: the share of zeros over the pruned kernels; absent for ``dense``).
    """
    if arm not in TFKERAS_ARMS:
        why = " (straight-through gradients: Keras 3 or torch only, see bench.lm.keras_runs)" if arm in GRADUAL_ARMS else ""
        raise ValueError(f"arm: one of {TFKERAS_ARMS}, got {arm!r}{why}")
    tf_keras.utils.set_random_seed(seed)
    model = build_tfkeras_model(cfg, seed, _tfmot_wrap(setting, steps) if arm == "tfmot" else None)
    offsets = batch_offsets(corpus, seed, steps, batch_size, cfg.context).reshape(-1)
    x, y = (a.astype("int32") for a in windows(corpus.train, offsets, cfg.context))
    opt = tf_keras.optimizers.AdamW(learning_rate=TorchSchedule(steps, settings), weight_decay=settings.weight_decay,
                                    beta_1=0.9, beta_2=0.95, epsilon=1e-8, global_clipnorm=settings.clip)
    model.compile(optimizer=opt, loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks: list[Any] = []
    if arm == "tfmot":
        import tensorflow_model_optimization as tfmot

        callbacks.append(tfmot.sparsity.keras.UpdatePruningStep())
    elif arm != "dense":
        from sparsify_tf.keras import PruningCallback

        callbacks.append(PruningCallback(gradual_config(arm, setting, steps, PRUNABLE_TFKERAS)))
    start = time.perf_counter()
    hist = model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    info: dict[str, Any] = {"steps": int(opt.iterations.numpy()), "seconds": time.perf_counter() - start,
                            "final_loss": float(hist.history["loss"][-1])}
    if arm not in ("dense", "tfmot"):
        from sparsify_tf.keras import strip_pruning

        model = strip_pruning(model)
    if arm != "dense":
        kernels = pruned_kernels(model)
        info["sparsity"] = float(sum((k == 0).sum() for k in kernels.values()) / sum(k.size for k in kernels.values()))
    return model, info


def bits_per_char_tfkeras(model: Any, inputs: np.ndarray, targets: np.ndarray, batch_size: int = 64) -> float:
    """Mean cross-entropy in bits (:func:`bench.lm.model.bits_per_char`)."""
    total, count = 0.0, 0
    for i in range(0, len(inputs), batch_size):
        x, y = inputs[i:i + batch_size].astype("int32"), targets[i:i + batch_size].astype("int32")
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x, training=False))
        total += float(tf.reduce_sum(ce))
        count += y.size
    return total / count / math.log(2)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the asked arms per seed, appending each record to ``--out-json`` as it ends; return the results.

    Raises:
        SystemExit: tfmot is asked for and cannot be imported or installed, or ``--out-json`` holds another
            configuration.
    """
    args = run_arguments(argv, __doc__.splitlines()[0], TFKERAS_ARMS, ["dense", "tfmot", "default"])
    from ..accuracy.keras_runs import single_thread

    single_thread()
    if "tfmot" in args.arms:
        from ..bench_keras import ensure_tfmot

        why = ensure_tfmot()
        if why:
            raise SystemExit(why)
    corpus = load_corpus()
    cfg = LMConfig(vocab_size=corpus.vocab_size, d_model=args.d_model, n_layers=args.layers, context=args.context)
    train = {"steps": args.steps, "batch_size": args.batch_size}
    data = open_results(args.out_json, cfg, train, corpus, "bench.lm.tfkeras_runs", argv)
    data.update(tf_keras=tf_keras.__version__, tensorflow=tf.__version__)
    if "tfmot" in args.arms:
        import tensorflow_model_optimization as tfmot_package

        data["tfmot"] = tfmot_package.__version__
    val = validation_windows(corpus, cfg.context, args.val_limit)
    for seed in args.seeds:
        for arm in args.arms:
            for setting in (["0"] if arm == "dense" else args.targets):
                model, info = train_tfkeras(cfg, corpus, seed, args.steps, arm, setting, args.batch_size)
                extra = {"sparsity": info["sparsity"]} if "sparsity" in info else {}
                name = "tfkeras/dense" if arm == "dense" else f"tfkeras/gradual/{arm}"
                record_run(data, seed, name, setting, bits_per_char_tfkeras(model, *val),
                        {"seconds": info["seconds"], **extra})
                save_results(args.out_json, data)
                tf_keras.backend.clear_session()
    return data


if __name__ == "__main__":
    main()
