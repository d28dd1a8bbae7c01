"""criterion="wanda" during model.fit (sparsify_tf/keras/statistics.py): the per-input-channel sums of squares of
each pruned layer's inputs since the last update, the core's masks from them, torch parity, resume, errors."""
import json
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import torch

import sparsify_torch
from sparsify import PruningProtocol
from sparsify_tf.keras import PruningCallback, strip_pruning
from sparsify_tf.keras.compat import tf_variable
from sparsify_keras.statistics import window_of

from _keras_helpers import compile_, first, interrupted_run, mlp

CFG = {"target_sparsity": 0.5, "start_step": 0, "end_step": 6, "pruning_frequency": 3, "criterion": "wanda"}


def _conv_model(K, lr=0.0):
    """Conv2D(4, 3) on 6x6x2 -> Flatten -> Dense(3); SGD (lr 0: the weights move only by the masks)."""
    K.utils.set_random_seed(1)
    model = K.Sequential([first(K, (6, 6, 2)), K.layers.Conv2D(4, 3, activation="relu", name="conv"),
                          K.layers.Flatten(), K.layers.Dense(3, name="fc")])
    model.compile(K.optimizers.SGD(lr), "mse")
    return model


def _numpy_conv_relu(x, kernel, bias):
    """Valid 2-D convolution (NHWC, kernel (kh, kw, in, out)) then relu, in NumPy float64."""
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), kernel.shape[:2], axis=(1, 2))
    return np.maximum(np.einsum("nhwcij,ijco->nhwo", windows, kernel.astype(np.float64)) + bias, 0.0)


def _sums(cb):
    return {pw.path: tf_variable(s).numpy() for pw, s in zip(cb._state.pweights, cb._state.activation_sums)}


def _calls(cb):
    return {pw.path: int(tf_variable(c).numpy()) for pw, c in zip(cb._state.pweights, cb._state.activation_calls)}


@pytest.mark.parametrize("in_graph", [True, False], ids=["in_graph", "host"])
def test_the_sums_are_numpy_s_over_the_training_batches_since_the_last_update(K, in_graph):
    model = _conv_model(K)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 6, 6, 2)).astype("float32"), np.zeros((40, 3), "float32")
    xv = rng.normal(size=(16, 6, 6, 2)).astype("float32")
    cb = PruningCallback(CFG, update_in_graph=in_graph)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[cb],
              validation_data=(xv, np.zeros((16, 3), "float32")))       # validation adds nothing
    assert cb.last_update_step == 3 and int(model.optimizer.iterations.numpy()) == 5
    window = x[24:]                                                      # steps 3 and 4 (batches 4 and 5)
    conv = model.get_layer("conv")
    fc_in = _numpy_conv_relu(window, conv.kernel.numpy(), conv.bias.numpy()).reshape(len(window), -1)
    sums = _sums(cb)
    assert sums["conv/kernel"].shape == (2,) and sums["fc/kernel"].shape == (64,)
    np.testing.assert_allclose(sums["conv/kernel"], np.square(window.astype(np.float64)).sum(axis=(0, 1, 2)),
                               rtol=1e-5)
    np.testing.assert_allclose(sums["fc/kernel"], np.square(fc_in).sum(axis=0), rtol=1e-5, atol=1e-5)
    assert _calls(cb) == {"conv/kernel": 2, "fc/kernel": 2}


def test_the_norms_are_shaped_to_broadcast_against_the_canonical_weight(K):
    model = _conv_model(K)
    cb = PruningCallback(CFG)
    cb.attach(model)
    window = window_of(cb._state.pweights, [np.full(2, 4.0, np.float32), np.full(64, 9.0, np.float32)], [1, 1])
    norms = window.read()
    assert norms["conv/kernel"].shape == (1, 2, 1, 1) and norms["fc/kernel"].shape == (1, 64)
    assert norms["conv/kernel"].ravel().tolist() == [2.0, 2.0] and set(norms["fc/kernel"].ravel()) == {3.0}
    assert not window.waiting() and window_of(cb._state.pweights, [np.zeros(2), np.zeros(64)], [0, 0]).waiting()
    with pytest.raises(ValueError, match=r"\['fc/kernel'\] saw no input since the last update"):
        window_of(cb._state.pweights, [np.ones(2, np.float32), np.ones(64, np.float32)], [3, 0]).read()


