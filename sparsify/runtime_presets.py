"""Pruning presets for the runtime a model is deployed on: which layers, which pattern pays there.

A runtime speeds up a pruned model only for the layers and layouts its sparse
kernels take. :func:`runtime_config` builds a :class:`PruningConfig` that prunes
exactly those, from the model's weight names and canonical shapes (torch:
``{n: p.shape for n, p in model.named_parameters()}``; Keras:
``{w.path: w.canonical_shape for w in sparsify_keras.find_prunable_weights(model)}``):

* ``"xnnpack"`` (TFLite with XNNPACK's sparse inference, Fast Sparse ConvNets):
  only 1x1 convolutions (canonical ``(out, in, 1, 1)``, ``in > 1``), in blocks
  of 4 output channels (pattern ``"4x1"``: XNNPACK then runs its 4-channel
  kernel), and at least 2/3 of those weights zero, else XNNPACK stays dense.
* ``"torch-csr"``: Linear weights (2-D) and 1x1 convolutions, unstructured
  (``"1x1"``), for :func:`sparsify_torch.to_sparse_inference` with ``layout="csr"``.
* ``"torch-bsr"``: the same layers in square blocks (``"16x16"``; pass
  ``pattern="8x8"`` etc. to change), for ``layout="bsr", blocksize=16``.
* ``"onnx"``: every weight of 2 or more dimensions, unstructured: ONNX sparse
  initializers shrink the file (onnxruntime computes dense).

Pass the shapes of the layers you mean: a 2-D embedding looks like a Linear
weight. Which sparsity pays on which runtime is measured by
``bench/bench_deploy.py`` (docs/export.md).

Example:
    >>> shapes = {"stem.weight": (32, 3, 3, 3), "pw.weight": (64, 32, 1, 1), "pw.bias": (64,), "fc.weight": (10, 64)}
    >>> cfg = runtime_config("xnnpack", shapes, target_sparsity=0.8)
    >>> cfg.pattern, cfg.op_names
    ('4x1', ['^pw\\\\.weight$'])
    >>> runtime_layers("xnnpack", shapes)["fc.weight"]
    'not a 1x1 convolution (canonical shape (10, 64))'
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .config import PruningConfig

__all__ = ["RuntimePreset", "RUNTIME_PRESETS", "runtime_layers", "runtime_config"]


def _is_1x1_conv(shape: tuple[int, ...]) -> str | None:
    if len(shape) != 4 or tuple(shape[2:]) != (1, 1):
        return f"not a 1x1 convolution (canonical shape {tuple(shape)})"
    if shape[1] < 2:
        return f"one input channel per group (canonical shape {tuple(shape)}): a depthwise or grouped convolution"
    return None


def _matmul_layer(shape: tuple[int, ...]) -> str | None:
    if len(shape) == 2:
        return None
    if _is_1x1_conv(shape) is None:
        return None
    return f"neither a Linear (2-D) weight nor a 1x1 convolution (canonical shape {tuple(shape)})"


def _any_matrix(shape: tuple[int, ...]) -> str | None:
    return None if len(shape) >= 2 else f"a {len(shape)}-D tensor (biases and norms stay dense)"


@dataclass(frozen=True)
class RuntimePreset:
    """What one runtime's sparse kernels take."""

    pattern: str
    layer_rule: Callable[[tuple[int, ...]], str | None]
    layers: str
    min_target: float = 0.0
    block_rows: int = 1


RUNTIME_PRESETS: dict[str, RuntimePreset] = {
    "xnnpack": RuntimePreset("4x1", _is_1x1_conv, "1x1 convolutions", min_target=2 / 3, block_rows=4),
    "torch-csr": RuntimePreset("1x1", _matmul_layer, "Linear weights and 1x1 convolutions"),
    "torch-bsr": RuntimePreset("16x16", _matmul_layer, "Linear weights and 1x1 convolutions"),
    "onnx": RuntimePreset("1x1", _any_matrix, "every weight of 2 or more dimensions"),
}


def _preset(runtime: Any) -> RuntimePreset:
    if runtime not in RUNTIME_PRESETS:
        raise ValueError(f"runtime must be one of {tuple(RUNTIME_PRESETS)}, got {runtime!r}")
    return RUNTIME_PRESETS[runtime]


def _shapes(shapes: Any) -> dict[str, tuple[int, ...]]:
    if not isinstance(shapes, Mapping) or not shapes:
        raise TypeError(f"shapes must be a non-empty mapping of weight name to canonical shape, got "
                        f"{type(shapes).__name__}")
    return {str(n): tuple(int(d) for d in s) for n, s in shapes.items()}


def runtime_layers(runtime: str, shapes: Mapping[str, Sequence[int]]) -> dict[str, str | None]:
    """Each weight: None if ``runtime`` runs it sparse, else why not (see the module docstring)."""
    preset = _preset(runtime)
    return {n: preset.layer_rule(s) for n, s in _shapes(shapes).items()}


def runtime_config(runtime: str, shapes: Mapping[str, Sequence[int]], **overrides: Any) -> PruningConfig:
    """A :class:`PruningConfig` pruning what ``runtime`` runs sparse, in its pattern; ``overrides`` win.

    Raises:
        ValueError: an unknown runtime, no weight the runtime takes, a ``target_sparsity`` below what the
            runtime needs (XNNPACK: 2/3), or ``op_names`` in ``overrides`` (the preset selects the layers).
        TypeError: ``shapes`` is not a non-empty mapping.
    """
    preset = _preset(runtime)
    if "op_names" in overrides:
        raise ValueError("op_names is chosen by the runtime preset; use excluded_op_names to leave layers out")
    layers = runtime_layers(runtime, shapes)
    names = [n for n, why in layers.items() if why is None]
    if not names:
        raise ValueError(f"runtime {runtime!r} takes {preset.layers}, and none of the weights is one: {layers}")
    target = overrides.get("target_sparsity")
    if target is not None and preset.min_target and target < preset.min_target:
        raise ValueError(f"target_sparsity {target} is below {preset.min_target:.3f}: {runtime} runs sparse only "
                         f"when at least that fraction of the {preset.layers}' weights is zero")
    settings = {"pattern": preset.pattern, "op_names": [f"^{re.escape(n)}$" for n in names], **overrides}
    if preset.block_rows > 1 and settings["pattern"] == preset.pattern:
        shp = _shapes(shapes)
        if any(shp[n][0] % preset.block_rows for n in names):
            settings.setdefault("skip_incompatible_layers", True)
    return PruningConfig.from_dict(settings)
