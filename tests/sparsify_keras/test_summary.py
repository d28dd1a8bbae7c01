"""sparsify_keras.summary / PruningCallback.summary(): every weight of rank 2+, selected or skipped with why."""
from __future__ import annotations

import numpy as np
import pytest

import keras

from sparsify_keras import PruningCallback, selection_summary, strip_pruning


class Scaler(keras.layers.Layer):
    """A user layer with a 2-D weight sparsify cannot prune (an unsupported type)."""

    def build(self, input_shape):
        self.table = self.add_weight(shape=(4, int(input_shape[-1])), name="table")

    def call(self, x):
        return x * keras.ops.sum(self.table, axis=0)


def _model():
    inp = keras.Input((6,), dtype="int32")
    emb = keras.layers.Embedding(10, 8, name="emb")(inp)
    h = keras.layers.Dense(8, name="fc1")(emb)
    h = Scaler(name="scaler")(h)
    h = keras.layers.Dense(8, name="fc2")(h)
    out = keras.layers.Dense(2, name="head")(keras.layers.Flatten()(h))
    return keras.Model(inp, out)


def test_rows_say_what_is_pruned_and_why_not():
    s = selection_summary(_model(), {"target_sparsity": 0.5, "pattern": "2:4", "op_names": ["fc", "head"],
                                     "excluded_op_names": ["head"]})
    assert [(r.name, r.layer_type, r.shape, r.status) for r in s] == [
        ("emb/embeddings", "Embedding", (10, 8), "skipped: not matched"),
        ("fc1/kernel", "Dense", (8, 8), "selected"),
        ("scaler/table", "Scaler", (4, 8), "skipped: unsupported type"),
        ("fc2/kernel", "Dense", (8, 8), "selected"),
        ("head/kernel", "Dense", (48, 2), "skipped: excluded")]
    assert {(r.pattern, r.target) for r in s.selected} == {("2:4", 0.5)}
    assert str(s).splitlines()[0] == ("2 weights selected (128 parameters), 3 skipped (208 parameters: 1 not matched, "
                                      "1 unsupported type, 1 excluded)")
    assert s.to_dict()["skipped"][1]["reason"] == "unsupported type"


def test_callback_summary_before_and_after_fit_and_pattern_that_does_not_fit():
    model = _model()
    model.compile("sgd", "mse")
    cb = PruningCallback({"target_sparsity": 0.5, "pattern": "4x1", "skip_incompatible_layers": True,
                          "end_step": 0, "excluded_op_names": ["emb"]})
    with pytest.raises(ValueError, match="not attached to a model yet; pass one"):
        cb.summary()
    before = cb.summary(model)
    with pytest.warns(UserWarning, match="does not fit"):
        model.fit(np.zeros((4, 6), "int32"), np.zeros((4, 2)), verbose=0, callbacks=[cb])
    after = cb.summary()
    assert [r.name for r in after.selected] == [r.name for r in before.selected] == ["fc1/kernel", "fc2/kernel"]
    assert after["head/kernel"].reason.startswith("pattern '4x1' does not fit")         # 2 outputs: no 4 rows
    assert before["head/kernel"].reason == after["head/kernel"].reason
    assert after["fc1/kernel"].sparsity == 0.5 and before["fc1/kernel"].sparsity is None    # the masks held now
    assert str(after).splitlines()[1].split()[5] == "sparsity"
    assert cb.sparsity["head/kernel"] is None and cb.pruned_weights == ["fc1/kernel", "fc2/kernel", "head/kernel"]
    assert not any("sparsify" in r.name for r in after)          # the pruning state's variables are not rows
    strip_pruning(model)


def test_shared_layer_is_one_row_and_a_variable_held_twice_is_tied():
    shared = keras.layers.Dense(4, name="shared")
    inp = keras.Input((4,))
    inner = keras.Model(inp, shared(shared(inp)), name="inner")

    class Again(keras.layers.Layer):             # holds the shared layer: walked once, no second row
        def __init__(self, other, **kw):
            super().__init__(**kw)
            self.other = other

        def call(self, x):
            return self.other(x)

    class Alias(keras.layers.Layer):             # holds the same variable (a tied weight)
        def __init__(self, var, **kw):
            super().__init__(**kw)
            self.w = var

        def call(self, x):
            return x @ self.w

    outer = keras.Sequential([keras.Input((4,)), inner, Again(shared, name="again"),
                              Alias(shared.kernel, name="alias")])
    s = selection_summary(outer, {"target_sparsity": 0.5})
    assert [(r.name, r.layer_type, r.status) for r in s] == [
        ("inner/shared/kernel", "Dense", "selected"),
        ("alias/kernel", "Alias", "skipped: tied to inner/shared/kernel")]


def test_bad_input():
    with pytest.raises(ValueError, match="is not built"):
        selection_summary(keras.Sequential([keras.layers.Dense(2)]), {})
    with pytest.raises(ValueError, match="target_sparsity"):
        selection_summary(_model(), {"target_sparsity": 2.0})
