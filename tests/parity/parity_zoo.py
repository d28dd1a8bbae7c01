"""Every prunable layer type, with the same weights in torch, Keras (tf-keras, Keras 3) and TF graph mode.

The weights are made in torch and copied to the other frameworks by the layout conversions
written here (not ``sparsify.layout``); each copy is checked by running the torch module and the
TF layer on the same input (:func:`assert_close_outputs`), so a wrong conversion here fails loudly
instead of hiding a library bug. Masks read back from each framework are turned into 2-D views by the
``*_view`` functions below (also written here), and compared with :mod:`parity_reference`.

The layer zoo (2-D views, rows x columns; every view fits every pattern of the parity tests:
rows even, columns a multiple of 4, and the input channels (3) are not a multiple of 4, so N:M
groups straddle kernel taps):

=====================  =============================================  ========  ===========
name (torch pruner)    layer                                          view      TF graph op
=====================  =============================================  ========  ===========
emb.weight             Embedding(10, 8)                               10 x 8    -
embbag.weight          EmbeddingBag(10, 8)                            10 x 8    - (torch only)
conv1d.weight          Conv1d(3 -> 6, k 4)                            6 x 12    -
dw1d.weight            depthwise Conv1d(3 -> 6, k 4)                  6 x 4     -
convt1d.weight         ConvTranspose1d(3 -> 4, k 4)                   4 x 12    -
sep1d_dw.weight        separable 1-D: depthwise (3 -> 12, k 4)        12 x 4    -
sep1d_pw.weight        separable 1-D: pointwise (12 -> 4, k 1)        4 x 12    -
conv2d.weight          Conv2d(3 -> 4, k 2x2), square: kh<->kw safe    4 x 12    Conv2D
conv2d_wide.weight     Conv2d(3 -> 4, k 2x4), continuous weights      4 x 24    Conv2D
gconv2d.weight         Conv2d(6 -> 4, k 2x2, groups 2)                4 x 12    Conv2D
dw2d.weight            depthwise Conv2d(3 -> 6, k 2x2)                6 x 4     DepthwiseConv2dNative
sep_dw.weight          separable: depthwise (3 -> 12, k 2x2)          12 x 4    DepthwiseConv2dNative
sep_pw.weight          separable: pointwise (12 -> 4, k 1x1)          4 x 12    Conv2D
convt2d.weight         ConvTranspose2d(3 -> 4, k 2x2)                 4 x 12    Conv2DBackpropInput
gconvt2d.weight        ConvTranspose2d(6 -> 4, k 2x2, groups 2)       4 x 12    - (torch only)
conv3d.weight          Conv3d(3 -> 2, k 2x2x2)                        2 x 24    Conv3D
convt3d.weight         ConvTranspose3d(3 -> 2, k 2x2x2)               2 x 24    -
mha.in_proj_weight.q   MultiheadAttention(8, 2 heads): query          8 x 8     BatchMatMulV2 x @ W
mha.in_proj_weight.k   key (torch: thirds of in_proj_weight)          8 x 8     MatMul x @ W^T
mha.in_proj_weight.v   value                                          8 x 8     MatMul W @ x^T
mha.out_proj.weight    output                                         8 x 8     MatMul x @ W
xattn.q_proj_weight    MultiheadAttention(8, 2 heads, kdim=vdim=4)    8 x 8     -
xattn.k_proj_weight    (torch: separate q/k/v_proj_weight)            8 x 4     -
xattn.v_proj_weight                                                   8 x 4     -
xattn.out_proj.weight                                                 8 x 8     -
tiny.weight            Linear(12 -> 10), scaled by 2**-10             10 x 12   MatMul W^T @ x^T
head.weight            Linear(84 -> 4)                                4 x 84    MatMul x @ W
=====================  =============================================  ========  ===========

Weights are multiples of 1/8 (of 2**-13 in ``tiny``) except ``conv2d_wide``; ``conv2d`` is all
+-1/4 and the attention's q, k and v weights all +-1/2: equal scores everywhere, inside layers and across them, so
tie-breaking (the lower flat index, then the model's weight order in global scope) decides many
masks (``test_parity_reference`` checks that the global masks of every pattern depend on it).
``tiny`` sits below every other layer, so global scope clamps it at
``max_sparsity_ratio_per_layer``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from parity_reference import mask_history  # noqa: E402

E, HEADS, HEAD_DIM, CIN, KV_DIM = 8, 2, 4, 3, 4
BATCH = 2


@dataclass(frozen=True)
class Layer:
    """One prunable weight of the zoo.

    Attributes:
        name: the torch pruner's name (also the key of every mask history).
        kind: how it is laid out: dense, embedding, conv, depthwise, conv_transpose, mha_in, mha_out.
        keras: its Keras path; ``{dw}`` is the depthwise kernel's name (Keras 3 ``kernel``,
            tf-keras ``depthwise_kernel``); None where Keras has no such layer.
        graph: its TF graph variable name, None where graph mode has no op for the layer type.
        groups: the conv's groups.
    """

    name: str
    kind: str
    keras: str | None
    graph: str | None
    groups: int = 1


LAYERS = [
    Layer("emb.weight", "embedding", "emb/embeddings", None),
    Layer("embbag.weight", "embedding", None, None),
    Layer("conv1d.weight", "conv", "conv1d/kernel", None),
    Layer("dw1d.weight", "depthwise", "dw1d/{dw}", None),
    Layer("convt1d.weight", "conv_transpose", "convt1d/kernel", None),
    Layer("sep1d_dw.weight", "depthwise", "sep1d/depthwise_kernel", None),
    Layer("sep1d_pw.weight", "conv", "sep1d/pointwise_kernel", None),
    Layer("conv2d.weight", "conv", "conv2d/kernel", "conv2d/kernel"),
    Layer("conv2d_wide.weight", "conv", "conv2d_wide/kernel", "conv2d_wide/kernel"),
    Layer("gconv2d.weight", "conv", "gconv2d/kernel", "gconv2d/kernel", groups=2),
    Layer("dw2d.weight", "depthwise", "dw2d/{dw}", "dw2d/depthwise_kernel"),
    Layer("sep_dw.weight", "depthwise", "sep/depthwise_kernel", "sep/depthwise_kernel"),
    Layer("sep_pw.weight", "conv", "sep/pointwise_kernel", "sep/pointwise_kernel"),
    Layer("convt2d.weight", "conv_transpose", "convt2d/kernel", "convt2d/kernel"),
    Layer("gconvt2d.weight", "conv_transpose", None, None, groups=2),
    Layer("conv3d.weight", "conv", "conv3d/kernel", "conv3d/kernel"),
    Layer("convt3d.weight", "conv_transpose", "convt3d/kernel", None),
    Layer("mha.in_proj_weight.q", "mha_in", "mha/query/kernel", "mha/query/kernel"),
    Layer("mha.in_proj_weight.k", "mha_in", "mha/key/kernel", "mha/key/kernel"),
    Layer("mha.in_proj_weight.v", "mha_in", "mha/value/kernel", "mha/value/kernel"),
    Layer("mha.out_proj.weight", "mha_out", "mha/attention_output/kernel", "mha/attention_output/kernel"),
    Layer("xattn.q_proj_weight", "mha_in", "xattn/query/kernel", None),
    Layer("xattn.k_proj_weight", "mha_in", "xattn/key/kernel", None),
    Layer("xattn.v_proj_weight", "mha_in", "xattn/value/kernel", None),
    Layer("xattn.out_proj.weight", "mha_out", "xattn/attention_output/kernel", None),
    Layer("tiny.weight", "dense", "tiny/kernel", "tiny/kernel"),
    Layer("head.weight", "dense", "head/kernel", "head/kernel"),
]
KERAS_LAYERS = [layer for layer in LAYERS if layer.keras is not None]
GRAPH_LAYERS = [layer for layer in LAYERS if layer.graph is not None]


# ----- torch: the source of the weights -------------------------------------------------------

class TorchZoo(nn.Module):
    """The torch side; modules are registered in the order of ``LAYERS`` (the global tie order)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, E)
        self.embbag = nn.EmbeddingBag(10, E)
        self.conv1d = nn.Conv1d(CIN, 6, 4)
        self.dw1d = nn.Conv1d(CIN, 6, 4, groups=CIN)
        self.convt1d = nn.ConvTranspose1d(CIN, 4, 4)
        self.sep1d_dw = nn.Conv1d(CIN, 12, 4, groups=CIN, bias=False)
        self.sep1d_pw = nn.Conv1d(12, 4, 1)
        self.conv2d = nn.Conv2d(CIN, 4, 2)
        self.conv2d_wide = nn.Conv2d(CIN, 4, (2, 4))
        self.gconv2d = nn.Conv2d(2 * CIN, 4, 2, groups=2)
        self.dw2d = nn.Conv2d(CIN, 6, 2, groups=CIN)
        self.sep_dw = nn.Conv2d(CIN, 12, 2, groups=CIN, bias=False)
        self.sep_pw = nn.Conv2d(12, 4, 1)
        self.convt2d = nn.ConvTranspose2d(CIN, 4, 2)
        self.gconvt2d = nn.ConvTranspose2d(2 * CIN, 4, 2, groups=2)
        self.conv3d = nn.Conv3d(CIN, 2, 2)
        self.convt3d = nn.ConvTranspose3d(CIN, 2, 2)
        self.mha = nn.MultiheadAttention(E, HEADS, batch_first=True)
        self.xattn = nn.MultiheadAttention(E, HEADS, batch_first=True, kdim=KV_DIM, vdim=KV_DIM)
        self.tiny = nn.Linear(12, 10)
        self.head = nn.Linear(84, 4)


