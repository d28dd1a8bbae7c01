"""PruningCallback.summary() on tf-keras (Keras 2) and Keras 3 models: the same rows in both Kerases."""
from __future__ import annotations

import numpy as np
import pytest

from sparsify_tf.keras import PruningCallback, strip_pruning


def _model(K):
    inp = K.Input((6,), dtype="int32")
    h = K.layers.Embedding(10, 8, name="emb")(inp)
    h = K.layers.Conv1D(8, 3, name="conv")(h)
    h = K.layers.LayerNormalization(name="norm")(h)
    out = K.layers.Dense(2, name="head")(K.layers.Flatten()(h))
    return K.Model(inp, out)


def test_summary_rows_are_the_same_in_both_kerases(K):
    model = _model(K)
    model.compile("sgd", "mse")
    cb = PruningCallback({"target_sparsity": 0.5, "end_step": 0, "excluded_op_names": ["head"]})
    _ = model.fit(np.zeros((4, 6), "int32"), np.zeros((4, 2)), verbose=0, callbacks=[cb])
    s = cb.summary()
    assert [(r.name, r.layer_type, r.shape, r.status) for r in s] == [
        ("emb/embeddings", "Embedding", (10, 8), "selected"),
        ("conv/kernel", "Conv1D", (3, 8, 8), "selected"),
        ("head/kernel", "Dense", (32, 2), "skipped: excluded")]
    assert [r.name for r in s.selected] == cb.pruned_weights
    assert str(s).splitlines()[0] == "2 weights selected (272 parameters), 1 skipped (64 parameters: 1 excluded)"
    strip_pruning(model)
