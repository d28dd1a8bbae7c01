"""Keeping pruned weights at zero: gradient masking and the per-step fallback, per optimizer."""
import numpy as np
import pytest

from sparsify_tf.keras import PruningCallback, find_prunable_weights, strip_pruning
from sparsify_keras.train_step import grad_masking_supported

from _keras_helpers import exact_pruned, first
from test_callback import zero_checker

CFG = {"target_sparsity": 0.6, "start_step": 0, "end_step": 6, "pruning_frequency": 3}


def optimizers(K):
    """(optimizer, gradient masking expected) pairs, including weight decay and the fallbacks."""
    out = [(K.optimizers.SGD(0.05, momentum=0.9, nesterov=True), True),
           (K.optimizers.RMSprop(0.01, momentum=0.5, centered=True), True),
           (K.optimizers.Adam(0.01, amsgrad=True), True),
           (K.optimizers.Nadam(0.01), True),
           (K.optimizers.Adagrad(0.1), False)]                   # accumulators start at 0.1
    if K.__name__ == "tf_keras":
        out.append((K.optimizers.legacy.Adam(0.01), True))
        out.append((K.optimizers.AdamW(0.01, weight_decay=0.1), True))
    else:
        out.append((K.optimizers.AdamW(0.01, weight_decay=0.1), True))
        out.append((K.optimizers.Lion(0.001), True))
    return out


def model_with_constraint(K, seed=0):
    K.utils.set_random_seed(seed)
    return K.Sequential([first(K, (64,)), K.layers.Dense(24, activation="relu", name="fc"),
                         K.layers.Dense(10, name="out", kernel_constraint=K.constraints.MaxNorm(1.0))])


def test_grad_masking_needs_a_positive_epsilon(K):
    assert grad_masking_supported(K.optimizers.Adam(0.01))
    assert not grad_masking_supported(K.optimizers.Adam(0.01, epsilon=0.0))    # 0 / (sqrt(0) + 0) is NaN
    assert not grad_masking_supported(K.optimizers.Adadelta(1.0))
    assert not grad_masking_supported(None)


@pytest.mark.slow
def test_every_optimizer_keeps_weights_and_slots_zero(K, digits):
    X, y = digits
    X, y = X[:192], y[:192]
    for opt, by_grads in optimizers(K):
        assert grad_masking_supported(opt) is by_grads, type(opt).__name__
        model = model_with_constraint(K)
        model.compile(opt, K.losses.SparseCategoricalCrossentropy(from_logits=True))
        cb = PruningCallback(CFG)
        seen = []
        model.fit(X, y, batch_size=32, epochs=2, verbose=0, shuffle=False,
                  callbacks=[cb, zero_checker(K, cb, model, seen)])
        name = type(opt).__name__
        assert seen == list(range(1, 13)), name       # checked after every step from the first update on
        # the constrained kernel (a constraint may move a zero) always keeps the per-step multiply
        assert cb.per_step_paths == (["out/kernel"] if by_grads else ["fc/kernel", "out/kernel"]), name
        for pw in find_prunable_weights(model):
            w = pw.variable.numpy()
            assert np.isfinite(w).all(), name
            assert int((w == 0).sum()) == exact_pruned(0.6, w.size), (name, pw.path)
        strip_pruning(model)
        assert not {"apply", "apply_gradients"} & set(vars(model.optimizer)), name    # hook removed


def test_custom_train_step_with_another_optimizer_falls_back(K, digits):
    """Gradients that bypass model.optimizer are not masked: the per-step multiply keeps the zeros."""
    X, y = digits
    X, y = X[:192], y[:192]

    class Net(K.Model):
        def __init__(self):
            super().__init__()
            self.fc = K.layers.Dense(24, activation="relu", name="fc")
            self.head = K.layers.Dense(10, name="head")
            self.other = K.optimizers.SGD(0.05, momentum=0.9)

        def call(self, x):
            return self.head(self.fc(x))

        def train_step(self, data):
            import tensorflow as tf

            x, y = data
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.other.apply_gradients(zip(grads, self.trainable_variables))
            self.optimizer.iterations.assign_add(1)
            return {"loss": loss}

    K.utils.set_random_seed(3)
    model = Net()
    model(X[:1])
    model.other.build(model.trainable_variables)
    model.compile(K.optimizers.Adam(0.01), K.losses.SparseCategoricalCrossentropy(from_logits=True))
    cb = PruningCallback(CFG)
    seen = []
    model.fit(X, y, batch_size=32, epochs=2, verbose=0, shuffle=False,
              callbacks=[cb, zero_checker(K, cb, model, seen)])
    assert seen == list(range(1, 13))
    assert cb.per_step_paths == ["fc/kernel", "head/kernel"]
    for pw in find_prunable_weights(model):
        w = pw.variable.numpy()
        assert int((w == 0).sum()) == exact_pruned(0.6, w.size), pw.path


@pytest.mark.slow
@pytest.mark.parametrize("opt", ["Adam", "RMSprop"])
def test_training_equals_per_step_masking(K, digits, opt):
    """Masking gradients gives the same weights as re-masking weights and slots after every step."""
    X, y = digits
    X, y = X[:192], y[:192]
    finals = []
    for force_fallback in (False, True):
        K.utils.set_random_seed(5)
        model = K.Sequential([first(K, (64,)), K.layers.Dense(24, activation="relu", name="fc"),
                              K.layers.Dense(10, name="out")])
        model.compile(getattr(K.optimizers, opt)(0.01), K.losses.SparseCategoricalCrossentropy(from_logits=True))
        cb = PruningCallback(CFG)
        if force_fallback:
            import sparsify_keras.train_step as cbm     # the one masking of both Kerases

            orig = cbm.grad_masking_supported
            cbm.grad_masking_supported = lambda o: False
        try:
            model.fit(X, y, batch_size=32, epochs=2, verbose=0, shuffle=False, callbacks=[cb])
        finally:
            if force_fallback:
                cbm.grad_masking_supported = orig
        assert cb.per_step_paths == (["fc/kernel", "out/kernel"] if force_fallback else [])
        finals.append([w.numpy() for w in model.trainable_weights])
    for a, b in zip(*finals):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