def torch_zoo(seed: int = 0) -> TorchZoo:
    """The zoo with its fixed weights: multiples of 1/8 (many ties), ``conv2d_wide`` continuous,
    ``conv2d`` all +-1/4, attention q, k, v all +-1/2, ``tiny`` scaled by 2**-10, biases random too."""
    torch.manual_seed(seed)
    model = TorchZoo()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if name == "conv2d_wide.weight":
                values = rng.standard_normal(shape)
            else:
                values = rng.integers(1, 8, size=shape) / 8 * rng.choice([-1.0, 1.0], size=shape)
            if name == "mha.in_proj_weight":          # all of q, k, v tie: 2xchannel ties across layers
                values = np.sign(values) / 2
            if name == "conv2d.weight":               # all tie: the flat order alone decides its masks
                values = np.sign(values) / 4
            if name.startswith("tiny."):
                values = values * 2.0 ** -10
            p.copy_(torch.from_numpy(values.astype(np.float32)))
    return model


def torch_weight(model: TorchZoo, layer: Layer) -> np.ndarray:
    """The torch-layout weight of one zoo layer (a third of ``in_proj_weight`` for q/k/v)."""
    if ".in_proj_weight." in layer.name:
        third = "qkv".index(layer.name[-1])
        return model.mha.in_proj_weight.detach().numpy()[third * E:(third + 1) * E].copy()
    module, tensor = layer.name.rsplit(".", 1)
    return getattr(model.get_submodule(module), tensor).detach().numpy().copy()


