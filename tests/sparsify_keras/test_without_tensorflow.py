"""A JAX or PyTorch Keras user needs no TensorFlow: sparsify_keras imports and prunes with TensorFlow (and
tf-keras) made unimportable, as in an environment where ``pip install "sparsify-train[jax]"`` put keras + jax only."""
from __future__ import annotations

import json

import pytest
from backend_runs import run_python

pytestmark = pytest.mark.slow        # every test here is slow (docs/design.md, "Tests in tiers")

BLOCKED = ("tensorflow", "tf_keras", "tensorboard")
SCRIPT = f"""
import json, sys

for name in {BLOCKED!r}:          # as if not installed: import raises, importlib.util.find_spec finds nothing
    sys.modules[name] = None
import numpy as np, keras
from sparsify_keras import PruningCallback, prune_oneshot, strip_pruning

x = np.random.default_rng(0).standard_normal((64, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, name="fc"), keras.layers.Dense(2, name="out")])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
cb = PruningCallback({{"target_sparsity": 0.5, "end_step": 4, "pruning_frequency": 2, "criterion": "wanda"}})
model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
strip_pruning(model)
small = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="d")])
other = prune_oneshot(small, {{"target_sparsity": 0.75}})
print(json.dumps({{"backend": keras.backend.backend(), "sparsity": cb.sparsity["total"],
                  "zeros": float((model.get_layer("fc").kernel.numpy() == 0).mean()),
                  "oneshot": float((other.get_layer("d").kernel.numpy() == 0).mean()),
                  "loaded": sorted(m for m in {BLOCKED!r} if sys.modules.get(m) is not None)}}))
"""


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_prunes_with_tensorflow_unimportable(backend):
    out = run_python(["-c", SCRIPT], backend)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"backend": backend, "sparsity": 0.5, "zeros": 0.5, "oneshot": 0.75, "loaded": []}


IMPORT_SCRIPT = """
import json, sys

def error_of(blocked):
    for name in blocked:
        sys.modules[name] = None
    for name in [m for m in sys.modules if m.startswith("sparsify_tf")]:
        del sys.modules[name]
    try:
        from sparsify_tf.keras import PruningCallback  # noqa: F401
    except ImportError as e:
        return f"{type(e).__name__}: {e}"
    return None

print(json.dumps({"no tf_keras": error_of(["tf_keras"]), "no tensorflow": error_of(["tensorflow", "tf_keras"])}))
"""


def test_sparsify_tf_keras_without_its_framework_names_the_extra_and_sparsify_keras():
    """Issue 47: ``from sparsify_tf.keras import ...`` where tf-keras (or TensorFlow) is missing, as under a JAX-only
    install, raises an ImportError naming the ``tf`` extra and pointing to sparsify_keras."""
    out = run_python(["-c", IMPORT_SCRIPT], "jax")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["no tf_keras"] == (
        "ImportError: sparsify_tf.keras prunes tf-keras (Keras 2) models and needs tf-keras: pip install "
        "\"sparsify-train[tf]\" (KERAS_BACKEND='jax' here); for Keras 3 on JAX, PyTorch or TensorFlow use sparsify_keras (from "
        "sparsify_keras import PruningCallback, strip_pruning, prune_oneshot)")
    assert got["no tensorflow"] == (
        "ImportError: sparsify_tf needs tensorflow, which cannot be imported (import of tensorflow halted; None in "
        "sys.modules): pip "
        "install \"sparsify-train[tf]\"; for Keras 3 on JAX or PyTorch use sparsify_keras (from sparsify_keras import "
        "PruningCallback)")
