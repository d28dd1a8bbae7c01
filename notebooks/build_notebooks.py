"""Generate the tutorial notebooks from the cell sources below, run them, and save them with their outputs.

Run ``python notebooks/build_notebooks.py`` after editing a notebook's cells
here: it writes each notebook, executes it in a fresh ``python3`` kernel (in
a temporary directory, so the files the notebooks write stay out of the
repository) and saves it with the outputs of that real run, figures
included. ``--no-execute`` writes the cells only. ``tests/test_notebooks.py``
checks the committed ``.ipynb`` files hold these cells and outputs (an image
for every plot cell, no TensorFlow start-up noise, no deprecation warnings),
then executes them again.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
#: Cells of this kind end with a plot call; their output must hold an image.
PLOT = "plot"
#: Seconds one cell may run.
CELL_TIMEOUT = 600

#: Importing TensorFlow prints native start-up lines (absl, CUDA probes) on stderr that no environment
#: variable hides; this helper imports it with them silenced.
TF_IMPORT = """\
from sparsify.cli.frameworks import import_tensorflow
tf = import_tensorflow()          # `import tensorflow as tf`, without its native start-up lines on stderr"""

SETUP = """\
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
from sparsify.cli.demo.data import load_digits_split, batch_indices
data = load_digits_split(seed=0)      # scikit-learn's bundled 8x8 digits, no download
print(data.x_train.shape, data.x_test.shape)"""

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {}

# ------------------------------------------------------------------------------------------------
NOTEBOOKS["01_tf_graph_seed_api.ipynb"] = [
    ("md", """\
# 1. Pruning a `tf.compat.v1` graph with the seed API, then exporting an inference graph

The seed functions (`get_or_create_ks_scheduled_graph_ops`, `apply_op_vars_masks`, ...) work on
TensorFlow 2.x graphs in `tf.compat.v1` mode. The masks are computed by the framework-neutral core,
so the same weights give the same masks in Keras and PyTorch."""),
    ("code", SETUP),
    ("code", TF_IMPORT + """
import sparsify_tf
tf1 = tf.compat.v1

g = tf.Graph()
with g.as_default():
    tf1.set_random_seed(0)
    x = tf1.placeholder(tf.float32, [None, 64], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    h, kernels = x, {}
    for name, (n_in, n_out) in [("fc1", (64, 128)), ("fc2", (128, 10))]:
        with tf1.variable_scope(name):
            kernel = tf1.get_variable("kernel", [n_in, n_out], initializer=tf1.glorot_uniform_initializer(seed=1))
            bias = tf1.get_variable("bias", [n_out], initializer=tf1.zeros_initializer())
        kernels[name] = kernel
        h = tf.matmul(h, kernel) + bias
        if name == "fc1":
            h = tf.nn.relu(h)
    logits = tf.identity(h, name="logits")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    global_step = tf1.train.get_or_create_global_step()

    # The seed API: schedule ops, masks for the matched weights and one grouped update op.
    # mask_creator takes any core pattern: here blocks of 1 row x 4 columns of the (out, in) view.
    update_op, op_vars, update_ready, sparsity = sparsify_tf.get_or_create_ks_scheduled_graph_ops(
        g, global_step, var_names=["fc1/kernel", "fc2/kernel"], begin_step=0, end_step=120,
        update_step_freq=20, init_sparsity=0.0, final_sparsity=0.8, exponent=3.0,
        leave_enabled=True, ks_group="tutorial", mask_creator="1x4")
    summaries = sparsify_tf.create_summaries_pruning(op_vars)     # one TensorBoard scalar per op
    # the optimizer is built after the masks, so pruned weights get zero gradients
    train_op = tf1.train.AdamOptimizer(0.01).minimize(loss, global_step=global_step)
    init = tf1.global_variables_initializer()
print([ov.op.name for ov in op_vars])"""),
    ("code", """\
sess = tf1.Session(graph=g)
sess.run(init)
for idx in batch_indices(len(data.x_train), 64, 150, seed=0):
    sess.run(train_op, {x: data.x_train[idx], y: data.y_train[idx]})
    sess.run(update_op)                       # no-op except at the schedule's update points
masks = sess.run([ov.mask for ov in op_vars])
print("step", sess.run(global_step), "target", round(float(sess.run(sparsity)), 4))
print("mask sparsity per op:", [round(1 - float(m.mean()), 4) for m in masks])
print("test accuracy", sess.run(accuracy, {x: data.x_test, y: data.y_test}))
assert all(abs((1 - m.mean()) - 0.8) < 1e-3 for m in masks)"""),
    ("code", """\
# bake the masks into the weights, then export a frozen inference graph: no mask variables, no update ops
sparsify_tf.apply_op_vars_masks(op_vars, "tutorial", sess)
frozen = sparsify_tf.export_frozen_graph(sess, [logits])
print(sorted({n.op for n in frozen.node}))
assert not any("mask" in n.name.lower() for n in frozen.node)

g2 = tf.Graph()
with g2.as_default():
    tf.import_graph_def(frozen, name="")
    with tf1.Session(graph=g2) as s2:
        exported = s2.run("logits:0", {"x:0": data.x_test})
original = sess.run(logits, {x: data.x_test})
print("max |difference| between training and exported graph:", float(np.abs(exported - original).max()))
assert np.allclose(exported, original, atol=1e-5)"""),
    (PLOT, """\
from sparsify.layout import tf_to_canonical
from sparsify.cli.plots import plot_mask
fc1 = sess.run(kernels["fc1"])                 # TF layout (in, out); the core's layout is (out, in)
plot_mask(tf_to_canonical(fc1, "dense") != 0, name="fc1 (1x4 blocks)")"""),
]