def torch_view(kind: str, w: np.ndarray, groups: int = 1) -> np.ndarray:
    """The 2-D view of a torch-layout weight (or mask): rows = output channels, input fastest."""
    w = np.asarray(w)
    if kind in ("dense", "embedding", "mha_in", "mha_out"):
        return w
    if kind == "conv_transpose":                      # (in, out/g, *k): group g's rows read its inputs
        cin, out_g, kernel = w.shape[0], w.shape[1], w.shape[2:]
        per_group = w.reshape(groups, cin // groups, out_g, *kernel)      # (g, in/g, out/g, *k)
        return per_group.transpose(0, 2, *range(3, w.ndim + 1), 1).reshape(groups * out_g, -1)
    return w.transpose(0, *range(2, w.ndim), 1).reshape(w.shape[0], -1)   # (out, in, *k) -> (out, *k, in)


def views(model: TorchZoo, layers: list[Layer]) -> dict[str, np.ndarray]:
    """``{name: 2-D view}`` of the zoo's weights, in ``layers`` order (the reference's input)."""
    return {layer.name: torch_view(layer.kind, torch_weight(model, layer), layer.groups) for layer in layers}


# ----- layout conversions torch -> TF, and TF -> 2-D view ----------------------------------------

def to_keras(kind: str, w: np.ndarray) -> np.ndarray:
    """A torch-layout weight in the Keras layout of the same layer."""
    nd = w.ndim
    if kind == "dense":                               # (out, in) -> (in, out)
        return w.T.copy()
    if kind == "embedding":
        return w.copy()
    if kind == "conv":                                # (out, in, *k) -> (*k, in, out)
        return w.transpose(*range(2, nd), 1, 0).copy()
    if kind == "depthwise":                           # (in*mult, 1, *k) -> (*k, in, mult)
        per_channel = w[:, 0].reshape(CIN, -1, *w.shape[2:])
        return per_channel.transpose(*range(2, nd), 0, 1).copy()
    if kind == "conv_transpose":                      # (in, out, *k) -> (*k, out, in)
        return w.transpose(*range(2, nd), 1, 0).copy()
    if kind == "mha_in":                              # (heads*dim, in) -> (in, heads, dim)
        return w.T.reshape(w.shape[1], HEADS, HEAD_DIM).copy()
    if kind == "mha_out":                             # (E, heads*dim) -> (heads, dim, E)
        return w.T.reshape(HEADS, HEAD_DIM, E).copy()
    raise ValueError(kind)


def keras_view(kind: str, k: np.ndarray) -> np.ndarray:
    """The 2-D view of a Keras-layout weight (or mask)."""
    k = np.asarray(k)
    if kind == "dense":                               # (in, out)
        return k.T
    if kind == "embedding":
        return k
    if kind == "conv":                                # (*k, in, out): rows out, columns (*k, in)
        return k.reshape(-1, k.shape[-1]).T
    if kind == "depthwise":                           # (*k, in, mult): rows in*mult, columns the taps
        return k.reshape(int(np.prod(k.shape[:-2])), -1).T
    if kind == "conv_transpose":                      # (*k, out, in) -> (out, *k, in)
        return np.moveaxis(k, -2, 0).reshape(k.shape[-2], -1)
    if kind == "mha_in":                              # (in, heads, dim)
        return k.reshape(k.shape[0], -1).T
    if kind == "mha_out":                             # (heads, dim, E)
        return k.reshape(-1, k.shape[-1]).T
    raise ValueError(kind)


# ----- the comparison -------------------------------------------------------------------------

def assert_same_history(recorded: list[dict[str, np.ndarray]], expected: list[dict[str, np.ndarray]],
                        where: str) -> None:
    """Equal 2-D masks at every step for every layer; the AssertionError lists every difference."""
    assert len(recorded) == len(expected), f"{where}: {len(recorded)} steps recorded, {len(expected)} expected"
    diffs = []
    for step, (rec, exp) in enumerate(zip(recorded, expected)):
        assert set(rec) == set(exp), f"{where}: layers {sorted(rec)} recorded, {sorted(exp)} expected"
        for name, mask in exp.items():
            got = np.asarray(rec[name])
            if got.shape != mask.shape:
                diffs.append(f"step {step} {name}: shape {got.shape}, expected {mask.shape}")
            elif (got != mask).any():
                diffs.append(f"step {step} {name}: {int((got != mask).sum())} of {mask.size} entries differ "
                             f"({int((~got).sum())} pruned, expected {int((~mask).sum())})")
    if diffs:
        raise AssertionError(f"{where}: masks differ from the reference:\n" + "\n".join(diffs))


def mismatched_layers(error: AssertionError) -> set[str]:
    """The layer names an :func:`assert_same_history` error reports."""
    return {line.split()[2].rstrip(":") for line in str(error).splitlines()[1:]}


def assert_weights_masked(original_views: dict[str, np.ndarray], final_views: dict[str, np.ndarray],
                          masks: dict[str, np.ndarray], where: str) -> None:
    """The framework's weights are the original weights times the expected mask (learning rate 0)."""
    for name, mask in masks.items():
        np.testing.assert_array_equal(final_views[name], original_views[name] * mask,
                                      err_msg=f"{where}: weights of {name}")


# ----- the parity runs ------------------------------------------------------------------------

#: Schedule of every parity run: gradual 0.1 -> 0.5 over steps 1..7, updates at 1, 3, 5, 7;
#: masks are compared at steps 0..8 (before the start, at every update point and between them).
SCHEDULE = {"init_sparsity": 0.1, "target_sparsity": 0.5, "start_step": 1, "end_step": 7,
            "pruning_frequency": 2}
STEPS = 9


def config(pattern: str, scope: str) -> dict:
    """The parity config for a pattern and a scope (an N:M pattern below 1/2 ramps to its N/M)."""
    cfg = {**SCHEDULE, "pattern": pattern, "pruning_scope": scope}
    if ":" in pattern:
        n, m = (int(v) for v in pattern.split(":"))
        if n / m < cfg["target_sparsity"]:
            cfg.update(init_sparsity=n / m / 5, target_sparsity=n / m)
    return cfg


def expected_history(cfg: dict, layers: list[Layer]) -> list[dict[str, np.ndarray]]:
    """The reference's masks for the zoo's ``layers`` (in that order) at steps 0..STEPS-1."""
    history = mask_history(views(torch_zoo(), layers), cfg, STEPS)
    pruned = [sum(int((~m).sum()) for m in h.values()) for h in history]
    # a meaningful schedule: nothing before the start, growing at update points, equal between
    assert pruned[0] == 0 < pruned[1] <= pruned[3] <= pruned[5] <= pruned[7] == pruned[8], pruned
    assert pruned[1] < pruned[7], pruned
    assert pruned[2] == pruned[1] and pruned[4] == pruned[3] and pruned[6] == pruned[5]
    return history


def torch_history(cfg: dict) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Masks of ``sparsify_torch.prune`` at steps 0..STEPS-1 as 2-D views, and the final weights' views."""
    from sparsify_torch import prune

    model = torch_zoo()
    pruner = prune(model, cfg)
    assert list(pruner.names) == [layer.name for layer in LAYERS], pruner.names
    history = []
    for step in range(STEPS):
        if step:
            pruner.step()
        masks = pruner.masks()
        history.append({layer.name: torch_view(layer.kind, masks[layer.name].numpy(), layer.groups)
                        for layer in LAYERS})
    final = views(model, LAYERS)
    return history, final


# ----- Keras ----------------------------------------------------------------------------------

def keras_module(flavor: str):
    """``tf_keras`` or Keras 3."""
    if flavor == "tf_keras":
        import tf_keras

        return tf_keras
    import keras

    return keras


def keras_path(layer: Layer, keras: Any) -> str:
    """The Keras path of a zoo layer in this Keras."""
    return layer.keras.format(dw="depthwise_kernel" if keras.__name__ == "tf_keras" else "kernel")


def zoo_inputs(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Channels-last inputs for every branch of the zoo."""
    return {"tokens": rng.integers(0, 10, size=(n, 5)).astype(np.int32),
            "seq": rng.normal(size=(n, 8, CIN)).astype(np.float32),
            "img": rng.normal(size=(n, 5, 5, CIN)).astype(np.float32),
            "img6": rng.normal(size=(n, 5, 5, 2 * CIN)).astype(np.float32),
            "vol": rng.normal(size=(n, 3, 3, 3, CIN)).astype(np.float32),
            "att": rng.normal(size=(n, 4, E)).astype(np.float32),
            "kv": rng.normal(size=(n, 3, KV_DIM)).astype(np.float32),
            "fcin": rng.normal(size=(n, 12)).astype(np.float32),
            "feat": rng.normal(size=(n, 84)).astype(np.float32)}


INPUT_ORDER = ("tokens", "seq", "img", "img6", "vol", "att", "kv", "fcin")


def keras_zoo(keras: Any):
    """The Keras model: a subclassed model whose layers are tracked in ``LAYERS`` order."""
    L = keras.layers

    class KerasZoo(keras.Model):
        def __init__(self):
            super().__init__(name="zoo")
            self.emb = L.Embedding(10, E, name="emb")
            self.conv1d = L.Conv1D(6, 4, name="conv1d")
            self.dw1d = L.DepthwiseConv1D(4, depth_multiplier=2, name="dw1d")
            self.convt1d = L.Conv1DTranspose(4, 4, name="convt1d")
            self.sep1d = L.SeparableConv1D(4, 4, depth_multiplier=4, name="sep1d")
            self.conv2d = L.Conv2D(4, 2, name="conv2d")
            self.conv2d_wide = L.Conv2D(4, (2, 4), name="conv2d_wide")
            self.gconv2d = L.Conv2D(4, 2, groups=2, name="gconv2d")
            self.dw2d = L.DepthwiseConv2D(2, depth_multiplier=2, name="dw2d")
            self.sep = L.SeparableConv2D(4, 2, depth_multiplier=4, name="sep")
            self.convt2d = L.Conv2DTranspose(4, 2, name="convt2d")
            self.conv3d = L.Conv3D(2, 2, name="conv3d")
            self.convt3d = L.Conv3DTranspose(2, 2, name="convt3d")
            self.mha = L.MultiHeadAttention(HEADS, HEAD_DIM, name="mha")
            self.xattn = L.MultiHeadAttention(HEADS, HEAD_DIM, name="xattn")
            self.tiny = L.Dense(10, name="tiny")
            self.head = L.Dense(4, name="head")

        def branches(self, inputs):
            tokens, seq, img, img6, vol, att, kv, fcin = inputs
            return {"emb.weight": self.emb(tokens), "conv1d.weight": self.conv1d(seq),
                    "dw1d.weight": self.dw1d(seq), "convt1d.weight": self.convt1d(seq),
                    "sep1d_pw.weight": self.sep1d(seq),
                    "conv2d.weight": self.conv2d(img), "conv2d_wide.weight": self.conv2d_wide(img),
                    "gconv2d.weight": self.gconv2d(img6),
                    "dw2d.weight": self.dw2d(img), "sep_pw.weight": self.sep(img),
                    "convt2d.weight": self.convt2d(img), "conv3d.weight": self.conv3d(vol),
                    "convt3d.weight": self.convt3d(vol), "mha.out_proj.weight": self.mha(att, att),
                    "xattn.out_proj.weight": self.xattn(att, kv),
                    "tiny.weight": self.tiny(fcin)}

        def call(self, inputs):
            out = self.branches(inputs)
            if hasattr(keras, "ops"):           # Keras 3, any backend
                ops = keras.ops
                pooled = [ops.mean(ops.reshape(t, (ops.shape(t)[0], -1, t.shape[-1])), axis=1) for t in out.values()]
                return self.head(ops.concatenate(pooled, axis=-1))
            import tensorflow as tf

            pooled = [tf.reshape(tf.reduce_mean(tf.reshape(t, [tf.shape(t)[0], -1, t.shape[-1]]), 1),
                                 [-1, t.shape[-1]]) for t in out.values()]
            return self.head(tf.concat(pooled, -1))

    return KerasZoo()


def keras_arrays(model: TorchZoo, keras: Any) -> dict[str, np.ndarray]:
    """``{Keras path: array}`` of every zoo weight and bias, converted from torch here."""
    out = {}
    for layer in KERAS_LAYERS:
        out[keras_path(layer, keras)] = to_keras(layer.kind, torch_weight(model, layer))
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    for name in ("conv1d", "dw1d", "convt1d", "conv2d", "conv2d_wide", "gconv2d", "dw2d", "convt2d", "conv3d",
                 "convt3d", "tiny", "head"):
        out[f"{name}/bias"] = sd[f"{name}.bias"]
    out["sep/bias"] = sd["sep_pw.bias"]
    out["sep1d/bias"] = sd["sep1d_pw.bias"]
    for mha in ("mha", "xattn"):
        for i, part in enumerate(("query", "key", "value")):
            out[f"{mha}/{part}/bias"] = sd[f"{mha}.in_proj_bias"][i * E:(i + 1) * E].reshape(HEADS, HEAD_DIM)
        out[f"{mha}/attention_output/bias"] = sd[f"{mha}.out_proj.bias"]
    return out


def _path(variable: Any) -> str:
    """A Keras variable's path below the model: "zoo/conv2d/kernel:0" -> "conv2d/kernel"."""
    path = getattr(variable, "path", None) or variable.name
    return path.split(":")[0].split("/", 1)[1]


def _nchw(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.moveaxis(x, -1, 1).copy())


def _nhwc(t: torch.Tensor) -> np.ndarray:
    return np.moveaxis(t.detach().numpy(), 1, -1)


def torch_outputs(model: TorchZoo, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each torch layer's output on the zoo inputs, channels last (keyed like the Keras branches)."""
    m = model
    with torch.no_grad():
        seq, img, img6, vol = _nchw(x["seq"]), _nchw(x["img"]), _nchw(x["img6"]), _nchw(x["vol"])
        att, kv = torch.from_numpy(x["att"]), torch.from_numpy(x["kv"])
        return {"emb.weight": m.emb(torch.from_numpy(x["tokens"]).long()).numpy(),
                "conv1d.weight": _nhwc(m.conv1d(seq)), "dw1d.weight": _nhwc(m.dw1d(seq)),
                "convt1d.weight": _nhwc(m.convt1d(seq)), "sep1d_pw.weight": _nhwc(m.sep1d_pw(m.sep1d_dw(seq))),
                "conv2d.weight": _nhwc(m.conv2d(img)),
                "conv2d_wide.weight": _nhwc(m.conv2d_wide(img)), "gconv2d.weight": _nhwc(m.gconv2d(img6)),
                "dw2d.weight": _nhwc(m.dw2d(img)),
                "sep_pw.weight": _nhwc(m.sep_pw(m.sep_dw(img))), "convt2d.weight": _nhwc(m.convt2d(img)),
                "conv3d.weight": _nhwc(m.conv3d(vol)), "convt3d.weight": _nhwc(m.convt3d(vol)),
                "mha.out_proj.weight": m.mha(att, att, att, need_weights=False)[0].numpy(),
                "xattn.out_proj.weight": m.xattn(att, kv, kv, need_weights=False)[0].numpy(),
                "tiny.weight": m.tiny(torch.from_numpy(x["fcin"])).numpy(),
                "head.weight": m.head(torch.from_numpy(x["feat"])).numpy()}


def assert_close_outputs(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], where: str) -> None:
    """The copied layers compute what the torch layers compute (float32 tolerance)."""
    for key, value in ours.items():
        np.testing.assert_allclose(value, theirs[key], rtol=1e-5, atol=1e-5,
                                   err_msg=f"{where}: forward output of {key} differs from torch")


def keras_history(cfg: dict, flavor: str, *, run_eagerly: bool = True):
    """Masks of ``PruningCallback`` in ``model.fit`` at steps 0..STEPS-1 as 2-D views, and the final
    weights' views. The weights are copied from the torch zoo and checked by forward outputs first."""
    if flavor == "keras3":
        from sparsify_keras import PruningCallback      # every backend
    else:
        from sparsify_tf.keras import PruningCallback

    keras = keras_module(flavor)
    keras.utils.set_random_seed(0)
    source = torch_zoo()
    model = keras_zoo(keras)
    rng = np.random.default_rng(0)
    probe = zoo_inputs(rng, BATCH)
    model(tuple(probe[k] for k in INPUT_ORDER))        # build
    arrays = keras_arrays(source, keras)
    assert sorted(_path(v) for v in model.weights) == sorted(arrays)
    for v in model.weights:
        v.assign(arrays[_path(v)])
    tonp = keras.ops.convert_to_numpy if hasattr(keras, "ops") else np.asarray     # any Keras 3 backend
    ours = {k: tonp(t) for k, t in model.branches(tuple(probe[k] for k in INPUT_ORDER)).items()}
    ours["head.weight"] = tonp(model.head(probe["feat"]))
    assert_close_outputs(ours, torch_outputs(source, probe), flavor)

    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0), loss="mse", run_eagerly=run_eagerly)
    pruning = PruningCallback(cfg)
    paths = [keras_path(layer, keras) for layer in KERAS_LAYERS]
    history: list[dict[str, np.ndarray]] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):   # after PruningCallback's update of this step
            masks = pruning.masks                            # (syncs the JAX trainer's state first)
            assert int(np.asarray(self.model.optimizer.iterations.numpy())) == len(history)
            history.append({layer.name: keras_view(layer.kind, masks[p]) for layer, p in zip(KERAS_LAYERS, paths)})

    data = zoo_inputs(rng, BATCH * STEPS)
    y = rng.normal(size=(BATCH * STEPS, 4)).astype(np.float32)
    model.fit(tuple(data[k] for k in INPUT_ORDER), y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[pruning, Record()])
    assert pruning.pruned_weights == paths, pruning.pruned_weights
    weights = {_path(v): np.asarray(tonp(v.value if hasattr(keras, "ops") else v)) for v in model.weights
               if "/" in (getattr(v, "path", None) or v.name)}        # not the pruning state's own variables
    final = {layer.name: keras_view(layer.kind, weights[p]) for layer, p in zip(KERAS_LAYERS, paths)}
    return history, final


