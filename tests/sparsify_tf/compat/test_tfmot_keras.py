"""``import sparsify_tf.compat.tfmot as tfmot`` used as tfmot's guides use it, on Keras 3 and tf-keras."""
import os

import numpy as np
import pytest
import tensorflow as tf

import sparsify_tf.compat.tfmot as tfmot

sk = tfmot.sparsity.keras


def dense_model(K, seed=0):
    K.utils.set_random_seed(seed)
    return K.Sequential([K.layers.Dense(32, activation="relu", input_shape=(64,), name="fc1"),
                         K.layers.Dense(10, name="out")])


def kernel_sparsity(layer):
    k = layer.kernel.numpy()
    return float((k == 0).mean())


def fit(model, digits, epochs=2, callbacks=None, optimizer="adam"):
    x, y = digits
    model.compile(loss="categorical_crossentropy", optimizer=optimizer, metrics=["accuracy"])
    return model.fit(x, y, batch_size=64, epochs=epochs, verbose=0,
                     callbacks=[sk.UpdatePruningStep()] if callbacks is None else callbacks)


@pytest.mark.slow
def test_whole_sequential_model_guide_flow(K, digits, tmp_path):
    base = dense_model(K)
    end_step = 2 * 8
    params = {"pruning_schedule": sk.PolynomialDecay(initial_sparsity=0.50, final_sparsity=0.80,
                                                     begin_step=0, end_step=end_step, frequency=4)}
    model_for_pruning = sk.prune_low_magnitude(base, **params)
    assert [layer.name for layer in model_for_pruning.layers] == ["prune_low_magnitude_fc1",
                                                                  "prune_low_magnitude_out"]
    log_dir = str(tmp_path / "logs")
    history = fit(model_for_pruning, digits, callbacks=[sk.UpdatePruningStep(), sk.PruningSummaries(log_dir=log_dir)])
    assert np.isfinite(history.history["loss"]).all()
    tags = {v.tag for f in os.listdir(log_dir) for e in tf.compat.v1.train.summary_iterator(os.path.join(log_dir, f))
            for v in e.summary.value}
    assert {"prune_low_magnitude_fc1/kernel_mask/sparsity", "prune_low_magnitude_out/kernel_threshold/threshold",
            "epoch_loss"} <= tags
    model_for_export = sk.strip_pruning(model_for_pruning)
    assert [layer.name for layer in model_for_export.layers] == ["fc1", "out"]
    # tfmot's count in float32: keep round(n * (1 - 0.8f)): 410 of 2048 (0.19999999 * 2048 = 409.6), 64 of 320
    assert int((model_for_export.get_layer("fc1").kernel.numpy() != 0).sum()) == 410
    assert int((model_for_export.get_layer("out").kernel.numpy() != 0).sum()) == 64
    x, _ = digits
    np.testing.assert_allclose(model_for_export.predict(x[:8], verbose=0),
                               model_for_pruning.predict(x[:8], verbose=0), rtol=1e-5, atol=1e-6)


def test_prune_some_layers_with_clone_model(K, digits):
    base = K.Sequential([K.layers.Dense(20, input_shape=(64,), name="fc"), K.layers.Flatten(),
                         K.layers.Dense(10, name="out")])

    def apply_pruning_to_dense(layer):
        if isinstance(layer, K.layers.Dense) and layer.name == "fc":
            return sk.prune_low_magnitude(layer, pruning_schedule=sk.ConstantSparsity(0.75, 0, frequency=1))
        return layer

    model_for_pruning = K.models.clone_model(base, clone_function=apply_pruning_to_dense)
    fit(model_for_pruning, digits, epochs=1)
    stripped = sk.strip_pruning(model_for_pruning)
    assert kernel_sparsity(stripped.get_layer("fc")) == 0.75
    assert kernel_sparsity(stripped.get_layer("out")) == 0.0


def test_functional_model_and_layer_wrapped_at_definition(K, digits):
    i = K.Input(shape=(64,))
    x = sk.prune_low_magnitude(K.layers.Dense(10, name="fc"),
                               pruning_schedule=sk.ConstantSparsity(0.5, 0, frequency=1))(i)
    o = K.layers.Flatten()(x)
    model_for_pruning = K.Model(inputs=i, outputs=o)
    fit(model_for_pruning, digits, epochs=1)
    stripped = sk.strip_pruning(model_for_pruning)
    assert kernel_sparsity(stripped.get_layer("fc")) == 0.5
    whole = sk.prune_low_magnitude(K.Model(i, K.layers.Dense(3, name="head")(K.layers.Dense(5, name="fc2")(i))))
    assert {layer.name for layer in whole.layers} >= {"prune_low_magnitude_head", "prune_low_magnitude_fc2"}


