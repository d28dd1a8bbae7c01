"""MirroredStrategy over 2 logical CPU devices (own subprocess: devices are fixed before TF starts)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, tf_keras
    from sklearn.datasets import load_digits
    from sparsify_tf.keras import PruningCallback
    from sparsify_keras.compat import optimizer_slots
    from sparsify_tf.keras.compat import tf_variable
    d = load_digits()
    X, y = (d.data[:256] / 16.0).astype("float32"), d.target[:256].astype("int32")
    result = {}
    for K in (tf_keras, keras):
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            K.utils.set_random_seed(0)
            first = K.layers.InputLayer((64,)) if K is tf_keras else K.Input((64,))
            m = K.Sequential([first, K.layers.Dense(32, activation="relu", name="fc1"),
                              K.layers.Dense(10, name="out")])
            m.compile(K.optimizers.SGD(0.05, momentum=0.9),
                      K.losses.SparseCategoricalCrossentropy(from_logits=True))
        cb = PruningCallback({"target_sparsity": 0.7, "start_step": 0, "end_step": 10,
                              "pruning_frequency": 3})
        seen = []
        def check(batch, logs=None):
            ok = True
            for pw, mv in zip(cb._state.pweights, cb._state.masks):
                keep = tf_variable(mv).values[0].numpy() != 0
                comps = [tf_variable(pw.variable).values[i].numpy() for i in range(2)]
                slots = [tf_variable(s).values[i].numpy() for s in optimizer_slots(m.optimizer, pw.variable)
                         for i in range(2)]
                ok &= all(not np.any(c[~keep]) for c in comps + slots) and len(slots) == 2
            seen.append(bool(ok))
        m.fit(X, y, batch_size=32, epochs=2, verbose=0, shuffle=False,
              callbacks=[cb, K.callbacks.LambdaCallback(on_train_batch_end=check)])
        out = {"replicas": strategy.num_replicas_in_sync, "zero_every_batch": all(seen), "n_checks": len(seen),
               "host_path": cb._in_graph is False and cb._batch_hooks is True}
        for pw, mv in zip(cb._state.pweights, cb._state.masks):
            masks = [c.numpy() for c in tf_variable(mv).values]
            comps = [c.numpy() for c in tf_variable(pw.variable).values]
            out[pw.path] = {"same_masks": all(np.array_equal(masks[0], q) for q in masks),
                            "same_weights": all(np.array_equal(comps[0], c) for c in comps),
                            "zeros": [int((c == 0).sum()) for c in comps], "size": int(comps[0].size)}
        result[K.__name__] = out
    print(json.dumps(result))
""")


def test_mirrored_strategy_two_logical_cpus_identical_masks_exact_sparsity():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(result) == {"tf_keras", "keras"}
    for flavor, out in result.items():
        assert out["replicas"] == 2, flavor
        assert out["zero_every_batch"] and out["n_checks"] == 16, flavor
        assert out["host_path"], flavor        # every replica would run the core: updates stay on the host
        for path in ("fc1/kernel", "out/kernel"):
            w = out[path]
            assert w["same_masks"] and w["same_weights"], (flavor, path)
            k = min(int(np.ceil(0.7 * w["size"] - 0.5)), w["size"] - 1)
            assert w["zeros"] == [k, k], (flavor, path)
