"""Which channels of a Keras 3 model must be removed together: the channel graph of a Sequential or Functional model.

Every output channel of a Dense or Conv2D layer (a *producer*) gets an integer *atom* id; every tensor of
the model is described by the atom each of its channel positions holds (channels last). Layers that pass
channels on (BatchNormalization, activations, Dropout, pooling, DepthwiseConv2D, Flatten, global pooling)
map the atoms of their input to their output; an ``Add`` ties the atoms at the same position of all its
inputs (:class:`sparsify.channels.groups.LabelUnionFind`). Atoms of a model input, of a model output and of
a channel-mixing activation (softmax) are *fixed*: they are never removed. Any other layer is refused with
a ``ValueError`` that names it and says why.

Example:
    >>> import keras
    >>> L = keras.layers
    >>> model = keras.Sequential([keras.Input((4,)), L.Dense(3, name="a"), L.Dense(2, name="b")])
    >>> graph = channel_graph(model)
    >>> graph.producers, graph.out_atoms["a"].tolist(), graph.in_atoms["a"].tolist()
    (['a', 'b'], [4, 5, 6], [0, 1, 2, 3])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import keras
import numpy as np

from sparsify.channels.groups import LabelUnionFind

__all__ = ["ChannelGraph", "channel_graph", "SUPPORTED_LAYERS"]

L = keras.layers
PRODUCERS = (L.Dense, L.Conv2D)
PASS_THROUGH = (L.BatchNormalization, L.Activation, L.ReLU, L.LeakyReLU, L.ELU, L.Dropout, L.SpatialDropout2D,
                L.MaxPooling2D, L.AveragePooling2D, L.GlobalAveragePooling2D, L.GlobalMaxPooling2D)
SUPPORTED_LAYERS = ("Dense", "Conv2D (groups=1)", "DepthwiseConv2D", "BatchNormalization (last axis)",
                    "Activation / ReLU / LeakyReLU / ELU", "Dropout / SpatialDropout2D", "MaxPooling2D",
                    "AveragePooling2D", "GlobalAveragePooling2D", "GlobalMaxPooling2D", "Flatten", "Add")
MIXING_ACTIVATIONS = ("softmax", "log_softmax")


@dataclass
class ChannelGraph:
    """The channel atoms of a model: what each layer reads and writes, which atoms are tied or fixed.

    Attributes:
        producers: names of the Dense and Conv2D layers, in call order.
        out_atoms: layer name -> the atom at every channel position of its output.
        in_atoms: layer name -> the atom at every channel position of its (first) input.
        kinds: layer name -> ``"producer"``, ``"depthwise"``, ``"norm"`` or ``"other"``.
        union: the ties between atoms (an ``Add``).
        fixed: ``(atoms, reason)`` pairs that must stay.
    """

    producers: List[str] = field(default_factory=list)
    out_atoms: Dict[str, np.ndarray] = field(default_factory=dict)
    in_atoms: Dict[str, np.ndarray] = field(default_factory=dict)
    kinds: Dict[str, str] = field(default_factory=dict)
    union: LabelUnionFind = field(default_factory=LabelUnionFind)
    fixed: List[Tuple[np.ndarray, str]] = field(default_factory=list)

    def fixed_roots(self) -> Dict[int, str]:
        """Root atom -> why it must stay, for every fixed atom."""
        out: Dict[int, str] = {}
        for atoms, reason in self.fixed:
            for root in self.union.find(atoms).tolist():
                out.setdefault(int(root), reason)
        return out


def _refuse(layer, why: str) -> ValueError:
    return ValueError(f"remove_channels cannot take layer {layer.name!r} ({type(layer).__name__}): {why}. "
                      f"Supported layers: {', '.join(SUPPORTED_LAYERS)}")


def _channels(layer, tensor) -> int:
    n = tensor.shape[-1]
    if n is None:
        raise _refuse(layer, f"its input has no static channel count (shape {tuple(tensor.shape)})")
    return int(n)


def _check_layer(layer) -> str:
    """The kind of a supported layer; ValueError naming the layer and why for anything else."""
    cfg = layer.get_config()
    if cfg.get("data_format", "channels_last") != "channels_last":
        raise _refuse(layer, f"data_format={cfg['data_format']!r}; only 'channels_last' is supported")
    if isinstance(layer, L.DepthwiseConv2D):
        return "depthwise"
    if isinstance(layer, PRODUCERS) and type(layer) in (L.Dense, L.Conv2D):
        if cfg.get("groups", 1) != 1:
            raise _refuse(layer, f"groups={cfg['groups']}; grouped convolutions are not supported")
        if getattr(layer, "quantization_mode", None) or getattr(layer, "lora_enabled", False):
            raise _refuse(layer, "quantized and LoRA layers are not supported")
        return "producer"
    if type(layer) is L.BatchNormalization:
        return "norm"
    if type(layer) in PASS_THROUGH or type(layer) in (L.Flatten, L.Add, L.InputLayer):
        return "other"
    if isinstance(layer, keras.Model):
        raise _refuse(layer, "nested models are not supported; build one flat Functional model")
    raise _refuse(layer, "this layer type is not supported")


def _nodes_in_order(model) -> tuple:
    """The model's nodes in call order, and the Functional model holding them."""
    if isinstance(model, keras.Sequential):
        functional = getattr(model, "_functional", None)
        if functional is None:
            raise ValueError(f"model {model.name!r} is a Sequential model without an Input; build it with "
                             "keras.Input(shape) as its first layer")
        model = functional
    if not isinstance(model, keras.Model) or not hasattr(model, "_nodes_by_depth"):
        raise TypeError(f"model must be a Keras 3 Sequential or Functional model, got {type(model).__name__} "
                        "(subclassed models are not supported)")
    return [n for depth in sorted(model._nodes_by_depth, reverse=True) for n in model._nodes_by_depth[depth]], model


