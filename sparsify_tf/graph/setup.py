"""The named steps of :func:`sparsify_tf.prune_graph` before and while it changes the graph.

Checks first (:func:`check_arguments`, :func:`check_free_to_prune`, :func:`check_gradients_not_built`, all
before the graph is changed), then what is pruned (:func:`select_layers`: the prunable ops, their canonical
shapes and the core's protocol in the graph's variable creation order), then the variables and ops the
pruning adds (:func:`add_state_variables`, :func:`add_masks`, :func:`add_stored_values`).

Example:
    >>> import tensorflow as tf
    >>> from sparsify import PruningConfig
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.compat.v1.placeholder(tf.float32, [None, 8])
    ...     y = tf.matmul(x, tf.compat.v1.get_variable("fc/kernel", [8, 4]))
    >>> selection = select_layers(g, PruningConfig(target_sparsity=0.5))
    >>> selection.names, selection.shapes["fc/kernel"], selection.kinds["fc/kernel"]
    (['fc/kernel'], (4, 8), 'dense')
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from sparsify.config import PruningConfig
from sparsify.criteria import get_criterion
from sparsify.engine import PruningEngine, select_names
from sparsify.layout import tf_to_canonical
from sparsify.protocol import PruningProtocol, config_fingerprint

from ..common.graph_utils import (
    PrunableInput, check_global_step, check_graph_editable, get_prunable_ops_and_inputs, get_tensor_var,
    in_variable_creation_order, unmaskable_weight_uses,
)
from ..common.guarded_update import NEVER
from ..common.masking import GraphMasks, PruningOpVars, gradient_ops_of, mask_op_gradient, mask_op_input
from ..common.pruning_scope import PruningScope
from .statistics import check_input_channels

__all__ = ["MASKING_MODES", "Selection", "StateVariables", "check_arguments", "check_free_to_prune",
           "select_layers", "check_gradients_not_built", "warn_unmaskable", "add_state_variables", "add_masks",
           "add_stored_values", "collected"]

tf1 = tf.compat.v1

#: ``masking`` values of :func:`sparsify_tf.prune_graph`: where the zeros live between mask updates.
MASKING_MODES = ("weights", "inputs")


def check_arguments(cfg: PruningConfig, graph: tf.Graph | None, masking: str) -> tf.Graph:
    """Refuse what graph mode cannot do with this config and these arguments; the graph to prune.

    Example:
        >>> check_arguments(PruningConfig(), None, "somewhere")
        Traceback (most recent call last):
        ...
        ValueError: masking must be one of ('weights', 'inputs'), got 'somewhere'
    """
    missing = sorted(set(get_criterion(cfg.criterion).needs) - {"weight", "activation"})
    if missing:
        raise ValueError(f"criterion {cfg.criterion!r} needs {missing}, which graph-mode pruning does not collect "
                         "(criteria scored from each step's gradients or a running state); use a criterion that "
                         "needs only 'weight' and 'activation' (magnitude, wanda)")
    if cfg.pruned_gradient != "none":
        raise ValueError(f"pruned_gradient={cfg.pruned_gradient!r} is not supported by TF graph mode: its pruned "
                         "weights get no gradient (pruned_gradient='none', the only value allowed here); "
                         "'straight_through' is implemented by sparsify_torch")
    if masking not in MASKING_MODES:
        raise ValueError(f"masking must be one of {MASKING_MODES}, got {masking!r}")
    graph = tf1.get_default_graph() if graph is None else graph
    if not isinstance(graph, tf.Graph):
        raise TypeError(f"graph must be a tf.Graph, got {graph!r}")
    return graph


def check_free_to_prune(graph: tf.Graph, cfg: PruningConfig, ks_group: str, global_step: Any) -> None:
    """The graph can take a new pruning: not finalized, a valid global step, no selected weight pruned
    by another ks_group."""
    check_graph_editable(graph)
    step = global_step if global_step is not None else tf1.train.get_global_step(graph)
    if step is not None:
        check_global_step(step, graph)
    # ops pruned under another ks_group read their weight through our marked ops: not candidates any more
    owners = {n: g for (g, n) in GraphMasks.of(graph).masks if g != ks_group}
    taken = {n: owners[n] for n in select_names(owners, cfg.op_names, cfg.excluded_op_names)}
    if taken:
        raise ValueError(f"weights already pruned under another ks_group of this graph: "
                         f"{', '.join(f'{n!r} ({g!r})' for n, g in sorted(taken.items()))}; a weight can be pruned "
                         "by one ks_group only: leave them out with excluded_op_names, or use that ks_group")


@dataclass(frozen=True)
class Selection:
    """What a graph pruning prunes.

    Attributes:
        protocol: the core's protocol over the selected weights, in variable creation order.
        candidates: every prunable op input of the graph with a known shape.
        pruned: the candidates reading a selected weight (a shared weight: several).
        shapes: weight name -> canonical shape (every candidate's weight).
        kinds: weight name -> layout kind.
    """

    protocol: PruningProtocol
    candidates: list[PrunableInput]
    pruned: list[PrunableInput]
    shapes: dict[str, tuple[int, ...]]
    kinds: dict[str, str]

    @property
    def names(self) -> list[str]:
        """The selected weights, in the order handed to the core."""
        return list(self.protocol.names)


def select_layers(graph: tf.Graph, cfg: PruningConfig) -> Selection:
    """The prunable ops of ``graph`` whose weights ``cfg`` selects, and the protocol over those weights."""
    candidates = get_prunable_ops_and_inputs(graph)
    shapes, kinds = {}, {}
    for p in candidates:
        if p.var_name not in shapes:
            tf_shape = tuple(p.tensor.shape.as_list())
            if any(d is None for d in tf_shape):
                continue
            shapes[p.var_name] = tf_to_canonical(np.zeros(tf_shape, np.float32), p.kind).shape
            kinds[p.var_name] = p.kind
    if not shapes:
        raise ValueError("the graph has no prunable op (MatMul, BatchMatMul, Conv2D, Conv3D, "
                         "DepthwiseConv2dNative, Conv2DBackpropInput) reading a tf.Variable weight")
    ordered = in_variable_creation_order(graph, list(shapes))
    protocol = PruningProtocol(cfg, {n: shapes[n] for n in ordered})
    for n in protocol.names:
        get_tensor_var(graph, n)
    chosen = set(protocol.names)
    return Selection(protocol, candidates, [p for p in candidates if p.var_name in chosen], shapes, kinds)


def collected(cfg: PruningConfig) -> dict[str, bool]:
    """What the pruned ops' gradients collect for this config: ``activations`` (Wanda) and ``grads`` (RigL)."""
    needs = PruningEngine(cfg).needs
    return {"activations": "activation" in needs, "grads": "grad" in needs}


def check_gradients_not_built(selection: Selection, cfg: PruningConfig, masking: str) -> None:
    """Refuse gradients already built for a pruned op when the pruning needs to own them."""
    collect = collected(cfg)
    if collect["activations"]:
        check_input_channels(selection.pruned, selection.names, cfg.criterion)
    if masking != "weights" and not any(collect.values()):
        return
    built = [op for p in selection.pruned for op in gradient_ops_of(p.op, p.tensor)]
    if built:
        why = ("masking='weights' masks the gradients of the pruned ops" if masking == "weights" else
               f"criterion={cfg.criterion!r} with regrowth={cfg.regrowth!r} reads the pruned ops' inputs or "
               "gradients in their gradient")
        raise ValueError(f"{why}, but gradient ops reading their weights exist already ({built[:3]}): call "
                         "prune_graph before building the optimizer"
                         + (" (recommended), or pass masking='inputs'" if masking == "weights" else ""))


def warn_unmaskable(graph: tf.Graph, cfg: PruningConfig) -> None:
    """Warn about weights ``op_names`` matches that graph mode leaves dense (it cannot mask them)."""
    left_dense = unmaskable_weight_uses(graph)
    left_dense = {n: left_dense[n] for n in select_names(left_dense, cfg.op_names, cfg.excluded_op_names)}
    if left_dense:
        warnings.warn("prune_graph leaves these weights matched by op_names dense, because graph mode cannot "
                      "mask them: " + "; ".join(f"{n!r}: {why}" for n, why in left_dense.items())
                      + ". Exclude them with excluded_op_names to silence this", stacklevel=3)


@dataclass(frozen=True)
class StateVariables:
    """The protocol's state in the graph: done step, next due step (the per-step guard), config fingerprint."""

    done: tf.Variable
    next_due: tf.Variable
    fingerprint: tf.Variable


def add_state_variables(ks_group: str, protocol: PruningProtocol) -> StateVariables:
    """Create the state variables of a pruning in the default graph (saved with the masks)."""
    with tf1.variable_scope(PruningScope.general(ks_group)):
        done = tf1.get_variable("nm_last_update_step", [], tf.int64, initializer=tf1.constant_initializer(-1),
                                trainable=False, use_resource=True)
        # protocol.next_step() for that done step (written with it; int64 max: never): the per-step guard
        first_due = protocol.next_step()
        next_due = tf1.get_variable("nm_next_update_step", [], tf.int64, trainable=False, use_resource=True,
                                    initializer=tf1.constant_initializer(NEVER if first_due < 0 else first_due))
        fp = config_fingerprint(protocol.config)
        fingerprint = tf1.get_variable("nm_config_fingerprint", fp.shape, tf.int64, trainable=False,
                                       use_resource=True, initializer=tf1.constant_initializer(fp))
    return StateVariables(done, next_due, fingerprint)


def add_masks(selection: Selection, masking: str, ks_group: str) -> tuple[list[PruningOpVars], dict[str, PruningOpVars]]:
    """Mask every pruned op (its gradient or its input, see ``masking``); every op's handles, and each
    weight's first (shared weights share one mask)."""
    op_vars: list[PruningOpVars] = []
    first: dict[str, PruningOpVars] = {}
    for p in selection.pruned:
        ov = (mask_op_gradient if masking == "weights" else mask_op_input)(p.op, p.tensor, ks_group)
        first.setdefault(p.var_name, ov)
        op_vars.append(ov)
    return op_vars, first


def add_stored_values(ks_group: str, weights: dict[str, tf.Variable]) -> dict[str, tf.Variable]:
    """One variable per weight holding its pruned entries' values (0 where kept): the weights stay dense
    under the masks for the core."""
    with tf1.variable_scope(PruningScope.general(ks_group)):
        return {n: tf1.get_variable(f"nm_stored/{n}", w.shape, w.dtype.base_dtype,
                                    initializer=tf1.zeros_initializer(), trainable=False, use_resource=True)
                for n, w in weights.items()}