# ----- TF graph mode --------------------------------------------------------------------------

#: Graph variables stored in the torch layout ``(out, in)``: the MatMul reads them transposed
#: (``x @ W^T``) or as its left operand (``W @ x^T``). The others are ``(in, out)`` (``x @ W``,
#: or ``W^T @ x^T`` for ``tiny``), as the tf.nn ops' filters are in the Keras layouts.
GRAPH_OUT_IN = ("mha.in_proj_weight.k", "mha.in_proj_weight.v")


def graph_value(layer: Layer, w: np.ndarray) -> np.ndarray:
    """A torch-layout weight as the zoo's TF graph variable."""
    if layer.name in GRAPH_OUT_IN:
        return w.copy()
    k = to_keras(layer.kind, w)
    if layer.kind == "mha_in":                        # (E, heads, dim) -> (in, out)
        return k.reshape(k.shape[0], -1)
    if layer.kind == "mha_out":                       # (heads, dim, E) -> (in, out)
        return k.reshape(-1, k.shape[-1])
    return k


def graph_view(layer: Layer, value: np.ndarray) -> np.ndarray:
    """The 2-D view of a graph variable (or its mask)."""
    if layer.name in GRAPH_OUT_IN:
        return np.asarray(value)
    return keras_view("dense" if layer.kind in ("mha_in", "mha_out") else layer.kind, value)


