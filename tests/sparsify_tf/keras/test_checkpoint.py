"""Resume from checkpoints, strip_pruning, and loading saved models without sparsify."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from sparsify_tf.keras import STATE_ATTR, PruningCallback, find_prunable_weights, strip_pruning

from _keras_helpers import FLAVORS, cnn, compile_, kmod, mlp

CFG = {"target_sparsity": 0.8, "start_step": 0, "end_step": 24, "pruning_frequency": 5}   # points 0,5,...,20,24


def _data(digits):
    X, y = digits
    return X[:256], y[:256]                  # 8 steps per epoch at batch 32


def _fresh(K, init=None, seed=0):
    model = compile_(mlp(K, seed=seed), K)
    if init is not None:
        model.set_weights(init)
    return model


_REFERENCE = {}


def _reference(K, digits, init):
    """The uninterrupted run (computed once per flavour; init is the same seed-0 init each time)."""
    if K.__name__ in _REFERENCE:
        return _REFERENCE[K.__name__]
    X, y = _data(digits)
    model = _fresh(K, init)
    cb = PruningCallback(CFG)
    model.fit(X, y, batch_size=32, epochs=4, verbose=0, shuffle=False, callbacks=[cb])
    _REFERENCE[K.__name__] = model, cb
    return model, cb


def _assert_same(model_a, cb_a, model_b, cb_b):
    assert cb_a.last_update_step == cb_b.last_update_step == 24
    for a, b in zip(model_a.get_weights(), model_b.get_weights()):
        assert np.array_equal(a, b)
    ma, mb = cb_a.masks, cb_b.masks
    assert ma.keys() == mb.keys() and all(np.array_equal(ma[k], mb[k]) for k in ma)
    assert int(model_a.optimizer.iterations.numpy()) == int(model_b.optimizer.iterations.numpy()) == 32


def _checkpoint_then_resume(K, digits, tmp_path, epochs, first_cb, resumed_cb):
    """Train ``epochs`` epochs with ModelCheckpoint(save_weights_only), then do what a new process would:
    new model, new callback, attach, load. Returns (reference model, its callback, resumed model)."""
    X, y = _data(digits)
    init = _fresh(K).get_weights()
    ref, ref_cb = _reference(K, digits, init)
    path = str(tmp_path / ("ckpt.weights.h5" if K.__name__ == "keras" else "ckpt"))
    first = _fresh(K, init)
    first.fit(X, y, batch_size=32, epochs=epochs, verbose=0, shuffle=False,
              callbacks=[first_cb, K.callbacks.ModelCheckpoint(path, save_weights_only=True)])
    resumed = _fresh(K, seed=5)
    if K.__name__ == "keras":
        resumed.optimizer.build(resumed.trainable_variables)
    resumed_cb.attach(resumed)
    resumed.load_weights(path)
    return ref, ref_cb, resumed


@pytest.mark.slow
def test_resume_from_model_checkpoint_weights_equals_uninterrupted(K, digits, tmp_path):
    cb = PruningCallback(CFG)
    ref, ref_cb, resumed = _checkpoint_then_resume(K, digits, tmp_path, 2, PruningCallback(CFG), cb)
    assert cb.last_update_step == 15                       # mask state restored from the checkpoint
    resumed.fit(*_data(digits), batch_size=32, epochs=4, initial_epoch=2, verbose=0, shuffle=False, callbacks=[cb])
    _assert_same(ref, ref_cb, resumed, cb)


@pytest.mark.parametrize("first_in_graph", [False, True], ids=["host_then_graph", "graph_then_host"])
def test_resume_across_update_paths_equals_uninterrupted(K, digits, tmp_path, first_in_graph):
    """A checkpoint written on one update path resumes exactly on the other. Host first: the checkpoint
    after epoch 3 (step 24) lacks the update due at 24 (the host makes it at the next batch start or
    at on_train_end, after the save), so the resumed in-graph run makes it at its first epoch start."""
    cb = PruningCallback(CFG, update_in_graph=not first_in_graph)
    ref, ref_cb, resumed = _checkpoint_then_resume(
        K, digits, tmp_path, 3, PruningCallback(CFG, update_in_graph=first_in_graph), cb)
    assert cb.last_update_step == (24 if first_in_graph else 20)
    resumed.fit(*_data(digits), batch_size=32, epochs=4, initial_epoch=3, verbose=0, shuffle=False, callbacks=[cb])
    _assert_same(ref, ref_cb, resumed, cb)


@pytest.mark.slow
def test_backup_and_restore_resume_equals_uninterrupted(K, digits, tmp_path):
    X, y = _data(digits)
    init = _fresh(K).get_weights()
    ref, ref_cb = _reference(K, digits, init)

    def interrupt(epoch, logs=None):
        if epoch == 2:
            raise RuntimeError("preempted")

    backup = str(tmp_path / "backup")
    first = _fresh(K, init)
    with pytest.raises(RuntimeError, match="preempted"):
        first.fit(X, y, batch_size=32, epochs=4, verbose=0, shuffle=False,
                  callbacks=[K.callbacks.BackupAndRestore(backup), PruningCallback(CFG),
                             K.callbacks.LambdaCallback(on_epoch_begin=interrupt)])
    resumed = _fresh(K, seed=7)
    cb = PruningCallback(CFG)
    resumed.fit(X, y, batch_size=32, epochs=4, verbose=0, shuffle=False,
                callbacks=[K.callbacks.BackupAndRestore(backup), cb])
    _assert_same(ref, ref_cb, resumed, cb)


CLEAN_LOAD = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np, tensorflow as tf
    result = {}
    for flavor, d in zip(sys.argv[1::2], sys.argv[2::2]):
      K = __import__("tf_keras" if flavor == "tf_keras" else "keras")
      x = np.load(os.path.join(d, "x.npy")); want = np.load(os.path.join(d, "y.npy"))
      out = {}
      for name in ("stripped.keras", "unstripped.keras"):
          m = K.models.load_model(os.path.join(d, name))
          out[name] = [float(np.abs(m.predict(x, verbose=0) - want).max()),
                       float((m.get_layer("conv2").kernel.numpy() == 0).mean())]
      sm = os.path.join(d, "savedmodel")
      if flavor == "tf_keras":
          pred = K.models.load_model(sm).predict(x, verbose=0)
      else:
          obj = tf.saved_model.load(sm)
          pred = obj.serve(tf.constant(x)).numpy()
      out["savedmodel"] = [float(np.abs(pred - want).max()), 0.0]
      out["imported"] = sorted(m for m in sys.modules if m.split(".")[0] in ("sparsify", "sparsify_tf"))
      result[flavor] = out
    print(json.dumps(result))
""")


