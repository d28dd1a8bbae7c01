"""``PruningCallback``: gradual pruning inside ``model.fit`` (tf-keras and Keras 3).

How it works:

* **Discovery** (``set_model``/``on_train_begin``): all sublayers are walked
  (:func:`~sparsify_tf.keras.layers.find_prunable_weights`), the config's
  ``op_names``/``excluded_op_names`` select weights by path and the pattern is
  checked against every selected weight before anything changes.
* **State**: one mask variable per pruned weight plus the step of the last
  mask update live in a small non-trainable layer attached to the model as
  ``model._sparsify_pruning_state``. Keras saves it with the model's weights
  (``save_weights``, ``ModelCheckpoint``, ``BackupAndRestore``), so an
  interrupted run resumes to exactly the same masks and weights.
* **Mask updates** follow ``optimizer.iterations``: at every batch start the
  callback asks the core ``PruningEngine.update_due(last_update, step)``; when
  an update point was reached (also one that fell inside a block of
  ``steps_per_execution`` steps) the masks are recomputed by the core from the
  canonical-layout weights and written back. No pruning math lives here.
* **Keeping zeros**: a mask update zeroes the pruned weights and their
  optimizer slots (momentum, Adam moments, ...). In between, the gradients of
  the pruned weights are multiplied by the mask before the optimizer applies
  them (``model.optimizer.apply``/``apply_gradients`` is wrapped on the
  instance), which keeps weight and slots at exactly zero for the optimizers in
  :data:`GRAD_MASKING_OPTIMIZERS`. The model's ``train_step`` is wrapped too:
  for other optimizers, constrained weights and weights whose gradients bypass
  ``model.optimizer`` (found when the step is traced), it multiplies the weight
  and its slots by the mask after every step. Both run in the graph, on every
  replica.

Example:
    >>> import numpy as np, keras
    >>> from sparsify_tf.keras import PruningCallback, strip_pruning
    >>> m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, name="fc"), keras.layers.Dense(2)])
    >>> m.compile("sgd", "mse")
    >>> cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2})
    >>> _ = m.fit(np.ones((32, 8)), np.ones((32, 2)), batch_size=8, epochs=1, verbose=0, callbacks=[cb])
    >>> cb.sparsity["fc/kernel"]
    0.5
    >>> m = strip_pruning(m)
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Mapping

import numpy as np
import tensorflow as tf

import keras as _keras3

from sparsify import PruningConfig, PruningEngine

from .compat import (keras_flavor, keras_module, optimizer_slots, steps_per_execution, tf_variable,
                     unwrap_optimizer)
from .layers import PrunableWeight, find_prunable_weights

__all__ = ["PruningCallback", "strip_pruning", "STATE_ATTR", "GRAD_MASKING_OPTIMIZERS", "grad_masking_supported"]

STATE_ATTR = "_sparsify_pruning_state"
_WRAP_FLAG = "_sparsify_wrapped_train_step"
_STATE_CLASSES: dict[str, type] = {}


# --------------------------------------------------------------------------------------------
# State layer (one class per Keras flavour, created lazily)
# --------------------------------------------------------------------------------------------
def _state_class(flavor: str) -> type:
    if flavor in _STATE_CLASSES:
        return _STATE_CLASSES[flavor]
    K = keras_module(flavor)

    class PruningState(K.layers.Layer):
        """Mask variables and the last update step, saved with the model's weights."""

        def __init__(self, pweights: list[PrunableWeight], **kwargs: Any) -> None:
            super().__init__(name="sparsify_pruning_state", trainable=False, **kwargs)
            extra = {"autocast": False} if flavor == "keras3" else {}
            masks = []
            for i, pw in enumerate(pweights):
                masks.append(self.add_weight(name=f"mask_{i}", shape=pw.tf_shape, dtype=pw.variable.dtype,
                                             initializer="ones", trainable=False, **extra))
            last = self.add_weight(name="last_update_step", shape=(), dtype="int64",
                                   initializer=K.initializers.Constant(-1), trainable=False, **extra)
            # Plain attributes: keep them out of Keras' layer/variable tracking.
            object.__setattr__(self, "pweights", list(pweights))
            object.__setattr__(self, "masks", masks)
            object.__setattr__(self, "last_step", last)
            object.__setattr__(self, "slot_count", 0)
            object.__setattr__(self, "per_step_paths", [pw.path for pw in pweights])
            object.__setattr__(self, "owner", None)
            self.built = True

        def call(self, inputs: Any) -> Any:  # pragma: no cover - never called
            return inputs

        def get_config(self) -> dict:  # pragma: no cover - never serialised as a layer
            return {"name": self.name}

    PruningState.__name__ = PruningState.__qualname__ = "SparsifyPruningState"
    _STATE_CLASSES[flavor] = PruningState
    return PruningState


