"""The parity checks can fail: plausible layout bugs planted in the library are caught.

Each test monkeypatches one consistent layout bug into the library (the weights go in and the
masks come back through the same wrong conversion, so nothing crashes and every framework still
returns masks of the right shapes) and asserts that the parity check raises an AssertionError, and
that the layers it reports are among those the bug touches (local scope, so a bug in one layer
cannot move the masks of another). A cross-framework comparison cannot see the first bug at all:
it sits in the core, which every adapter shares.
"""
import numpy as np
import pytest
from parity_zoo import LAYERS, check_parity, mismatched_layers

import sparsify.patterns.base
import sparsify.patterns.layer_view
import sparsify.patterns.nxm
import sparsify.patterns.row_scope
import sparsify_torch.layers

KERNEL_LAYERS = {layer.name for layer in LAYERS if layer.kind in ("conv", "depthwise", "conv_transpose")}


def assert_caught(framework: str, pattern: str, touched: set[str]) -> None:
    with pytest.raises(AssertionError, match="masks differ from the reference") as caught:
        check_parity(framework, pattern, "local")
    reported = mismatched_layers(caught.value)
    assert reported, str(caught.value)
    assert reported <= touched, f"{sorted(reported - touched)} reported, but the bug only touches {sorted(touched)}"


def test_core_view_with_input_channels_slowest_is_caught(monkeypatch):
    """The core's 2-D view built as ``w.reshape(out, -1)`` (kernel taps fastest) instead of input
    channels fastest: every adapter agrees with every other, only the reference sees it."""
    def to_2d(w):
        w = np.asarray(w)
        return w.reshape(1, -1) if w.ndim == 1 else w.reshape(w.shape[0], -1)

    def from_2d(view, shape):
        return np.asarray(view).reshape(tuple(shape))

    for module in (sparsify.patterns.base, sparsify.patterns.layer_view, sparsify.patterns.row_scope):
        monkeypatch.setattr(module, "to_2d", to_2d)
        monkeypatch.setattr(module, "from_2d", from_2d)
    monkeypatch.setattr(sparsify.patterns.nxm, "to_2d", to_2d)
    assert_caught("torch", "2:4", KERNEL_LAYERS)


def test_tf_graph_conv_kh_kw_swap_is_caught(monkeypatch):
    """TF graph mode converts Conv2D kernels with kh and kw swapped (and back, consistently).

    The layout conversions are graph ops (``sparsify_tf.common.layout_ops``), built into the update branch
    (``sparsify_tf.common.guarded_update``); the shapes handed to the core come from ``sparsify_tf.graph.setup``."""
    import tensorflow as tf

    import sparsify_tf.common.guarded_update as guarded_update
    import sparsify_tf.graph.setup as graph_setup

    to_canonical, from_canonical = guarded_update.to_canonical, guarded_update.from_canonical
    np_to_canonical = graph_setup.tf_to_canonical             # the shapes handed to the core

    def swapped_np_to_canonical(kernel, kind):
        c = np_to_canonical(kernel, kind)
        return np.ascontiguousarray(np.swapaxes(c, 2, 3)) if kind == "conv" and c.ndim == 4 else c

    def swapped_to_canonical(kernel, kind):
        c = to_canonical(kernel, kind)
        return tf.transpose(c, [0, 1, 3, 2]) if kind == "conv" and c.shape.rank == 4 else c

    def swapped_from_canonical(w, kind, tf_shape):
        if kind == "conv" and w.shape.rank == 4:
            w = tf.transpose(w, [0, 1, 3, 2])
        return from_canonical(w, kind, tf_shape)

    monkeypatch.setattr(graph_setup, "tf_to_canonical", swapped_np_to_canonical)
    monkeypatch.setattr(guarded_update, "to_canonical", swapped_to_canonical)
    monkeypatch.setattr(guarded_update, "from_canonical", swapped_from_canonical)
    assert_caught("tf_graph", "channelx2", {"conv2d.weight", "conv2d_wide.weight", "gconv2d.weight"})


@pytest.mark.slow
def test_keras_dense_kernel_reshaped_instead_of_transposed_is_caught(monkeypatch):
    """tf-keras: a Dense (and EinsumDense) kernel ``(in, out)`` reinterpreted as ``(out, in)``."""
    import sparsify_keras.layers as keras_layers

    to_canonical, from_canonical = keras_layers.tf_to_canonical, keras_layers.canonical_to_tf

    def reshaped_to_canonical(kernel, kind):
        k = np.asarray(kernel)
        return k.reshape(k.shape[::-1]) if kind == "dense" else to_canonical(kernel, kind)

    def reshaped_from_canonical(w, kind, tf_shape):
        return np.asarray(w).reshape(tuple(tf_shape)) if kind == "dense" else from_canonical(w, kind, tf_shape)

    monkeypatch.setattr(keras_layers, "tf_to_canonical", reshaped_to_canonical)
    monkeypatch.setattr(keras_layers, "canonical_to_tf", reshaped_from_canonical)
    dense = {layer.name for layer in LAYERS if layer.kind in ("dense", "mha_in", "mha_out")}
    assert_caught("tf_keras", "1x1", dense)


@pytest.mark.slow
def test_keras_conv_transpose_rows_as_input_channels_is_caught(monkeypatch):
    """Keras 3: ``Conv*DTranspose`` kernels ``(*k, out, in)`` viewed like a Conv's ``(*k, in, out)``,
    so the rows are the layer's input channels (the layout of issue 11 point 6)."""
    import sparsify_keras.layers as keras_layers

    to_canonical, from_canonical = keras_layers.tf_to_canonical, keras_layers.canonical_to_tf

    def as_conv(kind):
        return "conv" if kind == "conv_transpose" else kind

    monkeypatch.setattr(keras_layers, "tf_to_canonical", lambda k, kind: to_canonical(k, as_conv(kind)))
    monkeypatch.setattr(keras_layers, "canonical_to_tf", lambda w, kind, s: from_canonical(w, as_conv(kind), s))
    assert_caught("keras3", "2:4", {layer.name for layer in LAYERS if layer.kind == "conv_transpose"})


def test_torch_conv_transpose_rows_flipped_is_caught(monkeypatch):
    """torch: ConvTranspose output channels in reverse order in the canonical layout."""
    to_canonical = sparsify_torch.layers.conv_transpose_to_canonical
    from_canonical = sparsify_torch.layers.canonical_to_conv_transpose
    monkeypatch.setattr(sparsify_torch.layers, "conv_transpose_to_canonical",
                        lambda w, groups=1: np.ascontiguousarray(to_canonical(w, groups)[::-1]))
    monkeypatch.setattr(sparsify_torch.layers, "canonical_to_conv_transpose",
                        lambda c, groups=1: from_canonical(np.ascontiguousarray(np.asarray(c)[::-1]), groups))
    assert_caught("torch", "1x1", {layer.name for layer in LAYERS if layer.kind == "conv_transpose"})
