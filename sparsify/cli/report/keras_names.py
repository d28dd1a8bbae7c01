"""Layer names for the weights of a Keras 3 ``.keras`` archive: ``fc1/kernel`` for ``layers/dense/vars/0``.

``model.weights.h5`` inside a ``.keras`` file names a layer's weights by the layer's *class*, made unique in
order within its container (``layers/dense``, ``layers/dense_1``, ...), and its variables by position
(``vars/0``, ``vars/1``). The archive's ``config.json`` lists the same layers, in the same order, with the
names the user gave them. :func:`keras_weight_names` pairs the two, the way Keras's own saver walks them
(the class name in snake case, counted per container), and names a variable of a common layer after what it
is (``kernel``, ``bias``, ``gamma``, ...) when the file holds exactly the variables its config implies.
A path it cannot pair keeps its name. Nothing in the file is executed: the config is plain JSON.

Example:
    >>> config = {"class_name": "Sequential", "config": {"layers": [
    ...     {"class_name": "InputLayer", "config": {"name": "input_layer"}},
    ...     {"class_name": "Dense", "config": {"name": "fc1", "use_bias": True}},
    ...     {"class_name": "Dense", "config": {"name": "out", "use_bias": False}}]}}
    >>> names = keras_weight_names(config, ["layers/dense/vars/0", "layers/dense/vars/1", "layers/dense_1/vars/0",
    ...                                     "optimizer/vars/3"])
    >>> for path, name in names.items():
    ...     print(f"{path:22} -> {name}")
    layers/dense/vars/0    -> fc1/kernel
    layers/dense/vars/1    -> fc1/bias
    layers/dense_1/vars/0  -> out/kernel
    optimizer/vars/3       -> optimizer/vars/3
"""
from __future__ import annotations

import re
from typing import Any, Iterable

__all__ = ["keras_weight_names", "snake_case"]


def snake_case(name: str) -> str:
    """Keras's ``to_snake_case`` of a class name (the key its saver gives a layer's weights).

    Example:
        >>> snake_case("Dense"), snake_case("Conv2DTranspose"), snake_case("BatchNormalization")
        ('dense', 'conv2d_transpose', 'batch_normalization')
    """
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _variables(cls: str, cfg: dict[str, Any]) -> list[str] | None:
    """The variables a layer of class ``cls`` with config ``cfg`` holds, in its saving order (None: unknown).

    A kernel whose layout is not that of a plain convolution says so in its name (``depthwise_kernel``,
    ``transpose_kernel``), which is what the report's layout guess reads.
    """
    bias = ["bias"] if cfg.get("use_bias", True) else []
    if cls == "Dense":
        return ["kernel", *bias]
    if re.fullmatch(r"Conv[123]DTranspose", cls):
        return ["transpose_kernel", *bias]
    if re.fullmatch(r"Conv[123]D", cls) or re.fullmatch(r"DepthwiseConv[12]D", cls):
        return ["depthwise_kernel" if cls.startswith("Depthwise") else "kernel", *bias]
    if re.fullmatch(r"SeparableConv[12]D", cls):
        return ["depthwise_kernel", "pointwise_kernel", *bias]
    if cls == "Embedding":
        return ["embeddings"]
    if cls in ("BatchNormalization", "LayerNormalization"):
        names = (["gamma"] if cfg.get("scale", True) else []) + (["beta"] if cfg.get("center", True) else [])
        return names + (["moving_mean", "moving_variance"] if cls == "BatchNormalization" else [])
    return None


def _walk(model: Any, prefix: str, out: dict[str, tuple[str, list[str] | None]], depth: int = 0) -> None:
    """Map ``prefix/layers/<class key>`` of every layer of ``model`` (a config dict) to its name and variables."""
    cfg = model.get("config") if isinstance(model, dict) else None
    layers = cfg.get("layers") if isinstance(cfg, dict) else None
    if not isinstance(layers, list) or depth > 16:
        return
    used: dict[str, int] = {}
    for layer in layers:
        if not isinstance(layer, dict) or not isinstance(layer.get("class_name"), str):
            continue
        key = snake_case(layer["class_name"])
        used[key] = used.get(key, -1) + 1
        path = f"{prefix}layers/{key}" + (f"_{used[key]}" if used[key] else "")
        lcfg = layer.get("config") if isinstance(layer.get("config"), dict) else {}
        name = lcfg.get("name")
        if isinstance(name, str) and name:
            out[path] = (name, _variables(layer["class_name"], lcfg))
        _walk(layer, f"{path}/", out, depth + 1)          # a model nested in the model


def keras_weight_names(config: Any, paths: Iterable[str]) -> dict[str, str]:
    """``{path in model.weights.h5: display name}`` for ``paths``, from the archive's ``config.json``.

    A layer's weights become ``<layer name>/<variable>`` (``fc1/kernel``), or ``<layer name>/vars/<i>``
    when the file does not hold exactly the variables its class and config imply; nested models give
    ``<outer name>/<inner name>/...``. Paths outside the model's layers (``optimizer/vars/3``) stay as they are.
    The mapping lists the model's weights in the order of its layers, then the other paths, each group's
    variables in numeric order (``optimizer/vars/2`` before ``optimizer/vars/10``).
    """
    layers: dict[str, tuple[str, list[str] | None]] = {}
    _walk(config, "", layers)
    paths = list(paths)
    by_layer: dict[str, list[str]] = {}
    for p in paths:
        head, sep, _ = p.rpartition("/vars/")
        if sep and head in layers:
            by_layer.setdefault(head, []).append(p)
    names = {p: p for p in paths}

    def display(head: str) -> str:                       # the names of the enclosing layers, outermost first
        parts = []
        while head:
            if head in layers:
                parts.append(layers[head][0])
            head = head.rpartition("/layers/")[0] if "/layers/" in head else ""
        return "/".join(reversed(parts))

    for head, members in by_layer.items():
        variables = layers[head][1]
        index = {p: p.rpartition("/vars/")[2] for p in members}
        exact = variables is not None and sorted(index.values()) == [str(i) for i in range(len(variables))]
        for p, i in index.items():
            names[p] = f"{display(head)}/{variables[int(i)] if exact else 'vars/' + i}"
    if len(set(names.values())) != len(names):           # never merge two tensors under one name
        return {p: p for p in paths}
    order = {head: i for i, head in enumerate(layers)}     # the model's order, then each layer's variables

    def key(p: str) -> tuple[int, Any, int]:
        head, sep, i = p.rpartition("/vars/")
        if sep and i.isdigit():
            return (0, order[head], int(i)) if head in order else (1, head, int(i))
        return (1, p, -1)
    return {p: names[p] for p in sorted(paths, key=key)}
