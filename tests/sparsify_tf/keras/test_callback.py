"""Training real small models with PruningCallback under tf-keras and Keras 3."""
import glob

import numpy as np
import pytest
import tensorflow as tf

import sparsify
from sparsify_tf.keras import PruningCallback, find_prunable_weights
from sparsify_keras.adapter import KerasAdapter
from sparsify_keras.compat import optimizer_slots

from _keras_helpers import cnn, compile_, exact_pruned, first, inp, mlp


def zero_checker(K, cb, model, record):
    """A callback (after ours) asserting pruned weights and slots are 0 at every batch end."""
    def check(batch, logs=None):
        if cb.last_update_step < 0:
            return
        record.append(int(model.optimizer.iterations.numpy()))
        for pw, m in zip(cb._state.pweights, cb._state.masks):
            keep = m.numpy() != 0
            assert not np.any(pw.variable.numpy()[~keep]), pw.path
            for s in optimizer_slots(model.optimizer, pw.variable):
                assert not np.any(s.numpy()[~keep]), pw.path
    return K.callbacks.LambdaCallback(on_train_batch_end=check)


@pytest.mark.parametrize("in_graph", [True, False], ids=["in_graph", "host"])
def test_mlp_digits_exact_sparsity_zero_every_batch_and_logs(K, digits, tmp_path, in_graph):
    X, y = digits
    X, y = X[:512], y[:512]
    model = compile_(mlp(K), K)
    cfg = {"target_sparsity": 0.8, "start_step": 2, "end_step": 20, "pruning_frequency": 6}
    cb = PruningCallback(cfg, log_dir=str(tmp_path / "tb"), update_in_graph=in_graph)
    seen = []
    hist = model.fit(X, y, batch_size=64, epochs=4, verbose=0, shuffle=False,
                     callbacks=[cb, zero_checker(K, cb, model, seen)])
    assert cb._in_graph is in_graph
    # checked at every batch end from the first update on: the update for step 2 runs at the end of
    # the step that reaches it in the graph, at the next batch start on the host
    assert seen[0] == (2 if in_graph else 3) and seen[-1] == 32
    for pw in find_prunable_weights(model):
        k = pw.variable.numpy()
        assert int((k == 0).sum()) == exact_pruned(0.8, k.size), pw.path
        assert np.array_equal(k != 0, cb.masks[pw.path])
    assert cb.last_update_step == 20
    assert hist.history["sparsity"][-1] == pytest.approx(0.8, abs=1e-3)
    assert set(hist.history) >= {"sparsity/fc1/kernel", "sparsity/fc2/kernel", "sparsity/out/kernel"}
    # gradual schedule: epoch 1 runs steps 0-7 (update at 2, init sparsity 0), epoch 2 steps 8-15
    # (updates at 8 and 14); in the graph, the update for step 8 is made when step 7 ends, before
    # the epoch-end logs
    sched = sparsify.PruningEngine(cfg)
    n = 64 * 32
    assert hist.history["sparsity/fc1/kernel"][0] == (exact_pruned(sched.target_sparsity(8), n) / n if in_graph else 0.0)
    assert hist.history["sparsity/fc1/kernel"][1] == exact_pruned(sched.target_sparsity(14), n) / n > 0.5
    assert hist.history["accuracy"][-1] > 0.3          # still learns (chance is 0.1)
    events = glob.glob(str(tmp_path / "tb" / "*"))
    assert events
    tags = {v.tag for e in tf.compat.v1.train.summary_iterator(events[0]) for v in e.summary.value}
    assert {"sparsity/total", "sparsity/fc1/kernel"} <= tags