def test_prunable_layer_prunes_the_bias_too(K, digits):
    class MyDenseLayer(K.layers.Dense, sk.PrunableLayer):
        def get_prunable_weights(self):
            return [self.kernel, self.bias]

    model = K.Sequential([sk.prune_low_magnitude(MyDenseLayer(10, input_shape=(64,)),
                                                 pruning_schedule=sk.ConstantSparsity(0.5, 0, frequency=1)),
                          K.layers.Flatten()])
    fit(model, digits, epochs=1)
    layer = sk.strip_pruning(model).layers[0]
    assert float((layer.bias.numpy() == 0).mean()) == 0.5 and kernel_sparsity(layer) == 0.5


@pytest.mark.slow
def test_subclassed_model_with_pruned_layers(K, digits):
    class Net(K.Model):
        def __init__(self):
            super().__init__()
            self.fc = sk.prune_low_magnitude(K.layers.Dense(16, activation="relu"),
                                             pruning_schedule=sk.ConstantSparsity(0.75, 0, frequency=2))
            self.out = K.layers.Dense(10)

        def call(self, x, training=None):
            return self.out(self.fc(x, training=training))

    net = Net()
    net(digits[0][:2])
    fit(net, digits, epochs=1)
    assert kernel_sparsity(net.fc.layer) == 0.75
    with pytest.raises(ValueError, match="subclassed model"):
        sk.strip_pruning(net)
    with pytest.raises(ValueError, match="subclassed model"):
        sk.prune_low_magnitude(net)


def test_custom_training_loop_guide_flow(K, digits, tmp_path):
    x, y = digits
    model_for_pruning = sk.prune_low_magnitude(dense_model(K),
                                               pruning_schedule=sk.ConstantSparsity(0.6, 0, frequency=1))
    loss = K.losses.categorical_crossentropy
    optimizer = K.optimizers.Adam()
    model_for_pruning.optimizer = optimizer
    step_callback = sk.UpdatePruningStep()
    step_callback.set_model(model_for_pruning)
    log_callback = sk.PruningSummaries(log_dir=str(tmp_path))
    log_callback.set_model(model_for_pruning)
    step_callback.on_train_begin()
    for _ in range(2):
        log_callback.on_epoch_begin(epoch=-1)
        step_callback.on_train_batch_begin(batch=-1)
        with tf.GradientTape() as tape:
            logits = model_for_pruning(x[:64], training=True)
            loss_value = tf.reduce_mean(loss(y[:64], logits))
        grads = tape.gradient(loss_value, model_for_pruning.trainable_variables)
        optimizer.apply_gradients(zip(grads, model_for_pruning.trainable_variables))
        step_callback.on_epoch_end(batch=-1)
        log_callback.on_epoch_end(batch=-1)
    assert [int(w.pruning_step.numpy()) for w in model_for_pruning.layers] == [2, 2]
    assert kernel_sparsity(model_for_pruning.layers[0].layer) == pytest.approx(0.6, abs=1e-3)


@pytest.mark.slow
def test_training_without_update_pruning_step_is_refused(K, digits):
    model = sk.prune_low_magnitude(dense_model(K))
    with pytest.raises(tf.errors.InvalidArgumentError, match="UpdatePruningStep"):
        fit(model, digits, epochs=1, callbacks=[])


@pytest.mark.slow
@pytest.mark.parametrize("ext", [".keras", ".h5"])
def test_saved_model_loads_inside_prune_scope_and_keeps_training(K, digits, tmp_path, ext):
    model = sk.prune_low_magnitude(dense_model(K), pruning_schedule=sk.ConstantSparsity(0.5, 0, frequency=3))
    fit(model, digits, epochs=1)
    path = str(tmp_path / f"pruned{ext}")
    if ext == ".h5":
        model.save(path, include_optimizer=True)      # the guide's checkpoint
    else:
        model.save(path)
    with sk.prune_scope():
        loaded = K.models.load_model(path)
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]
    for a, b in zip(model.layers, loaded.layers):
        assert a.pruning_schedule.get_config() == b.pruning_schedule.get_config()
        assert int(a.pruning_step.numpy()) == int(b.pruning_step.numpy()) == 8
        for (wa, ma, _), (wb, mb, _) in zip(a.pruning_vars, b.pruning_vars):
            np.testing.assert_array_equal(wa.numpy(), wb.numpy())
            np.testing.assert_array_equal(ma.numpy(), mb.numpy())
    if K.__name__ == "keras" and ext == ".h5":
        # Keras 3's legacy .h5 loader restores an optimizer that cannot step (plain models too): compile again
        loaded.compile(loss="categorical_crossentropy", optimizer="adam")
    loaded.fit(*digits, batch_size=64, epochs=1, verbose=0, callbacks=[sk.UpdatePruningStep()])
    assert int(loaded.layers[0].pruning_step.numpy()) == 16        # continues from the saved step
    assert kernel_sparsity(sk.strip_pruning(loaded).layers[0]) == 0.5