def _scalar(tag: str, value: float) -> None:
    """A TensorBoard scalar summary that needs no ``tensorboard`` package (as tf.summary.scalar writes it)."""
    from tensorflow.core.framework import summary_pb2

    md = summary_pb2.SummaryMetadata()
    md.plugin_data.plugin_name = "scalars"
    md.data_class = summary_pb2.DATA_CLASS_SCALAR
    tf.summary.write(tag, tf.constant(float(value), tf.float32), metadata=md)


def _strategy(model: Any) -> tf.distribute.Strategy:
    return getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()


def _mask_all(pairs: list[tuple[tf.Variable, tf.Variable]]) -> Any:
    """``var.assign(var * mask)`` for every pair, on every replica (graph or eager)."""
    if not tf.distribute.has_strategy():          # plain (default-strategy) training: direct ops
        for v, m in pairs:
            v.assign(v * m, read_value=False)
        return None

    def merge_fn(strategy: tf.distribute.Strategy) -> Any:
        ops = [strategy.extended.update(v, lambda x, m: x.assign(x * m, read_value=False), args=(m,), group=True)
               for v, m in pairs]
        return tf.group(ops)

    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        return merge_fn(tf.distribute.get_strategy())
    return ctx.merge_call(merge_fn)


def _graph_masking_pairs(state: Any, model: Any, skip: frozenset = frozenset()) -> list[tuple[tf.Variable, tf.Variable]]:
    """(variable, mask) pairs for the pruned weights not in ``skip`` (ids) and their optimizer slots."""
    pairs, n_slots = [], 0
    opt = getattr(model, "optimizer", None)
    for pw, mask in zip(state.pweights, state.masks):
        if id(pw.variable) in skip:
            continue
        m = tf_variable(mask)
        pairs.append((tf_variable(pw.variable), m))
        for s in optimizer_slots(opt, pw.variable):
            pairs.append((tf_variable(s), m))
            n_slots += 1
    object.__setattr__(state, "slot_count", n_slots)
    return pairs


# --------------------------------------------------------------------------------------------
# Gradient masking: pruned gradients are multiplied by the mask before the optimizer applies
# them. With a zero gradient and zeroed slots (zeroed at every mask update), the optimizers
# below leave a zero weight and its slots exactly at zero, so nothing has to be re-masked after
# the step. Everything else (other optimizers, constrained weights, weights whose gradients do
# not pass through ``model.optimizer``) keeps the per-step weight and slot multiply.
# --------------------------------------------------------------------------------------------
#: Optimizer classes (Keras 3, tf-keras and tf-keras legacy) that keep a zero weight with zero
#: slots at zero under a zero gradient: moments start at and stay 0, the update is a multiple
#: of them (divided by ``sqrt(v) + epsilon``, hence epsilon must be > 0), weight decay scales
#: the weight. Not listed on purpose: Adagrad/Ftrl (accumulators start at 0.1; 0/0 with
#: epsilon=0 or l2=0 once zeroed), Adadelta, Adafactor (factored statistics), Muon (the
#: orthogonalised update is dense), and any subclass (it may override the update).
GRAD_MASKING_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Lion", "Lamb"})
_HOOK_FLAG = "_sparsify_grad_hook"
_TLS = threading.local()


def grad_masking_supported(optimizer: Any) -> bool:
    """Whether pruned gradients can be masked instead of re-masking weights after each step.

    Example:
        >>> import keras
        >>> grad_masking_supported(keras.optimizers.Adam()), grad_masking_supported(keras.optimizers.Adagrad())
        (True, False)
    """
    opt = unwrap_optimizer(optimizer)
    if opt is None:
        return False
    cls = type(opt)
    if cls.__name__ not in GRAD_MASKING_OPTIMIZERS or not (cls.__module__ or "").startswith(("keras.", "tf_keras.")):
        return False
    eps = getattr(opt, "epsilon", None)
    if eps is not None:
        try:
            if not float(eps) > 0:
                return False
        except (TypeError, ValueError):
            return False
    return True


