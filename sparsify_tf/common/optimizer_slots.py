"""Find the optimizer slot variables whose pruned entries must be zeroed with the weight.

A pruned weight gets exactly zero gradient (the ops read ``mask * weight``),
but optimizer state built before the weight was pruned (the Momentum
accumulator, Adam's ``m`` and ``v``, RMSProp's ``ms``/``mom``...) would keep
moving it off zero. :func:`find_optimizer_slots` discovers, from the graph,
the slots of every ``tf.compat.v1.train`` (and Keras ``OptimizerV2``)
optimizer applied to a weight: it reads the optimizer's apply op
(``ApplyMomentum``, ``ResourceApplyAdam``, ...), whose first input is the
weight and whose next inputs are its slots, so the optimizer object is not
needed and an optimizer built after :func:`sparsify_tf.prune_graph` is found.

Only slots that can make a zero-gradient weight move are zeroed, and only
where zero is a valid state (:data:`SLOT_INPUTS_TO_ZERO`). Adagrad-style
accumulators (``ApplyAdagrad``, ``ApplyProximalAdagrad``, the squared
accumulators of Ftrl and AdagradDA) are left alone: with a zero gradient they
never move a weight, and ``ApplyAdagrad`` divides by ``sqrt(accum)``, so a
zeroed accumulator would turn the weight into NaN.

Example:
    >>> import tensorflow as tf
    >>> tf1 = tf.compat.v1
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     w = tf1.get_variable("w", [3, 2])
    ...     loss = tf.reduce_sum(tf.matmul(tf.ones([1, 3]), w))
    ...     _ = tf1.train.AdamOptimizer(0.1).minimize(loss)
    >>> {n: [s.op.name for s in v] for n, v in find_optimizer_slots(g, ["w"]).items()}
    {'w': ['w/Adam', 'w/Adam_1']}
"""
from __future__ import annotations

from typing import Iterable

import tensorflow as tf

__all__ = ["SLOT_INPUTS_TO_ZERO", "SLOT_INPUTS_KEPT", "find_optimizer_slots", "unknown_apply_ops"]

tf1 = tf.compat.v1

#: Apply op (without the ``Resource`` / ``Sparse`` prefixes) -> input indices of the slots zeroed
#: where a weight is pruned. Input 0 is always the weight.
SLOT_INPUTS_TO_ZERO: dict[str, tuple[int, ...]] = {
    "ApplyMomentum": (1,),                 # accum                  (MomentumOptimizer)
    "ApplyKerasMomentum": (1,),            # momentum               (Keras SGD)
    "ApplyAdam": (1, 2),                   # m, v                   (AdamOptimizer)
    "ApplyAdamWithAmsgrad": (1, 2, 3),     # m, v, vhat
    "ApplyAdaMax": (1, 2),                 # m, v
    "ApplyRMSProp": (1, 2),                # ms, mom                (RMSPropOptimizer; eps keeps it finite)
    "ApplyCenteredRMSProp": (1, 2, 3),     # mg, ms, mom
    "ApplyAdadelta": (1, 2),               # accum, accum_update    (eps keeps it finite)
    "ApplyAddSign": (1,),                  # m
    "ApplyPowerSign": (1,),                # m
    "ApplyFtrl": (2,),                     # linear (the weight is recomputed from it; accum kept)
    "ApplyFtrlV2": (2,),                   # linear
    "ApplyAdagradDA": (1,),                # gradient_accumulator (the squared one is kept)
}

#: Apply ops whose slots are never zeroed: with a zero gradient they do not move the weight,
#: and their accumulators must stay positive (``ApplyAdagrad`` divides by ``sqrt(accum)``).
SLOT_INPUTS_KEPT: frozenset[str] = frozenset({
    "ApplyGradientDescent", "ApplyProximalGradientDescent", "ApplyAdagrad", "ApplyAdagradV2",
    "ApplyProximalAdagrad",
})


def _base_type(op_type: str) -> str | None:
    name = op_type
    if name.startswith("Resource"):
        name = name[len("Resource"):]
    if name.startswith("Sparse"):
        name = name[len("Sparse"):]
    return name if name.startswith("Apply") else None


def _variables_by_op_name(graph: tf.Graph) -> dict[str, tf.Variable]:
    return {v.op.name: v for v in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)}


def find_optimizer_slots(graph: tf.Graph, var_names: Iterable[str]) -> dict[str, list[tf.Variable]]:
    """The optimizer slot variables to zero with each pruned weight, found from the graph's apply ops.

    Args:
        graph: the training graph (after the optimizer's ``minimize``/``apply_gradients``).
        var_names: weight variable names (``"fc1/kernel"``).

    Returns:
        ``{var_name: [slot variables]}`` for every name in ``var_names`` (an empty list when
        no optimizer with zeroable slots updates it), slots in graph order, without duplicates.
        Works for resource and legacy ref variables.

    Example:
        >>> g = tf.Graph()
        >>> with g.as_default():
        ...     w = tf1.get_variable("w", [2, 2], use_resource=False)
        ...     _ = tf1.train.MomentumOptimizer(0.1, 0.9).minimize(tf.reduce_sum(w * w))
        >>> [s.op.name for s in find_optimizer_slots(g, ["w"])["w"]]
        ['w/Momentum']
    """
    names = list(dict.fromkeys(var_names))
    result: dict[str, list[tf.Variable]] = {n: [] for n in names}
    wanted = set(names)
    variables = None
    for op in graph.get_operations():
        base = _base_type(op.type)
        if base not in SLOT_INPUTS_TO_ZERO or not op.inputs:
            continue
        target = op.inputs[0].op.name
        if target not in wanted:
            continue
        if variables is None:
            variables = _variables_by_op_name(graph)
        weight = variables.get(target)
        for idx in SLOT_INPUTS_TO_ZERO[base]:
            slot = variables.get(op.inputs[idx].op.name)
            if slot is None or any(s.op.name == slot.op.name for s in result[target]):
                continue   # (tf.Variable == is elementwise: compare names)
            if weight is not None and slot.shape.as_list() != weight.shape.as_list():
                continue
            result[target].append(slot)
    return result


def unknown_apply_ops(graph: tf.Graph, var_names: Iterable[str]) -> list[str]:
    """Names of apply ops updating one of ``var_names`` whose slots are not known (neither zeroed nor kept)."""
    wanted = set(var_names)
    return [op.name for op in graph.get_operations()
            if _base_type(op.type) is not None and op.inputs and op.inputs[0].op.name in wanted
            and _base_type(op.type) not in SLOT_INPUTS_TO_ZERO and _base_type(op.type) not in SLOT_INPUTS_KEPT]
