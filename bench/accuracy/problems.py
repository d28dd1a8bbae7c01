"""What one accuracy run trains: data sets, architectures, initial weights, batch order, settings and arms.

Everything framework-independent lives here, so torch, tf-keras and Keras 3 (JAX) runs of one seed start
from the same NumPy weights (canonical torch layout) and see the same batches.

Example:
    >>> spec = problem("digits")
    >>> [layer.name for layer in spec.layers(setting("90"))]
    ['l0', 'l1', 'l2']
    >>> init_weights(spec, setting("90"), seed=0)["l2.weight"].shape
    (10, 512)
    >>> setting("2:4").pattern, setting("2:4").target
    ('2:4', 0.5)
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from typing import Any

import numpy as np

__all__ = ["Layer", "Problem", "Setting", "PROBLEMS", "SETTINGS", "SPARSIFY_ARMS", "PEER_ARMS", "problem",
           "setting", "init_weights", "batch_order", "load_data", "selected_layers", "schedule", "fits",
           "sparsify_config", "summarize"]


@dataclasses.dataclass(frozen=True)
class Layer:
    """One conv/linear layer in torch terms: ``kind`` is conv1d, conv2d or linear."""

    name: str
    kind: str
    cin: int
    cout: int
    kernel: int = 1
    stride: int = 1
    padding: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        """Canonical (torch) weight shape."""
        if self.kind == "linear":
            return (self.cout, self.cin)
        return (self.cout, self.cin) + (self.kernel,) * (1 if self.kind == "conv1d" else 2)

    @property
    def view(self) -> tuple[int, int]:
        """The 2-D view patterns work on: ``(out, prod(kernel) * in)``, input channel fastest."""
        return (self.shape[0], int(np.prod(self.shape[1:])))


@dataclasses.dataclass(frozen=True)
class Setting:
    """A sparsity setting: ``target`` sparsity of the ``pattern`` (N:M targets are N/M)."""

    name: str
    target: float
    pattern: str = "1x1"

    @property
    def structured(self) -> bool:
        return self.pattern != "1x1"


@dataclasses.dataclass(frozen=True)
class Problem:
    """A data set, its CNN and its training recipe (Adam, fixed batch, gradual cubic schedule)."""

    name: str
    title: str
    lr: float
    batch: int
    steps: int
    start: int
    end: int
    frequency: int
    channels: int = 0             # MNIST-1D: conv width (25 in the paper; 32 where a pattern needs it)
    structured_channels: int = 0

    def width(self, s: Setting) -> int:
        return self.structured_channels if s.structured and self.structured_channels else self.channels

    def variant(self, s: Setting) -> str:
        """Name of the model variant a setting trains (the dense arm runs once per variant)."""
        return "base" if self.width(s) == self.channels else f"{self.width(s)}ch"

    def layers(self, s: Setting) -> list[Layer]:
        if self.name == "mnist1d":
            c = self.width(s)
            return [Layer("l0", "conv1d", 1, c, 5, 2, 1), Layer("l1", "conv1d", c, c, 3, 2, 1),
                    Layer("l2", "conv1d", c, c, 3, 2, 1), Layer("l3", "linear", 5 * c, 10)]
        return [Layer("l0", "conv2d", 1, 16, 3, 1, 1), Layer("l1", "conv2d", 16, 32, 3, 2, 1),
                Layer("l2", "linear", 32 * 16, 10)]

    def scaled(self, steps: int) -> "Problem":
        """The same recipe over ``steps`` steps (schedule window and frequency scaled alike)."""
        f = steps / self.steps
        return dataclasses.replace(self, steps=steps, start=int(self.start * f), end=max(int(self.end * f), 1),
                                   frequency=max(int(round(self.frequency * f)), 1))


PROBLEMS = {
    "mnist1d": Problem("mnist1d", "MNIST-1D CNN (conv 5/3/3 stride 2, linear to 10)", lr=1e-2, batch=100,
                       steps=6000, start=1200, end=4200, frequency=50, channels=25, structured_channels=32),
    "digits": Problem("digits", "digits CNN (conv 16, conv 32 stride 2, linear to 10)", lr=2e-3, batch=32,
                      steps=1000, start=200, end=700, frequency=20),
}
SETTINGS = {"80": Setting("80", 0.8), "90": Setting("90", 0.9), "95": Setting("95", 0.95),
            "4x1": Setting("4x1", 0.9, "4x1"), "2:4": Setting("2:4", 0.5, "2:4")}
#: sparsify arms: name -> config overrides on top of the base schedule (passed through unchanged).
SPARSIFY_ARMS: dict[str, dict[str, Any]] = {
    "default": {}, "rigl": {"regrowth": "rigl"}, "set": {"regrowth": "set"}, "nonmonotone": {"monotone": False},
    "wanda": {"criterion": "wanda"}, "ste": {"pruned_gradient": "straight_through"},
    # SR-STE: straight-through + the decay of pruned weights, masks every step (tuned on seeds 1000-1003)
    "sr_ste": {"pruned_gradient": "straight_through", "pruned_decay": 6e-4, "pruning_frequency": 1, "monotone": False},
    "global": {"pruning_scope": "global"}, "global_nm": {"pruning_scope": "global", "monotone": False},
    "global_rigl": {"pruning_scope": "global", "regrowth": "rigl"}, "erk": {"pruning_scope": "erk"},
    "erk_rigl": {"pruning_scope": "erk", "regrowth": "rigl"}, "erk_nm": {"pruning_scope": "erk", "monotone": False},
    "erk_wanda": {"pruning_scope": "erk", "criterion": "wanda"},
    # the best arm at 90/95 %, taught by the trained dense model of the seed (torch only)
    "erk_wanda_kd": {"pruning_scope": "erk", "criterion": "wanda",
                     "distillation": {"temperature": 2.0, "weight": 1.0}}}
#: peer arms and the framework each runs in.
PEER_ARMS = {"torch.ao": "torch", "tfmot": "tf_keras"}


def problem(name: str) -> Problem:
    if name not in PROBLEMS:
        raise ValueError(f"--datasets: unknown data set {name!r}; choose from {sorted(PROBLEMS)}")
    return PROBLEMS[name]


def setting(name: str) -> Setting:
    if name not in SETTINGS:
        raise ValueError(f"--settings: unknown setting {name!r}; choose from {list(SETTINGS)}")
    return SETTINGS[name]


def fits(layer: Layer, s: Setting) -> bool:
    """True if the setting's pattern divides the layer's 2-D view (always for unstructured)."""
    rows, cols = layer.view
    if s.pattern == "4x1":
        return rows % 4 == 0
    if s.pattern == "2:4":
        return cols % 4 == 0
    return True


def selected_layers(spec: Problem, s: Setting) -> list[str]:
    """Layers every arm prunes: all of them, or those the pattern fits (the rest stay dense for every arm)."""
    return [layer.name for layer in spec.layers(s) if fits(layer, s)]


def schedule(spec: Problem, s: Setting):
    """The core's gradual cubic schedule of a run (the peers are driven by the same update steps and values)."""
    from sparsify import GradualSchedule

    return GradualSchedule(0.0, s.target, spec.start, spec.end, spec.frequency, 3.0)