def _train_strip_save(K, digits, d):
    X, y = digits
    X, y = X[:256].reshape(-1, 8, 8, 1), y[:256]
    model = compile_(cnn(K), K)
    n_weights = len(model.weights)
    cb = PruningCallback({"target_sparsity": 0.75, "start_step": 0, "end_step": 4, "pruning_frequency": 2})
    model.fit(X, y, batch_size=32, epochs=1, verbose=0, callbacks=[cb])
    model.save(os.path.join(d, "unstripped.keras"))
    assert strip_pruning(model) is model
    assert STATE_ATTR not in model.__dict__ and "train_step" not in model.__dict__
    assert len(model.weights) == n_weights
    k = model.get_layer("conv2").kernel.numpy()
    assert (k == 0).sum() == int(np.ceil(0.75 * k.size - 0.5))
    model.save(os.path.join(d, "stripped.keras"))
    if K.__name__ == "tf_keras":
        model.save(os.path.join(d, "savedmodel"), save_format="tf")
    else:
        model.export(os.path.join(d, "savedmodel"), verbose=False)
    np.save(os.path.join(d, "x.npy"), X[:16])
    np.save(os.path.join(d, "y.npy"), model.predict(X[:16], verbose=0))
    # the stripped model trains on as a plain model (no masking any more)
    model.fit(X, y, batch_size=32, epochs=1, verbose=0)
    assert (model.get_layer("conv2").kernel.numpy() == 0).mean() < 0.75
    return float((k == 0).mean())