def test_cnn_digits_4x1_blocks(K, digits):
    X, y = digits
    X, y = X[:384].reshape(-1, 8, 8, 1), y[:384]
    model = compile_(cnn(K), K)
    cb = PruningCallback({"target_sparsity": 0.5, "pattern": "4x1", "start_step": 0, "end_step": 8,
                          "pruning_frequency": 4, "excluded_op_names": ["^out/"]})
    model.fit(X, y, batch_size=64, epochs=2, verbose=0, callbacks=[cb])
    assert cb.pruned_weights == ["conv1/kernel", "conv2/kernel", "fc/kernel"]
    ws = {pw.path: pw for pw in find_prunable_weights(model)}
    for path in cb.pruned_weights:
        pw = ws[path]
        kept = pw.to_canonical(pw.variable.numpy() != 0)
        view = kept.reshape(kept.shape[0], -1) if kept.ndim == 2 else \
            kept.transpose(0, 2, 3, 1).reshape(kept.shape[0], -1)
        blocks = view.reshape(view.shape[0] // 4, 4, view.shape[1])
        assert (blocks.all(axis=1) | ~blocks.any(axis=1)).all(), path       # whole 4x1 blocks
        assert (~blocks.any(axis=1)).sum() == exact_pruned(0.5, blocks.shape[0] * blocks.shape[2]), path
    assert np.count_nonzero(model.get_layer("out").kernel.numpy() == 0) == 0


@pytest.mark.parametrize("in_graph", [True, False], ids=["in_graph", "host"])
def test_subclassed_model_steps_per_execution_4_loses_no_update(K, digits, in_graph):
    X, y = digits
    X, y = X[:256], y[:256]

    class Net(K.Model):
        def __init__(self):
            super().__init__()
            self.hidden = K.layers.Dense(24, activation="relu", name="hidden")
            self.head = K.layers.Dense(10, name="head")

        def call(self, x):
            return self.head(self.hidden(x))

    K.utils.set_random_seed(1)
    model = Net()
    model(X[:1])
    compile_(model, K, opt="sgd", lr=0.05, steps_per_execution=4)
    updates = []
    cfg = {"target_sparsity": 0.7, "start_step": 1, "end_step": 11, "pruning_frequency": 5}   # points 1, 6, 11
    cb = PruningCallback(cfg, update_in_graph=in_graph)
    orig, orig_graph = cb._update, cb.record_update_in_step
    cb._update = lambda step: (updates.append(("host", step)), orig(step))
    cb.record_update_in_step = lambda done, keep: (updates.append(("graph", done)), orig_graph(done, keep))
    model.fit(X, y, batch_size=32, epochs=2, verbose=0, callbacks=[cb])    # 16 steps, callbacks at 0, 4, 8, 12
    if in_graph:       # inside the 4-step loop: every update point at its own step
        assert [u for u in updates if u[0] == "graph"] == [("graph", 1), ("graph", 6), ("graph", 11)]
        assert cb.last_update_step == 11
    else:              # each update point (1, 6, 11) caught at the next block start
        assert updates == [("host", 4), ("host", 8), ("host", 12)]
        assert cb.last_update_step == 12
    for pw in find_prunable_weights(model):
        assert int((pw.variable.numpy() == 0).sum()) == exact_pruned(0.7, pw.variable.numpy().size)


def test_functional_shared_layer_global_scope(K, digits):
    X, y = digits
    X, y = X[:256], y[:256]
    K.utils.set_random_seed(2)
    shared = K.layers.Dense(16, activation="relu", name="shared")
    a, b = inp(K, (32,)), inp(K, (32,))
    h = K.layers.Concatenate()([shared(a), shared(b)])
    out = K.layers.Dense(10, name="head")(K.layers.Dense(12, name="mid")(h))
    model = compile_(K.Model([a, b], out), K)
    cb = PruningCallback({"target_sparsity": 0.75, "pruning_scope": "global", "start_step": 0,
                          "end_step": 6, "pruning_frequency": 3})
    model.fit([X[:, :32], X[:, 32:]], y, batch_size=32, epochs=1, verbose=0, callbacks=[cb])
    assert cb.pruned_weights == ["shared/kernel", "mid/kernel", "head/kernel"]
    ks = [pw.variable.numpy() for pw in find_prunable_weights(model)]
    total = sum(k.size for k in ks)
    assert sum(int((k == 0).sum()) for k in ks) == int(np.ceil(0.75 * total - 0.5))
    per = [float((k == 0).mean()) for k in ks]
    assert len(set(per)) > 1                      # one global threshold, not equal per-layer ratios
    assert cb.sparsity["total"] == pytest.approx(0.75, abs=1 / total)


def test_2_of_4_pattern(K, digits):
    X, y = digits
    X, y = X[:256], y[:256]
    model = compile_(mlp(K), K)
    cb = PruningCallback({"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 4,
                          "pruning_frequency": 2, "op_names": ["fc"]})
    model.fit(X, y, batch_size=32, epochs=1, verbose=0, callbacks=[cb])
    assert cb.pruned_weights == ["fc1/kernel", "fc2/kernel"]
    for name in ("fc1", "fc2"):
        k = model.get_layer(name).kernel.numpy().T            # canonical (out, in)
        groups = (k != 0).reshape(k.shape[0], -1, 4)
        assert (groups.sum(axis=2) == 2).all(), name


def test_literal_mask_on_a_tiny_dense_layer(K):
    model = K.Sequential([first(K, (2,)), K.layers.Dense(2, use_bias=False, name="d")])
    model.get_layer("d").set_weights([np.array([[1.0, -3.0], [0.5, 2.0]], np.float32)])  # (in, out)
    model.compile(K.optimizers.SGD(0.0), "mse")
    cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    model.fit(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), batch_size=2, epochs=1,
              verbose=0, callbacks=[cb])
    # the two smallest magnitudes (0.5 and 1.0) are pruned
    assert cb.masks["d/kernel"].tolist() == [[False, True], [False, True]]
    assert model.get_layer("d").kernel.numpy().tolist() == [[0.0, -3.0], [0.0, 2.0]]