class _Probe:
    """Records, at each batch start before the pruning callback acts, the dense weights and the statistics."""

    def __init__(self, K, cb):
        probe = self

        class Before(K.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                st = cb._state
                probe.seen.append((int(self.model.optimizer.iterations.numpy()), cb.last_update_step,
                                   {pw.path: pw.variable.numpy() + s.numpy() for pw, s in zip(st.pweights, st.stored)},
                                   dict(cb.masks), _sums(cb)))

        class After(K.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                probe.after.append((cb.last_update_step, dict(cb.masks)))

        self.seen, self.after = [], []
        self.callbacks = [Before(), cb, After()]


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["local", "row"])
def test_each_update_s_masks_are_the_core_s_wanda_masks_of_those_weights_and_sums(K, digits, scope):
    """Adam at lr 0.01 moves the weights: at every update the masks equal what the core's protocol gives for
    the dense weights and the norms of the sums the callback held just before it."""
    model = compile_(mlp(K), K)
    cfg = {"target_sparsity": 0.8, "start_step": 0, "end_step": 24, "pruning_frequency": 6, "criterion": "wanda",
           "pruning_scope": scope, "monotone": False}
    cb = PruningCallback(cfg, update_in_graph=False)
    probe = _Probe(K, cb)
    X, y = digits
    model.fit(X[:960], y[:960], batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=probe.callbacks)
    pws = {pw.path: pw for pw in cb._state.pweights}
    core = PruningProtocol(cfg, {p: pw.canonical_shape for p, pw in pws.items()})
    updates = 0
    for (step, done, weights, masks, sums), (new_done, new_masks) in zip(probe.seen, probe.after):
        if new_done == done:
            continue
        updates += 1
        assert new_done == step and all(s.any() for s in sums.values())
        core.restore(done, {p: pws[p].to_canonical(m) for p, m in masks.items()})
        norms = {p: np.sqrt(s).reshape(1, -1) for p, s in sums.items()}
        update = core.advance(step, {p: pws[p].to_canonical(w) for p, w in weights.items()}, activations=norms)
        for p, pw in pws.items():
            assert np.array_equal(new_masks[p], pw.from_canonical(update.masks[p])), (step, p)
    assert updates == 5                  # steps 1 (the update due at 0 waits for a batch), 6, 12, 18, 24
    assert probe.after[0][0] == -1 and probe.after[1][0] == 1


def test_in_graph_and_host_updates_give_the_same_weights_masks_and_sums(K, digits):
    cfg = {"target_sparsity": 0.8, "start_step": 0, "end_step": 24, "pruning_frequency": 6, "criterion": "wanda"}
    X, y = digits
    runs = []
    for in_graph in (True, False):
        model = compile_(mlp(K), K)
        cb = PruningCallback(cfg, update_in_graph=in_graph)
        model.fit(X[:832], y[:832], batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
        runs.append((model, cb))
    (a, cb_a), (b, cb_b) = runs
    assert cb_a.last_update_step == cb_b.last_update_step == 24
    assert all(np.array_equal(u, v) for u, v in zip(a.get_weights(), b.get_weights()))
    assert all(np.array_equal(cb_a.masks[k], cb_b.masks[k]) for k in cb_a.masks)
    sa, sb = _sums(cb_a), _sums(cb_b)
    assert all(np.array_equal(sa[k], sb[k]) for k in sa) and _calls(cb_a) == _calls(cb_b) == {"fc1/kernel": 2,
                                                                                             "fc2/kernel": 2,
                                                                                             "out/kernel": 2}


def _torch_conv_copy(model):
    """torch twin of _conv_model: Conv2d, ReLU, Flatten (CHW order), Linear with the columns permuted to match."""
    conv, fc = model.get_layer("conv"), model.get_layer("fc")
    tm = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(64, 3))
    with torch.no_grad():
        tm[0].weight.copy_(torch.from_numpy(conv.kernel.numpy().transpose(3, 2, 0, 1).copy()))
        tm[0].bias.copy_(torch.from_numpy(conv.bias.numpy()))
        tm[3].weight.copy_(torch.from_numpy(_fc_to_torch(fc.kernel.numpy())))
        tm[3].bias.copy_(torch.from_numpy(fc.bias.numpy()))
    return tm


def _fc_to_torch(kernel):
    """Keras Dense kernel over an HWC flatten (4*4*4, out) -> torch Linear weight over a CHW flatten (out, 64)."""
    return kernel.reshape(4, 4, 4, -1).transpose(3, 2, 0, 1).reshape(kernel.shape[-1], 64).copy()


@pytest.mark.parametrize("scope", ["local", "row"])
def test_masks_and_sums_equal_torch_s_for_the_same_weights_and_batches(K, scope):
    """Learning rate 0: both frameworks see the same weights and batches, so their statistics agree (up to
    float32 summation order) and every update gives the same masks."""
    cfg = {"target_sparsity": 0.7, "start_step": 0, "end_step": 20, "pruning_frequency": 5, "criterion": "wanda",
           "pruning_scope": scope}
    model = _conv_model(K)
    tm = _torch_conv_copy(model)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(23 * 8, 6, 6, 2)).astype("float32"), rng.normal(size=(23 * 8, 3)).astype("float32")
    opt = torch.optim.SGD(tm.parameters(), lr=0.0)
    pruner = sparsify_torch.prune(tm, cfg, optimizer=opt)
    for i in range(23):
        xb = torch.from_numpy(x[i * 8:(i + 1) * 8].transpose(0, 3, 1, 2).copy())
        loss = torch.nn.functional.mse_loss(tm(xb), torch.from_numpy(y[i * 8:(i + 1) * 8]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        pruner.step()
    cb = PruningCallback(cfg)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
    assert cb.last_update_step == pruner.done_step == 20
    masks = pruner.masks()
    assert np.array_equal(cb.masks["conv/kernel"], masks["0.weight"].numpy().transpose(2, 3, 1, 0))
    assert np.array_equal(_fc_to_torch(cb.masks["fc/kernel"]), masks["3.weight"].numpy())
    sums, torch_sums = _sums(cb), pruner.state_dict()["activation_sums"]      # steps 20..22 in both
    np.testing.assert_allclose(sums["conv/kernel"], torch_sums["0.weight"].numpy(), rtol=1e-5)
    chw = sums["fc/kernel"].reshape(4, 4, 4).transpose(2, 0, 1).ravel()
    np.testing.assert_allclose(chw, torch_sums["3.weight"].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("first_in_graph", [True, False], ids=["saved_in_graph", "saved_on_host"])
def test_resume_from_a_checkpoint_continues_bit_exactly(K, digits, tmp_path, first_in_graph):
    """Windows span the checkpoint (updates every 15 steps, 10 steps an epoch): the saved sums carry over.
    Saved on the host path, the checkpoint at step 30 lacks the update due there: the resumed run makes it
    first, from the saved weights and sums."""
    cfg = {"target_sparsity": 0.8, "start_step": 0, "end_step": 60, "pruning_frequency": 15, "criterion": "wanda"}
    ref, ref_cb, resumed, cb, rest = interrupted_run(K, digits, cfg, tmp_path, first_in_graph, PruningCallback)
    assert cb.last_update_step == (30 if first_in_graph else 15)
    assert all(c == (0 if first_in_graph else 15) for c in _calls(cb).values())   # the window that was saved
    rest()
    assert cb.last_update_step == ref_cb.last_update_step == 45
    assert all(np.array_equal(a, b) for a, b in zip(ref.get_weights(), resumed.get_weights()))
    assert all(np.array_equal(ref_cb.masks[k], cb.masks[k]) for k in ref_cb.masks)
    sa, sb = _sums(ref_cb), _sums(cb)
    assert all(np.array_equal(sa[k], sb[k]) for k in sa) and _calls(ref_cb) == _calls(cb)


@pytest.mark.slow
def test_strip_pruning_gives_the_layers_their_own_call_back(K, digits):
    model = compile_(mlp(K), K)
    cb = PruningCallback({"target_sparsity": 0.5, "end_step": 0, "criterion": "wanda"})
    X, y = digits
    model.fit(X[:64], y[:64], batch_size=32, epochs=1, verbose=0, callbacks=[cb])
    assert "call" in model.get_layer("fc1").__dict__
    assert cb.sparsity["total"] == 0.5
    strip_pruning(model)
    assert all("call" not in model.get_layer(n).__dict__ for n in ("fc1", "fc2", "out"))
    assert (model.get_layer("fc1").kernel.numpy() == 0).mean() == 0.5
    before = model.predict(X[:8], verbose=0)
    model.fit(X[:64], y[:64], batch_size=32, epochs=1, verbose=0)     # trains as a plain model: zeros may move
    assert not np.array_equal(before, model.predict(X[:8], verbose=0))


def test_a_layer_whose_kernel_does_not_read_input_channels_is_refused_by_name(K):
    model = K.Sequential([first(K, (5,)), K.layers.Embedding(10, 4, name="emb"), K.layers.Flatten(),
                          K.layers.Dense(2, name="fc")])
    model.compile("sgd", "mse")
    cb = PruningCallback({"target_sparsity": 0.5, "end_step": 0, "criterion": "wanda"})
    with pytest.raises(ValueError, match=r"\['emb/embeddings'\] are not Dense or Conv1D/2D/3D kernels"):
        cb.attach(model)
    assert cb.pruned_weights == [] and "call" not in model.get_layer("fc").__dict__   # nothing changed


def test_a_pruned_layer_the_train_step_never_calls_is_refused_by_name(K):
    class TwoHeads(K.Model):
        def __init__(self):
            super().__init__()
            self.used = K.layers.Dense(2, name="used")
            self.unused = K.layers.Dense(2, name="unused")

        def call(self, x):
            return self.used(x)

    model = TwoHeads()
    model(np.zeros((1, 3), "float32"))
    model.unused.build((None, 3))
    model.compile("sgd", "mse")
    cb = PruningCallback({"target_sparsity": 0.5, "end_step": 0, "criterion": "wanda"})
    with pytest.raises(ValueError, match=r"\['unused/kernel'\] were not called in the model's train step"):
        model.fit(np.ones((4, 3), "float32"), np.zeros((4, 2), "float32"), verbose=0, callbacks=[cb])
    assert (model.unused.kernel.numpy() != 0).all()                   # nothing was pruned


DISTRIBUTED = textwrap.dedent("""
    import json, os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, tf_keras
    from sparsify_tf.keras import PruningCallback
    from sparsify_tf.keras.compat import tf_variable
    x = np.random.default_rng(0).normal(size=(64, 6)).astype("float32")
    result = {}
    for K in (tf_keras, keras):
        for dist in (False, True):
            strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if dist else tf.distribute.get_strategy()
            with strategy.scope():
                K.utils.set_random_seed(0)
                first = K.layers.InputLayer((6,)) if K is tf_keras else K.Input((6,))
                m = K.Sequential([first, K.layers.Dense(5, activation="relu", name="fc1"),
                                  K.layers.Dense(3, name="out")])
                m.compile(K.optimizers.SGD(0.0), "mse")
            cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 6, "pruning_frequency": 3,
                                  "criterion": "wanda"})
            m.fit(x, np.zeros((64, 3), "float32"), batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
            var = tf_variable(cb._state.activation_sums[0])
            replicas = [v.numpy().tolist() for v in var.values] if dist else [var.numpy().tolist()]
            result[f"{K.__name__}/{dist}"] = {"done": cb.last_update_step, "fc1_sums": replicas,
                                             "masks": {k: v.tolist() for k, v in cb.masks.items()}}
    print("RESULT " + json.dumps(result))
""")


@pytest.mark.slow
def test_under_mirrored_strategy_each_replica_adds_its_share_of_the_global_batch():
    """Two logical CPUs (own process: devices are fixed before TF starts), batch 16 split 8 + 8: the sums on
    every replica are those of the whole batch and the masks are those of training without a strategy."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", DISTRIBUTED], capture_output=True, text=True, env=env, timeout=600)
    line = [s for s in res.stdout.splitlines() if s.startswith("RESULT ")]
    assert res.returncode == 0 and line, res.stderr[-3000:]
    result = json.loads(line[0][len("RESULT "):])
    x = np.random.default_rng(0).normal(size=(64, 6)).astype("float32")
    for flavor in ("tf_keras", "keras"):
        plain, mirrored = result[f"{flavor}/False"], result[f"{flavor}/True"]
        assert plain["done"] == mirrored["done"] == 3 and plain["masks"] == mirrored["masks"]
        assert len(mirrored["fc1_sums"]) == 2
        for sums in plain["fc1_sums"] + mirrored["fc1_sums"]:      # step 3's batch: x[48:64]
            np.testing.assert_allclose(sums, np.square(x[48:].astype(np.float64)).sum(axis=0), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("compile_kw", [{"jit_compile": True}, {"steps_per_execution": 3}], ids=["xla", "spe3"])
def test_xla_and_several_steps_per_execution_record_the_same_statistics(K, digits, compile_kw):
    """Under XLA the updates run on the host, with steps_per_execution=3 the host or graph sees 3 steps a call:
    the recorded sums, masks and weights are those of the plain run."""
    cfg = {"target_sparsity": 0.8, "start_step": 0, "end_step": 12, "pruning_frequency": 6, "criterion": "wanda"}
    X, y = digits
    runs = []
    for kw in ({}, compile_kw):
        model = compile_(mlp(K), K, opt="sgd", lr=0.05, **kw)
        cb = PruningCallback(cfg)
        model.fit(X[:480], y[:480], batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
        runs.append((model, cb))
    (a, cb_a), (b, cb_b) = runs
    assert cb_a.last_update_step == cb_b.last_update_step == 12
    assert all(np.array_equal(cb_a.masks[k], cb_b.masks[k]) for k in cb_a.masks)
    assert all(np.allclose(u, v, rtol=1e-5, atol=1e-6) for u, v in zip(a.get_weights(), b.get_weights()))
    sa, sb = _sums(cb_a), _sums(cb_b)
    assert all(np.allclose(sa[k], sb[k], rtol=1e-5) for k in sa) and _calls(cb_a) == _calls(cb_b)
    assert all(c == 3 for c in _calls(cb_b).values())               # steps 12, 13, 14 since the update at 12