@pytest.mark.slow
def test_strip_and_reload_in_a_process_without_sparsify(digits, tmp_path):
    args, zero_frac = [], {}
    for flavor in FLAVORS:
        d = tmp_path / flavor
        d.mkdir()
        zero_frac[flavor] = _train_strip_save(kmod(flavor), digits, str(d))
        args += [flavor, str(d)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", CLEAN_LOAD, *args], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    for flavor in FLAVORS:
        out = result[flavor]
        assert out["imported"] == []
        assert out["stripped.keras"] == [0.0, zero_frac[flavor]]
        assert out["unstripped.keras"] == [0.0, zero_frac[flavor]]
        assert out["savedmodel"][0] < 1e-5


@pytest.mark.slow
def test_resume_with_another_config_is_refused_naming_the_keys(K, digits, tmp_path):
    X, y = _data(digits)
    path = str(tmp_path / ("ckpt.weights.h5" if K.__name__ == "keras" else "ckpt"))
    first = _fresh(K)
    first.fit(X, y, batch_size=32, epochs=1, verbose=0, shuffle=False,
              callbacks=[PruningCallback({**CFG, "pattern": "1x2"}), K.callbacks.ModelCheckpoint(path, save_weights_only=True)])
    resumed = _fresh(K, seed=5)
    if K.__name__ == "keras":
        resumed.optimizer.build(resumed.trainable_variables)
    cb = PruningCallback({**CFG, "pattern": "2:4", "target_sparsity": 0.5})
    cb.attach(resumed)
    resumed.load_weights(path)
    with pytest.raises(ValueError, match="saved with a different pruning config \\(keys that differ: "
                                         "target_sparsity, pattern\\)"):
        resumed.fit(X, y, batch_size=32, epochs=2, initial_epoch=1, verbose=0, callbacks=[cb])
    # a second fit of the same model with a new callback of another config: refused too
    again = PruningCallback({**CFG, "pattern": "1x2", "target_sparsity": 0.5})
    with pytest.raises(ValueError, match="already carries pruning state saved with a different pruning config "
                                         "\\(keys that differ: target_sparsity\\)"):
        first.fit(X, y, batch_size=32, epochs=1, verbose=0, callbacks=[again])
    strip_pruning(first)                               # what the message says to do: then a new run works
    first.fit(X, y, batch_size=32, epochs=1, verbose=0, callbacks=[again])
    assert again.sparsity["total"] > 0


@pytest.mark.slow
def test_a_checkpoint_of_another_config_loaded_between_fits_is_refused(K, digits, tmp_path):
    """The saved config is checked at every fit, not only the first one (the callback compares the config
    again whenever the saved digests change)."""
    X, y = _data(digits)
    path = str(tmp_path / ("other.weights.h5" if K.__name__ == "keras" else "other"))
    other = _fresh(K)
    other.fit(X, y, batch_size=32, epochs=1, verbose=0, shuffle=False,
              callbacks=[PruningCallback({**CFG, "pattern": "1x2"}), K.callbacks.ModelCheckpoint(path, save_weights_only=True)])
    model, cb = _fresh(K), PruningCallback(CFG)
    model.fit(X, y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
    model.load_weights(path)
    with pytest.raises(ValueError, match="saved with a different pruning config \\(keys that differ: pattern\\)"):
        model.fit(X, y, batch_size=32, epochs=1, verbose=0, callbacks=[cb])


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_masks_restored_between_fits_at_the_same_update_step_are_picked_up(flavor, digits):
    """Each fit re-reads the state; it skips restoring the protocol only when the variables hold exactly what
    the callback last wrote. Masks of another run restored at the same update step are picked up."""
    K = kmod(flavor)
    X, y = _data(digits)
    cfg = {"target_sparsity": 0.5, "start_step": 0, "end_step": 16, "pruning_frequency": 4}   # 0, 4, ..., 16
    other = PruningCallback(cfg)
    model_b = _fresh(K, seed=3)
    model_b.fit(X, y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[other])
    cb = PruningCallback(cfg)
    model = _fresh(K)
    model.fit(X, y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
    assert cb.last_update_step == other.last_update_step == 8          # on_train_end applies step 8
    theirs = other.masks
    assert any(not np.array_equal(theirs[p], m) for p, m in cb.masks.items())
    for pw, mask in zip(cb._state.pweights, cb._state.masks):     # "load" run B's masks at the same step
        mask.assign(theirs[pw.path].astype("float32"))
    model.fit(X, y, batch_size=32, epochs=3, initial_epoch=1, verbose=0, shuffle=False, callbacks=[cb])
    assert cb.last_update_step == 16
    for pw, mask in zip(cb._state.pweights, cb._state.masks):
        keep = mask.numpy() != 0
        assert not np.any(keep & ~theirs[pw.path])                # monotone from run B's masks, not ours
        assert cb.protocol.masks[pw.path].sum() == pw.to_canonical(keep).sum()