# ------------------------------------------------------------------------------------------------
NOTEBOOKS["02_keras_callback.ipynb"] = [
    ("md", """\
# 2. The Keras callback under tf-keras (Keras 2) and Keras 3

`PruningCallback` follows the schedule by `optimizer.iterations` and keeps pruned weights (and their
optimizer slots) at zero after every step. The same code runs with `tf_keras` and with `keras` 3;
the model decides which one is used."""),
    ("code", SETUP),
    ("code", TF_IMPORT + """
import keras, tf_keras
from sparsify import PruningConfig
from sparsify_tf.keras import PruningCallback, strip_pruning

config = PruningConfig(target_sparsity=0.75, pattern="1x1", start_step=0, end_step=60,
                       pruning_frequency=10)

def train(K):
    K.utils.set_random_seed(0)
    model = K.Sequential([K.Input((64,)), K.layers.Dense(64, activation="relu", name="fc1"),
                          K.layers.Dense(10, name="out")])
    model.compile(K.optimizers.Adam(0.01), K.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    cb = PruningCallback(config)
    hist = model.fit(data.x_train, data.y_train, batch_size=64, epochs=4, verbose=0, callbacks=[cb])
    acc = model.evaluate(data.x_test, data.y_test, verbose=0)[1]
    model = strip_pruning(model)
    kernels = {l.name: l.kernel.numpy() for l in model.layers}
    return cb, hist, acc, kernels

results = {}
for name, K in [("tf-keras", tf_keras), ("keras 3", keras)]:
    cb, hist, acc, kernels = train(K)
    results[name] = kernels
    print(f"{name:9s} {K.__version__:8s} sparsity {cb.sparsity}  accuracy {acc:.3f}")
    print("          sparsity logged per epoch (History):", [round(v, 3) for v in hist.history.get("sparsity", [])])"""),
    ("code", """\
for name, kernels in results.items():
    for layer, k in kernels.items():
        assert abs((k == 0).mean() - 0.75) < 1e-3, (name, layer)
print("both flavours: every kernel exactly 75% zeros")"""),
    (PLOT, """\
from sparsify.cli.plots import plot_layer_sparsity
plot_layer_sparsity({f"{n}: {l}": float((k == 0).mean()) for n, ks in results.items() for l, k in ks.items()},
                    target=0.75)"""),
]

