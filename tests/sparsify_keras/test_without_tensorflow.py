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