#: Every op type graph mode prunes, each reading at least one zoo weight.
GRAPH_OP_TYPES = {"MatMul", "BatchMatMulV2", "Conv2D", "Conv3D", "DepthwiseConv2dNative", "Conv2DBackpropInput"}


def graph_history(cfg: dict, api: str = "prune_graph"):
    """Masks of TF graph mode on a tf.compat.v1 graph with the zoo's graph-mode ops, at steps
    0..STEPS-1 as 2-D views, and the final weights' views. ``api``: ``"prune_graph"`` (the
    high-level entry point) or ``"seed"`` (``get_or_create_ks_scheduled_graph_ops`` with the
    config's pattern and scope as ``mask_creator``)."""
    import tensorflow as tf

    from sparsify.patterns import get_pattern
    from sparsify_tf import get_or_create_ks_scheduled_graph_ops, prune_graph

    tf1 = tf.compat.v1
    source = torch_zoo()
    sd = {k: v.detach().numpy() for k, v in source.state_dict().items()}
    probe = zoo_inputs(np.random.default_rng(0), BATCH)
    graph = tf.Graph()
    with graph.as_default():
        gs = tf1.train.get_or_create_global_step()
        ph = {k: tf1.placeholder(tf.float32, (None, *v.shape[1:]), name=k) for k, v in probe.items()
              if k != "tokens"}
        var = {layer.name: tf1.get_variable(layer.graph, initializer=tf.constant(
            graph_value(layer, torch_weight(source, layer))), use_resource=True) for layer in GRAPH_LAYERS}

        def bias(key, rows=None):
            value = sd[key] if rows is None else sd[key][rows[0]:rows[1]]
            return tf1.get_variable(key.replace(".", "/") + ("" if rows is None else f"/{rows[0]}"),
                                    initializer=tf.constant(value), use_resource=True)

        img, img6, vol, att = ph["img"], ph["img6"], ph["vol"], ph["att"]
        out = {"conv2d.weight": tf.nn.conv2d(img, var["conv2d.weight"], 1, "VALID") + bias("conv2d.bias"),
               "conv2d_wide.weight": tf.nn.conv2d(img, var["conv2d_wide.weight"], 1, "VALID")
               + bias("conv2d_wide.bias"),
               "gconv2d.weight": tf.nn.conv2d(img6, var["gconv2d.weight"], 1, "VALID") + bias("gconv2d.bias"),
               "dw2d.weight": tf.nn.depthwise_conv2d(img, var["dw2d.weight"], [1, 1, 1, 1], "VALID")
               + bias("dw2d.bias"),
               "sep_pw.weight": tf.nn.conv2d(tf.nn.depthwise_conv2d(img, var["sep_dw.weight"], [1, 1, 1, 1], "VALID"),
                                             var["sep_pw.weight"], 1, "VALID") + bias("sep_pw.bias"),
               "convt2d.weight": tf.nn.conv2d_transpose(img, var["convt2d.weight"],
                                                        tf.stack([tf.shape(img)[0], 6, 6, 4]), 1, "VALID")
               + bias("convt2d.bias"),
               "conv3d.weight": tf.nn.conv3d(vol, var["conv3d.weight"], [1] * 5, "VALID") + bias("conv3d.bias"),
               "tiny.weight": tf.transpose(tf.matmul(var["tiny.weight"], ph["fcin"], transpose_a=True,
                                                     transpose_b=True)) + bias("tiny.bias"),
               "head.weight": tf.matmul(ph["feat"], var["head.weight"]) + bias("head.bias")}
        flat = tf.reshape(att, [-1, E])
        qkv_bias = [bias("mha.in_proj_bias", (i * E, (i + 1) * E)) for i in range(3)]
        q = tf.matmul(att, var["mha.in_proj_weight.q"]) + qkv_bias[0]                 # BatchMatMulV2, x @ W
        k = tf.matmul(flat, var["mha.in_proj_weight.k"], transpose_b=True) + qkv_bias[1]   # x @ W^T
        v = tf.transpose(tf.matmul(var["mha.in_proj_weight.v"], flat, transpose_b=True)) + qkv_bias[2]  # W @ x^T
        q, k, v = (tf.transpose(tf.reshape(t, [-1, 4, HEADS, HEAD_DIM]), [0, 2, 1, 3]) for t in (q, k, v))
        attention = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / np.float32(np.sqrt(HEAD_DIM)))
        ctx = tf.reshape(tf.transpose(tf.matmul(attention, v), [0, 2, 1, 3]), [-1, E])
        out["mha.out_proj.weight"] = tf.reshape(tf.matmul(ctx, var["mha.out_proj.weight"])
                                                + bias("mha.out_proj.bias"), [-1, 4, E])
        if api == "prune_graph":
            pruning = prune_graph(cfg, graph, global_step=gs)
            assert list(pruning.protocol.names) == [layer.graph for layer in GRAPH_LAYERS], pruning.protocol.names
            update, op_vars = pruning.update_op, pruning.op_vars
        else:
            update, op_vars, _, _ = get_or_create_ks_scheduled_graph_ops(
                graph, gs, ["re:.*kernel$"], cfg["start_step"], cfg["end_step"], cfg["pruning_frequency"],
                cfg["init_sparsity"], cfg["target_sparsity"], 3.0, True, "parity",
                # a Pattern object: the core's rules (a name or dict would follow SparseML's: no cap, 1.0 allowed)
                get_pattern({"pattern": cfg["pattern"], "pruning_scope": cfg["pruning_scope"]}))
        mask_vars = {ov.op_input.op.inputs[0].op.name: ov.mask for ov in op_vars}   # variable name -> mask
        assert sorted(mask_vars) == sorted(layer.graph for layer in GRAPH_LAYERS), sorted(mask_vars)
        assert {ov.op.type for ov in op_vars} == GRAPH_OP_TYPES
        set_step = tf1.placeholder(tf.int64, [])
        assign_step = tf1.assign(gs, set_step)
        init = tf1.global_variables_initializer()
    history = []
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        feed = {ph[k]: value for k, value in probe.items() if k != "tokens"}
        assert_close_outputs(sess.run(out, feed), torch_outputs(source, probe), "TF graph")
        for step in range(STEPS):
            sess.run(assign_step, {set_step: step})
            sess.run(update)
            masks = pruning.get_masks(sess) if api == "prune_graph" else sess.run(mask_vars)
            history.append({layer.name: graph_view(layer, masks[layer.graph] != 0) for layer in GRAPH_LAYERS})
        values = sess.run({layer.name: var[layer.name] for layer in GRAPH_LAYERS})
    final = {layer.name: graph_view(layer, values[layer.name]) for layer in GRAPH_LAYERS}
    return history, final


