import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify.layout import (canonical_to_conv_transpose, canonical_to_tf, conv_transpose_to_canonical, from_2d,
                             tf_to_canonical, to_2d)


def test_2d_view_puts_input_channel_fastest():
    w = np.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2)         # (out, in, kh, kw)
    view = to_2d(w)
    assert view.shape == (2, 12)
    # element (o=0, kh=0, kw=1) across input channels 0..2 are consecutive
    assert view[0, 3:6].tolist() == [w[0, 0, 0, 1], w[0, 1, 0, 1], w[0, 2, 0, 1]]
    assert to_2d(np.arange(4.0)).shape == (1, 4)
    with pytest.raises(ValueError, match=r"^weight must have at least 1 dimension, got a scalar of shape \(\)$"):
        to_2d(np.float32(1.0))


def test_a_scalar_is_refused_naming_the_layer():
    from sparsify.layout import view_shape

    message = r"^layer 'w': the weight must have at least 1 dimension, got a scalar of shape \(\)$"
    with pytest.raises(ValueError, match=message):
        to_2d(np.float32(1.0), "w")
    with pytest.raises(ValueError, match=message):
        view_shape((), "w")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5))
def test_roundtrip_any_rank(shape):
    w = np.arange(int(np.prod(shape))).reshape(shape)
    assert (from_2d(to_2d(w), w.shape) == w).all()


def test_tf_dense_and_conv_match_torch_layout():
    k = np.arange(6).reshape(2, 3)                          # Dense (in=2, out=3)
    assert tf_to_canonical(k, "dense").tolist() == [[0, 3], [1, 4], [2, 5]]
    kc = np.random.default_rng(0).random((3, 2, 4, 5))      # Conv2D (kh, kw, in, out)
    c = tf_to_canonical(kc, "conv")
    assert c.shape == (5, 4, 3, 2)
    assert c[1, 2, 0, 1] == kc[0, 1, 2, 1]


def test_tf_depthwise_layout():
    k = np.random.default_rng(0).random((3, 3, 4, 2))       # (kh, kw, in, mult)
    c = tf_to_canonical(k, "depthwise")
    assert c.shape == (8, 1, 3, 3)
    assert c[2 * 1 + 1, 0, 2, 0] == k[2, 0, 1, 1]           # out channel = in * mult + m


@pytest.mark.parametrize("kind,shape", [("dense", (3, 4)), ("conv", (3, 3, 2, 5)), ("conv", (3, 2, 5)),
                                        ("conv_transpose", (3, 3, 5, 2)), ("depthwise", (3, 3, 4, 2)),
                                        ("embedding", (10, 4))])
def test_tf_roundtrip(kind, shape):
    k = np.random.default_rng(0).random(shape)
    assert (canonical_to_tf(tf_to_canonical(k, kind), kind, shape) == k).all()


def test_unknown_kind():
    with pytest.raises(ValueError, match="kind must be one of"):
        tf_to_canonical(np.zeros((2, 2)), "lstm")
    with pytest.raises(ValueError, match="kind must be one of"):
        canonical_to_tf(np.zeros((2, 2)), "lstm", (2, 2))


def test_transposed_conv_rows_are_output_channels_in_tf_and_torch():
    rng = np.random.default_rng(1)
    torch_w = rng.random((4, 6, 3, 2))                       # torch ConvTranspose2d (in=4, out=6, kh, kw)
    keras_k = torch_w.transpose(2, 3, 1, 0)                  # Keras Conv2DTranspose (kh, kw, out, in)
    c_torch = conv_transpose_to_canonical(torch_w)
    c_tf = tf_to_canonical(keras_k, "conv_transpose")
    assert c_torch.shape == c_tf.shape == (6, 4, 3, 2)       # (out, in, kh, kw), like every conv
    assert (c_torch == c_tf).all()
    assert c_tf[5, 1, 2, 0] == keras_k[2, 0, 5, 1] == torch_w[1, 5, 2, 0]
    # the 2-D view has output channels as rows and the input channel fastest in each row
    assert to_2d(c_tf)[5, :4].tolist() == torch_w[:, 5, 0, 0].tolist()


def test_grouped_transposed_conv_layout_literal():
    groups, cin, out_g = 2, 4, 3                             # in/g = 2, out = 6
    w = np.arange(cin * out_g).reshape(cin, out_g, 1)
    c = conv_transpose_to_canonical(w, groups)
    assert c.shape == (groups * out_g, cin // groups, 1)
    for o in range(groups * out_g):
        g, o_local = divmod(o, out_g)
        for i_local in range(cin // groups):
            assert c[o, i_local, 0] == w[g * (cin // groups) + i_local, o_local, 0]
    assert (canonical_to_conv_transpose(c, groups) == w).all()
    with pytest.raises(ValueError, match="groups must be a positive integer dividing"):
        conv_transpose_to_canonical(w, 3)
    for bad in (4, 0, True, 1.0):                          # the inverse checks groups the same way
        with pytest.raises(ValueError, match=rf"groups must be a positive integer dividing the weight's first "
                                             rf"dimension 6, got {bad!r}"):
            canonical_to_conv_transpose(c, bad)
    with pytest.raises(ValueError, match=r"canonical weight must have at least 3 dimensions, got shape \(6, 2\)"):
        canonical_to_conv_transpose(c[:, :, 0], groups)


@pytest.mark.parametrize("kind,shape", [("dense", (1000, 70)), ("dense", (70, 1000)), ("conv", (3, 3, 100, 80)),
                                        ("conv", (5, 130, 101)), ("conv", (1, 1, 300, 257))])
@pytest.mark.parametrize("dtype", [np.float32, np.bool_])
def test_large_kernels_take_the_blocked_path_and_equal_a_plain_transpose(kind, shape, dtype):
    """Kernels of 2**16 elements and more are transposed in row blocks (uneven last block included)."""
    k = np.random.default_rng(0).random(shape)
    k = (k > 0.5) if dtype is np.bool_ else k.astype(dtype)
    assert k.size >= 1 << 16
    nd = k.ndim
    plain = k.T if kind == "dense" else k.transpose(nd - 1, nd - 2, *range(nd - 2))
    c = tf_to_canonical(k, kind)
    assert c.flags.c_contiguous and c.dtype == k.dtype and np.array_equal(c, plain)
    back = canonical_to_tf(c, kind, k.shape)
    assert back.flags.c_contiguous and np.array_equal(back, k)
