"""One-shot Wanda and SparseGPT on a keras_hub causal LM (GPT-2 from a small config) give torch's masks for the same
weights and the same layer inputs.

The attention projections of keras_hub are EinsumDense layers inside subclassed layers: their inputs are not in the
model's graph, so ``sparsify_keras.prune_oneshot`` records them while the model runs, and reads an EinsumDense kernel
``(in, heads, head_dim)`` / ``(heads, head_dim, out)`` as the canonical ``(out, in)`` matrix. Here the inputs of every
pruned layer are read independently (the layer classes' ``call`` wrapped by the test) and handed to
``sparsify_torch.prune_oneshot`` on one ``nn.Linear`` per pruned kernel holding its canonical weight; the masks must be
equal (and SparseGPT's updated weights equal within float32 rounding). SparseGPT runs with ``sequential=False`` on both
sides (each layer's inputs from the unpruned model, which the torch side is handed).
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow          # keras_hub's import and the model's build take several seconds

keras_hub = pytest.importorskip("keras_hub")
torch = pytest.importorskip("torch")

import keras  # noqa: E402

import sparsify_torch  # noqa: E402
from sparsify_keras import find_prunable_weights, prune_oneshot  # noqa: E402

EXCLUDED = ["embedding"]


def _gpt2():
    keras.utils.set_random_seed(0)
    bb = keras_hub.models.GPT2Backbone(vocabulary_size=64, num_layers=2, num_heads=2, hidden_dim=32,
                                       intermediate_dim=64, max_sequence_length=32, dropout=0.0)
    return keras_hub.models.GPT2CausalLM(backbone=bb, preprocessor=None)


def _batches():
    rng = np.random.default_rng(0)
    return [{"token_ids": rng.integers(0, 64, (4, 16)).astype("int32"), "padding_mask": np.ones((4, 16), "int32")}
            for _ in range(3)]


def _pruned(model):
    return [pw for pw in find_prunable_weights(model) if not any(e in pw.path for e in EXCLUDED)]


def _layer_inputs(model, pws, batches):
    """Per batch, per pruned weight: its layer's input as ``(rows, canonical in)``, read by wrapping the classes'
    ``call`` (Dense and EinsumDense) while the model runs."""
    seen: dict[int, list] = {}
    originals = {cls: cls.call for cls in (keras.layers.Dense, keras.layers.EinsumDense)}

    def wrap(cls):
        def call(self, inputs, *args, **kwargs):
            seen.setdefault(id(self), []).append(np.asarray(keras.ops.convert_to_numpy(inputs)))
            return originals[cls](self, inputs, *args, **kwargs)
        return call

    out = []
    try:
        for cls in originals:
            cls.call = wrap(cls)
        for x in batches:
            seen.clear()
            model(x, training=False)
            out.append([np.concatenate([a.reshape(-1, pw.canonical_shape[1]) for a in seen[id(pw.layer)]])
                        for pw in pws])
    finally:
        for cls, fn in originals.items():
            cls.call = fn
    return out


def _torch_twin(pws):
    """One bias-free ``nn.Linear`` per pruned kernel, holding its canonical ``(out, in)`` weight."""
    lins = torch.nn.ModuleList()
    for pw in pws:
        w = pw.to_canonical(np.asarray(pw.variable.numpy()))
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w)))
        lins.append(lin)
    return lins


def _run_each(lins, batch):
    for lin, x in zip(lins, batch):
        lin(x)


@pytest.mark.parametrize("method, cfg", [
    ("criterion", {"target_sparsity": 0.5, "criterion": "wanda"}),
    ("criterion", {"target_sparsity": 0.5, "criterion": "wanda", "pattern": "2:4"}),
    ("sparsegpt", {"target_sparsity": 0.5, "pattern": "2:4"}),
    ("sparsegpt", {"target_sparsity": 0.6}),
])
def test_gpt2_oneshot_masks_equal_torch_s(method, cfg):
    model, batches = _gpt2(), _batches()
    pws = _pruned(model)
    assert len(pws) == 12 and sum(pw.kind == "einsum" for pw in pws) == 8       # q, k, v, output per block
    inputs = _layer_inputs(model, pws, batches)
    lins = _torch_twin(pws)
    options = {"block_size": 8, "sequential": False} if method == "sparsegpt" else {}
    sparsify_torch.prune_oneshot(lins, cfg, [[torch.from_numpy(a) for a in b] for b in inputs], forward=_run_each,
                                 method=method, **options)
    prune_oneshot(model, {**cfg, "excluded_op_names": EXCLUDED}, batches, method=method, **options)
    for pw, lin in zip(pws, lins):
        tw = lin.weight.detach().numpy()
        kw = pw.to_canonical(np.asarray(pw.variable.numpy()))
        np.testing.assert_array_equal(kw == 0, tw == 0, err_msg=pw.path)
        np.testing.assert_allclose(kw, tw, rtol=1e-4, atol=1e-5, err_msg=pw.path)
        if cfg.get("pattern") == "2:4":
            assert ((kw == 0).reshape(kw.shape[0], -1, 4).sum(-1) == 2).all(), pw.path
        else:
            assert int((kw == 0).sum()) == round(cfg["target_sparsity"] * kw.size), pw.path


def test_sequential_sparsegpt_reads_each_layer_after_the_earlier_ones_are_pruned():
    """``sequential=True`` (the default): the inputs of block 1 come from the model whose block 0 is pruned, so the
    masks differ from ``sequential=False``'s there, and block 0's are the same (same inputs)."""
    runs = {}
    for sequential in (True, False):
        model = _gpt2()
        prune_oneshot(model, {"target_sparsity": 0.5, "pattern": "2:4", "excluded_op_names": EXCLUDED}, _batches(),
                      method="sparsegpt", block_size=8, sequential=sequential)
        runs[sequential] = {pw.path.split("/", 1)[1]: np.asarray(pw.variable.numpy()) == 0 for pw in _pruned(model)}
    first = "transformer_layer_0/self_attention/query/kernel"
    np.testing.assert_array_equal(runs[True][first], runs[False][first])
    assert any(not np.array_equal(runs[True][k], runs[False][k]) for k in runs[True] if "layer_1" in k)


def test_a_layer_the_model_never_calls_is_named():
    model = _gpt2()
    extra = keras.layers.Dense(4, name="never_called")
    extra.build((None, 32))
    model.backbone._sparsify_unused = extra           # tracked below the backbone, never called by it
    with pytest.raises(ValueError, match=r"layers \['never_called'\] were not called"):
        prune_oneshot(model, {"target_sparsity": 0.5, "criterion": "wanda", "op_names": ["never_called"]},
                      _batches())
