"""Dense weights under the mask, monotone=False, regrowth (SET, RigL), registered criteria and one-shot
pruning (Wanda) in Keras, on small real models trained with model.fit as a user trains them (both Kerases).
Wanda during fit: test_activation_statistics.py."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
import torch

import sparsify_torch
from sparsify.criteria import register_criterion, unregister_criterion
from sparsify_tf.keras import PruningCallback, prune_oneshot, strip_pruning
from sparsify_keras.compat import optimizer_slots

from _keras_helpers import compile_, exact_pruned, first, interrupted_run, mlp


def _one_weight_model(K, values, lr=0.0):
    """Dense(1, no bias) on 4 inputs holding ``values``, compiled with Adam (lr 0: weights move only by us)."""
    model = K.Sequential([first(K, (4,)), K.layers.Dense(1, use_bias=False, name="d")])
    model.layers[-1].kernel.assign(np.array(values, np.float32).reshape(4, 1))
    model.compile(K.optimizers.Adam(lr), "mse")
    return model


@pytest.mark.parametrize("in_graph", [True, False], ids=["in_graph", "host"])
@pytest.mark.parametrize("monotone", [True, False])
def test_a_pruned_weight_comes_back_only_when_monotone_is_false(K, monotone, in_graph):
    model = _one_weight_model(K, [1.0, 2.0, 3.0, 4.0])
    cfg = {"sparsity_decay_type": "constant", "target_sparsity": 0.5, "start_step": 0, "end_step": 4,
           "pruning_frequency": 2, "monotone": monotone}
    cb = PruningCallback(cfg, update_in_graph=in_graph)
    x, y = np.ones((1, 4), np.float32), np.zeros((1, 1), np.float32)
    model.fit(x, y, epochs=1, verbose=0, callbacks=[cb])                 # update at step 0; one step
    kernel, state = model.layers[-1].kernel, cb._state
    assert cb.masks["d/kernel"].ravel().tolist() == [False, False, True, True]
    assert kernel.numpy().ravel().tolist() == [0.0, 0.0, 3.0, 4.0]           # the model sees zeros
    assert state.stored[0].numpy().ravel().tolist() == [1.0, 2.0, 0.0, 0.0]  # the pruned values are kept
    kernel.assign(np.array([[0.0], [0.0], [0.1], [0.2]], np.float32))   # the kept weights shrink below them
    model.fit(x, y, epochs=1, verbose=0, callbacks=[cb])                 # update at step 2
    assert cb.last_update_step == 2
    if monotone:
        assert cb.masks["d/kernel"].ravel().tolist() == [False, False, True, True]
        assert np.allclose(kernel.numpy().ravel(), [0.0, 0.0, 0.1, 0.2])
        assert state.stored[0].numpy().ravel().tolist() == [1.0, 2.0, 0.0, 0.0]
    else:                                                                # 1, 2 come back by their stored values
        assert cb.masks["d/kernel"].ravel().tolist() == [True, True, False, False]
        assert kernel.numpy().ravel().tolist() == [1.0, 2.0, 0.0, 0.0]
        assert np.allclose(state.stored[0].numpy().ravel(), [0.0, 0.0, 0.1, 0.2])
        slots = optimizer_slots(model.optimizer, kernel)
        assert len(slots) == 2 and all(not s.numpy().any() for s in slots)   # returning and newly pruned: 0
    n_weights = len(model.weights)            # Keras 3: the state's variables are listed while pruning
    n_state = len(state.state_variables) if K.__name__ == "keras" else 0
    strip_pruning(model)
    assert len(model.weights) == n_weights - n_state
    assert (kernel.numpy() == 0).sum() == 2 and not any("stored" in w.name for w in model.weights)


def _digits_fit(model, digits, cb, epochs, n=1280):
    X, y = digits
    model.fit(X[:n], y[:n], batch_size=64, epochs=epochs, verbose=0, shuffle=False, callbacks=[cb])


@pytest.mark.slow
@pytest.mark.parametrize("in_graph", [True, False], ids=["in_graph", "host"])
@pytest.mark.parametrize("method", ["set", "rigl"])
def test_regrowth_keeps_exact_sparsity_and_grown_weights_start_at_zero(K, digits, method, in_graph):
    model = compile_(mlp(K), K)
    cfg = {"sparsity_decay_type": "constant", "target_sparsity": 0.8, "start_step": 0, "end_step": 60,
           "pruning_frequency": 20, "regrowth": method, "regrowth_fraction": 0.3}
    cb = PruningCallback(cfg, update_in_graph=in_graph)
    _digits_fit(model, digits, cb, 1)               # 20 steps: the update at 20 ends the fit
    assert cb.last_update_step == 20
    before = cb.masks
    _digits_fit(model, digits, cb, 1)               # steps 20..39, then the update at 40
    assert cb.last_update_step == 40
    after = cb.masks
    state = cb._state
    for pw, stored in zip(state.pweights, state.stored):
        new, old = after[pw.path], before[pw.path]
        assert (~new).sum() == exact_pruned(0.8, new.size)          # the scheduled sparsity, exactly
        grown = new & ~old                       # monotone masks: what is kept now and was not is grown
        assert grown.any() and grown.sum() == (old & ~new).sum()
        kernel = pw.variable.numpy()
        assert not kernel[grown].any() and not kernel[~new].any()
        assert not stored.numpy()[new].any()
        slots = optimizer_slots(model.optimizer, pw.variable)
        assert len(slots) == 2 and all(not s.numpy()[grown | ~new].any() for s in slots)
    _digits_fit(model, digits, cb, 8)               # past end_step (the fraction is 0 there)
    X, y = digits
    assert model.evaluate(X[1280:], y[1280:], verbose=0)[1] > 0.6          # it learns (chance: 0.1)
    assert cb.sparsity["total"] == pytest.approx(0.8, abs=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("first_in_graph", [True, False], ids=["saved_in_graph", "saved_on_host"])
@pytest.mark.parametrize("method", ["set", "rigl"])
def test_regrowth_resumes_bit_exactly_from_a_checkpoint(K, digits, tmp_path, method, first_in_graph):
    """Saved on the host path, the checkpoint at step 30 lacks the update due there: the resumed run makes it
    first, from the saved weights, stored values and (RigL) dense gradients of step 29."""
    cfg = {"sparsity_decay_type": "constant", "target_sparsity": 0.8, "start_step": 0, "end_step": 60,
           "pruning_frequency": 10, "regrowth": method}
    ref, ref_cb, resumed, cb, rest = interrupted_run(K, digits, cfg, tmp_path, first_in_graph, PruningCallback)
    assert cb.last_update_step == (30 if first_in_graph else 20)
    rest()
    assert cb.last_update_step == ref_cb.last_update_step == 50
    for a, b in zip(ref.get_weights(), resumed.get_weights()):
        assert np.array_equal(a, b)
    for a, b in zip(ref_cb._state.stored, cb._state.stored):
        assert np.array_equal(a.numpy(), b.numpy())
    assert all(np.array_equal(ref_cb.masks[k], cb.masks[k]) for k in ref_cb.masks)


@pytest.fixture
def distance():
    """A criterion registered in user code, needing only the weight."""
    name = "test_keras_distance"

    @register_criterion(name, needs=("weight",))
    def score(weight, **_):
        return abs(weight - 0.1)
    yield name
    unregister_criterion(name)


def test_a_criterion_registered_in_user_code_works_in_keras_like_in_torch(K, distance):
    rng = np.random.default_rng(0)
    model = K.Sequential([first(K, (8,)), K.layers.Dense(6, name="fc1"), K.layers.Dense(4, name="fc2")])
    kernels = [rng.normal(0.1, 0.3, size=s).astype(np.float32) for s in ((8, 6), (6, 4))]
    for layer, k in zip(model.layers, kernels):
        layer.kernel.assign(k)
    model.compile(K.optimizers.SGD(0.0), "mse")
    cfg = {"criterion": distance, "target_sparsity": 0.5, "end_step": 0, "pruning_scope": "global"}
    cb = PruningCallback(cfg)
    model.fit(np.ones((4, 8), np.float32), np.zeros((4, 4), np.float32), verbose=0, callbacks=[cb])
    tm = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 4))
    with torch.no_grad():
        for lin, k in zip(tm, kernels):
            lin.weight.copy_(torch.from_numpy(k.T.copy()))
    torch_masks = sparsify_torch.prune(tm, cfg).masks()
    for name, tname in (("fc1/kernel", "0.weight"), ("fc2/kernel", "1.weight")):
        assert np.array_equal(cb.masks[name], torch_masks[tname].numpy().T)
    literal = _one_weight_model(K, [0.1, 1.0, 0.2, -0.3])
    cb = PruningCallback({"criterion": distance, "target_sparsity": 0.5, "end_step": 0})
    literal.fit(np.ones((1, 4)), np.zeros((1, 1)), verbose=0, callbacks=[cb])
    assert cb.masks["d/kernel"].ravel().tolist() == [False, True, False, True]


def test_erk_scope_gives_torch_masks_in_keras(K):
    """ERK per-layer counts come from the canonical shapes: a Keras conv net and its torch twin agree."""
    rng = np.random.default_rng(3)
    model = K.Sequential([first(K, (12, 2)), K.layers.Conv1D(6, 3, name="c"), K.layers.Flatten(),
                          K.layers.Dense(5, name="fc")])
    ck, fk = rng.standard_normal((3, 2, 6)).astype(np.float32), rng.standard_normal((60, 5)).astype(np.float32)
    model.layers[0].kernel.assign(ck)
    model.layers[-1].kernel.assign(fk)
    model.compile(K.optimizers.SGD(0.0), "mse")
    cfg = {"pruning_scope": "erk", "target_sparsity": 0.9, "end_step": 0}
    cb = PruningCallback(cfg)
    model.fit(np.ones((2, 12, 2), np.float32), np.zeros((2, 5), np.float32), verbose=0, callbacks=[cb])
    tm = torch.nn.Sequential(torch.nn.Conv1d(2, 6, 3), torch.nn.Linear(60, 5))
    with torch.no_grad():
        tm[0].weight.copy_(torch.from_numpy(ck.transpose(2, 1, 0).copy()))
        tm[1].weight.copy_(torch.from_numpy(fk.T.copy()))
    torch_masks = {n: m.numpy() for n, m in sparsify_torch.prune(tm, cfg).masks().items()}
    assert np.array_equal(cb.masks["c/kernel"], torch_masks["0.weight"].transpose(2, 1, 0))
    assert np.array_equal(cb.masks["fc/kernel"], torch_masks["1.weight"].T)
    # ERK (6+2+3)/36 vs (5+60)/300: the conv keeps a larger share; 302 of 336 weights pruned in all
    pruned = {n: int((~m).sum()) for n, m in cb.masks.items()}
    assert sum(pruned.values()) == 302 and pruned["c/kernel"] / 36 < pruned["fc/kernel"] / 300


def test_a_registered_criterion_works_in_tf_graph_mode(distance):
    from sparsify_tf import prune_graph
    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("fc/kernel", initializer=tf.constant([[0.1], [1.0], [0.2], [-0.3]]))
        _ = tf.matmul(tf.ones([1, 4]), w)
        pruning = prune_graph({"criterion": distance, "target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    with tf1.Session(graph=g) as sess:
        sess.run(tf1.global_variables_initializer())
        sess.run(pruning.update_op)
        assert sess.run(pruning.masks["fc/kernel"]).ravel().tolist() == [0.0, 1.0, 0.0, 1.0]


def _trained_mlp(K, digits, seed):
    model = K.Sequential([first(K, (64,)), K.layers.Dense(32, activation="relu", name="fc1"),
                          K.layers.Dense(10, name="out")])
    K.utils.set_random_seed(seed)
    model = compile_(model, K)
    X, y = digits
    model.fit(X[:1200], y[:1200], batch_size=64, epochs=8, verbose=0)
    return model


def _torch_copy(model):
    tm = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    with torch.no_grad():
        for lin, name in ((tm[0], "fc1"), (tm[2], "out")):
            layer = model.get_layer(name)
            lin.weight.copy_(torch.from_numpy(layer.kernel.numpy().T.copy()))
            lin.bias.copy_(torch.from_numpy(layer.bias.numpy()))
    return tm


@pytest.mark.slow
@pytest.mark.parametrize("name,cfg", [("wanda", {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row"}),
                                      ("magnitude", {"target_sparsity": 0.5, "pruning_scope": "row"}),
                                      ("wanda 2:4", {"pattern": "2:4", "criterion": "wanda"})])
def test_prune_oneshot_gives_torch_s_masks_on_a_trained_mlp(K, digits, name, cfg):
    model = _trained_mlp(K, digits, 0)
    X, y = digits
    tm = sparsify_torch.prune_oneshot(_torch_copy(model), cfg, [torch.from_numpy(X[:256])])
    data = tf.data.Dataset.from_tensor_slices((X[:256], y[:256])).batch(64)      # (x, y) batches
    assert prune_oneshot(model, cfg, data) is model
    for kname, lin in (("fc1", tm[0]), ("out", tm[2])):
        kernel = model.get_layer(kname).kernel.numpy()
        assert np.array_equal(kernel == 0, lin.weight.detach().numpy().T == 0), kname
        assert (kernel == 0).mean() == 0.5
    assert not any("sparsify" in w.name for w in model.weights)


@pytest.mark.slow
def test_prune_oneshot_wanda_keeps_more_accuracy_than_magnitude(K, digits):
    X, y = digits
    acc = {"magnitude": [], "wanda": []}
    for seed in range(3):
        model = _trained_mlp(K, digits, seed)
        init = model.get_weights()
        for crit in acc:
            model.set_weights(init)
            prune_oneshot(model, {"target_sparsity": 0.5, "criterion": crit, "pruning_scope": "row"}, X[:256])
            acc[crit].append(model.evaluate(X[1200:], y[1200:], verbose=0)[1])
    assert np.mean(acc["wanda"]) > np.mean(acc["magnitude"]), acc


def test_prune_oneshot_reads_conv_input_channels_like_torch(K):
    rng = np.random.default_rng(1)
    K.utils.set_random_seed(1)
    model = K.Sequential([first(K, (6, 6, 3)), K.layers.Conv2D(4, 3, name="conv"), K.layers.Flatten(),
                          K.layers.Dense(2, name="fc")])
    x = (rng.normal(size=(16, 6, 6, 3)) * np.array([5.0, 0.1, 1.0])).astype(np.float32)   # channel scales differ
    conv = torch.nn.Conv2d(3, 4, 3)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(model.get_layer("conv").kernel.numpy().transpose(3, 2, 0, 1).copy()))
    cfg = {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row"}
    sparsify_torch.prune_oneshot(conv, cfg, [torch.from_numpy(x.transpose(0, 3, 1, 2).copy())])
    prune_oneshot(model, {**cfg, "op_names": ["conv"]}, [x])
    kernel = model.get_layer("conv").kernel.numpy()
    assert np.array_equal(kernel == 0, conv.weight.detach().numpy().transpose(2, 3, 1, 0) == 0)


def test_prune_oneshot_errors(K):
    with pytest.raises(ValueError, match="one-shot pruning runs no backward pass"):
        prune_oneshot(mlp(K), {"criterion": "snip"})
    with pytest.raises(ValueError, match="pass calibration data"):
        prune_oneshot(mlp(K), {"criterion": "wanda"})
    with pytest.raises(ValueError, match="data held no batch"):
        prune_oneshot(mlp(K), {"criterion": "wanda"}, [])

    class Sub(K.Model):
        def __init__(self):
            super().__init__()
            self.fc = K.layers.Dense(4, name="fc")

        def call(self, x):
            return self.fc(x)
    sub = Sub()
    sub(np.ones((1, 3), np.float32))
    # a subclassed model: the layers' inputs are recorded while the model runs (sparsify_keras.oneshot)
    prune_oneshot(sub, {"criterion": "wanda", "target_sparsity": 0.5}, np.ones((2, 3), np.float32))
    assert int((sub.fc.kernel.numpy() == 0).sum()) == 6
    model = mlp(K)
    prune_oneshot(model, {"target_sparsity": 0.75, "start_step": 500, "end_step": 900})   # target as given
    assert (model.get_layer("fc1").kernel.numpy() == 0).mean() == 0.75


@pytest.mark.parametrize("monotone", [True, False])
def test_set_regrowth_masks_equal_torch_s_for_the_same_weights(K, digits, monotone):
    """Learning rate 0: the weights move only by the adapters (grown ones start at zero), so both
    frameworks hand the core the same dense weights at every update and must get the same masks."""
    model = K.Sequential([first(K, (64,)), K.layers.Dense(32, activation="relu", name="fc1"),
                          K.layers.Dense(10, name="out")])
    model.compile(K.optimizers.Adam(0.0), K.losses.SparseCategoricalCrossentropy(from_logits=True))
    cfg = {"sparsity_decay_type": "constant", "target_sparsity": 0.7, "start_step": 0, "end_step": 40,
           "pruning_frequency": 10, "regrowth": "set", "monotone": monotone}
    tm = _torch_copy(model)
    opt = torch.optim.Adam(tm.parameters(), lr=0.0)
    pruner = sparsify_torch.prune(tm, cfg, optimizer=opt)
    X, y = digits
    for i in range(30):
        loss = torch.nn.functional.cross_entropy(tm(torch.from_numpy(X[i * 32:(i + 1) * 32])),
                                                 torch.from_numpy(y[i * 32:(i + 1) * 32]).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
        pruner.step()
    cb = PruningCallback(cfg)
    model.fit(X[:960], y[:960], batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
    assert cb.last_update_step == pruner.done_step == 30
    masks = pruner.masks()
    for kname, tname in (("fc1/kernel", "0.weight"), ("out/kernel", "2.weight")):
        assert np.array_equal(cb.masks[kname], masks[tname].numpy().T), kname