@pytest.mark.slow
def test_m_by_n_two_of_four_on_dense_and_conv(K, digits):
    x, y = digits
    K.utils.set_random_seed(1)
    base = K.Sequential([K.layers.Reshape((8, 8, 1), input_shape=(64,)), K.layers.Conv2D(8, 3, name="conv1"),
                         K.layers.Conv2D(8, 3, name="conv2"), K.layers.Flatten(), K.layers.Dense(10, name="out")])
    model = sk.prune_low_magnitude(base, sparsity_m_by_n=(2, 4))
    fit(model, (x, y), epochs=1)
    stripped = sk.strip_pruning(model)
    conv2 = stripped.get_layer("conv2").kernel.numpy()                 # (3, 3, in=8, out=8)
    groups = (conv2 != 0).transpose(3, 0, 1, 2).reshape(-1, 2, 4)      # 4 consecutive input channels
    assert (groups.sum(-1) == 2).all()
    out = stripped.get_layer("out").kernel.numpy()                     # (in, out): groups down the columns
    assert ((out.T != 0).reshape(10, -1, 4).sum(-1) == 2).all()
    conv1 = stripped.get_layer("conv1").kernel.numpy()                 # one input channel: padded, kept
    assert (conv1 != 0).all()


@pytest.mark.slow
def test_block_size_prunes_whole_blocks(K, digits):
    model = sk.prune_low_magnitude(dense_model(K), block_size=(1, 16),
                                   pruning_schedule=sk.ConstantSparsity(0.5, 0, frequency=1))
    fit(model, digits, epochs=1)
    fc1 = sk.strip_pruning(model).get_layer("fc1").kernel.numpy()     # (64, 32): blocks of 16 along a row
    blocks = (fc1 != 0).reshape(64, 2, 16)
    assert (blocks.all(-1) | ~blocks.any(-1)).all() and float((fc1 == 0).mean()) == 0.5


def test_masks_follow_tfmots_count_and_step_rule(K):
    """One step of SGD with lr 0: the mask is made at step 1 from the initial weights by tfmot's rule."""
    layer = K.layers.Dense(1, use_bias=False, kernel_initializer=K.initializers.Constant(
        np.array([[0.5], [-3.0], [2.0], [-2.0], [1.0], [0.1]], np.float32)), input_shape=(6,))
    model = sk.prune_low_magnitude(K.Sequential([layer]),
                                   pruning_schedule=sk.ConstantSparsity(0.25, begin_step=1, frequency=10))
    model.compile(loss="mse", optimizer=K.optimizers.SGD(0.0))
    model.fit(np.ones((4, 6), np.float32), np.ones((4, 1), np.float32), epochs=1, verbose=0,
              callbacks=[sk.UpdatePruningStep()])
    # 6 weights, keep round(4.5) = 4 (half to even): |w| >= 1.0
    assert model.layers[0].pruning_vars[0][1].numpy().ravel().tolist() == [0, 1, 1, 1, 1, 0]
    assert float(model.layers[0].pruning_vars[0][2].numpy()) == 1.0
    assert int(model.layers[0].pruning_step.numpy()) == 1


def test_bad_arguments_are_refused_before_wrapping(K):
    dense = K.layers.Dense(4)
    with pytest.raises(ValueError, match="block_pooling_type must be 'AVG' or 'MAX', got 'MEAN'"):
        sk.prune_low_magnitude(dense, block_pooling_type="MEAN")
    with pytest.raises(ValueError, match="block_size must be 2 positive ints"):
        sk.prune_low_magnitude(dense, block_size=(0, 2))
    with pytest.raises(ValueError, match="sparsity_m_by_n must be"):
        sk.prune_low_magnitude(dense, sparsity_m_by_n=(4, 2))
    with pytest.raises(TypeError, match="pruning_schedule must be a PruningSchedule"):
        sk.prune_low_magnitude(dense, pruning_schedule=0.5)
    with pytest.raises(TypeError, match="to_prune must be a Keras layer"):
        sk.prune_low_magnitude("dense")

    class Custom(K.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 2))

        def call(self, x):
            return tf.matmul(x, self.w)

    with pytest.raises(ValueError, match="class Custom cannot be pruned"):
        sk.prune_low_magnitude(K.Sequential([K.layers.Dense(3, input_shape=(4,)), Custom()]))


def test_block_sparsity_refuses_conv_kernels(K):
    model = K.Sequential([K.layers.Conv2D(4, 3, input_shape=(8, 8, 1))])
    with pytest.raises(ValueError, match="block sparsity needs rank-2 weights"):
        sk.prune_low_magnitude(model, block_size=(2, 2))