# ------------------------------------------------------------------------------------------------
NOTEBOOKS["03_torch_parametrizations_parity.ipynb"] = [
    ("md", """\
# 3. PyTorch mask parametrizations, and TF <-> torch parity

`sparsify_torch.prune(model, config)` registers a mask parametrization (a buffer updated in place) on
every selected weight and returns a `Pruner`; call `pruner.step()` once per optimizer step. Because
TensorFlow and PyTorch both hand the core canonical-layout weights, the same weights give the
**same masks, bit for bit**."""),
    ("code", SETUP),
    ("code", """\
import torch
import sparsify_torch
from sparsify import PruningConfig
torch.manual_seed(0)

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
config = PruningConfig(target_sparsity=0.5, pattern="2:4", start_step=0, end_step=50, pruning_frequency=10)
pruner = sparsify_torch.prune(model, config, log_dir="runs/torch_tb")   # TensorBoard scalars, as Keras' log_dir=
print(model[0])                                  # a ParametrizedLinear holding a MaskParametrization
opt = torch.optim.Adam(model.parameters(), lr=0.01)
x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
for idx in batch_indices(len(x), 64, 80, seed=0):
    loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
    opt.zero_grad(); loss.backward(); opt.step()
    pruner.step()
print(pruner, pruner.sparsity())
with torch.no_grad():
    acc = (model(torch.from_numpy(data.x_test)).argmax(1) == torch.from_numpy(data.y_test)).float().mean()
print("test accuracy", float(acc))
assert all(s == 0.5 for s in pruner.sparsity().values())"""),
    ("code", """\
# every group of 4 consecutive weights keeps exactly 2
w = model[0].weight.detach().numpy()
print((w.reshape(64, -1, 4) != 0).sum(-1).min(), (w.reshape(64, -1, 4) != 0).sum(-1).max())
pruner.remove()                                   # bake the masks into plain parameters
torch.save(model.state_dict(), "pruned_torch.pt")
from sparsify.cli import main as sparsify_command        # the `sparsify` command, in-process
assert sparsify_command(["report", "pruned_torch.pt", "--pattern", "2:4"]) == 0"""),
    ("code", """\
# what TensorBoard shows (`tensorboard --logdir runs/torch_tb`): sparsity/total and one scalar per weight
from sparsify_torch.tensorboard import read_scalars
for tag, points in read_scalars("runs/torch_tb").items():
    print(f"{tag:14s}", points)"""),
    ("code", """\
# ship it: a compressed state_dict (packed bitmask + values), dense vs sparse bytes, and the 2:4 check
# torch.sparse.to_sparse_semi_structured needs (here without a GPU)
assert sparsify_command(["export", "pruned_torch.pt", "--out", "pruned_torch.sparse.pt", "--overwrite"]) == 0
from sparsify_torch.export import load_compressed_state_dict
fresh = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
fresh.load_state_dict(load_compressed_state_dict("pruned_torch.sparse.pt"))
assert torch.equal(fresh(x[:8]), model(x[:8]))"""),
    (PLOT, """\
from sparsify.cli.plots import plot_schedule
plot_schedule(config, steps=80)"""),
    ("md", """\
## Parity with the TensorFlow graph path

Load the same dense weights into a `tf.compat.v1` graph (Dense kernels are `(in, out)`, the transpose
of torch's `(out, in)`), prune both with the same one-shot config for several patterns and compare."""),
    ("code", TF_IMPORT + """
import sparsify_tf
tf1 = tf.compat.v1

def torch_masks(weights, cfg):
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    with torch.no_grad():
        net[0].weight.copy_(torch.from_numpy(weights[0])); net[2].weight.copy_(torch.from_numpy(weights[1]))
    p = sparsify_torch.prune(net, cfg)
    return [m.numpy() for m in p.masks().values()]

def tf_masks(weights, cfg):
    g = tf.Graph()
    with g.as_default():
        h = tf1.placeholder(tf.float32, [None, 64])
        for i, w in enumerate(weights):
            k = tf1.get_variable(f"fc{i}/kernel", initializer=w.T.copy())
            h = tf.matmul(h, k)
        pruning = sparsify_tf.prune_graph(cfg)
        with tf1.Session(graph=g) as s:
            s.run(tf1.global_variables_initializer()); s.run(pruning.update_op)
            return list(pruning.get_masks(s, canonical=True).values())

rng = np.random.default_rng(0)
weights = [rng.normal(size=(32, 64)).astype(np.float32), rng.normal(size=(16, 32)).astype(np.float32)]
for pattern, sp, scope in [("1x1", 0.9, "local"), ("4x1", 0.75, "local"), ("2:4", 0.5, "local"),
                           ("1xchannel", 0.5, "local"), ("1x1", 0.8, "global")]:
    cfg = PruningConfig(target_sparsity=sp, pattern=pattern, pruning_scope=scope, start_step=0, end_step=0)
    same = all(np.array_equal(a, b) for a, b in zip(torch_masks(weights, cfg), tf_masks(weights, cfg)))
    print(f"{pattern:10s} {scope:6s} {sp:.2f}  identical masks: {same}")
    assert same"""),
]