# ----- one parity check -----------------------------------------------------------------------

RUNNERS: dict[str, Callable[[dict], tuple]] = {
    "torch": torch_history,
    # the quicker fit mode of each Keras (eager tf-keras, compiled Keras 3), the other one for "1x1"
    "tf_keras": lambda cfg: keras_history(cfg, "tf_keras", run_eagerly=cfg["pattern"] != "1x1"),
    "keras3": lambda cfg: keras_history(cfg, "keras3", run_eagerly=cfg["pattern"] == "1x1"),
    "tf_graph": graph_history,
    "tf_seed_api": lambda cfg: graph_history(cfg, "seed"),
}


def check_parity(framework: str, pattern: str, scope: str) -> None:
    """Run one framework on the zoo and compare every mask at every step with the reference, and
    the final weights with the original weights times the reference's final masks."""
    cfg = config(pattern, scope)
    layers = {"torch": LAYERS, "tf_graph": GRAPH_LAYERS, "tf_seed_api": GRAPH_LAYERS}.get(framework, KERAS_LAYERS)
    expected = expected_history(cfg, layers)
    recorded, final = RUNNERS[framework](cfg)
    assert_same_history(recorded, expected, f"{framework} {pattern} {scope}")
    assert_weights_masked(views(torch_zoo(), layers), final, expected[-1], f"{framework} {pattern} {scope}")


