"""KerasAdapter: the Keras host update through the typed adapter contract (sparsify.adapter).

one KerasAdapter (sparsify_keras.adapter) for both Kerases: tf-keras models read and write through the tf-keras
driver's TfStateIO, Keras 3 models through Keras3StateIO
(every backend): the same contract and the same written values."""
import numpy as np
import pytest

from sparsify import PruningProtocol
from sparsify.adapter import ActivationReader, GradientReader, MaskWriter, WeightReader, collect_reads
from sparsify_tf.keras import PruningCallback
from sparsify_keras.adapter import KerasAdapter
from sparsify_keras.state import model_state
from sparsify_tf.keras.mask_apply import MaskApplier, TfStateIO

from _keras_helpers import first


def _attached(K, cfg):
    model = K.Sequential([first(K, (4,)), K.layers.Dense(2, use_bias=False, name="d")])
    model.layers[-1].kernel.assign(np.array([[1.0, -8.0], [2.0, 7.0], [-3.0, 6.0], [4.0, 5.0]], np.float32))
    model.compile(K.optimizers.Adam(0.1), "mse")
    cb = PruningCallback(cfg)
    cb.attach(model)
    if K.__name__ == "keras":
        return model, cb, KerasAdapter(model, model_state(model), cfg.get("criterion", "magnitude"))
    return model, cb, KerasAdapter(model, model_state(model), cfg.get("criterion", "magnitude"),
                                   io=TfStateIO(model, model_state(model), MaskApplier()))


def test_the_adapter_is_every_reader_and_the_writer(K):
    _, _, adapter = _attached(K, {"target_sparsity": 0.5, "end_step": 0})
    assert all(isinstance(adapter, kind) for kind in (WeightReader, GradientReader, ActivationReader, MaskWriter))
    assert adapter.names == ["d/kernel"]


def test_a_pruned_weight_is_read_back_dense_and_returns_when_its_mask_comes_back(K):
    model, cb, adapter = _attached(K, {"target_sparsity": 0.5, "end_step": 0})
    update = cb.protocol.advance(0, **collect_reads(cb.protocol, adapter))
    adapter.write_update(update)
    kernel = model.layers[-1].kernel.numpy()
    # canonical (out=2, in=4): row 0 = [1, 2, -3, 4], row 1 = [-8, 7, 6, 5]; the 4 lowest |w| are 1, 2, -3, 4
    assert update.masks["d/kernel"].astype(int).tolist() == [[0, 0, 0, 0], [1, 1, 1, 1]]
    assert kernel.T.tolist() == [[0.0, 0.0, 0.0, 0.0], [-8.0, 7.0, 6.0, 5.0]]
    assert adapter.read_weights()["d/kernel"].tolist() == [[1.0, 2.0, -3.0, 4.0], [-8.0, 7.0, 6.0, 5.0]]
    # a hand-made update that brings row 0 back: its stored values return to the kernel
    back = {"d/kernel": np.ones((2, 4), bool)}
    adapter.write_update(type(update)(1, back, back, False, {}))
    assert model.layers[-1].kernel.numpy().T.tolist() == [[1.0, 2.0, -3.0, 4.0], [-8.0, 7.0, 6.0, 5.0]]


def test_keras3_writer_slices_each_weights_masks_out_of_the_packed_array():
    import keras
    from sparsify_keras.adapter import MaskWriter, write_updates

    a, sa, ma = keras.Variable([[1.0, -2.0, 3.0]]), keras.Variable([[0.0, 0.0, 0.0]]), keras.Variable([[1.0, 1.0, 1.0]])
    b, sb, mb = keras.Variable([4.0, 5.0]), keras.Variable([0.0, -6.0]), keras.Variable([1.0, 0.0])
    slot = keras.Variable([0.5, 0.5])
    write_updates([(a, ma, np.array([[True, False, True]]), None, sa, []),
                   # b: index 1 comes back but was grown (kept, not a value to keep): starts at zero
                   (b, mb, np.array([True, True]), np.array([True, False]), sb, [slot])])
    assert a.numpy().tolist() == [[1.0, 0.0, 3.0]] and sa.numpy().tolist() == [[0.0, -2.0, 0.0]]
    assert ma.numpy().tolist() == [[1.0, 0.0, 1.0]]
    assert b.numpy().tolist() == [4.0, 0.0] and sb.numpy().tolist() == [0.0, 0.0]
    assert mb.numpy().tolist() == [1.0, 1.0] and slot.numpy().tolist() == [0.5, 0.0]
    writer = MaskWriter([(a, ma, sa, [])])
    with pytest.raises(ValueError, match=r"one \(keep, keep_values\) pair per weight \(1\), got 2"):
        writer.write([(np.ones((1, 3), bool), None), (np.ones(2, bool), None)])
    assert ma.numpy().tolist() == [[1.0, 0.0, 1.0]]          # nothing written


def test_keras3_adapter_writes_the_slots_of_an_optimizer_compiled_in_later():
    import keras

    model, cb, adapter = _attached(keras, {"target_sparsity": 0.5, "end_step": 0})
    x, y = np.ones((2, 4), np.float32), np.ones((2, 2), np.float32)
    model.train_on_batch(x, y)                                  # Adam's slots exist
    update = cb.protocol.advance(0, **collect_reads(cb.protocol, adapter))
    adapter.write_update(update)
    model.compile(keras.optimizers.SGD(0.1, momentum=0.9), "mse")
    model.optimizer.build(model.trainable_variables)
    momentum = [v for v in model.optimizer.variables if tuple(v.shape) == (4, 2)][0]
    momentum.assign(np.ones((4, 2), np.float32))
    back = {"d/kernel": np.ones((2, 4), bool)}
    adapter.write_update(type(update)(1, back, back, False, {}))
    # row 0 (canonical) was pruned: its momentum starts from zero; row 1 stayed kept
    assert momentum.numpy().T.tolist() == [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