def _layer_step(graph: ChannelGraph, layer, kind: str, node, atoms_of: Dict[int, np.ndarray]) -> np.ndarray:
    """The atoms of ``layer``'s output, given its inputs' atoms; records what it reads."""
    inputs = list(node.input_tensors)
    if isinstance(layer, L.InputLayer):
        out = graph.union.new(_channels(layer, node.outputs[0]))
        graph.fixed.append((out, f"model input {layer.name!r}"))
        return out
    if len(inputs) != 1 and not isinstance(layer, L.Add):
        raise _refuse(layer, f"it takes {len(inputs)} inputs")
    ins = [atoms_of[id(t)] for t in inputs]
    graph.in_atoms[layer.name] = ins[0]
    activation = getattr(layer.get_config().get("activation"), "lower", lambda: "")()
    if kind == "producer":
        out = graph.union.new(int(layer.get_config()["units" if isinstance(layer, L.Dense) else "filters"]))
        graph.producers.append(layer.name)
        if activation in MIXING_ACTIVATIONS:
            graph.fixed.append((out, f"{layer.name!r} applies {activation} across its channels"))
        return out
    if kind == "depthwise":
        return np.repeat(ins[0], int(layer.get_config()["depth_multiplier"]))
    if kind == "norm":
        axis = layer.get_config()["axis"]
        axes = [axis] if isinstance(axis, int) else list(axis)
        rank = len(inputs[0].shape)
        if [a % rank for a in axes] != [rank - 1]:
            raise _refuse(layer, f"axis={axis}; only the last (channel) axis is supported")
        return ins[0]
    if isinstance(layer, L.Add):
        for other in ins[1:]:
            if other.shape != ins[0].shape:
                raise _refuse(layer, f"its inputs have {ins[0].size} and {other.size} channels")
            graph.union.union(ins[0], other)
        return ins[0]
    if isinstance(layer, L.Flatten):
        spatial = tuple(inputs[0].shape[1:-1])
        if any(s is None for s in spatial):
            raise _refuse(layer, f"its input shape {tuple(inputs[0].shape)} is not static")
        return np.tile(ins[0], int(np.prod(spatial, dtype=np.int64)))
    if activation in MIXING_ACTIVATIONS:
        graph.fixed.append((ins[0], f"{layer.name!r} applies {activation} across channels"))
    return ins[0]


def channel_graph(model) -> ChannelGraph:
    """Trace a built Sequential or Functional Keras 3 model into a :class:`ChannelGraph`.

    Raises:
        TypeError: ``model`` is not a Sequential or Functional Keras 3 model.
        ValueError: an unsupported layer, a layer called more than once, a Sequential model without an Input.
    """
    nodes, functional = _nodes_in_order(model)
    graph = ChannelGraph()
    atoms_of: Dict[int, np.ndarray] = {}
    for node in nodes:
        layer = node.operation
        kind = _check_layer(layer)
        if len(getattr(layer, "_inbound_nodes", [])) > 1:
            raise _refuse(layer, f"it is called {len(layer._inbound_nodes)} times (shared layers are not "
                                 "supported)")
        graph.kinds[layer.name] = kind
        out = _layer_step(graph, layer, kind, node, atoms_of)
        if len(node.outputs) != 1 or (node.outputs[0].shape[-1] is not None
                                      and int(node.outputs[0].shape[-1]) != out.size):
            raise _refuse(layer, "its output channels could not be followed")
        graph.out_atoms[layer.name] = out
        atoms_of[id(node.outputs[0])] = out
    for tensor in functional.outputs:
        graph.fixed.append((atoms_of[id(tensor)], "model output"))
    return graph