#: Configs beyond the masks' default path, run by both Kerases on the zoo (tf-keras and Keras 3 must agree): the
#: straight-through gradient (the masks at learning rate 0 are the reference's) and a per-step criterion.
KERAS_VARIANTS = {"straight_through": {"pruned_gradient": "straight_through", "pruned_decay": 1e-3},
                  "snip": {"criterion": "snip"}}


def check_keras_variant(variant: str, pattern: str, scope: str) -> None:
    """tf-keras and Keras 3 run ``variant`` on the zoo: every mask at every step the same in both (bit for bit);
    with straight-through (the weights fixed at learning rate 0) also the reference's at every step."""
    cfg = {**config(pattern, scope), **KERAS_VARIANTS[variant]}
    tf_keras_masks, tf_keras_final = keras_history(cfg, "tf_keras")
    keras3_masks, _ = keras_history(cfg, "keras3", run_eagerly=False)
    assert_same_history(tf_keras_masks, keras3_masks, f"tf_keras vs keras3 {variant} {pattern} {scope}")
    pruned = [sum(int((~m).sum()) for m in h.values()) for h in tf_keras_masks]
    assert pruned[0] == 0 < pruned[1] < pruned[7] == pruned[8], pruned        # the schedule ran
    if variant == "straight_through":
        expected = expected_history(cfg, KERAS_LAYERS)
        assert_same_history(tf_keras_masks, expected, f"tf_keras {variant} {pattern} {scope}")
        assert_weights_masked(views(torch_zoo(), KERAS_LAYERS), tf_keras_final, expected[-1], f"tf_keras {variant}")