def init_weights(spec: Problem, s: Setting, seed: int) -> dict[str, np.ndarray]:
    """Torch-default-like uniform(+-1/sqrt(fan_in)) weights and biases in canonical layout, float32."""
    rng = np.random.default_rng(seed)
    out = {}
    for layer in spec.layers(s):
        bound = 1.0 / math.sqrt(int(np.prod(layer.shape[1:])))
        out[f"{layer.name}.weight"] = rng.uniform(-bound, bound, layer.shape).astype(np.float32)
        out[f"{layer.name}.bias"] = rng.uniform(-bound, bound, layer.cout).astype(np.float32)
    return out


def batch_order(spec: Problem, n_train: int, seed: int) -> np.ndarray:
    """``(steps, batch)`` training indices: per-epoch permutations, the last partial batch dropped."""
    rng = np.random.RandomState(10_000 + seed)
    per_epoch = n_train // spec.batch
    epochs = -(-spec.steps // per_epoch)
    idx = np.concatenate([rng.permutation(n_train)[:per_epoch * spec.batch] for _ in range(epochs)])
    return idx.reshape(-1, spec.batch)[:spec.steps].astype(np.int64)


@functools.lru_cache(maxsize=None)
def load_data(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test), float32 inputs of shape (n, 40) or (n, 8, 8); built offline."""
    if name == "mnist1d":
        from mnist1d.data import get_dataset_args, make_dataset

        d = make_dataset(get_dataset_args())    # built from code, never downloaded
        return (d["x"].astype(np.float32), d["y"].astype(np.int64), d["x_test"].astype(np.float32),
                d["y_test"].astype(np.int64))
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32).reshape(-1, 8, 8)
    y = d.target.astype(np.int64)
    p = np.random.RandomState(0).permutation(len(x))
    x, y = x[p], y[p]
    return x[:1408], y[:1408], x[1408:], y[1408:]


def sparsify_config(spec: Problem, s: Setting, overrides: dict[str, Any]) -> dict[str, Any]:
    """Base config of a sparsify run (every conv/linear weight the pattern fits), ``overrides`` on top.

    Example:
        >>> sparsify_config(problem("mnist1d"), setting("90"), {"monotone": False})["monotone"]
        False
    """
    base: dict[str, Any] = {"target_sparsity": s.target, "pattern": s.pattern, "start_step": spec.start, "end_step": spec.end,
            "pruning_frequency": spec.frequency, "sparsity_decay_type": "gradual", "exponent": 3.0,
            "skip_incompatible_layers": s.structured}
    return {**base, **overrides}


def summarize(weights: dict[str, np.ndarray], spec: Problem, s: Setting, acc: float, seconds: float,
              cpu_seconds: float) -> dict:
    """A run's record from its final canonical weights: sparsity over the selected layers, layers pruned,
    training wall and process CPU seconds, and ``mask_digest`` (SHA-1 of the selected layers' nonzero
    patterns, canonical layout: equal digests, equal masks across frameworks).

    Example:
        >>> w = {"l0": np.zeros((4, 4)), "l1": np.ones((4, 4)), "l2": np.ones((2, 2))}
        >>> summarize(w, problem("digits"), setting("90"), 0.5, 1.0, 1.0)["pruned_layers"]
        ['l0']
    """
    chosen = selected_layers(spec, s)
    zeros = sum(int((weights[n] == 0).sum()) for n in chosen)
    size = sum(weights[n].size for n in chosen)
    pruned = sorted(n for n, w in weights.items() if (w == 0).mean() > 0.25)
    digest = hashlib.sha1(b"".join(np.packbits(np.asarray(weights[n]) != 0).tobytes() for n in chosen))
    return {"status": "ok", "accuracy": float(acc), "sparsity": zeros / size, "pruned_layers": pruned,
            "seconds": float(seconds), "cpu_seconds": float(cpu_seconds), "mask_digest": digest.hexdigest()[:16]}