def _mask_grads(models: list, grads: list, variables: list) -> list:
    """Multiply the gradients of pruned variables by their masks (trace time, replica context)."""
    table: dict[int, Any] = {}
    for ref in models:
        mdl = ref()
        st = mdl.__dict__.get(STATE_ATTR) if mdl is not None else None
        if st is None:
            continue
        for pw, mask in zip(st.pweights, st.masks):
            table[id(pw.variable)] = (pw.variable, mask)
            table[id(tf_variable(pw.variable))] = (pw.variable, mask)
    if not table:
        return list(grads)
    seen = getattr(_TLS, "seen", None)
    out = []
    for g, v in zip(grads, variables):
        entry = table.get(id(v))
        if entry is None or g is None:
            out.append(g)
            continue
        m = tf_variable(entry[1])
        if isinstance(g, tf.IndexedSlices):
            vals = g.values
            mg = tf.gather(m, g.indices)
            g = tf.IndexedSlices(vals * (mg if mg.dtype == vals.dtype else tf.cast(mg, vals.dtype)),
                                 g.indices, g.dense_shape)
        else:
            g = tf.convert_to_tensor(g)
            g = g * (m if m.dtype == g.dtype else tf.cast(m, g.dtype))
        if seen is not None:
            seen.add(id(entry[0]))
        out.append(g)
    return out