# ------------------------------------------------------------------------------------------------
NOTEBOOKS["04_structured_channels_torchvision.ipynb"] = [
    ("md", """\
# 4. Structured channel pruning of a torchvision model

Unstructured zeros rarely make a model faster on ordinary hardware; removing whole channels does.
`sparsify_torch.channels` calibrates channel importance with gates (first-order Taylor), selects
the channels to remove and returns a smaller plain `nn.Module`. Random weights (`weights=None`)
and random data keep this offline and quick; use your own model and data loader in practice."""),
    ("code", """\
import time
import torch, torchvision
from sparsify_torch.channels import calibrate_and_prune_model_equal
from sparsify_torch.channels.metrics import count_macs, count_params
torch.manual_seed(0)

model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
images = torch.randn(8, 3, 64, 64)
labels = torch.randint(0, 10, (8,))
loader = [(images[i:i + 4], labels[i:i + 4]) for i in range(0, 8, 4)]     # two calibration batches
loss_fn = lambda out, batch: torch.nn.functional.cross_entropy(out, batch[1])
example = images[:1]
before = {"params": count_params(model), "MACs": count_macs(model, example)}
channels_before = {n: m.out_channels for n, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)}
with torch.no_grad():
    ref = model(example)
print(before)"""),
    ("code", """\
t0 = time.perf_counter()
small = calibrate_and_prune_model_equal(model, loader, loss_fn, pruning_ratio=0.5,
                                        sample_to_model_inputs=lambda batch: ((batch[0],), {}))
print(f"calibrated and pruned in {time.perf_counter() - t0:.1f} s")
after = {"params": count_params(small), "MACs": count_macs(small, example)}
print(after)
print({k: f"{after[k] / before[k]:.2f}x" for k in before})
with torch.no_grad():
    out = small.eval()(example)
assert out.shape == ref.shape and after["MACs"] < before["MACs"] and after["params"] < before["params"]"""),
    ("code", """\
# save the smaller model without pickling code: its state_dict, the new layer widths and the constructor
from sparsify_torch.channels.serialization import save_pruned_model, load_pruned_model
print(small.layer1[0].conv1)
save_pruned_model(small, "resnet18_pruned.pt", "torchvision.models:resnet18", num_classes=10)
print(sorted(torch.load("resnet18_pruned.pt", weights_only=True)))       # tensors, strings and ints only

again = load_pruned_model("resnet18_pruned.pt").eval()      # rebuilds resnet18(num_classes=10), then narrows it
with torch.no_grad():
    assert torch.equal(again(example), small(example))
print("reloaded:", again.layer1[0].conv1, {"params": count_params(again)})
from sparsify.cli.report import build_report                  # `sparsify report resnet18_pruned.pt` reads it too
print(build_report("resnet18_pruned.pt").totals(weights_only=True))"""),
    (PLOT, """\
# the fraction of output channels each convolution lost (the model was pruned in place: `small is model`)
from sparsify.cli.plots import plot_layer_sparsity
channels_after = {n: m.out_channels for n, m in small.named_modules() if isinstance(m, torch.nn.Conv2d)}
plot_layer_sparsity({n: 1 - channels_after[n] / channels_before[n] for n in channels_before}, target=0.5,
                    title="ResNet-18: output channels removed per conv")"""),
]


def _cell(kind: str, src: str):
    if kind == "md":
        return new_markdown_cell(src)
    cell = new_code_cell(src)
    if kind == PLOT:
        cell.metadata["tags"] = [PLOT]
    return cell


def notebook(name: str):
    """The notebook ``name`` built from its cells (no outputs)."""
    nb = new_notebook(cells=[_cell(kind, src) for kind, src in NOTEBOOKS[name]],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                                "language_info": {"name": "python"}})
    for i, cell in enumerate(nb.cells):      # stable ids: regenerating gives identical sources
        cell["id"] = f"{Path(name).stem[:2]}-{i:02d}"
    return nb


def execute(nb, workdir: str | os.PathLike) -> None:
    """Run ``nb`` in place in a fresh ``python3`` kernel whose working directory is ``workdir``.

    The kernel inherits ``TF_CPP_MIN_LOG_LEVEL=2`` and a ``PATH`` that starts
    with this interpreter's directory (its ``sparsify`` command).
    """
    from nbclient import NotebookClient

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                   resources={"metadata": {"path": os.fspath(workdir)}}).execute()


def build(out_dir: Path = HERE, run: bool = True) -> list[Path]:
    """Write every notebook (executed, with its outputs, unless ``run`` is False); returns their paths."""
    paths = []
    for name in NOTEBOOKS:
        nb = notebook(name)
        if run:
            with tempfile.TemporaryDirectory() as work:
                execute(nb, work)
        path = out_dir / name
        nbformat.write(nb, path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--no-execute"]
    for p in build(Path(args[0]) if args else HERE, run="--no-execute" not in sys.argv[1:]):
        print(p)
