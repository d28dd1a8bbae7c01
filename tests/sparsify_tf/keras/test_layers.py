"""Discovery of prunable weights and conversion to the canonical layout."""
import numpy as np
import pytest

import sparsify
from sparsify_tf.keras import find_prunable_weights, weight_kinds

from _keras_helpers import inp


def zoo(K):
    """A functional model holding every prunable layer type once."""
    img = inp(K, (8, 8, 3), name="img")
    x = K.layers.Conv2D(4, 3, name="conv", padding="same")(img)
    x = K.layers.DepthwiseConv2D(3, depth_multiplier=2, name="dw", padding="same")(x)
    x = K.layers.SeparableConv2D(6, 3, name="sep", padding="same")(x)
    x = K.layers.Conv2DTranspose(5, 3, name="convt", padding="same")(x)
    x = K.layers.Conv3D(2, 1, name="conv3")(K.layers.Reshape((8, 8, 5, 1))(x))
    x = K.layers.GlobalAveragePooling3D()(x)
    tok = inp(K, (6,), name="tok")
    e = K.layers.Embedding(20, 8, name="emb")(tok)
    e = K.layers.Conv1D(8, 2, name="conv1d", padding="same")(e)
    e = K.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")(e, e)
    e = K.layers.LSTM(3, name="lstm")(e)
    out = K.layers.Dense(2, name="head")(K.layers.Concatenate()([x, e]))
    return K.Model([img, tok], out)


def test_every_layer_type_is_found_with_its_canonical_shape(K):
    found = {w.path: (w.kind, w.tf_shape, w.canonical_shape) for w in find_prunable_weights(zoo(K))}
    mha = {p: v for p, v in found.items() if p.startswith("mha/")}
    lstm = {p: v for p, v in found.items() if p.startswith("lstm/")}
    rest = {p: v for p, v in found.items() if p not in mha and p not in lstm}
    dw = "dw/depthwise_kernel" if K.__name__ == "tf_keras" else "dw/kernel"   # Keras 3 names it "kernel"
    assert rest == {
        "conv/kernel": ("conv", (3, 3, 3, 4), (4, 3, 3, 3)),
        dw: ("depthwise", (3, 3, 4, 2), (8, 1, 3, 3)),
        "sep/depthwise_kernel": ("depthwise", (3, 3, 8, 1), (8, 1, 3, 3)),
        "sep/pointwise_kernel": ("conv", (1, 1, 8, 6), (6, 8, 1, 1)),
        "convt/kernel": ("conv_transpose", (3, 3, 5, 6), (5, 6, 3, 3)),      # (kh, kw, out, in) -> (out, in, kh, kw)
        "conv3/kernel": ("conv", (1, 1, 1, 1, 2), (2, 1, 1, 1, 1)),
        "emb/embeddings": ("embedding", (20, 8), (20, 8)),
        "conv1d/kernel": ("conv", (2, 8, 8), (8, 8, 2)),
        "head/kernel": ("dense", (5, 2), (2, 5)),
    }
    # MultiHeadAttention: query/key/value (8 -> 2 heads x 4) and output (2 x 4 -> 8) kernels.
    assert sorted((v[0], v[2]) for v in mha.values()) == [("einsum", (8, 8))] * 4
    assert sorted(p.split("/")[-2] for p in mha) == ["attention_output", "key", "query", "value"]
    # LSTM cell: kernel (3 in -> 4 gates x 3) and recurrent kernel (3 -> 12)
    assert sorted((p.split("/")[-1], v[2]) for p, v in lstm.items()) == [("kernel", (12, 8)), ("recurrent_kernel", (12, 3))]


def test_round_trip_and_literal_layouts(K):
    ws = {w.path: w for w in find_prunable_weights(zoo(K))}
    for w in ws.values():
        k = np.arange(np.prod(w.tf_shape), dtype=np.float32).reshape(w.tf_shape)
        assert np.array_equal(w.from_canonical(w.to_canonical(k)), k), w.path
    k = np.arange(12.0).reshape(6, 2)
    assert np.array_equal(ws["head/kernel"].to_canonical(k), k.T)
    k = np.arange(3 * 3 * 3 * 4.0).reshape(3, 3, 3, 4)
    assert np.array_equal(ws["conv/kernel"].to_canonical(k), k.transpose(3, 2, 0, 1))
    q = [w for p, w in ws.items() if p.endswith("query/kernel")][0]          # (8, 2, 4): in, heads, dim
    k = np.arange(64.0).reshape(8, 2, 4)
    assert np.array_equal(q.to_canonical(k), k.reshape(8, 8).T)
    o = [w for p, w in ws.items() if p.endswith("attention_output/kernel")][0]  # (2, 4, 8): heads, dim, out
    assert np.array_equal(o.to_canonical(k.reshape(2, 4, 8)), k.reshape(8, 8).T)


def test_canonical_transpose_is_to_canonical_for_every_layer_type(K):
    """One transpose and a reshape (what Keras 3 applies on the device when it reads the weights) give
    :meth:`to_canonical`'s array for every layer of the zoo (einsum, depthwise, transposed conv included)."""
    rng = np.random.default_rng(0)
    for w in find_prunable_weights(zoo(K)):
        k = rng.standard_normal(w.tf_shape).astype(np.float32)
        perm, shape = w.canonical_transpose()
        np.testing.assert_array_equal(k.transpose(perm).reshape(shape), w.to_canonical(k), err_msg=w.path)
    head = {w.path: w for w in find_prunable_weights(zoo(K))}["head/kernel"]
    assert head.canonical_transpose() == ((1, 0), (2, head.tf_shape[0]))