def test_every_host_update_is_timed_by_its_parts(K, digits):
    X, y = digits
    model = compile_(mlp(K), K)
    cb = PruningCallback({"target_sparsity": 0.6, "start_step": 0, "end_step": 20, "pruning_frequency": 10},
                         update_in_graph=False)
    assert cb.update_timings == []
    model.fit(X[:640], y[:640], batch_size=32, epochs=2, verbose=0, shuffle=False, callbacks=[cb])
    assert [t["step"] for t in cb.update_timings] == [0, 10, 20]
    assert all(sorted(t) == ["read", "select", "step", "write"] for t in cb.update_timings)
    assert all(0 < t[part] < 60 for t in cb.update_timings for part in ("read", "select", "write"))


def test_leave_enabled_false_releases_masks_after_end(K, digits):
    X, y = digits
    model = compile_(mlp(K), K)
    cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 2, "pruning_frequency": 1,
                          "leave_enabled": False})
    model.fit(X[:192], y[:192], batch_size=32, epochs=1, verbose=0, callbacks=[cb])
    assert cb.sparsity["total"] == 0.0
    assert float((model.get_layer("fc1").kernel.numpy() == 0).mean()) < 0.5   # regrown


def test_mask_update_built_once_and_step_read_only_when_an_update_may_be_due(K, digits, monkeypatch):
    """Host path (update_in_graph=False): the update function is one concrete function for the whole run
    (no retracing: shapes never change; the optimizer's slots are created before the update at step 0),
    optimizer.iterations is read on the host only at epoch starts, at the due steps and at the end, and
    the pruned weights and Adam's slots are exactly zero after every step."""
    X, y = digits
    model = compile_(mlp(K), K)
    cb = PruningCallback({"target_sparsity": 0.6, "start_step": 0, "end_step": 30, "pruning_frequency": 10},
                         update_in_graph=False)
    reads, applies, checked = [], [], []
    step, write = cb._step, KerasAdapter.write_update
    cb._step = lambda: reads.append(step()) or reads[-1]
    monkeypatch.setattr(KerasAdapter, "write_update",
                        lambda self, update: applies.append((update.step, self.io.apply_function)) or write(self, update))
    model.fit(X[:1408], y[:1408], batch_size=64, epochs=2, verbose=0, shuffle=False,
              callbacks=[cb, zero_checker(K, cb, model, checked)])
    assert [s for s, _ in applies] == [0, 10, 20, 30]
    assert all(a is applies[0][1] for _, a in applies)          # the optimizer was built before step 0's update
    assert isinstance(applies[0][1], tf.types.experimental.ConcreteFunction)
    assert reads == [0, 10, 20, 22, 30, 44]          # 22: second epoch starts; 44: on_train_end
    assert checked == list(range(1, 45))
    assert cb.sparsity["total"] == pytest.approx(0.6, abs=1e-3)


