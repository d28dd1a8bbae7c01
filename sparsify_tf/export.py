"""Export a pruned ``tf.compat.v1`` graph for inference, masks baked in.

The exported graph reads the original weights (now constants equal to
``weight * mask``); it holds no mask variables, no update ops and no
py-function ops, and its outputs equal the pruned training graph's.

Example:
        after training with prune_graph(...):
        gd = export_frozen_graph(sess, ["logits"], path="model.pb")
        export_saved_model(sess, "export_dir", {"x": x}, {"logits": logits})
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from .graph_utils import get_tensor_var
from .masking import pruned_inputs

__all__ = ["export_frozen_graph", "export_saved_model", "FORBIDDEN_EXPORT_OPS"]

tf1 = tf.compat.v1

FORBIDDEN_EXPORT_OPS = ("VariableV2", "Variable", "VarHandleOp", "ReadVariableOp", "Assign", "AssignVariableOp",
                        "PyFunc", "PyFuncStateless", "EagerPyFunc", "Switch", "RefSwitch", "Merge")


def _op_name(x) -> str:
    name = x if isinstance(x, str) else x.name
    return name.split(":")[0]


def _input_ref(tensor_name: str) -> str:
    op, _, idx = tensor_name.partition(":")
    return op if idx in ("", "0") else f"{op}:{idx}"


def export_frozen_graph(sess: tf1.Session, outputs: Sequence[str | tf.Tensor | tf.Operation],
                        path: str | os.PathLike | None = None) -> tf1.GraphDef:
    """Frozen inference ``GraphDef`` of ``sess.graph`` for ``outputs``, masks baked in.

    Args:
        sess: the training session (holds the current weights and masks).
        outputs: output tensors, ops or their names.
        path: optional file to write the binary ``GraphDef`` to.

    Returns:
        The frozen ``GraphDef`` (only the ops ``outputs`` need, weights as constants).

    Raises:
        ValueError: for an empty or unknown output; RuntimeError if a mask,
        variable or py-function op would remain.
    """
    if isinstance(outputs, (str, tf.Tensor, tf.Operation)):
        outputs = [outputs]
    names = [_op_name(o) for o in outputs]
    if not names:
        raise ValueError("outputs must name at least one output tensor or op, got []")
    graph = sess.graph
    for n in names:
        try:
            graph.get_operation_by_name(n)
        except KeyError:
            raise ValueError(f"outputs: no op named {n!r} in the session's graph") from None
    gd = graph.as_graph_def()
    nodes = {n.name: n for n in gd.node}
    rewires = pruned_inputs(graph)
    for r in rewires:
        node = nodes[r["op"]]
        node.input[r["index"]] = _input_ref(r["original"])
    frozen = tf1.graph_util.convert_variables_to_constants(sess, gd, names)
    baked = {}
    for r in rewires:
        if r["var"] in baked:
            continue
        w, m = sess.run([get_tensor_var(graph, r["var"]), get_tensor_var(graph, r["mask"])])
        baked[r["var"]] = (np.asarray(w) * np.asarray(m)).astype(np.asarray(w).dtype)
    for node in frozen.node:
        if node.op == "Const" and node.name in baked:
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(baked[node.name]))
    bad = [f"{n.name} ({n.op})" for n in frozen.node
           if n.op in FORBIDDEN_EXPORT_OPS or "_nm_ks/" in n.name or n.name.startswith("nm_ks_ops/")]
    if bad:
        raise RuntimeError(f"exported graph still holds training/pruning ops: {bad[:10]}")
    if path is not None:
        with tf.io.gfile.GFile(os.fspath(path), "wb") as fh:
            fh.write(frozen.SerializeToString())
    return frozen


def export_saved_model(sess: tf1.Session, export_dir: str | os.PathLike, inputs: Mapping[str, tf.Tensor],
                       outputs: Mapping[str, tf.Tensor]) -> str:
    """Write a SavedModel (tag ``serve``, signature ``serving_default``) of the frozen pruned graph.

    Args:
        sess: the training session.
        export_dir: a directory that must not exist yet.
        inputs, outputs: signature names -> tensors of ``sess.graph``.

    Returns:
        ``export_dir`` as a string. Load with ``tf.compat.v1.saved_model.load(sess, ["serve"], export_dir)``.
    """
    for what, m in (("inputs", inputs), ("outputs", outputs)):
        if not isinstance(m, Mapping) or not m or not all(isinstance(t, tf.Tensor) for t in m.values()):
            raise TypeError(f"{what} must be a non-empty dict of signature name -> tf.Tensor, got {m!r}")
    export_dir = os.fspath(export_dir)
    if os.path.exists(export_dir):
        raise ValueError(f"export_dir {export_dir!r} already exists; pass a new directory")
    frozen = export_frozen_graph(sess, list(outputs.values()))
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(frozen, name="")
        sig = tf1.saved_model.signature_def_utils.predict_signature_def(
            {k: g.get_tensor_by_name(t.name) for k, t in inputs.items()},
            {k: g.get_tensor_by_name(t.name) for k, t in outputs.items()})
        with tf1.Session(graph=g) as s2:
            builder = tf1.saved_model.Builder(export_dir)
            builder.add_meta_graph_and_variables(s2, [tf1.saved_model.tag_constants.SERVING],
                                                 signature_def_map={"serving_default": sig},
                                                 strip_default_attrs=True)
            builder.save()
    return export_dir