def test_nested_subclassed_and_shared_layers_found_once(K):
    class Block(K.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.a = K.layers.Dense(6, name="a")
            self.b = K.layers.Dense(6, name="b")

        def call(self, x):
            return self.b(self.a(x))

    class Net(K.Model):
        def __init__(self):
            super().__init__(name="net")
            self.block = Block(name="block")
            self.head = K.layers.Dense(2, name="head")

        def call(self, x):
            return self.head(self.block(x) + self.block(x))

    net = Net()
    net(np.zeros((1, 6), np.float32))
    assert [w.path for w in find_prunable_weights(net)] == ["block/a/kernel", "block/b/kernel", "head/kernel"]
    shared = K.layers.Dense(4, name="shared")
    a, b = inp(K, (4,)), inp(K, (4,))
    m = K.Model([a, b], K.layers.Add()([shared(a), shared(b)]))
    assert [w.path for w in find_prunable_weights(m)] == ["shared/kernel"]


def test_weight_kinds_of_plain_layers(K):
    assert weight_kinds(K.layers.Dense(2)) == {"kernel": "dense"}
    assert weight_kinds(K.layers.Conv2DTranspose(2, 3)) == {"kernel": "conv_transpose"}
    assert weight_kinds(K.layers.BatchNormalization()) == {}
    assert weight_kinds(K.layers.Embedding(3, 2)) == {"embeddings": "embedding"}


@pytest.mark.slow
def test_masks_match_the_core_for_every_layer_type(K, digits):
    """Parity: one-shot pruning at step 0 equals the core applied to the same weights."""
    from sparsify_tf.keras import PruningCallback

    model = zoo(K)
    model.compile("sgd", "mse")
    before = {w.path: (w.kind, w.variable.numpy().copy()) for w in find_prunable_weights(model)}
    cfg = sparsify.PruningConfig(target_sparsity=0.6, start_step=0, end_step=0, pruning_scope="global")
    cb = PruningCallback(cfg)
    x = [np.random.RandomState(0).rand(4, 8, 8, 3).astype("float32"), np.zeros((4, 6), "int32")]
    model.fit(x, np.zeros((4, 2), "float32"), batch_size=4, epochs=1, verbose=0, callbacks=[cb])
    assert cb.last_update_step == 0
    # independent conversions written out in the test (not the adapter's helpers)
    def canon(path, kind, k):
        if path.startswith("mha/"):
            if k.shape[0] == 8:                      # q/k/v: (in, heads, dim)
                return k.reshape(8, -1).T
            return k.reshape(-1, k.shape[-1]).T     # output: (heads, dim, out)
        return {"dense": lambda a: a.T, "embedding": lambda a: a,
                "conv": lambda a: np.moveaxis(np.moveaxis(a, -1, 0), -1, 1),
                "conv_transpose": lambda a: a.transpose(2, 3, 0, 1),      # rows = the layer's output channels
                "depthwise": lambda a: a.reshape(a.shape[0], a.shape[1], -1).transpose(2, 0, 1)[:, None]}[kind](k)

    eng = sparsify.PruningEngine(cfg)
    expected = eng.compute_masks({p: canon(p, kind, k) for p, (kind, k) in before.items()}, 0)
    got = cb.masks
    assert set(got) == set(expected)
    for p, (kind, k) in before.items():
        assert np.array_equal(canon(p, kind, got[p]), expected[p]), p
    n = sum(m.size for m in got.values())
    assert sum(m.size - m.sum() for m in got.values()) == int(np.ceil(0.6 * n - 0.5))


def test_definition_order_breaks_global_ties_as_torch_does(K):
    """Layers in a dict attribute (insertion order, not sorted keys) and a frozen layer (its place, not
    last) are ordered as torch's ``named_parameters()`` orders the same model, so global scope prunes
    the same tied weights in tf-keras, Keras 3 and torch."""
    import torch

    from sparsify_tf.keras import prune_oneshot as keras_oneshot
    from sparsify_keras.layers import in_model_order
    from sparsify_torch import prune_oneshot as torch_oneshot

    class Net(K.Model):
        def __init__(self):
            super().__init__(name="net")
            self.frozen = K.layers.Dense(4, name="frozen", trainable=False)
            self.heads = {"zeta": K.layers.Dense(4, name="zeta"), "alpha": K.layers.Dense(4, name="alpha")}

        def call(self, x):
            return self.heads["alpha"](self.heads["zeta"](self.frozen(x)))

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.frozen = torch.nn.Linear(4, 4)
            self.heads = torch.nn.ModuleDict({"zeta": torch.nn.Linear(4, 4), "alpha": torch.nn.Linear(4, 4)})

    net = Net()
    net(np.zeros((1, 4), np.float32))
    assert [w.path for w in in_model_order(net, find_prunable_weights(net))] == [
        "frozen/kernel", "zeta/kernel", "alpha/kernel"]
    config = {"target_sparsity": 0.625, "pruning_scope": "global"}      # 30 of 48 tied weights
    for layer in (net.frozen, *net.heads.values()):
        layer.kernel.assign(np.full((4, 4), 0.5, np.float32))
    keras_oneshot(net, config)
    tnet = TorchNet()
    with torch.no_grad():
        for p in tnet.parameters():
            p.fill_(0.5)
    torch_oneshot(tnet, config)
    kept = {name: (layer.kernel.numpy() != 0).T for name, layer in
            (("frozen", net.frozen), *net.heads.items())}               # canonical (out, in)
    want = {"frozen": tnet.frozen.weight != 0, "zeta": tnet.heads["zeta"].weight != 0,
            "alpha": tnet.heads["alpha"].weight != 0}
    for name, mask in want.items():
        np.testing.assert_array_equal(kept[name], mask.numpy(), err_msg=name)
    assert [int(kept[n].sum()) for n in ("frozen", "zeta", "alpha")] == [1, 1, 16]   # a layer keeps one