def test_pruned_weights_can_grow_back_at_a_later_update(K):
    """tfmot's dynamics: between updates the optimizer moves pruned weights; the next update may keep them."""
    layer = K.layers.Dense(1, use_bias=False, input_shape=(2,),
                           kernel_initializer=K.initializers.Constant(np.array([[1.0], [0.1]], np.float32)))
    model = sk.prune_low_magnitude(K.Sequential([layer]),
                                   pruning_schedule=sk.ConstantSparsity(0.5, begin_step=1, frequency=2))
    x, y = np.array([[0.1, 10.0]] * 3, np.float32), np.array([[10.0]] * 3, np.float32)
    model.compile(optimizer=K.optimizers.SGD(0.01), loss="mse")
    model.fit(x, y, batch_size=1, epochs=1, shuffle=False, verbose=0, callbacks=[sk.UpdatePruningStep()])
    # step 1 keeps w0 (1.0 > 0.1); steps 1-2 push the masked w1 to ~1.98 each time; step 3 keeps w1
    assert model.layers[0].pruning_vars[0][1].numpy().ravel().tolist() == [0.0, 1.0]
    kernel = layer.kernel.numpy().ravel()              # step 3's SGD update: 1.9796 - 0.01 * 10 * 19.592
    assert kernel[0] == 0.0 and kernel[1] == pytest.approx(0.0204, abs=1e-3)


@pytest.mark.slow
def test_xla_compiled_train_step(K, digits):
    model = sk.prune_low_magnitude(dense_model(K), pruning_schedule=sk.PolynomialDecay(0.0, 0.5, 0, 8, frequency=2))
    x, y = digits
    model.compile(loss="categorical_crossentropy", optimizer="adam", jit_compile=True)
    model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[sk.UpdatePruningStep()])
    assert int(model.layers[0].pruning_step.numpy()) == 8
    assert kernel_sparsity(sk.strip_pruning(model).get_layer("fc1")) == 0.5


def test_pruning_policy_decides_which_layers_are_wrapped(K):
    class OnlyFirstDense:
        def ensure_model_supports_pruning(self, model):
            self.checked = model.name

        def allow_pruning(self, layer):
            return layer.name == "fc1"

    policy = OnlyFirstDense()
    model = dense_model(K)
    pruned = sk.prune_low_magnitude(model, pruning_policy=policy)
    assert policy.checked == model.name
    assert [layer.name for layer in pruned.layers] == ["prune_low_magnitude_fc1", "out"]


def test_nested_model_is_pruned_and_stripped_recursively(K):
    i = K.Input((8,))
    inner = K.Model(i, K.layers.Dense(6, name="inner_fc")(i), name="inner")
    outer = K.Sequential([K.layers.Dense(8, input_shape=(8,), name="stem"), inner, K.layers.Dense(2, name="head")])
    pruned = sk.prune_low_magnitude(outer, pruning_schedule=sk.ConstantSparsity(0.5, 0, frequency=1))
    assert [layer.name for layer in pruned.layers] == ["prune_low_magnitude_stem", "inner", "prune_low_magnitude_head"]
    pruned.compile("sgd", "mse")
    pruned.fit(np.random.rand(32, 8), np.random.rand(32, 2), batch_size=8, verbose=0,
               callbacks=[sk.UpdatePruningStep()])
    stripped = sk.strip_pruning(pruned)
    assert [layer.name for layer in stripped.layers] == ["stem", "inner", "head"]
    assert kernel_sparsity(stripped.layers[1].get_layer("inner_fc")) == 0.5
    assert kernel_sparsity(stripped.get_layer("head")) == 0.5


@pytest.mark.slow
def test_tf_keras_savedmodel_loads_inside_prune_scope(digits, tmp_path):
    import tf_keras as K

    model = sk.prune_low_magnitude(dense_model(K), pruning_schedule=sk.ConstantSparsity(0.5, 0, frequency=3))
    fit(model, digits, epochs=1)
    model.save(str(tmp_path / "sm"), save_format="tf")
    with sk.prune_scope():
        loaded = K.models.load_model(str(tmp_path / "sm"))
    assert [int(layer.pruning_step.numpy()) for layer in loaded.layers] == [8, 8]
    np.testing.assert_array_equal(loaded.layers[0].pruning_vars[0][1].numpy(),
                                  model.layers[0].pruning_vars[0][1].numpy())
    loaded.fit(*digits, batch_size=64, epochs=1, verbose=0, callbacks=[sk.UpdatePruningStep()])
    assert kernel_sparsity(sk.strip_pruning(loaded).layers[0]) == 0.5