def test_updates_in_the_train_step_need_no_host_work_between_epoch_starts(K, digits):
    """Default path: after the first batch (the update at step 0, on the host) the train step updates the
    masks itself at 10, 20 and 30; the host reads optimizer.iterations only at epoch starts and at the end,
    tf-keras calls no batch hook at all, and the result equals the host path's bit for bit."""
    X, y = digits
    results = {}
    for in_graph in (True, False):
        model = compile_(mlp(K), K)
        cb = PruningCallback({"target_sparsity": 0.6, "start_step": 0, "end_step": 30, "pruning_frequency": 10},
                             update_in_graph=in_graph)
        reads, host, graph, checked = [], [], [], []
        step, update, graph_updated = cb._step, cb._update, cb.record_update_in_step
        cb._step = lambda: reads.append(step()) or reads[-1]
        cb._update = lambda s: host.append(s) or update(s)
        cb.record_update_in_step = lambda done, keep: graph.append(done) or graph_updated(done, keep)
        model.fit(X[:1408], y[:1408], batch_size=64, epochs=2, verbose=0, shuffle=False,
                  callbacks=[cb, zero_checker(K, cb, model, checked)])
        results[in_graph] = [w.numpy() for w in model.weights]
        if in_graph:
            assert cb._in_graph
            assert host == [0] and graph == [10, 20, 30]
            assert reads == [0, 22, 44]             # epoch starts and on_train_end only
            assert checked == list(range(1, 45))
            if K.__name__ == "tf_keras":
                assert cb._batch_hooks is False     # tf-keras skips the per-batch Python call
    assert all(np.array_equal(a, b) for a, b in zip(results[True], results[False]))


def test_nan_weights_at_an_update_in_the_train_step_name_the_layer_and_change_nothing(K, digits):
    X, y = digits
    model = compile_(mlp(K), K, opt="sgd")
    cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 40, "pruning_frequency": 4})
    model.fit(X[:128], y[:128], batch_size=32, epochs=1, verbose=0, callbacks=[cb])       # steps 0-3
    assert cb._in_graph and cb.last_update_step == 4
    kernel = model.get_layer("fc2").kernel
    bad = kernel.numpy()
    bad[tuple(np.argwhere(cb.masks["fc2/kernel"])[0])] = np.nan       # a kept weight (training spreads it)
    kernel.assign(bad)
    before = [m.numpy() for m in cb._state.masks]
    with pytest.raises(ValueError, match=r"^pruning update at step 8 refused: layer .fc\d/kernel.: scores contain NaN"
                                         r".*the weights and masks are unchanged$") as info:
        model.fit(X[:128], y[:128], batch_size=32, epochs=1, verbose=0, callbacks=[cb])
    assert len(str(info.value).splitlines()) == 1 and info.value.__suppress_context__      # the core's one line
    assert cb.last_update_step == 4
    assert all(np.array_equal(a, m.numpy()) for a, m in zip(before, cb._state.masks))


@pytest.mark.slow
def test_xla_train_step_keeps_the_updates_on_the_host(K, digits):
    """numpy_function does not compile with XLA: a jit-compiled train step falls back to the host path."""
    X, y = digits
    model = compile_(mlp(K), K, jit_compile=True)
    cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 6, "pruning_frequency": 3})
    model.fit(X[:256], y[:256], batch_size=32, epochs=1, verbose=0, callbacks=[cb])
    assert cb._in_graph is False and cb._batch_hooks is True
    assert cb.last_update_step == 6
    for pw in find_prunable_weights(model):
        k = pw.variable.numpy()
        assert int((k == 0).sum()) == exact_pruned(0.5, k.size), pw.path


def test_fit_that_stops_before_end_step_warns_once_naming_the_steps_and_sparsity(K):
    """Issue 47: at the end of ``fit`` a schedule that never reached its target says so (once), on both Kerases;
    a fit that reaches it says nothing."""
    import warnings

    from sparsify.target_check import TargetNotReachedWarning

    x, y = np.ones((32, 8), np.float32), np.zeros(32, np.int32)
    model = compile_(K.Sequential([first(K, (8,)), K.layers.Dense(4, name="fc")]), K, opt="sgd")
    cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 100, "pruning_frequency": 2})
    with pytest.warns(TargetNotReachedWarning) as caught:
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb])
    assert len(caught) == 1 and cb.last_update_step == 4
    assert str(caught[0].message) == (
        f"PruningCallback (model {model.name!r}): training ended at step 4 before the pruning schedule reached its "
        f"target: the last mask update was at step 4 and the masks hold sparsity {cb.sparsity['total']:.4f}, but "
        "target_sparsity 0.5 is reached only at end_step 100. Train for at least end_step steps, or lower end_step "
        "(and pruning_frequency).")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TargetNotReachedWarning)     # once per run: the next fit says nothing
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[cb])
        reached = compile_(K.Sequential([first(K, (8,)), K.layers.Dense(4, name="fc")]), K, opt="sgd")
        done = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 2, "pruning_frequency": 2})
        reached.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[done])
    assert done.sparsity["total"] == 0.5