def _install_grad_hook(model: Any, optimizer: Any, flavor: str) -> None:
    """Wrap ``optimizer.apply`` (Keras 3) / ``apply_gradients`` (tf-keras) on the instance."""
    name = "apply" if flavor == "keras3" else "apply_gradients"
    current = optimizer.__dict__.get(name)
    if current is not None and getattr(current, _HOOK_FLAG, False):
        refs = current._sparsify_models
        refs[:] = [r for r in refs if r() is not None]
        if not any(r() is model for r in refs):
            refs.append(weakref.ref(model))
        return
    orig = current if current is not None else getattr(type(optimizer), name).__get__(optimizer, type(optimizer))
    refs = [weakref.ref(model)]
    opt_ref = weakref.ref(optimizer)

    if name == "apply":
        def hook(grads: Any, trainable_variables: Any = None, *args: Any, **kwargs: Any) -> Any:
            tv = trainable_variables
            if tv is None:
                o = opt_ref()
                tv = getattr(o, "_trainable_variables", None) if o is not None else None
            if tv is not None:
                grads = _mask_grads(refs, list(grads), list(tv))
            return orig(grads, trainable_variables, *args, **kwargs)
    else:
        def hook(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            gv = list(grads_and_vars)
            grads = _mask_grads(refs, [g for g, _ in gv], [v for _, v in gv])
            return orig(list(zip(grads, [v for _, v in gv])), *args, **kwargs)

    setattr(hook, _HOOK_FLAG, True)
    hook._sparsify_models = refs
    hook._sparsify_inner = orig
    hook._sparsify_had_instance_attr = current is not None
    object.__setattr__(optimizer, name, hook)


def _uninstall_grad_hook(model: Any) -> None:
    opt = getattr(model, "optimizer", None)
    if opt is None:
        return
    for name in ("apply", "apply_gradients"):
        current = opt.__dict__.get(name)
        if current is None or not getattr(current, _HOOK_FLAG, False):
            continue
        refs = current._sparsify_models
        refs[:] = [r for r in refs if r() is not None and r() is not model]
        if refs:
            continue
        if current._sparsify_had_instance_attr:
            object.__setattr__(opt, name, current._sparsify_inner)
        else:
            del opt.__dict__[name]


def _install_train_step(model: Any, state: Any, flavor: str) -> None:
    current = model.__dict__.get("train_step")
    if current is not None and getattr(current, _WRAP_FLAG, False):
        inner = current._sparsify_inner
    else:
        inner = current if current is not None else type(model).train_step.__get__(model, type(model))
    state_ref = weakref.ref(state)

    def train_step(data: Any) -> Any:
        # Runs when Keras traces the train function (per replica under a strategy).
        st = state_ref()
        if st is None or model.__dict__.get(STATE_ATTR) is not st:
            return inner(data)
        opt = getattr(model, "optimizer", None)
        use_grads = grad_masking_supported(opt)
        if use_grads:
            _install_grad_hook(model, opt, flavor)
        seen: set[int] = set()
        prev = getattr(_TLS, "seen", None)
        _TLS.seen = seen
        try:
            logs = inner(data)
        finally:
            _TLS.seen = prev
        # Gradient-masked weights need nothing more; constrained weights (the constraint
        # may move a zero), weights the hook did not see (a custom train_step with another
        # optimizer) and unsupported optimizers get the per-step multiply of weight and slots.
        skip = frozenset(id(pw.variable) for pw in st.pweights
                         if use_grads and id(pw.variable) in seen
                         and getattr(pw.variable, "constraint", None) is None)
        object.__setattr__(st, "per_step_paths", [pw.path for pw in st.pweights if id(pw.variable) not in skip])
        pairs = _graph_masking_pairs(st, model, skip)
        if pairs:
            _mask_all(pairs)
        return logs

    setattr(train_step, _WRAP_FLAG, True)
    train_step._sparsify_inner = inner
    train_step._sparsify_had_instance_attr = current is not None and not getattr(current, _WRAP_FLAG, False)
    object.__setattr__(model, "train_step", train_step)
    model.train_function = None   # force fit() to trace the wrapped step


def _uninstall_train_step(model: Any) -> None:
    current = model.__dict__.get("train_step")
    if current is None or not getattr(current, _WRAP_FLAG, False):
        return
    if current._sparsify_had_instance_attr:
        object.__setattr__(model, "train_step", current._sparsify_inner)
    else:
        del model.__dict__["train_step"]
    model.train_function = None


def _attach_state(model: Any, state: Any, flavor: str) -> None:
    object.__setattr__(model, STATE_ATTR, state)
    if flavor == "tf_keras":
        # Checkpoint dependency (TF-format save_weights, BackupAndRestore); also triggers
        # deferred restoration when load_weights ran before the state existed.
        model._track_trackable(state, name=STATE_ATTR, overwrite=True)


def _detach_state(model: Any) -> Any:
    state = model.__dict__.pop(STATE_ATTR, None)
    deps = getattr(model, "_self_unconditional_checkpoint_dependencies", None)
    if isinstance(deps, list):
        deps[:] = [d for d in deps if d.name != STATE_ATTR]
    names = getattr(model, "_self_unconditional_dependency_names", None)
    if isinstance(names, dict):
        names.pop(STATE_ATTR, None)
    return state


# --------------------------------------------------------------------------------------------
# Callback
# --------------------------------------------------------------------------------------------
class PruningCallback(_keras3.callbacks.Callback):
    """Gradual magnitude / block / N:M pruning during ``model.fit``.

    Works for tf-keras (``import tf_keras``) and Keras 3 on the TensorFlow
    backend (``import keras`` or ``tf.keras``), chosen by the model passed to
    ``fit``; Sequential, Functional, nested and subclassed models.

    Args:
        config: a :class:`sparsify.PruningConfig`, a dict of its fields or a YAML path.
            Steps (``start_step``, ``end_step``, ``pruning_frequency``) count
            optimizer steps (``optimizer.iterations``).
        log_dir: optional directory for a TensorBoard summary writer; sparsity
            scalars are written at every mask update.
        log_per_layer: also put ``sparsity/<weight path>`` into the epoch logs
            (the total is always logged as ``sparsity``).
        verbose: 1 prints a line at each mask update.

    Raises:
        TypeError/ValueError: bad config or arguments (at construction); a model
            that is not built, a selection matching no weight, a pattern that
            does not fit a weight, a second model (at ``fit``, before training).

    Example:
        >>> cb = PruningCallback({"target_sparsity": 0.9, "end_step": 1000})   # doctest: +SKIP
        >>> model.fit(x, y, epochs=5, callbacks=[cb])                           # doctest: +SKIP
        >>> model = strip_pruning(model); model.save("pruned.keras")            # doctest: +SKIP
    """

    def __init__(self, config: PruningConfig | Mapping[str, Any] | str | os.PathLike, *,
                 log_dir: str | os.PathLike | None = None, log_per_layer: bool = True,
                 verbose: int = 0) -> None:
        super().__init__()
        cfg = PruningConfig.coerce(config)
        engine = PruningEngine(cfg)
        if engine.needs_gradients:
            raise ValueError(f"criterion {cfg.criterion!r} needs gradients, which PruningCallback does not "
                             "collect; use criterion='magnitude' with the Keras callback")
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a directory path or None, got {log_dir!r}")
        if not isinstance(log_per_layer, bool):
            raise TypeError(f"log_per_layer must be True or False, got {log_per_layer!r}")
        if verbose not in (0, 1) or isinstance(verbose, bool):
            raise ValueError(f"verbose must be 0 or 1, got {verbose!r}")
        self.config = cfg
        self.engine = engine
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.log_per_layer = log_per_layer
        self.verbose = verbose
        # tf-keras CallbackList protocol
        self._supports_tf_logs = True
        self._chief_worker_only = None
        self.validation_data = None
        # state
        self._bound: weakref.ref | None = None
        self._state: Any = None
        self._done = -1
        self._refresh = True
        self._masks: dict[str, np.ndarray] = {}
        self._canon: dict[str, np.ndarray] | None = None   # self._masks in the canonical layout
        self._any_pruned = False
        self._next = 0.0            # first step that needs action (from the schedule)
        self._est: int | None = None  # expected optimizer.iterations at the next batch start
        self._spe = 1
        self._apply_cache: tuple | None = None
        self._autotune = False
        self._writer: Any = None

    # ----- tf-keras CallbackList protocol ------------------------------------------------
    def _implements_train_batch_hooks(self) -> bool:
        return True

    def _implements_test_batch_hooks(self) -> bool:
        return False

    def _implements_predict_batch_hooks(self) -> bool:
        return False

    @property
    def model(self) -> Any:
        return self._model

    @model.setter
    def model(self, value: Any) -> None:
        self._model = value

    # ----- public read-only views ----------------------------------------------------------
    @property
    def pruned_weights(self) -> list[str]:
        """Paths of the weights being pruned (empty before the callback is attached)."""
        return [pw.path for pw in self._state.pweights] if self._state is not None else []

    @property
    def masks(self) -> dict[str, np.ndarray]:
        """Current masks, ``{path: bool array in the TF layout}`` (True = kept)."""
        if self._state is None:
            return {}
        return {pw.path: m.numpy() != 0 for pw, m in zip(self._state.pweights, self._state.masks)}

    @property
    def per_step_paths(self) -> list[str]:
        """Pruned weights re-masked after every step instead of by gradient masking.

        Known once ``fit`` has traced the train step. These are the weights of
        an optimizer not in :data:`GRAD_MASKING_OPTIMIZERS`, constrained weights,
        and weights whose gradients bypass ``model.optimizer``.
        """
        return list(self._state.per_step_paths) if self._state is not None else []

    @property
    def last_update_step(self) -> int:
        """Optimizer step of the last mask update (-1 for none)."""
        return int(self._state.last_step.numpy()) if self._state is not None else -1

    @property
    def sparsity(self) -> dict[str, float]:
        """Fraction of pruned weights per path, plus ``"total"``."""
        masks = self.masks
        out = {p: 1.0 - float(np.count_nonzero(m)) / m.size for p, m in masks.items()}
        n = sum(m.size for m in masks.values())
        out["total"] = float(sum(m.size - np.count_nonzero(m) for m in masks.values()) / n) if n else 0.0
        return out

    # ----- binding -----------------------------------------------------------------------------
    def _bound_model(self) -> Any:
        m = self._bound() if self._bound is not None else None
        if m is not None and m.__dict__.get(STATE_ATTR) is not self._state:
            return None   # stripped: the callback may be used again
        return m

    def set_model(self, model: Any) -> None:
        """Called by Keras before training; binds the callback to ``model``."""
        if model is None:
            return
        bound = self._bound_model()
        if bound is not None and bound is not model:
            raise ValueError(f"model: this PruningCallback is bound to model {bound.name!r} but fit was called "
                             f"on model {model.name!r}; create one PruningCallback per model "
                             "(or strip_pruning the first model)")
        keras_flavor(model)
        self._model = model
        if bound is None and getattr(model, "built", False):
            self.attach(model)

    def attach(self, model: Any) -> None:
        """Validate the model and attach the pruning state to it now.

        ``fit`` does this for you. Call it yourself only to restore a
        checkpoint with ``model.load_weights`` *before* ``fit`` on Keras 3
        (the state variables must exist to be restored).

        Raises:
            ValueError: the model is not built, nothing is selected, or the
                pattern does not fit a selected weight (nothing is changed).
        """
        flavor = keras_flavor(model)
        bound = self._bound_model()
        if bound is model and self._state is not None:
            return
        if bound is not None and bound is not model:
            raise ValueError(f"model: this PruningCallback is already attached to model {bound.name!r}")
        if not getattr(model, "built", False):
            raise ValueError(f"model {model.name!r} is not built: build it (model.build(input_shape) or call it "
                             "on a batch) before fit so its weights exist")
        candidates = find_prunable_weights(model)
        shapes = {pw.path: pw.canonical_shape for pw in candidates}
        names = self.engine.select_layers(list(shapes), shapes)
        chosen = [pw for pw in candidates if pw.path in names]
        self.engine.check_layers({pw.path: shapes[pw.path] for pw in chosen})
        state = model.__dict__.get(STATE_ATTR)
        if state is not None:
            old = [(pw.path, pw.tf_shape) for pw in state.pweights]
            if old != [(pw.path, pw.tf_shape) for pw in chosen]:
                raise ValueError(f"model {model.name!r} already carries pruning state for {[p for p, _ in old]}; "
                                 "call strip_pruning(model) before pruning a different selection")
        else:
            with _strategy(model).scope():
                state = _state_class(flavor)(chosen)
            _attach_state(model, state, flavor)
        object.__setattr__(state, "owner", weakref.ref(self))
        _install_train_step(model, state, flavor)
        self._state = state
        self._bound = weakref.ref(model)
        self._model = model
        self._refresh = True

    # ----- training hooks --------------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        model = self.model
        if model is None:
            raise ValueError("model: PruningCallback.on_train_begin called before set_model")
        if self._bound_model() is not model:
            self.attach(model)
        if getattr(model, "optimizer", None) is None:
            raise ValueError(f"model {model.name!r} has no optimizer: compile it before fit")
        if self.log_dir is not None and self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        self._spe = steps_per_execution(model)
        self._autotune = bool(getattr(model, "_autotune_steps_per_execution", False))
        self._refresh = True

    def _sync_from_state(self) -> None:
        """Read the (possibly just restored) state variables into the Python cache."""
        st = self._state
        self._done = int(st.last_step.numpy())
        self._masks = {pw.path: m.numpy() != 0 for pw, m in zip(st.pweights, st.masks)}
        self._canon = None
        self._any_pruned = not all(m.all() for m in self._masks.values())
        self._next = self._next_event()
        self._est = None
        self._refresh = False

    def _step(self) -> int:
        return int(np.asarray(self.model.optimizer.iterations.numpy()))

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._est = None            # re-read optimizer.iterations at least once per epoch

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._refresh:
            self._sync_from_state()
        # optimizer.iterations is read whenever an update may be due (and once per epoch);
        # in between the step is known without a device->host read.
        if self._est is None or self._est >= self._next or self._autotune:
            step = self._step()
        else:
            step = self._est
        # self._next is the first step at which an update or the release is due
        if step >= self._next and (self.engine.update_due(self._done, step)
                                   or (self._any_pruned and not self.engine.masking_active(step))):
            self._update(step)
        self._est = step + self._spe

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._state is None or self._bound_model() is not self.model:
            return
        if self._refresh:
            self._sync_from_state()
        step = self._step()
        if self.engine.update_due(self._done, step) or (self._any_pruned and not self.engine.masking_active(step)):
            self._update(step)
        if self._writer is not None:
            self._writer.flush()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is None or self._state is None:
            return
        if self._refresh:
            self._sync_from_state()
        total, pruned = 0, 0
        for path, m in self._masks.items():
            k = m.size - int(np.count_nonzero(m))
            total += m.size
            pruned += k
            if self.log_per_layer:
                logs[f"sparsity/{path}"] = k / m.size
        logs["sparsity"] = pruned / total if total else 0.0

    # ----- the mask update ---------------------------------------------------------------------
    def _apply_fn(self) -> tuple[Any, Any]:
        """Compiled ``read() -> weights`` and ``apply(new masks, step)`` for the mask update.

        ``apply`` writes the masks and zeroes the pruned weights and their optimizer slots.
        One graph call each instead of dozens of eager ops; rebuilt when the optimizer's
        variables change (slots created, optimizer replaced).
        """
        st, opt = self._state, getattr(self.model, "optimizer", None)
        inner = unwrap_optimizer(opt)
        nvars = getattr(inner, "_variables", None)
        if not isinstance(nvars, list):
            nvars = getattr(inner, "_weights", None)
        cheap = (id(st), id(opt), len(nvars)) if isinstance(nvars, list) else None
        if cheap is not None and self._apply_cache is not None and self._apply_cache[0] == cheap:
            return self._apply_cache[2], self._apply_cache[3]
        slots = [optimizer_slots(opt, pw.variable) for pw in st.pweights]
        key = (id(st), tuple(id(s) for ss in slots for s in ss))
        if self._apply_cache is not None and self._apply_cache[1] == key:
            self._apply_cache = (cheap, *self._apply_cache[1:])
            return self._apply_cache[2], self._apply_cache[3]
        mvars = [tf_variable(m) for m in st.masks]
        wvars = [tf_variable(pw.variable) for pw in st.pweights]
        pairs = []
        for w, m, ss in zip(wvars, mvars, slots):
            pairs.append((w, m))
            pairs.extend((tf_variable(x), m) for x in ss)
        last = tf_variable(st.last_step)

        @tf.function(autograph=False)
        def apply(new_masks: list, step: tf.Tensor) -> None:
            for m, new in zip(mvars, new_masks):     # bool masks: 4x less to convert than floats
                m.assign(tf.cast(new, m.dtype))
            _mask_all(pairs)
            last.assign(step)

        @tf.function(autograph=False)
        def read() -> list:
            return [tf.identity(w.read_value()) for w in wvars]

        self._apply_cache = (cheap, key, read, apply)
        return read, apply

    def _next_event(self) -> float:
        """First step > last update at which the callback must act (update point or release)."""
        nxt_step = self.engine.next_update_step(self._done)
        nxt = float("inf") if nxt_step < 0 else float(nxt_step)
        if not self.config.leave_enabled and self._any_pruned:
            nxt = min(nxt, float(max(self.config.end_step + 1, self._done + 1)))
        return nxt

    def _update(self, step: int) -> None:
        st, model = self._state, self.model
        pws = st.pweights
        with _strategy(model).scope():
            read, apply = self._apply_fn()
            if self.engine.masking_active(step):
                values = read()     # one graph call for all pruned weights
                weights = {pw.path: pw.to_canonical(v.numpy()) for pw, v in zip(pws, values)}
                pre = self._canon
                if pre is None:
                    pre = {pw.path: pw.to_canonical(self._masks[pw.path]) for pw in pws}
                canon = self.engine.compute_masks(weights, step, pre_masks=pre)
                masks = {pw.path: pw.from_canonical(canon[pw.path]) for pw in pws}
            else:
                canon = None
                masks = {pw.path: np.ones(pw.tf_shape, dtype=bool) for pw in pws}
            apply([tf.constant(masks[pw.path]) for pw in pws], tf.constant(step, tf.int64))
        self._masks = masks
        self._canon = canon
        self._any_pruned = not all(m.all() for m in masks.values())
        self._done = step
        self._next = self._next_event()
        sp = {p: 1.0 - float(np.count_nonzero(m)) / m.size for p, m in masks.items()}
        n = sum(m.size for m in masks.values())
        total = sum(m.size - np.count_nonzero(m) for m in masks.values()) / n if n else 0.0
        if self._writer is not None:
            with self._writer.as_default(step=step):
                _scalar("sparsity/total", total)
                for p, v in sp.items():
                    _scalar(f"sparsity/{p}", v)
        if self.verbose:
            print(f"[sparsify] step {step}: masks updated, sparsity {total:.4f}")


def strip_pruning(model: Any) -> Any:
    """Remove the pruning state from ``model`` and return it as a plain model.

    The masks are applied one last time (pruned weights are exactly zero), the
    wrapped ``train_step`` and the state layer are removed, so the model saves
    and loads (``.keras``, SavedModel, weights) without sparsify.

    Example:
        >>> model = strip_pruning(model)        # doctest: +SKIP
        >>> model.save("pruned.keras")          # doctest: +SKIP
    """
    keras_flavor(model)
    state = model.__dict__.get(STATE_ATTR)
    if state is not None:
        with _strategy(model).scope():
            _mask_all([(tf_variable(pw.variable), tf_variable(m)) for pw, m in zip(state.pweights, state.masks)])
    _uninstall_train_step(model)
    _uninstall_grad_hook(model)
    _detach_state(model)
    return model
